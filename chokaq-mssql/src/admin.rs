//! Maintenance and queue controls: [`chokaq_core::Backend::rescue`], `cancel`,
//! `control_queue`, `requeue_dead` and `purge` (its batches).

use chokaq_core::{
    CancelOutcome, Error, ErrorKind, JobId, PurgeParams, PurgeTarget, QueueControl, QueueName, QueueSettings,
    RequeueOutcome, RescueParams, RescueReport, Result, DEFAULT_FETCHED_TIMEOUT, DEFAULT_ZOMBIE_TIMEOUT,
};
use tiberius::ToSql;

use crate::rows::{
    control_params, dead_reason_text, decode_cancel, decode_queue, decode_rescue, first_row, id_bytes, millis, req,
};

use crate::backend::{note_rescue, MssqlBackend};

/// [`chokaq_core::Backend::rescue`].
pub(crate) async fn rescue(b: &MssqlBackend, params: &RescueParams) -> Result<RescueReport> {
    let op = "rescue";
    if params.limit == 0 {
        return Err(Error::invalid("rescue limit must be at least 1"));
    }
    let fetched = millis("fetched_timeout", DEFAULT_FETCHED_TIMEOUT)?;
    let zombie = millis("zombie_timeout", DEFAULT_ZOMBIE_TIMEOUT)?;
    let limit = i32::try_from(params.limit).map_err(|_| Error::invalid("rescue limit too large"))?;
    let row = first_row(op, b.run(op, &b.sql().rescue, &[&fetched, &zombie, &limit]).await?)?;
    let mut report = decode_rescue(op, &row)?;
    if let Some(misses) = note_rescue(b.rescue_misses(), report.ran) {
        tracing::warn!(
            target: "chokaq_mssql",
            misses,
            "rescue has not run for {misses} calls in a row: another session holds the rescue row of the \
             schema's Locks table (a long transaction, or a role with UPDATE on it holding it on purpose), \
             or the schema is not migrated"
        );
    }
    if report.ran {
        for req in &params.purge {
            report.purged += b.purge_batches(req, true).await?;
        }
    }
    Ok(report)
}

/// [`chokaq_core::Backend::cancel`].
pub(crate) async fn cancel(b: &MssqlBackend, id: JobId) -> Result<CancelOutcome> {
    let op = "cancel";
    let bytes = id_bytes(id);
    let row = first_row(op, b.run(op, &b.sql().cancel, &[&bytes]).await?)?;
    decode_cancel(op, &row)
}

/// [`chokaq_core::Backend::control_queue`].
pub(crate) async fn control_queue(b: &MssqlBackend, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
    let op = "control_queue";
    control.validate()?;
    let p = control_params(control)?;
    let name = queue.as_str().to_string();
    let params: [&dyn ToSql; 9] =
        [&name, &p.code, &p.max, &p.timeout_ms, &p.policy, &p.key_max, &p.rate_jobs, &p.rate_per_ms, &p.rate_by_key];
    let row = first_row(op, b.run(op, &b.sql().control_queue, &params).await?)?;
    decode_queue(op, &row)
}

/// [`chokaq_core::Backend::requeue_dead`].
pub(crate) async fn requeue_dead(b: &MssqlBackend, id: JobId) -> Result<RequeueOutcome> {
    let op = "requeue_dead";
    let bytes = id_bytes(id);
    let row = match b.run(op, &b.sql().requeue_dead, &[&bytes]).await {
        Ok(sets) => first_row(op, sets)?,
        Err(e) if e.kind() == ErrorKind::Conflict => {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("requeue_dead: a live job of the same queue already holds the idempotency key of {id}"),
            ))
        }
        Err(e) => return Err(e),
    };
    Ok(if req::<i32>(op, &row, "Moved")? == 1 { RequeueOutcome::Requeued } else { RequeueOutcome::NotFound })
}

impl MssqlBackend {
    /// Deletes finished rows in bounded batches. `locked` (maintenance): each batch runs in a
    /// transaction holding the `rescue` row of `Locks` (taken with `READPAST`); the purge stops
    /// at the first batch that finds it held by another instance.
    pub(crate) async fn purge_batches(&self, r: &PurgeParams, locked: bool) -> Result<u64> {
        let op = "purge";
        if r.batch_size == 0 || r.batch_size > 100_000 {
            return Err(Error::invalid("purge batch_size must be 1 to 100000"));
        }
        if r.reason.is_some() && r.target == PurgeTarget::Archive {
            return Err(Error::invalid("purge: a reason filter applies to the dead-letter table only"));
        }
        let batch = i32::try_from(r.batch_size).map_err(|_| Error::invalid("purge batch_size too large"))?;
        let older = millis("older_than", r.older_than)?;
        let queue = r.queue.as_ref().map(|q| q.as_str().to_string());
        let kind = r.kind.as_ref().map(|k| k.as_str().to_string());
        let reason = r.reason.map(dead_reason_text);
        let mut total = 0u64;
        for _ in 0..r.max_batches {
            let sets = match r.target {
                PurgeTarget::Archive => {
                    self.run(op, &self.sql().purge_archive, &[&batch, &older, &queue, &kind, &locked]).await?
                }
                PurgeTarget::DeadLetter => {
                    self.run(op, &self.sql().purge_dlq, &[&batch, &older, &queue, &kind, &reason, &locked]).await?
                }
            };
            let deleted: i64 = crate::rows::req(op, &first_row(op, sets)?, "Deleted")?;
            // -1: another instance holds the maintenance lock.
            let Ok(n) = u64::try_from(deleted) else { break };
            total += n;
            if n < u64::from(r.batch_size) {
                break;
            }
        }
        Ok(total)
    }
}
