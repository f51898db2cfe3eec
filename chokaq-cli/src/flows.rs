//! `chokaq workflows show|cancel` and `chokaq batches show` (issue 41, `docs/workflows.md`):
//! a stored workflow or batch by id, through the `Backend` trait.

use chokaq::core::{BatchId, WorkflowId};

use crate::commands::Cx;
use crate::output::{self, outln, Table};
use crate::{CliResult, Exit, Failure};

fn uuid(s: &str, what: &str) -> CliResult<uuid::Uuid> {
    s.trim()
        .parse::<uuid::Uuid>()
        .map_err(|_| Failure::new(Exit::Usage, format!("{s:?} is not a {what} id (expected a UUID)")))
}

impl Cx {
    /// `workflows show ID`: the name, the counts per state and each task (name, state, job,
    /// dependencies), in the order the tasks were added.
    pub(crate) async fn workflow_show(&self, id: &str) -> CliResult<Exit> {
        let id = WorkflowId(uuid(id, "workflow")?);
        let Some(st) = self.backend.get_workflow(id).await? else {
            return Err(Failure::new(Exit::NotFound, format!("no workflow {id}")));
        };
        let counts = st.counts();
        if self.json {
            let tasks: Vec<serde_json::Value> = st
                .tasks
                .iter()
                .map(|t| {
                    serde_json::json!({ "name": t.name, "job": t.job.to_string(), "state": t.state.name(), "deps": t.deps })
                })
                .collect();
            output::json(&serde_json::json!({
                "id": id.to_string(), "name": st.name, "final": st.is_final(), "counts": counts, "tasks": tasks,
            }));
            return Ok(Exit::Ok);
        }
        let counts: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        outln!("workflow {id} {:?}: {}{}", st.name, counts.join(", "), if st.is_final() { " (final)" } else { "" });
        let mut t = Table::new(&["TASK", "STATE", "JOB", "AFTER"]);
        for task in &st.tasks {
            let state = match task.state {
                chokaq::core::TaskState::DeadLettered(r) => format!("dead ({})", r.as_str()),
                s => s.name().to_string(),
            };
            let after = if task.deps.is_empty() { "-".to_string() } else { task.deps.join(",") };
            t.row(vec![task.name.clone(), state, task.job.to_string(), after]);
        }
        t.print();
        Ok(Exit::Ok)
    }

    /// `workflows cancel ID`: cancels every task not yet final (as `jobs cancel` does a job).
    pub(crate) async fn workflow_cancel(&self, id: &str) -> CliResult<Exit> {
        let id = WorkflowId(uuid(id, "workflow")?);
        let n = self.backend.cancel_workflow(id).await?;
        if self.json {
            output::json(&serde_json::json!({ "id": id.to_string(), "reached": n }));
        } else {
            outln!(
                "workflow {id}: cancel reached {n} task(s) not yet final (running ones stop at their next heartbeat)"
            );
        }
        Ok(Exit::Ok)
    }

    /// `batches show ID`: the counts and the callbacks enqueued so far.
    pub(crate) async fn batch_show(&self, id: &str) -> CliResult<Exit> {
        let id = BatchId(uuid(id, "batch")?);
        let Some(st) = self.backend.get_batch(id).await? else {
            return Err(Failure::new(Exit::NotFound, format!("no batch {id}")));
        };
        let fired: Vec<serde_json::Value> =
            st.fired.iter().map(|(e, j)| serde_json::json!({ "event": e.as_str(), "job": j.to_string() })).collect();
        if self.json {
            output::json(&serde_json::json!({
                "id": id.to_string(), "name": st.name, "total": st.total, "succeeded": st.succeeded,
                "dead": st.dead, "final": st.is_final(), "fired": fired,
            }));
            return Ok(Exit::Ok);
        }
        let mut t = Table::new(&["FIELD", "VALUE"]);
        let mut kv = |k: &str, v: String| t.row(vec![k.into(), v]);
        kv("id", id.to_string());
        kv("name", st.name.clone());
        kv("jobs", st.total.to_string());
        kv("succeeded", st.succeeded.to_string());
        kv("dead", st.dead.to_string());
        kv("final", st.is_final().to_string());
        for (e, j) in &st.fired {
            kv(&format!("callback {}", e.as_str()), j.to_string());
        }
        t.print();
        Ok(Exit::Ok)
    }
}
