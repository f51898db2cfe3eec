//! Analysis of the handler runs: the runs read back, the re-runs each explained by an outage, the cap's peaks.

use super::*;

#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) job: JobId,
    pub(crate) lease: i64,
    pub(crate) attempt: i32,
    pub(crate) proc: usize,
    pub(crate) start: i64,
    /// None when no end was written (the runtime dropped the handler's future).
    pub(crate) end: Option<i64>,
    /// The handler's token fired while it ran.
    pub(crate) fired: bool,
}

impl Run {
    pub(crate) fn end_or_max(&self) -> i64 {
        self.end.unwrap_or(i64::MAX)
    }
}

pub(crate) fn read_runs(procs: &[Proc], failures: &mut Vec<String>) -> Result<Vec<Run>, String> {
    let mut runs: Vec<Run> = Vec::new();
    let mut index: HashMap<(JobId, i64), usize> = HashMap::new();
    let mut twice = Vec::new();
    for p in procs {
        let text = std::fs::read_to_string(&p.runs).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let bad = || format!("bad line in {}: {line:?}", p.runs.display());
            let job: JobId = f.get(1).ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let lease: i64 = f.get(2).ok_or_else(bad)?.parse().map_err(|_| bad())?;
            match f[0] {
                "S" if f.len() == 5 => {
                    let attempt = f[3].parse().map_err(|_| bad())?;
                    let start = f[4].parse().map_err(|_| bad())?;
                    if index.contains_key(&(job, lease)) {
                        twice.push(format!("{job} lease {lease}"));
                        continue;
                    }
                    index.insert((job, lease), runs.len());
                    runs.push(Run { job, lease, attempt, proc: p.idx, start, end: None, fired: false });
                }
                "E" if f.len() == 5 => {
                    let i = *index.get(&(job, lease)).ok_or_else(bad)?;
                    runs[i].end = Some(f[3].parse().map_err(|_| bad())?);
                    runs[i].fired = f[4] == "1";
                }
                _ => return Err(bad()),
            }
        }
    }
    if !twice.is_empty() {
        failures.push(format!(
            "{} leases ran their handler twice (one claim, two runs), e.g. {:?}",
            twice.len(),
            &twice[..twice.len().min(5)]
        ));
    }
    Ok(runs)
}

#[derive(Debug)]
pub(crate) struct Rerun {
    pub(crate) explained: bool,
    /// The last outage the earlier run lived into, whether it could expire a lease or not.
    pub(crate) across: Option<usize>,
    pub(crate) cause: String,
    pub(crate) detail: String,
}

#[derive(Debug, Default)]
pub(crate) struct Analysis {
    pub(crate) by_job: HashMap<JobId, Vec<Run>>,
    pub(crate) reruns: Vec<Rerun>,
    pub(crate) overlaps: usize,
    pub(crate) overlaps_explained: usize,
    pub(crate) cap_live: usize,
    pub(crate) cap_all: usize,
    /// Until when each run's lease was live, for runs whose lease was lost (`(job, lease)`).
    pub(crate) live_until: HashMap<(JobId, i64), i64>,
}

/// The last outage `older`'s lease lived into before `newer` began: `older` was claimed
/// before the server came back (it started before, or a lease at least as new ran before), its
/// outcome may still have been unwritten when the server went (it could be written at most
/// `OUTCOME_SLACK` before), and `newer` started after the server came back. The last one, not
/// the first: a run that outlived an outage was not lost in it (a lost lease fires the token and
/// the handler ends within a second of the server coming back).
pub(crate) fn outage_across<'o>(
    older: &Run,
    newer: &Run,
    outages: &'o [Outage],
    newest_lease_started_before: &dyn Fn(i64) -> i64,
) -> Option<&'o Outage> {
    outages.iter().rev().find(|o| {
        (older.start < o.up || older.lease <= newest_lease_started_before(o.up))
            && writable_from(older, outages) >= o.down - us(OUTCOME_SLACK)
            && newer.start >= o.up
    })
}

/// The outage that explains why `older`'s lease was lost and `newer` got a new one: the last
/// one `older` lived into ([`outage_across`]), when it was long enough to expire a lease.
pub(crate) fn explaining_outage<'o>(
    older: &Run,
    newer: &Run,
    outages: &'o [Outage],
    newest_lease_started_before: &dyn Fn(i64) -> i64,
) -> Option<&'o Outage> {
    outage_across(older, newer, outages, newest_lease_started_before).filter(|o| o.can_expire)
}

