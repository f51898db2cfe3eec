//! The simulator's invariant checker: fed every event as it happens (handler begins and ends,
//! the store's lease grants and ends, crashes, operator changes), it checks the rules at once
//! and keeps the first violations.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// A job's number in the simulation (its id counted up by the memory store: 1, 2, 3, …).
pub(super) type Job = u32;
/// A lease number as the store granted it.
pub(super) type LeaseNo = i64;

/// What the checker knows of a job from the start.
#[derive(Debug, Clone)]
pub(super) struct JobInfo {
    pub(super) queue: String,
    pub(super) key: Option<String>,
    pub(super) max_attempts: i32,
    pub(super) poison: bool,
}

impl JobInfo {
    /// What the checker needs of a planned job.
    pub(super) fn of(j: &super::run::JobPlan) -> Self {
        JobInfo {
            queue: j.queue.clone(),
            key: j.key.clone(),
            max_attempts: j.max_attempts,
            poison: j.spec.poison.is_some(),
        }
    }
}

/// A handler running now.
#[derive(Debug, Clone)]
struct Run {
    proc: usize,
    queue: String,
    key: Option<String>,
}

/// The store's side of a job, as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) lease: LeaseNo,
    pub(super) proc: Option<usize>,
}

/// The rules' margins.
#[derive(Debug, Clone, Copy)]
pub(super) struct Margins {
    /// How long a handler may outlive its lease (and overlap the next holder's handler): the
    /// worker's `cancel_wait` (a fenced handler is given that long to return, then dropped).
    pub(super) fence: Duration,
    /// How late a handler may begin after its claim's commit: the longest reply delay the
    /// faults inject. Rate windows are checked at their length less this.
    pub(super) begin_delay: Duration,
}

/// The invariant checker.
#[derive(Debug)]
pub(super) struct Checker {
    /// Workflow tasks (issue 41): a task's job -> its dependencies' jobs, and whether it runs
    /// anyway after a failed one.
    pub(super) flow: HashMap<Job, (Vec<Job>, bool)>,
    /// The jobs of the plan's batch (issue 41).
    pub(super) batch: Vec<Job>,
    margins: Margins,
    pub(super) jobs: BTreeMap<Job, JobInfo>,
    running: BTreeMap<(Job, LeaseNo), Run>,
    /// When the store ended each lease (rescued, released, finished, cancelled), if it did.
    lease_end: HashMap<(Job, LeaseNo), Duration>,
    /// When the store granted each lease.
    leased_at: HashMap<(Job, LeaseNo), Duration>,
    /// Leases whose handler returned `Ok` (the only ones that may archive their job).
    ok_ends: BTreeSet<(Job, LeaseNo)>,
    /// Handlers of each process that ended and whose lease the store still holds for it.
    ended: BTreeMap<usize, BTreeSet<(Job, LeaseNo)>>,
    /// The store's current holder of each job, when held.
    held: BTreeMap<Job, Held>,
    begins: BTreeMap<Job, u32>,
    /// Begins per rate bucket (queue, key or none), in time order.
    rate_begins: BTreeMap<(String, Option<String>), Vec<Duration>>,
    /// Rate limits per queue: (jobs, per, by key); fixed for a run.
    pub(super) rates: BTreeMap<String, (u32, Duration, bool)>,
    /// Cap history per queue: (from, cap); `None` = no cap.
    caps: BTreeMap<String, Vec<(Duration, Option<u32>)>>,
    key_caps: BTreeMap<String, Vec<(Duration, Option<u32>)>>,
    /// Process crashes caused by each poison job.
    poison_crashes: BTreeMap<Job, u32>,
    /// Every lease the store moved to Processing (an attempt counted): its process, and
    /// whether a handler began on it.
    counted: BTreeMap<(Job, LeaseNo), (Option<usize>, bool)>,
    /// Processes that lost a reply (a call committed, its answer never came).
    pub(super) faulted: BTreeSet<usize>,
    /// Leases handed out by a claim whose reply was lost: held for a process that never knew.
    pub(super) orphans: BTreeSet<(Job, LeaseNo)>,
    /// Each process's bound on finished, unwritten outcomes.
    pub(super) unwritten_bound: BTreeMap<usize, usize>,
    /// Each process's queues with slots of their own (`queue_concurrency`).
    pub(super) queue_slots: BTreeMap<usize, BTreeMap<String, u32>>,
    pub(super) dead_procs: BTreeSet<usize>,
    /// Leases a handler began on.
    begun: BTreeSet<(Job, LeaseNo)>,
    pub(super) violations: Vec<String>,
}

