//! Workflows in the simulation (issue 41): the plan's workflow, enqueued at its time through
//! the store (broken on purpose by the teeth), and the rule checked at every task's begin.

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
            let info = JobInfo {
                queue: t.job.queue.clone(),
                key: t.job.key.clone(),
                max_attempts: t.job.max_attempts,
                poison: t.job.spec.poison.is_some(),
            };
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
