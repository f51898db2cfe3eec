//! Workflows (`docs/workflows.md`, migration 19): the enqueue of a whole graph in one
//! statement (on the pool or in the caller's transaction), its status, a job's workflow and the
//! cancel of every task not yet final. The release of dependents and the cancel cascade run in
//! the database, in the moving statement's transaction (`functions_flows.sql`).

use chokaq_core::workflow::{check_task_jobs, DEFAULT_MAX_WORKFLOW_TASKS};
use chokaq_core::{
    DeadReason, EnqueuedWorkflow, Error, ErrorKind, JobId, Result, TaskState, TaskStatus, Workflow, WorkflowId,
    WorkflowStatus,
};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::batch::{fetch_all, parts, wake, JobArrays, PARTS};
use crate::bounded::Session;
use crate::enqueue::Target;
use crate::error::with_retry;

/// The task arrays of one workflow's enqueue (`$12` to `$16`), and its edges.
#[derive(Default)]
struct Tasks {
    names: Vec<String>,
    deps: Vec<String>,
    deps_left: Vec<i32>,
    run_anyway: Vec<bool>,
    hooked: Vec<bool>,
    edge_from: Vec<Uuid>,
    edge_to: Vec<Uuid>,
    edge_part: Vec<Option<i16>>,
    part_job: Vec<Uuid>,
    part_no: Vec<i16>,
    part_deps: Vec<i32>,
}

impl PgBackend {
    /// [`chokaq_core::Backend::enqueue_workflow`] inside the caller's transaction: every task
    /// exists, and the roots' queues are woken, only if that transaction commits. Pass
    /// `&mut *tx`.
    pub async fn enqueue_workflow_in_tx(&self, conn: &mut PgConnection, wf: &Workflow) -> Result<EnqueuedWorkflow> {
        enqueue(self, Target::Conn(conn), wf).await.map_err(|e| e.with_operation("enqueue_workflow_in_tx"))
    }
}

/// Checks the graph and every job before any round trip, then one statement.
pub(crate) async fn enqueue(b: &PgBackend, mut target: Target<'_>, wf: &Workflow) -> Result<EnqueuedWorkflow> {
    let plan = wf.plan(DEFAULT_MAX_WORKFLOW_TASKS)?;
    check_task_jobs(wf)?;
    let jobs = JobArrays::of(wf.tasks().iter().map(|t| &t.job), b.shared.max_payload_bytes)?;
    let mut a = Tasks::default();
    // A wide task's part of each of its dependencies (by the dependency's place in its list).
    let mut part_of = std::collections::HashMap::new();
    for (i, t) in wf.tasks().iter().enumerate() {
        let deps = plan.deps(i);
        a.names.push(t.name.clone());
        a.deps.push(serde_json::to_string(&t.deps)?);
        a.run_anyway.push(plan.runs_anyway(i));
        a.hooked.push(!plan.dependents(i).is_empty());
        let (of, no, counts) = parts(deps.len());
        for (&d, p) in deps.iter().zip(of) {
            if let Some(p) = p {
                part_of.insert((d, i), p);
            }
        }
        let left = if no.is_empty() { deps.len() } else { PARTS };
        a.deps_left.push(i32::try_from(left).map_err(|_| Error::invalid("too many dependencies"))?);
        a.part_job.extend(no.iter().map(|_| jobs.ids[i]));
        a.part_no.extend(no);
        a.part_deps.extend(counts);
    }
    for i in 0..wf.tasks().len() {
        for &k in plan.dependents(i) {
            a.edge_from.push(jobs.ids[i]);
            a.edge_to.push(jobs.ids[k]);
            a.edge_part.push(part_of.get(&(i, k)).copied());
        }
    }
    let id = WorkflowId::new();
    let in_tx = matches!(target, Target::Conn(_));
    let rows = fetch_all(&mut target, || {
        jobs.bind(sqlx::query(&b.sql().enqueue_workflow))
            .bind(&a.names)
            .bind(&a.deps)
            .bind(&a.deps_left)
            .bind(&a.run_anyway)
            .bind(&a.hooked)
            .bind(id.0)
            .bind(wf.name())
            .bind(&a.edge_from)
            .bind(&a.edge_to)
            .bind(&a.edge_part)
            .bind(&a.part_job)
            .bind(&a.part_no)
            .bind(&a.part_deps)
    })
    .await?;
    if rows.len() != jobs.ids.len() {
        return Err(Error::new(
            ErrorKind::Other,
            format!("workflow enqueue wrote {} of {} tasks", rows.len(), jobs.ids.len()),
        ));
    }
    wake(b, &rows, in_tx)?;
    Ok(EnqueuedWorkflow {
        id,
        tasks: wf.tasks().iter().zip(&jobs.ids).map(|(t, j)| (t.name.clone(), JobId(*j))).collect(),
    })
}