impl Checker {
    pub(super) fn new(margins: Margins) -> Self {
        Checker {
            margins,
            jobs: BTreeMap::new(),
            running: BTreeMap::new(),
            flow: HashMap::new(),
            batch: Vec::new(),
            lease_end: HashMap::new(),
            leased_at: HashMap::new(),
            ok_ends: BTreeSet::new(),
            ended: BTreeMap::new(),
            held: BTreeMap::new(),
            begins: BTreeMap::new(),
            rate_begins: BTreeMap::new(),
            rates: BTreeMap::new(),
            caps: BTreeMap::new(),
            key_caps: BTreeMap::new(),
            poison_crashes: BTreeMap::new(),
            counted: BTreeMap::new(),
            faulted: BTreeSet::new(),
            orphans: BTreeSet::new(),
            unwritten_bound: BTreeMap::new(),
            queue_slots: BTreeMap::new(),
            dead_procs: BTreeSet::new(),
            begun: BTreeSet::new(),
            violations: Vec::new(),
        }
    }

    fn violate(&mut self, at: Duration, msg: String) {
        if self.violations.len() < 20 {
            self.violations.push(format!("at {:.3} s: {msg}", at.as_secs_f64()));
        }
    }

    pub(super) fn set_cap(&mut self, at: Duration, queue: &str, cap: Option<u32>) {
        self.caps.entry(queue.to_string()).or_default().push((at, cap));
    }

    pub(super) fn set_key_cap(&mut self, at: Duration, queue: &str, cap: Option<u32>) {
        self.key_caps.entry(queue.to_string()).or_default().push((at, cap));
    }

    /// The loosest cap in force at any time from `from` on (`None`: uncapped then).
    fn loosest(history: Option<&Vec<(Duration, Option<u32>)>>, from: Duration) -> Option<u32> {
        let h = history?;
        let mut loosest: Option<Option<u32>> = None;
        for (i, (_, cap)) in h.iter().enumerate() {
            let until = h.get(i + 1).map(|x| x.0);
            if until.is_some_and(|u| u <= from) {
                continue;
            }
            loosest = Some(match (loosest, cap) {
                (None, c) => *c,
                (Some(None), _) | (_, None) => None,
                (Some(Some(a)), Some(b)) => Some(a.max(*b)),
            });
        }
        loosest.flatten()
    }

    /// A handler began.
    pub(super) fn begin(&mut self, at: Duration, proc: usize, job: Job, lease: LeaseNo) {
        let Some(info) = self.jobs.get(&job).cloned() else { return };
        *self.begins.entry(job).or_default() += 1;
        self.begun.insert((job, lease));
        if let Some(c) = self.counted.get_mut(&(job, lease)) {
            c.1 = true;
        }
        // Its lease must be the store's current one for this process.
        if self.lease_end.contains_key(&(job, lease)) {
            self.violate(at, format!("job {job}: a handler began on lease {lease}, which the store had ended"));
        }
        // Another handler of the same job: only within the fencing margin of its lease's end.
        let others: Vec<((Job, LeaseNo), Run)> =
            self.running.range((job, LeaseNo::MIN)..=(job, LeaseNo::MAX)).map(|(k, r)| (*k, r.clone())).collect();
        for ((_, l), r) in others {
            match self.lease_end.get(&(job, l)) {
                None => self.violate(
                    at,
                    format!("job {job}: two handlers at once on live leases {l} (proc {}) and {lease} (proc {proc})", r.proc),
                ),
                Some(end) if at > *end + self.margins.fence => self.violate(
                    at,
                    format!(
                        "job {job}: handler of lease {l} (proc {}) still runs {:.3} s after its lease ended while lease {lease} (proc {proc}) begins",
                        r.proc,
                        (at - *end).as_secs_f64()
                    ),
                ),
                Some(_) => {}
            }
        }
        self.running.insert((job, lease), Run { proc, queue: info.queue.clone(), key: info.key.clone() });
        self.check_queue_slots(at, proc, job, &info.queue);
        self.check_caps(at, job, &info);
        self.check_rate(at, job, &info);
    }

    /// No queue runs more handlers at once in one process than its own slots there (issue 40,
    /// item 5): every handler of the process counts, whatever its lease (it holds a slot until
    /// it returns or is dropped).
    fn check_queue_slots(&mut self, at: Duration, proc: usize, job: Job, queue: &str) {
        let Some(&slots) = self.queue_slots.get(&proc).and_then(|q| q.get(queue)) else { return };
        let n = self.running.values().filter(|r| r.proc == proc && r.queue == queue).count();
        if n > slots as usize {
            self.violate(
                at,
                format!("proc {proc}: {n} handlers of queue {queue} at once (job {job} began), its own slots {slots}"),
            );
        }
    }

    fn live_running(&self, queue: &str, key: Option<&str>) -> Vec<(Job, LeaseNo)> {
        self.running
            .iter()
            .filter(|(k, r)| {
                r.queue == queue && key.is_none_or(|k2| r.key.as_deref() == Some(k2)) && !self.lease_end.contains_key(k)
            })
            .map(|(k, _)| *k)
            .collect()
    }

