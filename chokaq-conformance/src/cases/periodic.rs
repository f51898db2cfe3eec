//! Periodic jobs (the `schedules` table): every tick is enqueued exactly once however many
//! schedulers try, also after its job left the hot table; missed ticks follow the policy;
//! a second spec under one name is a conflict; pause and stale rows refuse ticks.
//!
//! Each case uses its own schedule names, scheduler group and queue, so the cases run in
//! parallel with every other case.

use std::collections::BTreeMap;
use std::time::Duration;

use chokaq_core::{
    missed_ticks, tick_key, Backend, ClaimMode, Enqueued, ErrorKind, Interval, JobKind, JobTable, ListJobsParams,
    MissedTickPolicy, NewJob, QueueName, ScheduleDef, TickOutcome, TickRequest, TickSource, Timestamp, WorkerId,
};

use crate::child::ChildLine;
use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(
    periodic:
    four_schedulers_enqueue_each_tick_once,
    tick_after_archive_is_not_enqueued_again,
    missed_ticks_follow_the_policy,
    conflicting_spec_is_an_error,
    pause_and_stale_refuse_ticks,
    bad_input_is_rejected,
);

/// The number of schedulers of the exactly-once case.
const SCHEDULERS: usize = 4;
/// The ticks (one a second) the exactly-once case runs for.
const TICKS: i64 = 10;

