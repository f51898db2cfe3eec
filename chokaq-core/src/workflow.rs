//! Workflows, the client-side half (issue 41, item 2; `docs/workflows.md`): a named graph of
//! tasks, each a job of any type and queue with its own options, and their dependencies by
//! task name. [`Workflow::plan`] checks a graph before anything is written and refuses it with
//! a typed [`WorkflowError`]: an empty graph, a bad or duplicate task name, an unknown
//! dependency, a cycle (named, in order), more tasks than the limit. A [`WorkflowPlan`] is the
//! checked graph in dependency order, with the two walks every backend needs: which tasks a
//! task's success may release ([`WorkflowPlan::dependents`]) and which ones a dead-lettered or
//! cancelled task cancels, transitively ([`WorkflowPlan::cascade`]).
//!
//! The memory backend stores workflows (the reference); the SQL backends do not yet
//! ([`crate::Capabilities::workflows`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use crate::error::Error;
use crate::job::NewJob;
use crate::{DeadReason, JobId};

/// The most tasks one workflow may have unless the caller states another limit: a fan-out
/// of 10,000 and its fan-in fit.
pub const DEFAULT_MAX_WORKFLOW_TASKS: usize = 100_000;

/// The longest task or workflow name, in bytes.
pub const MAX_TASK_NAME_LEN: usize = 128;

/// Why a workflow was refused. Every variant is [`crate::ErrorKind::InvalidInput`] once
/// converted into an [`Error`]; nothing of a refused workflow is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkflowError {
    /// A workflow without tasks.
    #[error("workflow {workflow:?} has no tasks")]
    Empty {
        /// The workflow's name.
        workflow: String,
    },
    /// A workflow or task name that is empty, too long, or has a character other than
    /// ASCII letters, digits, `_`, `-`, `.` and `:`.
    #[error(
        "invalid {what} name {name:?}: 1 to {MAX_TASK_NAME_LEN} bytes of ASCII letters, digits, '_', '-', '.' and ':'"
    )]
    BadName {
        /// `"workflow"` or `"task"`.
        what: &'static str,
        /// The name as given.
        name: String,
    },
    /// Two tasks with one name.
    #[error("workflow {workflow:?}: task name {task:?} is used twice")]
    DuplicateTask {
        /// The workflow's name.
        workflow: String,
        /// The name used twice.
        task: String,
    },
    /// A dependency on no task of the workflow (a task depending on itself is a
    /// [`WorkflowError::Cycle`]).
    #[error("workflow {workflow:?}: task {task:?} depends on {dependency:?}, which is not a task of the workflow")]
    UnknownDependency {
        /// The workflow's name.
        workflow: String,
        /// The task that names it.
        task: String,
        /// The missing name.
        dependency: String,
    },
    /// The dependencies go round: `cycle` names the tasks in order, the first one again at
    /// the end (`a -> b -> a`).
    #[error("workflow {workflow:?}: dependency cycle {}", cycle.join(" -> "))]
    Cycle {
        /// The workflow's name.
        workflow: String,
        /// The tasks of one cycle, in dependency order, the first repeated at the end.
        cycle: Vec<String>,
    },
    /// More tasks than the limit.
    #[error("workflow {workflow:?} has {count} tasks, more than the limit of {limit}")]
    TooManyTasks {
        /// The workflow's name.
        workflow: String,
        /// How many it has.
        count: usize,
        /// The limit it was checked against.
        limit: usize,
    },
}

impl From<WorkflowError> for Error {
    fn from(e: WorkflowError) -> Self {
        Error::invalid(e.to_string())
    }
}

/// What a task does when a dependency of it is dead-lettered or cancelled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnFailedDependency {
    /// It is cancelled too (dead-lettered with a reason naming the task that failed), and so
    /// are its own dependents, transitively. The default, as River's and Oban's.
    #[default]
    Cancel,
    /// It runs anyway once every dependency is final: a failed dependency counts as done.
    RunAnyway,
}

/// One task: a job, its name in the workflow, the names of the tasks it waits for.
#[derive(Debug, Clone)]
pub struct Task {
    /// Unique in its workflow.
    pub name: String,
    /// The job it enqueues (any queue, kind and options).
    pub job: NewJob,
    /// The tasks that must succeed before it may be claimed.
    pub deps: Vec<String>,
    /// What a failed dependency does to it.
    pub on_failed_dependency: OnFailedDependency,
}

impl Task {
    /// A task with no dependencies.
    pub fn new(name: impl Into<String>, job: NewJob) -> Self {
        Task { name: name.into(), job, deps: Vec::new(), on_failed_dependency: OnFailedDependency::Cancel }
    }

    /// Waits for these tasks too.
    pub fn after<I, S>(mut self, deps: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deps.extend(deps.into_iter().map(Into::into));
        self
    }

    /// Runs even when a dependency is dead-lettered or cancelled.
    pub fn run_anyway(mut self) -> Self {
        self.on_failed_dependency = OnFailedDependency::RunAnyway;
        self
    }
}

