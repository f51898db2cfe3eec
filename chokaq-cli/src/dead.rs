//! The commands that change many rows: `dead retry` and `purge`. `purge` and
//! `dead retry --all` ask before they act (`--yes` answers for scripts); both have a dry run.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use chokaq::core::{JobLocation, JobTable, ListJobsParams, PurgeParams, PurgeTarget, RequeueOutcome, Timestamp};
use chokaq::{ErrorKind, QueueName};

use crate::commands::{job_id, queue_name, Cx};
use crate::output::{self, age, outln};
use crate::{CliResult, Exit, Failure, PurgeArgs, PurgeTable};

/// Asks `question` on a terminal; without one, refuses unless `--yes` was given.
fn confirm(yes: bool, question: &str) -> CliResult<()> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(Failure::new(
            Exit::Usage,
            format!("refusing to {question} without --yes (stdin is not a terminal)"),
        )
        .hint("add --yes to go ahead, or --dry-run to see what it would do"));
    }
    eprint!("{question}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::new(Exit::Other, format!("cannot read the answer: {e}")))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(Failure::new(Exit::Other, "not confirmed: nothing changed"))
    }
}

impl Cx {
    pub(crate) async fn retry_one(&self, id: &str, dry_run: bool) -> CliResult<Exit> {
        let id = job_id(id)?;
        if dry_run {
            let found = self.backend.get_job(id).await?;
            let Some(JobLocation::Dead(reason)) = found.as_ref().map(|r| r.location) else {
                return Err(Failure::new(Exit::NotFound, format!("no dead letter {id}")));
            };
            if self.json {
                output::json(&serde_json::json!({
                    "id": id.to_string(), "dry_run": true, "outcome": "would_requeue", "reason": reason.as_str()
                }));
            } else {
                outln!("would requeue job {id} (dead, reason {}); nothing changed", reason.as_str());
            }
            return Ok(Exit::Ok);
        }
        match self.backend.requeue_dead(id).await {
            Ok(RequeueOutcome::Requeued) => {
                if self.json {
                    output::json(&serde_json::json!({ "id": id.to_string(), "outcome": "requeued" }));
                } else {
                    outln!("job {id} requeued (pending, attempt 0)");
                }
                Ok(Exit::Ok)
            }
            Ok(RequeueOutcome::NotFound) => Err(Failure::new(
                Exit::NotFound,
                format!("no dead letter {id} (unknown, or already requeued by someone else)"),
            )),
            Err(e) if e.kind() == ErrorKind::Conflict => Err(Failure::from(e)
                .hint("a live job of the queue holds the same idempotency key: let it finish, then retry")),
            Err(e) => Err(e.into()),
        }
    }

    /// Every dead letter of `queue`, page by page: requeued, skipped (gone meanwhile: another
    /// retry took it), or a conflict (a live job holds its key). A dry run counts them.
    pub(crate) async fn retry_all(&self, queue: &str, yes: bool, dry_run: bool) -> CliResult<Exit> {
        let q = queue_name(queue)?;
        let mut p = ListJobsParams::new(JobTable::DeadLetter);
        p.queue = Some(q.clone());
        p.limit = 500;
        p.without_payloads = true;
        if dry_run {
            let n = self.count(p, |_| true).await?;
            if self.json {
                output::json(&serde_json::json!({ "queue": q.as_str(), "dry_run": true, "would_requeue": n }));
            } else {
                outln!("would requeue {n} dead letters of queue {q}; nothing changed");
            }
            return Ok(Exit::Ok);
        }
        confirm(yes, &format!("requeue every dead letter of queue {q}"))?;
        let (mut requeued, mut skipped, mut conflicts) = (0u64, 0u64, Vec::new());
        loop {
            let page = self.backend.list_jobs(&p).await?;
            for r in &page.jobs {
                match self.backend.requeue_dead(r.id).await {
                    Ok(RequeueOutcome::Requeued) => requeued += 1,
                    Ok(RequeueOutcome::NotFound) => skipped += 1,
                    Err(e) if e.kind() == ErrorKind::Conflict => conflicts.push(r.id.to_string()),
                    Err(e) => {
                        let f = Failure::from(e);
                        return Err(Failure {
                            message: format!("{} (after requeuing {requeued} of queue {q})", f.message),
                            ..f
                        });
                    }
                }
            }
            match page.next {
                Some(n) => p.after = Some(n),
                None => break,
            }
        }
        if self.json {
            output::json(&serde_json::json!({
                "queue": q.as_str(), "requeued": requeued, "skipped": skipped,
                "conflicts": conflicts.len(), "conflict_ids": conflicts,
            }));
        } else {
            outln!(
                "queue {q}: requeued {requeued}, skipped {skipped} (already requeued by another retry), \
                 conflicts {} (a live job holds the idempotency key)",
                conflicts.len()
            );
            for id in conflicts.iter().take(20) {
                outln!("conflict: {id}");
            }
        }
        Ok(if conflicts.is_empty() { Exit::Ok } else { Exit::Conflict })
    }

