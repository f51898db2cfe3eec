//! `jobs list`, `jobs show`, `jobs cancel` (and `dead list`, through `list`).

use chokaq::core::{JobStatus, JobTable, ListJobsParams};
use chokaq::{Backend, BackendExt, JobKind, NewJob};

use crate::commands::{job_id, queue_name, Cx};
use crate::output::{self, clip, opt_time, outln, time, Table};
use crate::views::*;
use crate::{CliResult, Exit, Failure, ListArgs, StatusArg, TableArg};

impl Cx {
    pub(crate) fn params(&self, table: JobTable, status: Option<StatusArg>, f: &ListArgs) -> CliResult<ListJobsParams> {
        let mut p = ListJobsParams::new(table);
        p.queue = f.queue.as_deref().map(queue_name).transpose()?;
        p.kind = f.kind.as_deref().map(|k| JobKind::new(k).map_err(Failure::from)).transpose()?;
        p.tag = f.tag.clone();
        p.created_from = f.since;
        p.created_to = f.until;
        p.after = f.after.as_deref().map(job_id).transpose()?;
        p.limit = f.limit;
        p.without_payloads = true;
        p.status = status.map(|s| match s {
            StatusArg::Pending => JobStatus::Pending,
            StatusArg::Fetched => JobStatus::Fetched,
            StatusArg::Processing => JobStatus::Processing,
        });
        Ok(p)
    }

    pub(crate) async fn list(&self, table: TableArg, status: Option<StatusArg>, f: &ListArgs) -> CliResult<Exit> {
        let t = match table {
            TableArg::Hot => JobTable::Hot,
            TableArg::Archive => JobTable::Archive,
            TableArg::Dead => JobTable::DeadLetter,
        };
        if status.is_some() && t != JobTable::Hot {
            return Err(Failure::new(Exit::Usage, "--status applies to the hot table only (--table hot)"));
        }
        let page = self.backend.list_jobs(&self.params(t, status, f)?).await?;
        let next = page.next.map(|n| n.to_string());
        if self.json {
            let jobs: Vec<_> = page.jobs.iter().map(|r| JobView::of(r, false)).collect();
            output::json(&serde_json::json!({ "jobs": jobs, "next": next }));
            return Ok(Exit::Ok);
        }
        if page.jobs.is_empty() {
            outln!("{}", if t == JobTable::DeadLetter { "no dead letters" } else { "no jobs" });
            return Ok(Exit::Ok);
        }
        let mut out = match t {
            JobTable::Hot => Table::new(&["ID", "STATE", "QUEUE", "KIND", ">ATTEMPT", ">PRIORITY", "CREATED", "DUE"]),
            JobTable::Archive => Table::new(&["ID", "QUEUE", "KIND", ">ATTEMPT", "CREATED", "FINISHED"]),
            JobTable::DeadLetter => {
                Table::new(&["ID", "QUEUE", "KIND", "REASON", ">ATTEMPT", "FINISHED", "LAST ERROR"])
            }
        };
        for r in &page.jobs {
            let (_, state, reason) = place(r.location);
            let attempt = format!("{}/{}", r.attempt, r.max_attempts);
            out.row(match t {
                JobTable::Hot => vec![
                    r.id.to_string(),
                    state.into(),
                    r.queue.to_string(),
                    r.kind.to_string(),
                    attempt,
                    r.priority.to_string(),
                    time(r.created_at),
                    opt_time(r.scheduled_at),
                ],
                JobTable::Archive => vec![
                    r.id.to_string(),
                    r.queue.to_string(),
                    r.kind.to_string(),
                    attempt,
                    time(r.created_at),
                    opt_time(r.finished_at),
                ],
                JobTable::DeadLetter => vec![
                    r.id.to_string(),
                    r.queue.to_string(),
                    r.kind.to_string(),
                    reason.unwrap_or("-").into(),
                    attempt,
                    opt_time(r.finished_at),
                    clip(r.last_error.as_deref().unwrap_or("-"), 60),
                ],
            });
        }
        out.print();
        if let Some(n) = next {
            outln!("next page: --after {n}");
        }
        Ok(Exit::Ok)
    }

