//! Workflows and batches in the simulation (issue 41): the plan's workflow, enqueued at its
//! time through the store (broken on purpose by the teeth), and the rule checked at every
//! task's begin; the plan's batch, whose callbacks go to a queue no process takes from
//! ([`CALLBACKS`]), counted at the end: each event's callback exactly once.

use std::sync::Arc;
use std::time::Duration;

use chokaq_core::Backend;

use super::check::JobInfo;
use super::run::{sim_job, JobPlan};
use super::world::{job_no, World};

/// A workflow the run enqueues (issue 41): tasks by index, each a job and the earlier tasks it
/// waits for.
#[derive(Debug, Clone)]
pub(super) struct FlowPlan {
    pub(super) at: Duration,
    pub(super) tasks: Vec<FlowTask>,
    /// A broken store the teeth use: the workflow is enqueued with weaker dependencies than the
    /// checker holds it to.
    pub(super) fault: Option<FlowFault>,
}

#[derive(Debug, Clone)]
pub(super) struct FlowTask {
    pub(super) job: JobPlan,
    pub(super) deps: Vec<usize>,
    pub(super) anyway: bool,
}

/// How the teeth break a workflow's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlowFault {
    /// Each task waits for its first dependency only.
    FirstDependencyOnly,
    /// Every task runs anyway after a failed dependency.
    AllRunAnyway,
}

/// Enqueues the plan's workflow at its time, and tells the checker each task's dependencies
/// (the true ones, whatever a tooth's broken store was given).
pub(super) async fn enqueue_flow(world: Arc<World>, flow: FlowPlan) {
    let now = world.now();
    if flow.at > now {
        tokio::time::sleep(flow.at - now).await;
    }
    let name = |i: usize| format!("w{i}");
    let mut wf = chokaq_core::Workflow::new("sim");
    for (i, t) in flow.tasks.iter().enumerate() {
        let mut deps: Vec<String> = t.deps.iter().map(|&d| name(d)).collect();
        let mut anyway = t.anyway;
        match flow.fault {
            Some(FlowFault::FirstDependencyOnly) => deps.truncate(1),
            Some(FlowFault::AllRunAnyway) => anyway = true,
            None => {}
        }
        let task = chokaq_core::Task::new(name(i), sim_job(&t.job)).after(deps);
        wf = wf.task(if anyway { task.run_anyway() } else { task });
    }
    let e = world.db.enqueue_workflow(&wf).await.expect("enqueue_workflow");
    let nos: Vec<u32> = e.tasks.iter().map(|(_, id)| job_no(*id)).collect();
    {
        let mut c = world.check.lock().unwrap();
        for (i, t) in flow.tasks.iter().enumerate() {
            let info = JobInfo::of(&t.job);
            c.jobs.insert(nos[i], info);
            c.flow.insert(nos[i], (t.deps.iter().map(|&d| nos[d]).collect(), t.anyway));
        }
    }
    let shape: Vec<String> = flow
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let deps: Vec<u32> = t.deps.iter().map(|&d| nos[d]).collect();
            format!("job {} after {deps:?}{}", nos[i], if t.anyway { " anyway" } else { "" })
        })
        .collect();
    world.log(format!("enqueue workflow: {}", shape.join(", ")));
    world.observe();
}

/// A workflow task's handler began: each dependency must have succeeded (or, for a task that
/// runs anyway, be final). Read from the store itself at the begin.
pub(super) fn check_flow_begin(world: &World, job: u32, lease: i64) {
    let Some((deps, anyway)) = world.check.lock().unwrap().flow.get(&job).cloned() else { return };
    if deps.is_empty() {
        return;
    }
    let view = world.db.view();
    for d in deps {
        let at = view.iter().find(|r| job_no(r.id) == d).map(|r| r.location);
        let ok = match at {
            Some(chokaq_core::JobLocation::Archived) => true,
            Some(chokaq_core::JobLocation::Dead(_)) => anyway,
            _ => false,
        };
        if !ok {
            let now = world.now();
            let place = at.map_or("nowhere".to_string(), super::world::loc);
            world.check.lock().unwrap().report(
                now,
                format!("job {job}: workflow task began (lease {lease}) while its dependency job {d} is {place}"),
            );
        }
    }
}