fn schedule_name(cx: &Ctx, label: &str) -> String {
    let case: String = cx.case.chars().take(60).collect();
    format!("{case}.{label}.{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

fn every_second() -> Interval {
    Interval::new(Duration::from_secs(1)).expect("1 s is a valid interval")
}

fn def_of(name: &str, src: &dyn TickSource, group: &str) -> ScheduleDef {
    ScheduleDef { group: group.to_owned(), ..ScheduleDef::new(name, src.spec(), src.time_zone()) }
}

fn tick_job(queue: &QueueName) -> NewJob {
    NewJob::new(queue.clone(), JobKind::new("test.periodic.v1").expect("valid kind"))
}

fn request(def: &ScheduleDef, src: &dyn TickSource, queue: &QueueName, tick: Timestamp) -> TickRequest {
    TickRequest::new(def, tick, src.next_after(tick), tick_job(queue))
}

fn secs(t: i64) -> Result<Timestamp, Failure> {
    chrono::DateTime::from_timestamp(t, 0).ok_or_else(|| Failure(format!("tick {t} out of range")))
}

/// One scheduler of the exactly-once case (a child process, or a task here): registers the
/// 1-second schedule `name`, enqueues each of the `n` ticks from `first` when it is due, then
/// tries every one of them again (a late scheduler, after the jobs were worked off). Reports
/// each attempt as (tick, won).
pub(crate) async fn run_scheduler(
    backend: &dyn Backend,
    name: &str,
    queue: &QueueName,
    first: i64,
    n: i64,
    mut report: impl FnMut(i64, bool),
) -> Result<(), Failure> {
    let src = every_second();
    let def = def_of(name, &src, name);
    backend.register_schedule(&def).await?;
    for t in first..first + n {
        let tick = secs(t)?;
        if let Ok(wait) = (tick - chrono::Utc::now()).to_std() {
            tokio::time::sleep(wait).await;
        }
        let out = backend.enqueue_tick(&request(&def, &src, queue, tick)).await?;
        report(t, matches!(out, TickOutcome::Enqueued(_)));
    }
    for t in first..first + n {
        let out = backend.enqueue_tick(&request(&def, &src, queue, secs(t)?)).await?;
        report(t, matches!(out, TickOutcome::Enqueued(_)));
    }
    Ok(())
}

/// Every job of `queue` (hot, archive, dead-letter) by idempotency key.
async fn jobs_by_key(cx: &Ctx, queue: &QueueName) -> Result<BTreeMap<String, usize>, Failure> {
    let mut keys = BTreeMap::new();
    for table in [JobTable::Hot, JobTable::Archive, JobTable::DeadLetter] {
        let mut p = ListJobsParams::new(table);
        p.queue = Some(queue.clone());
        p.limit = 1000;
        loop {
            let page = cx.backend.list_jobs(&p).await?;
            for j in &page.jobs {
                *keys.entry(j.idempotency_key.clone().unwrap_or_default()).or_insert(0) += 1;
            }
            match page.next {
                Some(n) => p.after = Some(n),
                None => break,
            }
        }
    }
    Ok(keys)
}

/// Four schedulers (child processes where the backend has them, else tasks) run the same
/// 1-second schedule for 10 s while a worker here works the jobs off: each of the 10 ticks is
/// enqueued exactly once, none is missed, and a second round of every tick by every
/// scheduler, after the jobs were archived, enqueues nothing.
pub async fn four_schedulers_enqueue_each_tick_once(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let name = schedule_name(&cx, "s");
    // The first tick leaves the schedulers time to start (a late one catches up at once).
    let first = chrono::Utc::now().timestamp() + 4;
    let stop = stop_flag();
    let worker = {
        let cx = cx.clone();
        let q = q.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let w = WorkerId::random();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let got = cx.claim(w, &q, 10, ClaimMode::Start).await?;
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
                cx.backend.complete(w, &leases).await?;
            }
            Ok::<(), Failure>(())
        })
    };
    let mut attempts: Vec<(i64, bool)> = Vec::new();
    let mut processes = 0;
    match cx.children().filter(|_| cx.caps.multi_process) {
        Some(launcher) => {
            let extra = [
                (crate::child::ENV_CHILD_SCHEDULE, name.clone()),
                (crate::child::ENV_CHILD_FIRST_TICK, first.to_string()),
                (crate::child::ENV_CHILD_TICKS, TICKS.to_string()),
            ];
            let mut readers = tokio::task::JoinSet::new();
            for _ in 0..SCHEDULERS {
                let mut p = launcher.spawn_with("scheduler", &q, 1, &extra)?;
                readers.spawn(async move {
                    let mut seen = Vec::new();
                    let mut done = false;
                    while let Some(line) = p.next().await? {
                        match line {
                            ChildLine::Tick(t, won) => seen.push((t, won)),
                            ChildLine::Done => done = true,
                            ChildLine::Error(e) => return Err(Failure(format!("scheduler child failed: {e}"))),
                            _ => {}
                        }
                    }
                    let status = p.child.wait().await.map_err(|e| Failure(format!("waiting for child: {e}")))?;
                    ensure!(done && status.success(), "scheduler child ended without 'done' (exit {status})");
                    Ok::<_, Failure>(seen)
                });
            }
            while let Some(r) = readers.join_next().await {
                attempts.extend(r.map_err(|e| Failure(format!("reader panicked: {e}")))??);
                processes += 1;
            }
        }
        None => {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..SCHEDULERS {
                let backend = cx.backend.clone();
                let (name, q) = (name.clone(), q.clone());
                tasks.spawn(async move {
                    let mut seen = Vec::new();
                    run_scheduler(&*backend, &name, &q, first, TICKS, |t, won| seen.push((t, won))).await?;
                    Ok::<_, Failure>(seen)
                });
            }
            while let Some(r) = tasks.join_next().await {
                attempts.extend(r.map_err(|e| Failure(format!("scheduler task panicked: {e}")))??);
                processes += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    worker.await.map_err(|e| Failure(format!("worker panicked: {e}")))??;
    ensure_eq!(processes, SCHEDULERS, "schedulers that finished");
    ensure_eq!(attempts.len(), SCHEDULERS * 2 * TICKS as usize, "tick attempts reported");
    let mut wins: BTreeMap<i64, usize> = (first..first + TICKS).map(|t| (t, 0)).collect();
    for (t, won) in &attempts {
        if *won {
            *wins.entry(*t).or_insert(0) += 1;
        }
    }
    let bad: Vec<_> = wins.iter().filter(|(_, n)| **n != 1).collect();
    ensure!(bad.is_empty(), "ticks not won exactly once (tick, wins): {bad:?}");
    let keys = jobs_by_key(&cx, &q).await?;
    let want: BTreeMap<String, usize> =
        (first..first + TICKS).map(|t| Ok((tick_key(&name, secs(t)?), 1))).collect::<Result<_, Failure>>()?;
    ensure_eq!(keys, want, "jobs per tick key");
    let row = cx.backend.list_schedules().await?.into_iter().find(|r| r.name == name).ok_or("schedule row missing")?;
    ensure_eq!(row.last_enqueued_tick, Some(secs(first + TICKS - 1)?), "last_enqueued_tick");
    Ok(())
}

fn stop_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}

/// The archive argument: once a tick's job is done and archived, no live job holds its key,
/// yet enqueueing the same tick again (a late scheduler) is refused by the schedule row, as is
/// any earlier tick; the next tick is enqueued.
pub async fn tick_after_archive_is_not_enqueued_again(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let name = schedule_name(&cx, "a");
    let src = every_second();
    let def = def_of(&name, &src, &name);
    cx.backend.register_schedule(&def).await?;
    let tick = secs(chrono::Utc::now().timestamp() - 60)?;
    let first = cx.backend.enqueue_tick(&request(&def, &src, &q, tick)).await?;
    let TickOutcome::Enqueued(e) = first else { return Err(format!("first attempt of a tick: {first:?}").into()) };
    ensure!(!e.duplicate, "the first attempt found a duplicate");
    let w = WorkerId::random();
    let job = cx.claim_one_started(w, &q).await?;
    ensure_eq!(job.id, e.id, "claimed the tick's job");
    ensure_eq!(job.idempotency_key.as_deref(), Some(tick_key(&name, tick).as_str()), "the tick's key");
    ensure!(cx.backend.complete(w, &[job.lease_ref()]).await?.lost.is_empty(), "complete lost the lease");
    ensure_eq!(cx.presence(e.id).await?.archive, 1, "the tick's job archived");
    for (what, t) in [("the same tick", tick), ("an earlier tick", tick - chrono::Duration::seconds(1))] {
        let again = cx.backend.enqueue_tick(&request(&def, &src, &q, t)).await?;
        ensure_eq!(again, TickOutcome::Taken { last_enqueued_tick: tick }, "{what} after the job was archived");
    }
    let next = tick + chrono::Duration::seconds(1);
    let later = cx.backend.enqueue_tick(&request(&def, &src, &q, next)).await?;
    ensure!(matches!(later, TickOutcome::Enqueued(Enqueued { duplicate: false, .. })), "the next tick: {later:?}");
    let keys = jobs_by_key(&cx, &q).await?;
    let want: BTreeMap<String, usize> = [(tick_key(&name, tick), 1), (tick_key(&name, next), 1)].into_iter().collect();
    ensure_eq!(keys, want, "jobs per tick key");
    Ok(())
}

/// A restart after five hours of an hourly schedule with no scheduler: `Skip` enqueues
/// nothing, `RunOnce` the latest missed tick, `RunAll` (3 h window) the three ticks inside
/// the window; a second scheduler restarting at the same time adds nothing.
pub async fn missed_ticks_follow_the_policy(cx: Ctx) -> CaseResult {
    let hourly = Interval::new(Duration::from_secs(3600)).expect("valid interval");
    let now = chrono::Utc::now();
    let latest = secs(now.timestamp().div_euclid(3600) * 3600)?;
    let hour = chrono::Duration::hours(1);
    let policies = [
        (MissedTickPolicy::Skip, vec![]),
        (MissedTickPolicy::RunOnce, vec![latest]),
        (
            MissedTickPolicy::RunAll { window: Duration::from_secs(3 * 3600) },
            vec![latest - hour * 2, latest - hour, latest],
        ),
    ];
    for (policy, want) in policies {
        let q = cx.queue_named("m");
        let name = schedule_name(&cx, "m");
        let def = def_of(&name, &hourly, &name);
        cx.backend.register_schedule(&def).await?;
        // The last run before the downtime, five hours ago.
        let before = latest - hour * 5;
        let out = cx.backend.enqueue_tick(&request(&def, &hourly, &q, before)).await?;
        ensure!(matches!(out, TickOutcome::Enqueued(_)), "{policy:?}: the run before the downtime: {out:?}");
        // Two schedulers restart: each registers, reads last_enqueued_tick and catches up.
        let mut enqueued = Vec::new();
        for restart in 0..2 {
            let row = cx.backend.register_schedule(&def).await?;
            if restart == 0 {
                ensure_eq!(row.last_enqueued_tick, Some(before), "{policy:?}: last_enqueued_tick at restart");
            }
            for t in missed_ticks(&hourly, row.last_enqueued_tick, now, policy) {
                if let TickOutcome::Enqueued(_) = cx.backend.enqueue_tick(&request(&def, &hourly, &q, t)).await? {
                    enqueued.push(t);
                }
            }
        }
        ensure_eq!(enqueued, want, "{policy:?}: catch-up ticks enqueued by the two restarting schedulers");
        let mut keys: BTreeMap<String, usize> = want.iter().map(|t| (tick_key(&name, *t), 1)).collect();
        keys.insert(tick_key(&name, before), 1);
        ensure_eq!(jobs_by_key(&cx, &q).await?, keys, "{policy:?}: jobs per tick key");
    }
    Ok(())
}

/// Two processes declare one name with different specs: the second registration fails with
/// `Conflict` naming both specs, and the row keeps the first. A deliberate change (`replace`)
/// takes the row over; the old spec's ticks are then refused with `SpecChanged`.
pub async fn conflicting_spec_is_an_error(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let name = schedule_name(&cx, "c");
    let one = every_second();
    let five = Interval::new(Duration::from_secs(5)).expect("valid interval");
    let first = def_of(&name, &one, &name);
    let second = def_of(&name, &five, &name);
    cx.backend.register_schedule(&first).await?;
    let err = cx.backend.register_schedule(&second).await.err().ok_or("a second spec under one name was accepted")?;
    ensure_eq!(err.kind(), ErrorKind::Conflict, "error kind of a second spec ({err})");
    let msg = err.to_string();
    ensure!(msg.contains("every:1s") && msg.contains("every:5s") && msg.contains(&name), "unclear conflict: {msg}");
    let in_tz = ScheduleDef { time_zone: "Europe/Berlin".into(), ..first.clone() };
    let err =
        cx.backend.register_schedule(&in_tz).await.err().ok_or("another time zone under one name was accepted")?;
    ensure_eq!(err.kind(), ErrorKind::Conflict, "error kind of another time zone");
    let rows = cx.backend.list_schedules().await?;
    let row = rows.iter().find(|r| r.name == name).ok_or("schedule row missing")?;
    ensure_eq!(row.spec.as_str(), "every:1s", "the row keeps the first spec");
    // Registering the same spec again is fine.
    cx.backend.register_schedule(&first).await?;
    // A deliberate change.
    let row = cx.backend.register_schedule(&ScheduleDef { replace: true, ..second.clone() }).await?;
    ensure_eq!(row.spec.as_str(), "every:5s", "the replaced spec");
    let tick = secs(chrono::Utc::now().timestamp().div_euclid(5) * 5 - 50)?;
    let old = cx.backend.enqueue_tick(&request(&first, &one, &q, tick)).await?;
    ensure_eq!(
        old,
        TickOutcome::SpecChanged { spec: "every:5s".into(), time_zone: "UTC".into() },
        "a tick of the old spec"
    );
    let new = cx.backend.enqueue_tick(&request(&second, &five, &q, tick)).await?;
    ensure!(matches!(new, TickOutcome::Enqueued(_)), "a tick of the new spec: {new:?}");
    ensure_eq!(jobs_by_key(&cx, &q).await?.len(), 1, "jobs");
    Ok(())
}

/// A paused schedule's tick is won without a job (and never caught up); a resumed one
/// enqueues again. Marking the group's undeclared rows stale refuses their ticks until a
/// process registers them again. Pausing an unknown name is `NotFound`.
pub async fn pause_and_stale_refuse_ticks(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let group = schedule_name(&cx, "g");
    let (kept, gone) = (schedule_name(&cx, "kept"), schedule_name(&cx, "gone"));
    let src = every_second();
    let (dk, dg) = (def_of(&kept, &src, &group), def_of(&gone, &src, &group));
    cx.backend.register_schedule(&dk).await?;
    cx.backend.register_schedule(&dg).await?;
    let t0 = chrono::Utc::now().timestamp() - 100;
    let paused = cx.backend.set_schedule_enabled(&kept, false).await?;
    ensure!(!paused.enabled, "set_schedule_enabled(false) returned an enabled row");
    let out = cx.backend.enqueue_tick(&request(&dk, &src, &q, secs(t0)?)).await?;
    ensure_eq!(out, TickOutcome::Paused, "a tick of a paused schedule");
    let again = cx.backend.enqueue_tick(&request(&dk, &src, &q, secs(t0)?)).await?;
    ensure_eq!(again, TickOutcome::Taken { last_enqueued_tick: secs(t0)? }, "the paused tick again");
    ensure_eq!(jobs_by_key(&cx, &q).await?.len(), 0, "jobs while paused");
    cx.backend.set_schedule_enabled(&kept, true).await?;
    let out = cx.backend.enqueue_tick(&request(&dk, &src, &q, secs(t0 + 1)?)).await?;
    ensure!(matches!(out, TickOutcome::Enqueued(_)), "a tick after resume: {out:?}");
    // The code now declares only `kept`.
    let marked = cx.backend.mark_stale_schedules(&group, std::slice::from_ref(&kept)).await?;
    ensure_eq!(marked, 1, "rows marked stale");
    let rows = cx.backend.list_schedules().await?;
    let stale: Vec<_> = rows.iter().filter(|r| r.group == group).map(|r| (r.name.clone(), r.stale)).collect();
    ensure_eq!(
        stale,
        {
            let mut v = vec![(kept.clone(), false), (gone.clone(), true)];
            v.sort();
            v
        },
        "stale marks of the group"
    );
    let out = cx.backend.enqueue_tick(&request(&dg, &src, &q, secs(t0 + 2)?)).await?;
    ensure_eq!(out, TickOutcome::Stale, "a tick of a stale schedule");
    let row = cx.backend.register_schedule(&dg).await?;
    ensure!(!row.stale, "registering again clears the stale mark");
    let out = cx.backend.enqueue_tick(&request(&dg, &src, &q, secs(t0 + 2)?)).await?;
    ensure!(matches!(out, TickOutcome::Enqueued(_)), "a tick after registering again: {out:?}");
    let err = cx.backend.set_schedule_enabled(&schedule_name(&cx, "none"), false).await.err();
    ensure_eq!(err.map(|e| e.kind()), Some(ErrorKind::NotFound), "pausing an unknown schedule");
    ensure_eq!(jobs_by_key(&cx, &q).await?.len(), 2, "jobs");
    Ok(())
}

/// Bad names, sub-second ticks and a job without the tick's key are `InvalidInput` and write
/// nothing.
pub async fn bad_input_is_rejected(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let name = schedule_name(&cx, "b");
    let src = every_second();
    let def = def_of(&name, &src, &name);
    for bad in ["", "a\nb", "a\u{200B}b"] {
        let r = cx.backend.register_schedule(&ScheduleDef { name: bad.into(), ..def.clone() }).await;
        ensure_eq!(r.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput), "schedule name {bad:?}");
    }
    let r = cx.backend.register_schedule(&ScheduleDef { name: "n".repeat(201), ..def.clone() }).await;
    ensure_eq!(r.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput), "a 201-byte name");
    cx.backend.register_schedule(&def).await?;
    let tick = secs(chrono::Utc::now().timestamp() - 10)?;
    let half = tick + chrono::Duration::milliseconds(500);
    let r = cx.backend.enqueue_tick(&request(&def, &src, &q, half)).await;
    ensure_eq!(r.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput), "a sub-second tick");
    let mut req = request(&def, &src, &q, tick);
    req.job.idempotency_key = Some("something-else".into());
    let r = cx.backend.enqueue_tick(&req).await;
    ensure_eq!(r.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput), "a job without the tick's key");
    let r = cx.backend.mark_stale_schedules(&name, &["a\0b".to_string()]).await;
    ensure_eq!(r.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput), "a bad live name");
    let row = cx.backend.list_schedules().await?.into_iter().find(|r| r.name == name).ok_or("row missing")?;
    ensure_eq!(row.last_enqueued_tick, None, "last_enqueued_tick after rejected ticks");
    ensure_eq!(jobs_by_key(&cx, &q).await?.len(), 0, "jobs");
    Ok(())
}
