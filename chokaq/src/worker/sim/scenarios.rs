//! Scripted scenarios: each runtime hole of issue 36 as a plan written out (no random faults),
//! run by the same simulator and checker, with the outcome the rules require.

use std::time::Duration;

use chokaq_core::RateLimit;

use super::report;
use super::run::{run, JobPlan, Out, Outcome, Plan, ProcPlan, QueuePlan, Spec};
use super::world::{Rates, Window};

fn queue(name: &str) -> QueuePlan {
    QueuePlan { name: name.to_string(), cap: None, key_cap: None, rate: None }
}

fn job(at_ms: u64, queue: &str, ms: u64) -> JobPlan {
    JobPlan {
        at: Duration::from_millis(at_ms),
        queue: queue.to_string(),
        key: None,
        max_attempts: 3,
        spec: Spec { ms, out: Out::Ok, coop: false, poison: None },
    }
}

fn proc(at_ms: u64, concurrency: u32, prefetch: u32) -> ProcPlan {
    ProcPlan {
        at: Duration::from_millis(at_ms),
        concurrency,
        prefetch,
        unwritten: None,
        queue_slots: Vec::new(),
        windows: Vec::new(),
    }
}

/// A plan without random faults, crashes or operator actions.
fn quiet(queues: Vec<QueuePlan>, jobs: Vec<JobPlan>, procs: Vec<ProcPlan>) -> Plan {
    Plan {
        seed: 1,
        queues,
        jobs,
        procs,
        rates: Rates { fail_before: 0, lost_after: 0, delay: Duration::ZERO },
        crashes: false,
        operator: false,
        fault_end: Duration::from_secs(1),
        deadline: Duration::from_secs(60),
        broken: Vec::new(),
        flow: None,
        batch: None,
    }
}

/// When job `n`'s first handler began (ms), from the log.
fn first_begin(out: &Outcome, n: u32) -> Option<f64> {
    let needle = format!(" begin job {n} ");
    out.log.iter().find(|l| l.contains(&needle)).and_then(|l| l.split_whitespace().next()?.parse().ok())
}

pub(super) fn check(name: &str, out: &Outcome) -> Result<(), String> {
    if out.violations.is_empty() {
        Ok(())
    } else {
        Err(report(1, out, name))
    }
}

/// Hole 1: a poison job (it kills its process as it begins) and an innocent job waiting behind
/// it in the same process's look-ahead (concurrency 1). The innocent job runs and is archived;
/// the poison job is dead-lettered within `max_attempts + 1` crashes.
pub(super) fn poison_and_innocent(plan_edit: &dyn Fn(&mut Plan)) -> Result<(), String> {
    let mut poison = job(0, "q0", 10);
    poison.spec.poison = Some(0);
    let mut plan = quiet(vec![queue("q0")], vec![poison, job(0, "q0", 10)], vec![proc(0, 1, 0)]);
    plan_edit(&mut plan);
    let out = run(&plan);
    check("poison_and_innocent", &out)?;
    let innocent = out.finals.get(&2).map(|f| f.0.clone());
    if innocent.as_deref() != Some("archived") {
        return Err(format!("the innocent job ended {innocent:?}, not archived"));
    }
    Ok(())
}

/// Hole 2: a worker whose heartbeats fail (its other calls work) for longer than the zombie
/// timeout while its handler runs: the job is rescued and run by another worker; the first
/// handler must be stopped (fenced) before its lease ends plus `cancel_wait`.
pub(super) fn heartbeat_outage(plan_edit: &dyn Fn(&mut Plan)) -> Result<(), String> {
    let mut p0 = proc(0, 1, 0);
    p0.windows = vec![(Duration::from_millis(300), Duration::from_millis(4300), Window::HeartbeatsFail)];
    let mut plan = quiet(vec![queue("q0")], vec![job(0, "q0", 3000)], vec![p0, proc(500, 1, 0)]);
    plan.fault_end = Duration::from_secs(5);
    plan_edit(&mut plan);
    let out = run(&plan);
    check("heartbeat_outage", &out)
}

/// Hole 3 (the review's scenario): a rate limit of 2 per second, one worker of 2 slots, two
/// 1.5 s jobs then 5 ms jobs: never more than 2 handler begins in any second.
pub(super) fn rate_binds_begins(plan_edit: &dyn Fn(&mut Plan)) -> Result<(), String> {
    let mut q = queue("q0");
    q.rate = Some(RateLimit::new(2, Duration::from_secs(1)));
    let mut jobs = vec![job(0, "q0", 1500), job(0, "q0", 1500)];
    jobs.extend((0..6).map(|_| job(0, "q0", 5)));
    let mut plan = quiet(vec![q], jobs, vec![proc(0, 2, 0)]);
    plan_edit(&mut plan);
    check("rate_binds_begins", &run(&plan))
}