/// When `r`'s outcome could first be written: when it ended, or when the server came back if
/// it ended during an outage.
pub(crate) fn writable_from(r: &Run, outages: &[Outage]) -> i64 {
    let end = r.end_or_max();
    outages.iter().find(|o| end >= o.down && end <= o.up).map_or(end, |o| o.up)
}

/// Where `t` lies relative to the outages, for the report.
pub(crate) fn placement(t: i64, outages: &[Outage]) -> String {
    if let Some(o) = outages.iter().find(|o| t >= o.down && t <= o.up) {
        return format!("during outage {}", o.n);
    }
    let before = outages.iter().filter(|o| o.down > t).min_by_key(|o| o.down);
    let after = outages.iter().filter(|o| o.up < t).max_by_key(|o| o.up);
    match (after, before) {
        (Some(a), Some(b)) if t - a.up <= b.down - t => format!("{:.2} s after outage {}", secs(t - a.up), a.n),
        (_, Some(b)) => format!("{:.2} s before outage {}", secs(b.down - t), b.n),
        (Some(a), None) => format!("{:.2} s after outage {}", secs(t - a.up), a.n),
        (None, None) => "with no outage".to_string(),
    }
}

/// [`placement`] without the distance, to group re-runs by it.
pub(crate) fn coarse_placement(t: i64, outages: &[Outage]) -> String {
    let p = placement(t, outages);
    match p.split_once(" s ") {
        Some((_, rest)) => rest.to_string(),
        None => p,
    }
}

