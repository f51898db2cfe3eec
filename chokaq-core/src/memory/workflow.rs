//! Workflows in the reference backend (`docs/workflows.md`): the graph beside the rows, the
//! waiting tasks' counts of dependencies not yet final, and the two hooks every move calls:
//! a success releases dependents, a dead letter cancels them (transitively, except those that
//! run anyway, which count it as final). Everything under the store's one lock.

use std::collections::{HashMap, HashSet};

use crate::workflow::{check_task_jobs, DEFAULT_MAX_WORKFLOW_TASKS};
use crate::{
    validate, DeadReason, EnqueuedWorkflow, Error, JobId, JobLocation, JobStatus, Result, RunAt, TaskState, TaskStatus,
    Timestamp, Workflow, WorkflowId, WorkflowPlan, WorkflowStatus,
};

use super::{plus, status_of, MemoryBackend, Store};

/// One stored workflow.
#[derive(Debug)]
pub(super) struct Flow {
    name: String,
    /// `(task name, job, dependency names)`, in the order the tasks were added.
    tasks: Vec<(String, JobId, Vec<String>)>,
    plan: WorkflowPlan,
}

/// The workflows of a store.
#[derive(Debug, Default)]
pub(super) struct Flows {
    flows: HashMap<WorkflowId, Flow>,
    /// A task's job -> its workflow and task index.
    task_of: HashMap<JobId, (WorkflowId, usize)>,
    /// A waiting task's job -> how many of its dependencies are not final yet (absent: not
    /// waiting). The claim skips these.
    waiting: HashMap<JobId, usize>,
    /// Tasks whose end was already counted by their dependents (once: a dead-lettered task
    /// requeued and then succeeding counts nothing again).
    counted: HashSet<JobId>,
}

impl Flows {
    /// Whether `id` waits for a dependency (not claimable).
    pub(super) fn is_waiting(&self, id: &JobId) -> bool {
        self.waiting.contains_key(id)
    }
}

/// [`crate::Backend::enqueue_workflow`]: every task or none.
pub(super) async fn enqueue(b: &MemoryBackend, wf: &Workflow) -> Result<EnqueuedWorkflow> {
    let plan = wf.plan(DEFAULT_MAX_WORKFLOW_TASKS)?;
    check_task_jobs(wf)?;
    for t in wf.tasks() {
        t.job.validate(b.max_payload_bytes)?;
    }
    let mut s = b.lock();
    let at = b.now();
    for t in wf.tasks() {
        if let RunAt::After(d) = t.job.run_at {
            plus(at, d)?;
        }
    }
    let id = WorkflowId(uuid::Uuid::now_v7());
    let mut tasks = Vec::with_capacity(wf.tasks().len());
    for (i, t) in wf.tasks().iter().enumerate() {
        // No key and no unique settings (checked above): always a new row.
        let job = MemoryBackend::insert(&mut s, t.job.clone(), at)?.id;
        s.flows.task_of.insert(job, (id, i));
        if !plan.deps(i).is_empty() {
            s.flows.waiting.insert(job, plan.deps(i).len());
        }
        tasks.push((t.name.clone(), job, t.deps.clone()));
    }
    let out = EnqueuedWorkflow { id, tasks: tasks.iter().map(|(n, j, _)| (n.clone(), *j)).collect() };
    s.flows.flows.insert(id, Flow { name: wf.name().to_string(), tasks, plan });
    Ok(out)
}

/// A dependency of these dependents is final: one fewer to wait for; at none, claimable.
fn count_down(s: &mut Store, jobs: &[JobId]) {
    for j in jobs {
        if let Some(n) = s.flows.waiting.get_mut(j) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.flows.waiting.remove(j);
            }
        }
    }
}

/// Called by every move to the archive: a task's success releases its dependents.
pub(super) fn succeeded(s: &mut Store, id: JobId) {
    let Some(&(wid, i)) = s.flows.task_of.get(&id) else { return };
    if !s.flows.counted.insert(id) {
        return;
    }
    let flow = &s.flows.flows[&wid];
    let deps: Vec<JobId> = flow.plan.dependents(i).iter().map(|&k| flow.tasks[k].1).collect();
    count_down(s, &deps);
}