/// A named graph of tasks, built client-side.
#[derive(Debug, Clone)]
pub struct Workflow {
    name: String,
    tasks: Vec<Task>,
}

impl Workflow {
    /// An empty workflow.
    pub fn new(name: impl Into<String>) -> Self {
        Workflow { name: name.into(), tasks: Vec::new() }
    }

    /// Adds a task that waits for `deps` (task names; they may be added later).
    pub fn add<I, S>(self, name: impl Into<String>, job: NewJob, deps: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.task(Task::new(name, job).after(deps))
    }

    /// Adds a task built with [`Task`]'s options.
    pub fn task(mut self, task: Task) -> Self {
        self.tasks.push(task);
        self
    }

    /// The workflow's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tasks in the order they were added.
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// Checks the graph against `max_tasks` and orders it. Refuses, before any work: no
    /// tasks, more than `max_tasks`, a bad or duplicate name, an unknown dependency, a cycle.
    pub fn plan(&self, max_tasks: usize) -> Result<WorkflowPlan, WorkflowError> {
        let workflow = || self.name.clone();
        check_name("workflow", &self.name)?;
        if self.tasks.is_empty() {
            return Err(WorkflowError::Empty { workflow: workflow() });
        }
        if self.tasks.len() > max_tasks {
            return Err(WorkflowError::TooManyTasks {
                workflow: workflow(),
                count: self.tasks.len(),
                limit: max_tasks,
            });
        }
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(self.tasks.len());
        for (i, t) in self.tasks.iter().enumerate() {
            check_name("task", &t.name)?;
            if index.insert(t.name.as_str(), i).is_some() {
                return Err(WorkflowError::DuplicateTask { workflow: workflow(), task: t.name.clone() });
            }
        }
        let mut deps: Vec<Vec<usize>> = Vec::with_capacity(self.tasks.len());
        for t in &self.tasks {
            let mut d: Vec<usize> = Vec::with_capacity(t.deps.len());
            for name in &t.deps {
                let Some(&j) = index.get(name.as_str()) else {
                    return Err(WorkflowError::UnknownDependency {
                        workflow: workflow(),
                        task: t.name.clone(),
                        dependency: name.clone(),
                    });
                };
                // A dependency named twice counts once.
                if !d.contains(&j) {
                    d.push(j);
                }
            }
            deps.push(d);
        }
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); self.tasks.len()];
        for (i, d) in deps.iter().enumerate() {
            for &j in d {
                dependents[j].push(i);
            }
        }
        // Kahn's order: a task after every task it waits for, ties in the order added.
        let mut left: Vec<usize> = deps.iter().map(Vec::len).collect();
        let mut ready: VecDeque<usize> = (0..self.tasks.len()).filter(|&i| left[i] == 0).collect();
        let mut order = Vec::with_capacity(self.tasks.len());
        while let Some(i) = ready.pop_front() {
            order.push(i);
            for &k in &dependents[i] {
                left[k] -= 1;
                if left[k] == 0 {
                    ready.push_back(k);
                }
            }
        }
        if order.len() < self.tasks.len() {
            let cycle = find_cycle(&deps, &left).into_iter().map(|i| self.tasks[i].name.clone()).collect();
            return Err(WorkflowError::Cycle { workflow: workflow(), cycle });
        }
        let run_anyway = self.tasks.iter().map(|t| t.on_failed_dependency == OnFailedDependency::RunAnyway).collect();
        Ok(WorkflowPlan { order, deps, dependents, run_anyway })
    }
}

/// One cycle among the tasks Kahn's walk could not order (`left[i] > 0`): follow a
/// dependency that is itself unordered until a task repeats. Every unordered task has one.
fn find_cycle(deps: &[Vec<usize>], left: &[usize]) -> Vec<usize> {
    let start = left.iter().position(|&n| n > 0).unwrap_or(0);
    let mut seen: HashMap<usize, usize> = HashMap::new();
    let mut path: Vec<usize> = Vec::new();
    let mut i = start;
    loop {
        if let Some(&at) = seen.get(&i) {
            // `path[at..]` waits on each next one: a -> b means a depends on b. Print in
            // dependency order (what runs first first), the first one repeated at the end.
            let mut cycle: Vec<usize> = path[at..].iter().rev().copied().collect();
            cycle.push(cycle[0]);
            return cycle;
        }
        seen.insert(i, path.len());
        path.push(i);
        match deps[i].iter().find(|&&j| left[j] > 0) {
            Some(&j) => i = j,
            None => return vec![i, i],
        }
    }
}

fn check_name(what: &'static str, name: &str) -> Result<(), WorkflowError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TASK_NAME_LEN
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(WorkflowError::BadName { what, name: name.to_string() })
    }
}

/// A checked workflow: tasks by their index in [`Workflow::tasks`].
#[derive(Clone, PartialEq, Eq)]
pub struct WorkflowPlan {
    order: Vec<usize>,
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    run_anyway: Vec<bool>,
}