    fn check_caps(&mut self, at: Duration, job: Job, info: &JobInfo) {
        let live = self.live_running(&info.queue, None);
        let from = live.iter().filter_map(|k| self.leased_at.get(k)).min().copied().unwrap_or(at);
        if let Some(cap) = Self::loosest(self.caps.get(&info.queue), from) {
            if live.len() > cap as usize {
                let n = live.len();
                self.violate(
                    at,
                    format!("queue {}: {n} handlers run at once (job {job} began), cap {cap}", info.queue),
                );
            }
        }
        if let Some(key) = &info.key {
            let live = self.live_running(&info.queue, Some(key));
            let from = live.iter().filter_map(|k| self.leased_at.get(k)).min().copied().unwrap_or(at);
            if let Some(cap) = Self::loosest(self.key_caps.get(&info.queue), from) {
                if live.len() > cap as usize {
                    let n = live.len();
                    self.violate(
                        at,
                        format!("key {key} of {}: {n} handlers at once (job {job}), key cap {cap}", info.queue),
                    );
                }
            }
        }
    }

    fn check_rate(&mut self, at: Duration, job: Job, info: &JobInfo) {
        let Some(&(jobs, per, by_key)) = self.rates.get(&info.queue) else { return };
        if by_key && info.key.is_none() {
            return;
        }
        let bucket = (info.queue.clone(), if by_key { info.key.clone() } else { None });
        let window = per.saturating_sub(self.margins.begin_delay);
        let list = self.rate_begins.entry(bucket).or_default();
        list.push(at);
        let n = list.iter().filter(|t| **t + window > at).count();
        if n > jobs as usize {
            self.violate(
                at,
                format!(
                    "queue {}: {n} handler begins within {:.3} s (job {job}), rate limit {jobs} per {:.3} s",
                    info.queue,
                    window.as_secs_f64(),
                    per.as_secs_f64()
                ),
            );
        }
    }

    /// A handler ended (`ok`: it returned `Ok`; `outcome`: the worker writes its outcome, which
    /// it does not for a handler stopped because its lease was lost).
    pub(super) fn end(&mut self, at: Duration, proc: usize, job: Job, lease: LeaseNo, ok: bool, outcome: bool) {
        if self.running.remove(&(job, lease)).is_none() {
            return;
        }
        if let Some(end) = self.lease_end.get(&(job, lease)) {
            if at > *end + self.margins.fence {
                let late = (at - *end).as_secs_f64();
                self.violate(
                    at,
                    format!("job {job}: handler of lease {lease} (proc {proc}) ran {late:.3} s past its lease's end"),
                );
            }
        }
        if ok {
            self.ok_ends.insert((job, lease));
        }
        if outcome && self.held.get(&job).is_some_and(|h| h.lease == lease && h.proc == Some(proc)) {
            self.ended.entry(proc).or_default().insert((job, lease));
            self.check_unwritten(at, proc);
        }
    }

    fn check_unwritten(&mut self, at: Duration, proc: usize) {
        if self.dead_procs.contains(&proc) {
            return;
        }
        let n = self.ended.get(&proc).map_or(0, BTreeSet::len);
        let bound = self.unwritten_bound.get(&proc).copied().unwrap_or(usize::MAX);
        if n > bound {
            self.violate(at, format!("proc {proc}: {n} finished, unwritten outcomes (bound {bound})"));
        }
    }

    /// When the store granted `lease` of `job`.
    pub(super) fn leased_at(&self, job: Job, lease: LeaseNo) -> Option<Duration> {
        self.leased_at.get(&(job, lease)).copied()
    }

    /// Whether a handler began on `lease` of `job`, or its claim's reply was lost (then the
    /// process never held it).
    pub(super) fn begun(&self, job: Job, lease: LeaseNo) -> bool {
        self.begun.contains(&(job, lease)) || self.orphans.contains(&(job, lease))
    }

    /// How many handlers process `p` runs now.
    pub(super) fn running_of(&self, p: usize) -> usize {
        self.running.values().filter(|r| r.proc == p).count()
    }

    pub(super) fn report(&mut self, at: Duration, msg: String) {
        self.violate(at, msg);
    }

    /// Checks every running handler against its lease's end (called at every event).
    pub(super) fn tick(&mut self, at: Duration) {
        let late: Vec<((Job, LeaseNo), usize, Duration)> = self
            .running
            .iter()
            .filter_map(|(k, r)| {
                self.lease_end.get(k).filter(|end| at > **end + self.margins.fence).map(|e| (*k, r.proc, *e))
            })
            .collect();
        for ((job, lease), proc, end) in late {
            let t = (at - end).as_secs_f64();
            self.violate(
                at,
                format!("job {job}: handler of lease {lease} (proc {proc}) still runs {t:.3} s after its lease ended"),
            );
            // Reported once.
            self.running.remove(&(job, lease));
        }
    }