/// Called by every move to the dead letters: the task's dependents are cancelled, and
/// theirs, transitively (each dead-lettered `cancelled`, its last error naming the task
/// that failed); a dependent that runs anyway counts the failure as its dependency's end.
pub(super) fn failed(s: &mut Store, id: JobId, at: Timestamp) {
    let Some(&(wid, i)) = s.flows.task_of.get(&id) else { return };
    if !s.flows.counted.insert(id) {
        return;
    }
    let flow = &s.flows.flows[&wid];
    let cascade = flow.plan.cascade(i);
    let why = format!("workflow {:?}: dependency {:?} was dead-lettered", flow.name, flow.tasks[i].0);
    let cancel: Vec<JobId> = cascade.iter().map(|&k| flow.tasks[k].1).collect();
    // Run-anyway dependents of the failed task and of every task it cancels.
    let mut anyway: Vec<JobId> = Vec::new();
    for &t in std::iter::once(&i).chain(cascade.iter()) {
        for &k in flow.plan.dependents(t) {
            if flow.plan.runs_anyway(k) {
                anyway.push(flow.tasks[k].1);
            }
        }
    }
    for j in cancel {
        // Only a task still waiting: one that ran or ended is left as it is.
        if s.flows.waiting.remove(&j).is_some() && s.hot.contains_key(&j) {
            s.flows.counted.insert(j);
            move_to_dead(s, j, why.clone(), at);
        }
    }
    count_down(s, &anyway);
}

/// The move of `MemoryBackend::to_dead` without its hook (the cascade is already whole).
fn move_to_dead(s: &mut Store, id: JobId, error: String, at: Timestamp) {
    if let Some(mut r) = s.hot.remove(&id) {
        r.location = JobLocation::Dead(DeadReason::Cancelled);
        r.last_error = Some(validate::error_text(&error));
        r.finished_at = Some(at);
        r.updated_at = at;
        s.dead.insert(id, r);
    }
}

/// [`crate::Backend::get_workflow`].
pub(super) async fn get(b: &MemoryBackend, id: WorkflowId) -> Result<Option<WorkflowStatus>> {
    b.check_read_deadline()?;
    let s = b.lock();
    let Some(flow) = s.flows.flows.get(&id) else { return Ok(None) };
    let tasks = flow
        .tasks
        .iter()
        .map(|(name, job, deps)| TaskStatus {
            name: name.clone(),
            job: *job,
            deps: deps.clone(),
            state: state_of(&s, *job),
        })
        .collect();
    Ok(Some(WorkflowStatus { id, name: flow.name.clone(), tasks }))
}

fn state_of(s: &Store, job: JobId) -> TaskState {
    if let Some(r) = s.hot.get(&job) {
        return match status_of(r) {
            _ if s.flows.is_waiting(&job) => TaskState::Waiting,
            Some(JobStatus::Pending) | None => TaskState::Pending,
            Some(JobStatus::Fetched | JobStatus::Processing) => TaskState::Running,
        };
    }
    if s.archive.contains_key(&job) {
        return TaskState::Succeeded;
    }
    match s.dead.get(&job).map(|r| &r.location) {
        Some(JobLocation::Dead(reason)) => TaskState::DeadLettered(*reason),
        _ => TaskState::Gone,
    }
}

/// [`crate::Backend::cancel_workflow`]: `cancel` on every task not yet final, in dependency
/// order; how many there were.
pub(super) async fn cancel(b: &MemoryBackend, id: WorkflowId) -> Result<u64> {
    let jobs: Vec<JobId> = {
        let s = b.lock();
        let Some(flow) = s.flows.flows.get(&id) else {
            return Err(Error::not_found(format!("no workflow {id}")));
        };
        flow.plan.order().iter().map(|&i| flow.tasks[i].1).filter(|j| s.hot.contains_key(j)).collect()
    };
    // A task's cancel may cancel others (its dependents): those are reached too.
    let reached = jobs.len() as u64;
    for j in jobs {
        super::admin::cancel(b, j).await?;
    }
    Ok(reached)
}

/// [`crate::Backend::workflow_of`].
pub(super) async fn workflow_of(b: &MemoryBackend, job: JobId) -> Result<Option<WorkflowId>> {
    b.check_read_deadline()?;
    Ok(b.lock().flows.task_of.get(&job).map(|(w, _)| *w))
}