/// The queue of the batch's callbacks: no process takes from it, so they stay to be counted.
pub(super) const CALLBACKS: &str = "callbacks";

/// A batch the run enqueues (issue 41): its jobs, at one time.
#[derive(Debug, Clone)]
pub(super) struct BatchPlan {
    pub(super) at: Duration,
    pub(super) jobs: Vec<JobPlan>,
    /// The tooth: a store that enqueues the `finished` callback again at every completion that
    /// finds the batch final (a check after the move instead of in it).
    pub(super) twice: bool,
}

/// Enqueues the plan's batch at its time, with the three callbacks in [`CALLBACKS`].
pub(super) async fn enqueue_batch(world: Arc<World>, batch: BatchPlan) {
    let now = world.now();
    if batch.at > now {
        tokio::time::sleep(batch.at - now).await;
    }
    world.batch_twice.store(batch.twice, std::sync::atomic::Ordering::Relaxed);
    let b = chokaq_core::Batch::new("sim")
        .jobs(batch.jobs.iter().map(sim_job))
        .on_finished(cb("finished"))
        .on_succeeded(cb("succeeded"))
        .on_first_dead(cb("first_dead"));
    let e = world.db.enqueue_batch(&b).await.expect("enqueue_batch");
    *world.batch_id.lock().unwrap() = Some(e.id);
    let nos: Vec<u32> = e.jobs.iter().map(|id| job_no(*id)).collect();
    {
        let mut c = world.check.lock().unwrap();
        for (no, j) in nos.iter().zip(&batch.jobs) {
            let info = JobInfo::of(j);
            c.jobs.insert(*no, info);
        }
        c.batch = nos.clone();
    }
    world.log(format!("enqueue batch: jobs {nos:?}"));
    world.observe();
}

/// The end of a run with a batch (every job final): exactly one `finished` callback, one
/// `succeeded` when none of its jobs was dead-lettered, one `first_dead` when one was; no
/// other.
pub(super) async fn check_batch_end(world: &World) {
    let (batch, known): (Vec<u32>, std::collections::HashSet<u32>) = {
        let c = world.check.lock().unwrap();
        (c.batch.clone(), c.jobs.keys().copied().collect())
    };
    if batch.is_empty() {
        return;
    }
    let view = world.db.view();
    let dead = view
        .iter()
        .filter(|r| batch.contains(&job_no(r.id)) && matches!(r.location, chokaq_core::JobLocation::Dead(_)))
        .count();
    let mut events: std::collections::BTreeMap<String, usize> = Default::default();
    for r in view.iter().filter(|r| !known.contains(&job_no(r.id))) {
        let Ok(Some(job)) = world.db.get_job(r.id).await else { continue };
        if job.queue.as_str() == CALLBACKS {
            let on = job.payload["on"].as_str().unwrap_or("?").to_string();
            *events.entry(on).or_insert(0) += 1;
        }
    }
    let mut want: std::collections::BTreeMap<String, usize> = Default::default();
    want.insert("finished".into(), 1);
    want.insert(if dead == 0 { "succeeded" } else { "first_dead" }.into(), 1);
    if events != want {
        let at = world.now();
        world.check.lock().unwrap().report(
            at,
            format!("batch of jobs {batch:?} ({dead} dead-lettered): callbacks {events:?}, expected {want:?}"),
        );
    }
}

/// A callback job of the plan's batch.
fn cb(event: &str) -> chokaq_core::NewJob {
    chokaq_core::NewJob::build(CALLBACKS, "sim.callback").expect("callback").json(serde_json::json!({ "on": event }))
}

/// The batch tooth, after a completion: the `finished` callback again when the batch is final.
pub(super) async fn batch_twice_after_complete(world: &World) {
    if !world.batch_twice.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let Some(id) = *world.batch_id.lock().unwrap() else { return };
    if let Ok(Some(st)) = world.db.get_batch(id).await {
        if st.is_final() {
            let _ = chokaq_core::BackendExt::enqueue(&*world.db, cb("finished")).await;
        }
    }
}