impl fmt::Debug for WorkflowPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkflowPlan").field("tasks", &self.order.len()).finish_non_exhaustive()
    }
}

impl WorkflowPlan {
    /// Every task, each after all it depends on.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The tasks `task` waits for (each once).
    pub fn deps(&self, task: usize) -> &[usize] {
        &self.deps[task]
    }

    /// The tasks that wait for `task`.
    pub fn dependents(&self, task: usize) -> &[usize] {
        &self.dependents[task]
    }

    /// The tasks claimable at once: no dependency.
    pub fn roots(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().copied().filter(|&i| self.deps[i].is_empty())
    }

    /// The tasks a dead-lettered or cancelled `failed` cancels: its dependents that do not
    /// run anyway, and theirs, transitively, each once, in dependency order. A task that runs
    /// anyway stops the cascade there: it still runs once its dependencies are final.
    pub fn cascade(&self, failed: usize) -> Vec<usize> {
        let mut hit = vec![false; self.deps.len()];
        let mut queue: VecDeque<usize> = VecDeque::from([failed]);
        while let Some(i) = queue.pop_front() {
            for &k in &self.dependents[i] {
                if !hit[k] && !self.run_anyway[k] {
                    hit[k] = true;
                    queue.push_back(k);
                }
            }
        }
        self.order.iter().copied().filter(|&i| hit[i]).collect()
    }

    /// Whether `task` runs even when a dependency fails ([`Task::run_anyway`]).
    pub fn runs_anyway(&self, task: usize) -> bool {
        self.run_anyway[task]
    }
}

/// A stored workflow's id (UUID v7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct WorkflowId(pub uuid::Uuid);

impl WorkflowId {
    /// A fresh id.
    pub fn new() -> Self {
        WorkflowId(uuid::Uuid::now_v7())
    }
}

impl Default for WorkflowId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What [`crate::Backend::enqueue_workflow`] wrote: the workflow's id and each task's job,
/// in the order the tasks were added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedWorkflow {
    /// The workflow's id.
    pub id: WorkflowId,
    /// `(task name, job id)`, in the order the tasks were added.
    pub tasks: Vec<(String, JobId)>,
}

impl EnqueuedWorkflow {
    /// The job of task `name`.
    pub fn job(&self, name: &str) -> Option<JobId> {
        self.tasks.iter().find(|(n, _)| n == name).map(|(_, id)| *id)
    }
}

/// Where one task of a stored workflow stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Waiting for a dependency: not claimable.
    Waiting,
    /// Claimable (or due later).
    Pending,
    /// Claimed (Fetched or Processing).
    Running,
    /// Archived: it succeeded.
    Succeeded,
    /// Dead-lettered, with the reason (`Cancelled` for a task a failed dependency cancelled).
    DeadLettered(DeadReason),
    /// In no table any more (purged).
    Gone,
}

impl TaskState {
    /// Succeeded, dead-lettered or gone: nothing will change it (short of a requeue).
    pub fn is_final(self) -> bool {
        matches!(self, TaskState::Succeeded | TaskState::DeadLettered(_) | TaskState::Gone)
    }

    /// A short name: `waiting`, `pending`, `running`, `succeeded`, `dead`, `gone`.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Waiting => "waiting",
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::DeadLettered(_) => "dead",
            TaskState::Gone => "gone",
        }
    }
}

/// One task of a stored workflow, as [`crate::Backend::get_workflow`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus {
    /// Its name.
    pub name: String,
    /// Its job.
    pub job: JobId,
    /// The tasks it waits for.
    pub deps: Vec<String>,
    /// Where it stands.
    pub state: TaskState,
}

/// A stored workflow: its tasks, each with its state, in the order they were added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowStatus {
    /// Its id.
    pub id: WorkflowId,
    /// Its name.
    pub name: String,
    /// Its tasks.
    pub tasks: Vec<TaskStatus>,
}

impl WorkflowStatus {
    /// How many tasks are in each state, by [`TaskState::name`].
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for t in &self.tasks {
            *m.entry(t.state.name()).or_insert(0) += 1;
        }
        m
    }

    /// Every task is final.
    pub fn is_final(&self) -> bool {
        self.tasks.iter().all(|t| t.state.is_final())
    }

    /// Task `name`.
    pub fn task(&self, name: &str) -> Option<&TaskStatus> {
        self.tasks.iter().find(|t| t.name == name)
    }
}

/// Refuses a task whose job carries an idempotency key or unique settings: such a job may be
/// answered by another job's id, which would tie the graph to a job that is not its own.
pub fn check_task_jobs(wf: &Workflow) -> Result<(), Error> {
    for t in wf.tasks() {
        if t.job.idempotency_key.is_some() || t.job.unique.is_some() {
            return Err(Error::invalid(format!(
                "workflow {:?}: task {:?} has an idempotency key or unique settings; a workflow's tasks take neither",
                wf.name(),
                t.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "workflow_tests.rs"]
mod tests;