pub(crate) fn analyse(
    ids: &[JobId],
    capped: &std::collections::HashSet<JobId>,
    runs: &[Run],
    outages: &[Outage],
    failures: &mut Vec<String>,
) -> Analysis {
    let mut a = Analysis::default();
    let known: std::collections::HashSet<JobId> = ids.iter().copied().collect();
    for r in runs {
        a.by_job.entry(r.job).or_default().push(r.clone());
    }
    let unknown = a.by_job.keys().filter(|id| !known.contains(id)).count();
    if unknown > 0 {
        failures.push(format!("{unknown} handler runs for ids that were never enqueued"));
    }
    let never = ids.iter().filter(|id| !a.by_job.contains_key(id)).count();
    if never > 0 {
        failures.push(format!("{never} jobs never ran a handler"));
    }
    for rs in a.by_job.values_mut() {
        rs.sort_by_key(|r| r.lease);
    }
    // Leases grow with every claim of any job, so a lease at most as new as one whose run
    // started before `t` was granted before `t`.
    let mut by_start: Vec<(i64, i64)> = runs.iter().map(|r| (r.start, r.lease)).collect();
    by_start.sort();
    let mut prefix_max = Vec::with_capacity(by_start.len());
    let mut m = i64::MIN;
    for (_, l) in &by_start {
        m = m.max(*l);
        prefix_max.push(m);
    }
    let newest_before = |t: i64| -> i64 {
        let i = by_start.partition_point(|(s, _)| *s < t);
        if i == 0 {
            i64::MIN
        } else {
            prefix_max[i - 1]
        }
    };

    // Re-runs: each run after the first, explained by the outage that expired the older lease.
    // For the cap: until when each run's lease was live.
    let mut live_until: HashMap<(JobId, i64), i64> = HashMap::new();
    for (id, rs) in &a.by_job {
        for w in rs.windows(2) {
            let (older, newer) = (&w[0], &w[1]);
            let phase = |o: &Outage| {
                if older.start >= o.down {
                    "started during the outage (claimed before it)"
                } else if older.end_or_max() <= o.down {
                    "finished before the outage, outcome not yet written"
                } else {
                    "running when the server went"
                }
            };
            match explaining_outage(older, newer, outages, &newest_before) {
                Some(o) => {
                    live_until.insert((*id, older.lease), older.end_or_max().min(o.up));
                    a.reruns.push(Rerun {
                        explained: true,
                        across: Some(o.n),
                        cause: format!(
                            "lease expired in {} ({:.1} s down; zombie timeout {:?}), rescued as a zombie: earlier \
                             run {}{}",
                            o.name(),
                            secs(o.up - o.down),
                            o.zombie,
                            phase(o),
                            if older.fired { ", its token fired" } else { "" }
                        ),
                        detail: String::new(),
                    });
                }
                None => {
                    live_until.insert((*id, older.lease), older.end_or_max().min(newer.start));
                    let end = older.end.map_or("never ended".to_string(), |e| placement(e, outages));
                    let across = outage_across(older, newer, outages, &newest_before);
                    a.reruns.push(Rerun {
                        explained: false,
                        across: across.map(|o| o.n),
                        cause: match across {
                            Some(o) => format!(
                                "lease lost across {} ({:.1} s down, shorter than its zombie timeout {:?}): \
                                 earlier run {}{}",
                                o.name(),
                                secs(o.up - o.down),
                                o.zombie,
                                phase(o),
                                if older.fired { ", its token fired" } else { "" }
                            ),
                            None => format!(
                                "lease lost with no outage long enough to expire it: earlier run ended {}",
                                older.end.map_or("never".to_string(), |e| coarse_placement(e, outages))
                            ),
                        },
                        detail: format!(
                            "job {id}: lease {} (attempt {}, p{}) ran {:.3} s, ended {end}, token fired: {}; \
                             lease {} (attempt {}, p{}) started {}",
                            older.lease,
                            older.attempt,
                            older.proc,
                            older.end.map_or(f64::NAN, |e| secs(e - older.start)),
                            older.fired,
                            newer.lease,
                            newer.attempt,
                            newer.proc,
                            placement(newer.start, outages)
                        ),
                    });
                }
            }
        }
        // Overlapping runs of one job.
        for (i, x) in rs.iter().enumerate() {
            for y in &rs[i + 1..] {
                if x.start < y.end_or_max() && y.start < x.end_or_max() {
                    a.overlaps += 1;
                    if explaining_outage(x, y, outages, &newest_before).is_some() {
                        a.overlaps_explained += 1;
                    }
                }
            }
        }
    }
    let unexplained = a.reruns.iter().filter(|r| !r.explained).count();
    if unexplained > 0 {
        failures.push(format!(
            "{unexplained} re-runs without an outage long enough to expire a lease: across an outage shorter \
             than the zombie timeout no lease may be lost, so no job may run twice (first: {})",
            a.reruns.iter().find(|r| !r.explained).map(|r| r.detail.as_str()).unwrap_or_default()
        ));
    }
    if a.overlaps > a.overlaps_explained {
        failures.push(format!(
            "{} pairs of runs of one job overlapped in time while both leases were live",
            a.overlaps - a.overlaps_explained
        ));
    }

    // The cap: the most capped handlers at once, on live leases and in all.
    let peaks = peaks_by_group(runs, &live_until, |id| capped.contains(id).then(String::new));
    (a.cap_live, a.cap_all) = peaks.get("").copied().unwrap_or_default();
    a.live_until = live_until;
    a
}

/// Per group (`group_of` a job; None: in none), the most handlers of the group that ran at
/// once: on live leases (a run counts until `live_until` of its lease, when it has one), and in
/// all. Ends come before starts at the same instant.
pub(crate) fn peaks_by_group(
    runs: &[Run],
    live_until: &HashMap<(JobId, i64), i64>,
    group_of: impl Fn(&JobId) -> Option<String>,
) -> BTreeMap<String, (usize, usize)> {
    // (time, +1 at a start / -1 at an end), on live leases and in all.
    type Events = Vec<(i64, i32)>;
    let mut events: BTreeMap<String, (Events, Events)> = BTreeMap::new();
    for r in runs {
        let Some(g) = group_of(&r.job) else { continue };
        let (live_events, all_events) = events.entry(g).or_default();
        let end = r.end_or_max();
        all_events.push((r.start, 1));
        all_events.push((end, -1));
        let live_end = live_until.get(&(r.job, r.lease)).copied().unwrap_or(end);
        if live_end > r.start {
            live_events.push((r.start, 1));
            live_events.push((live_end, -1));
        }
    }
    let peak = |mut ev: Events| {
        ev.sort();
        let (mut cur, mut max) = (0i32, 0i32);
        for (_, d) in ev {
            cur += d;
            max = max.max(cur);
        }
        max as usize
    };
    events.into_iter().map(|(g, (live, all))| (g, (peak(live), peak(all)))).collect()
}