    /// The store moved a job: `held` is its new holder (lease, process) when Fetched or
    /// Processing; `dead` the reason when it was dead-lettered.
    pub(super) fn moved(
        &mut self,
        at: Duration,
        job: Job,
        held: Option<Held>,
        processing: bool,
        dead: Option<&str>,
        archived_by: Option<LeaseNo>,
    ) {
        if let (Some(h), true) = (&held, processing) {
            let begun = self.begun.contains(&(job, h.lease));
            self.counted.entry((job, h.lease)).or_insert((h.proc, begun));
        }
        let old = self.held.get(&job).cloned();
        if old == held {
            return;
        }
        if let Some(o) = &old {
            self.lease_end.insert((job, o.lease), at);
            if let Some(p) = o.proc {
                if let Some(set) = self.ended.get_mut(&p) {
                    set.remove(&(job, o.lease));
                }
            }
        }
        match held {
            Some(h) => {
                self.leased_at.insert((job, h.lease), at);
                self.held.insert(job, h);
            }
            None => {
                self.held.remove(&job);
            }
        }
        if let Some(reason) = dead {
            // Without a run, only a cancel, or attempts each counted by a claim or start whose
            // process died (or lost the reply) before its handler began, may dead-letter a job.
            let lost_starts = self
                .counted
                .range((job, LeaseNo::MIN)..=(job, LeaseNo::MAX))
                .filter(|(_, (p, begun))| {
                    !begun && p.is_some_and(|p| self.dead_procs.contains(&p) || self.faulted.contains(&p))
                })
                .count();
            if reason != "cancelled" && self.begins.get(&job).copied().unwrap_or(0) == 0 && lost_starts == 0 {
                self.violate(at, format!("job {job}: dead-lettered {reason} without ever running"));
            }
        }
        if let Some(l) = archived_by {
            if !self.ok_ends.contains(&(job, l)) {
                self.violate(at, format!("job {job}: archived by lease {l}, whose handler never returned Ok"));
            }
        }
    }

    /// A process crashed: its handlers are gone; `poison`: the job whose handler crashed it.
    pub(super) fn crashed(&mut self, at: Duration, proc: usize, poison: Option<Job>) {
        self.dead_procs.insert(proc);
        self.running.retain(|_, r| r.proc != proc);
        self.ended.remove(&proc);
        if let Some(job) = poison {
            let n = {
                let c = self.poison_crashes.entry(job).or_default();
                *c += 1;
                *c
            };
            let max = self.jobs.get(&job).map_or(0, |j| j.max_attempts);
            if n > (max + 1) as u32 {
                self.violate(
                    at,
                    format!("poison job {job} crashed its process {n} times (bound: max_attempts {max} + 1)"),
                );
            }
        }
    }

    /// The end of a run: every job final (archived or dead), none lost, attempts counting runs.
    pub(super) fn finish(&mut self, at: Duration, finals: &BTreeMap<Job, (String, i32)>) {
        let jobs: Vec<(Job, JobInfo)> = self.jobs.iter().map(|(j, i)| (*j, i.clone())).collect();
        for (job, info) in jobs {
            match finals.get(&job) {
                None => self.violate(at, format!("job {job}: lost (in no table)")),
                Some((loc, attempt)) => {
                    if !(loc == "archived" || loc.starts_with("dead")) {
                        self.violate(at, format!("job {job}: not final once the faults stopped: {loc}"));
                    }
                    // An attempt counts a run, or a claim or start that counted it and whose
                    // handler never began because its process died or lost the reply.
                    let runs = self.begins.get(&job).copied().unwrap_or(0) as i32;
                    let unrun: Vec<(LeaseNo, Option<usize>)> = self
                        .counted
                        .range((job, LeaseNo::MIN)..=(job, LeaseNo::MAX))
                        .filter(|(_, (_, begun))| !begun)
                        .map(|((_, l), (p, _))| (*l, *p))
                        .collect();
                    if *attempt > runs + unrun.len() as i32 {
                        let n = unrun.len();
                        self.violate(
                            at,
                            format!(
                                "job {job}: attempt {attempt} but {runs} runs and {n} leases counted without a run"
                            ),
                        );
                    }
                    for (l, p) in unrun {
                        let excused = p.is_some_and(|p| self.dead_procs.contains(&p) || self.faulted.contains(&p));
                        if !excused {
                            self.violate(at, format!("job {job}: lease {l} (proc {p:?}) counted an attempt, no handler began on it, and its process had no fault"));
                        }
                    }
                    if info.poison && loc == "archived" {
                        self.violate(at, format!("poison job {job} was archived"));
                    }
                }
            }
        }
    }
}