    pub(crate) async fn purge(&self, a: &PurgeArgs) -> CliResult<Exit> {
        let queue = a.queue.as_deref().map(queue_name).transpose()?;
        let (target, table, name) = match a.table {
            PurgeTable::Archive => (PurgeTarget::Archive, JobTable::Archive, "archive"),
            PurgeTable::Dead => (PurgeTarget::DeadLetter, JobTable::DeadLetter, "dead"),
        };
        let scope = queue.as_ref().map_or_else(|| " of every queue".to_string(), |q| format!(" of queue {q}"));
        let count = if a.dry_run {
            self.count_older(table, queue.clone(), a.older_than).await?
        } else {
            confirm(
                a.yes,
                &format!("delete the rows{scope} of the {name} table finished more than {} ago", age(a.older_than)),
            )?;
            let mut params = PurgeParams::new(target, a.older_than);
            params.queue = queue.clone();
            let budget = u64::from(params.batch_size) * u64::from(params.max_batches);
            let mut total = 0;
            loop {
                let n = self.backend.purge(&params).await?;
                total += n;
                if n < budget {
                    break total;
                }
            }
        };
        if self.json {
            output::json(&serde_json::json!({
                "table": name, "older_than_seconds": a.older_than.as_secs_f64(),
                "queue": queue.as_ref().map(QueueName::as_str), "dry_run": a.dry_run,
                if a.dry_run { "would_purge" } else { "purged" }: count,
            }));
        } else {
            let scope = queue.map_or_else(String::new, |q| format!(" of queue {q}"));
            let verb = if a.dry_run { "would purge" } else { "purged" };
            outln!("{verb} {count} jobs{scope} from the {name} table, finished more than {} ago", age(a.older_than));
        }
        Ok(Exit::Ok)
    }

    /// How many rows of `table` (one queue, or all) finished more than `older_than` before the
    /// database's now: read page by page, nothing deleted.
    async fn count_older(&self, table: JobTable, queue: Option<QueueName>, older_than: Duration) -> CliResult<u64> {
        let now = self.backend.stats().await?.taken_at.unwrap_or_else(chrono::Utc::now);
        let cutoff = chrono::Duration::from_std(older_than)
            .ok()
            .and_then(|d| now.checked_sub_signed(d))
            .unwrap_or(Timestamp::MIN_UTC);
        let mut p = ListJobsParams::new(table);
        p.queue = queue;
        p.limit = 1000;
        p.without_payloads = true;
        self.count(p, |r| r.finished_at.is_some_and(|f| f < cutoff)).await
    }

    /// The rows of every page of `p` that `keep` accepts.
    async fn count(&self, mut p: ListJobsParams, keep: impl Fn(&chokaq::JobRecord) -> bool) -> CliResult<u64> {
        let mut n = 0;
        loop {
            let page = self.backend.list_jobs(&p).await?;
            n += page.jobs.iter().filter(|r| keep(r)).count() as u64;
            match page.next {
                Some(next) => p.after = Some(next),
                None => return Ok(n),
            }
        }
    }
}