/// Hole 5: writes stalled, 2 slots, `prefetch(8)`: at most 2 x 2 finished, unwritten outcomes.
pub(super) fn prefetch_stalled_writes(plan_edit: &dyn Fn(&mut Plan)) -> Result<(), String> {
    let mut p0 = proc(0, 2, 8);
    p0.windows = vec![(Duration::from_millis(100), Duration::from_millis(5000), Window::WritesStall)];
    let jobs = (0..40).map(|_| job(0, "q0", 30)).collect();
    let mut plan = quiet(vec![queue("q0")], jobs, vec![p0]);
    plan.fault_end = Duration::from_secs(6);
    plan_edit(&mut plan);
    check("prefetch_stalled_writes", &run(&plan))
}

/// Hole 6: a worker whose one slot runs a 2 s job does not keep a job of a queue capped at
/// one waiting in its look-ahead while another worker is idle: that job begins within 500 ms.
/// With `warm`, the first worker has run fast jobs before (its averages say jobs are short).
pub(super) fn no_hoarding(warm: bool, plan_edit: &dyn Fn(&mut Plan)) -> Result<(), String> {
    let mut capped = queue("q1");
    capped.cap = Some(1);
    let mut jobs = Vec::new();
    let at = if warm {
        jobs.extend((0..10).map(|_| job(0, "q0", 2)));
        400
    } else {
        0
    };
    jobs.push(job(at, "q0", 2000));
    jobs.push(job(at, "q1", 5));
    let long_job = jobs.len() as u32 - 1;
    let mut plan = quiet(vec![queue("q0"), capped], jobs, vec![proc(0, 1, 0), proc(if warm { 450 } else { 50 }, 1, 0)]);
    plan_edit(&mut plan);
    let out = run(&plan);
    check("no_hoarding", &out)?;
    let small = long_job + 1;
    let began = first_begin(&out, small).ok_or(format!("job {small} never began"))?;
    if began > at as f64 + 500.0 {
        let lines: Vec<&String> = out.log.iter().filter(|l| l.contains(&format!("job {small} "))).collect();
        return Err(format!(
            "job {small} (capped queue) began at {began:.0} ms, {:.0} ms after it was enqueued, while a worker sat idle:\n{}",
            began - at as f64,
            lines.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(())
}

/// Issue 40, item 5: one process of 3 slots, queue q0 with 1 of its own, q1 sharing the other
/// 2; 6 jobs of q0 (100 ms) and 3 of q1 enqueued at once: q0 never runs 2 at once, and every
/// job is archived.
pub(super) fn queue_slots_bind(plan_edit: &dyn Fn(&mut Plan)) -> Result<(), String> {
    let mut jobs: Vec<JobPlan> = (0..6).map(|_| job(0, "q0", 100)).collect();
    jobs.extend((0..3).map(|_| job(0, "q1", 100)));
    let mut p0 = proc(0, 3, 0);
    p0.queue_slots = vec![("q0".to_string(), 1)];
    let mut plan = quiet(vec![queue("q0"), queue("q1")], jobs, vec![p0]);
    plan_edit(&mut plan);
    check("queue_slots_bind", &run(&plan))
}

#[test]
fn issue40_a_queue_never_runs_more_than_its_own_slots() {
    queue_slots_bind(&|_| {}).unwrap();
}

#[test]
fn hole1_a_poison_job_ends_and_the_innocent_runs() {
    poison_and_innocent(&|_| {}).unwrap();
}

#[test]
fn hole2_a_handler_is_fenced_when_its_lease_ages() {
    heartbeat_outage(&|_| {}).unwrap();
}

#[test]
fn hole3_a_rate_limit_binds_handler_begins() {
    rate_binds_begins(&|_| {}).unwrap();
}

#[test]
fn hole5_the_prefetch_path_keeps_the_unwritten_bound() {
    prefetch_stalled_writes(&|_| {}).unwrap();
}

#[test]
fn hole6_a_long_job_does_not_hoard_the_look_ahead() {
    no_hoarding(false, &|_| {}).unwrap();
    no_hoarding(true, &|_| {}).unwrap();
}