/// Runs a read on the pool, or within the backend's read deadline (`bounded.rs`).
pub(crate) async fn read_all(b: &PgBackend, sql: &str, id: Uuid) -> Result<Vec<sqlx::postgres::PgRow>> {
    let q = || sqlx::query(sql).bind(id);
    match b.read_deadline {
        Some(d) => {
            let mut s = Session::open(b, d).await?;
            let r = q().fetch_all(s.conn()).await;
            s.finish(r).await
        }
        None => with_retry(|| q().fetch_all(&b.kept)).await,
    }
}

fn decode(e: sqlx::Error) -> Error {
    Error::with_source(ErrorKind::Other, "decoding a workflow row", e)
}

/// [`chokaq_core::Backend::get_workflow`]: one statement.
pub(crate) async fn get(b: &PgBackend, id: WorkflowId) -> Result<Option<WorkflowStatus>> {
    let rows = read_all(b, &b.sql().get_workflow, id.0).await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let name: String = first.try_get("workflow").map_err(decode)?;
    let mut tasks = Vec::with_capacity(rows.len());
    for r in &rows {
        let deps: String = r.try_get("deps").map_err(decode)?;
        let state: String = r.try_get("state").map_err(decode)?;
        let state = match state.as_str() {
            "waiting" => TaskState::Waiting,
            "pending" => TaskState::Pending,
            "running" => TaskState::Running,
            "succeeded" => TaskState::Succeeded,
            "dead" => TaskState::DeadLettered(DeadReason::parse(
                &r.try_get::<Option<String>, _>("reason").map_err(decode)?.unwrap_or_default(),
            )?),
            _ => TaskState::Gone,
        };
        tasks.push(TaskStatus {
            name: r.try_get("name").map_err(decode)?,
            job: JobId(r.try_get("job_id").map_err(decode)?),
            deps: serde_json::from_str(&deps)?,
            state,
        });
    }
    Ok(Some(WorkflowStatus { id, name, tasks }))
}

/// [`chokaq_core::Backend::workflow_of`].
pub(crate) async fn workflow_of(b: &PgBackend, job: JobId) -> Result<Option<WorkflowId>> {
    let rows = read_all(b, &b.sql().workflow_of, job.0).await?;
    rows.first().map(|r| r.try_get::<Uuid, _>("workflow_id").map(WorkflowId).map_err(decode)).transpose()
}

/// [`chokaq_core::Backend::cancel_workflow`]: `cancel` on every task still in the hot table, in
/// the order they were added (a task's cancel may cancel its dependents: those are reached
/// too); how many there were.
pub(crate) async fn cancel(b: &PgBackend, id: WorkflowId) -> Result<u64> {
    let q = || sqlx::query(&b.sql().workflow_live_tasks).bind(id.0);
    let rows = with_retry(|| q().fetch_all(&b.kept)).await?;
    if rows.is_empty() {
        return Err(Error::not_found(format!("no workflow {id}")));
    }
    let mut reached = 0;
    for r in &rows {
        if let Some(job) = r.try_get::<Option<Uuid>, _>("job_id").map_err(decode)? {
            reached += 1;
            crate::admin::cancel(b, JobId(job)).await?;
        }
    }
    Ok(reached)
}