    pub(crate) async fn show(&self, id: &str) -> CliResult<Exit> {
        let id = job_id(id)?;
        let Some(r) = self.backend.get_job(id).await? else {
            return Err(Failure::new(Exit::NotFound, format!("no job {id}")).hint("check the id (`chokaq jobs list`)"));
        };
        let mut v = JobView::of(&r, true);
        v.unique = self.backend.unique_of(id).await?.as_ref().map(UniqueView::of);
        v.output = self.backend.get_output(id).await?;
        if self.json {
            output::json(&v);
            return Ok(Exit::Ok);
        }
        let mut t = Table::new(&["FIELD", "VALUE"]);
        let mut kv = |k: &'static str, v: String| t.row(vec![k.into(), v]);
        kv("id", v.id.clone());
        kv("table", v.table.into());
        kv("state", v.state.into());
        if let Some(reason) = v.reason {
            kv("reason", reason.into());
        }
        kv("queue", v.queue.into());
        kv("kind", v.kind.into());
        kv("priority", v.priority.to_string());
        kv("attempt", format!("{}/{}", v.attempt, v.max_attempts));
        kv("tags", if v.tags.is_empty() { "-".into() } else { v.tags.join(",") });
        kv("concurrency key", v.concurrency_key.unwrap_or("-").into());
        kv("idempotency key", v.idempotency_key.unwrap_or("-").into());
        if let Some(u) = &v.unique {
            kv("unique key", u.key.clone());
            kv("unique settings", u.settings.clone());
            if let Some(end) = u.period_ends_at {
                kv("unique period ends", time(end));
            }
        }
        kv("worker", v.worker_id.clone().unwrap_or_else(|| "-".into()));
        kv("created", time(v.created_at));
        kv("due", opt_time(v.scheduled_at));
        kv("started", opt_time(v.started_at));
        kv("heartbeat", opt_time(v.heartbeat_at));
        kv("updated", time(v.updated_at));
        kv("finished", opt_time(v.finished_at));
        kv("cancel requested", v.cancel_requested.to_string());
        kv("created by", v.created_by.unwrap_or("-").into());
        kv("last error", clip(v.last_error.unwrap_or("-"), 200));
        kv("payload", clip(&r.payload.to_string(), 200));
        // The recorded output (docs/outputs.md), clipped as the payload is; `--json` has it whole.
        kv("output", v.output.as_ref().map_or_else(|| "-".into(), |o| clip(&o.to_string(), 200)));
        t.print();
        Ok(Exit::Ok)
    }

    pub(crate) async fn cancel(&self, id: &str) -> CliResult<Exit> {
        use chokaq::core::CancelOutcome;
        let id = job_id(id)?;
        let (outcome, text) = match self.backend.cancel(id).await? {
            CancelOutcome::Cancelled => ("cancelled", format!("job {id} cancelled (moved to the dead letters)")),
            CancelOutcome::Requested => (
                "requested",
                format!("job {id} is running: cancel requested, its worker stops it at its next heartbeat"),
            ),
            CancelOutcome::NotLive => {
                return Err(Failure::new(Exit::NotFound, format!("no live job {id} (unknown, finished or dead)")))
            }
        };
        if self.json {
            output::json(&serde_json::json!({ "id": id.to_string(), "outcome": outcome }));
        } else {
            outln!("{text}");
        }
        Ok(Exit::Ok)
    }

    /// `jobs enqueue`: one job, built from the flags, through `Backend::enqueue` (validated as
    /// every enqueue is: queue and kind names, payload size, key lengths).
    pub(crate) async fn enqueue(&self, a: crate::EnqueueArgs) -> CliResult<Exit> {
        let text = if a.payload == "-" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| Failure::new(Exit::Usage, format!("cannot read the payload from stdin: {e}")))?;
            s
        } else {
            a.payload.clone()
        };
        let payload: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            Failure::new(Exit::Usage, format!("--payload is not JSON: {e}"))
                .hint("quote it for the shell, e.g. --payload '{\"to\": \"a@example.com\"}'")
        })?;
        let mut job = NewJob::build(&a.queue, &a.kind)?.json(payload).created_by("chokaq-cli");
        if let Some(p) = a.priority {
            job = job.priority(p);
        }
        if let Some(d) = a.delay {
            job = job.delay(d);
        }
        if let Some(k) = a.idempotency_key {
            job = job.idempotency_key(k);
        }
        if !a.tags.is_empty() {
            job = job.tags(a.tags);
        }
        if let Some(k) = a.concurrency_key {
            job = job.concurrency_key(k);
        }
        if let Some(n) = a.max_attempts {
            job = job.max_attempts(n);
        }
        let e = self.backend.enqueue(job).await?;
        if self.json {
            output::json(&serde_json::json!({
                "id": e.id.to_string(), "duplicate": e.duplicate, "queue": a.queue, "kind": a.kind,
            }));
        } else if e.duplicate {
            outln!(
                "duplicate: live job {} of queue {} already holds the idempotency key",
                e.id,
                output::escape(&a.queue)
            );
        } else {
            outln!("enqueued job {} on queue {} (kind {})", e.id, output::escape(&a.queue), output::escape(&a.kind));
        }
        Ok(Exit::Ok)
    }
}
