//! The guarded writes of a held lease: [`chokaq_core::Backend::start`], `heartbeat`,
//! `complete`, `fail` and `release`. Each names the lease (fencing token) and reports lost
//! leases per id.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chokaq_core::{
    validate, BatchOutcome, DeadReason, Error, ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId,
    LeaseRef, Result, Timestamp, WorkerId,
};
use sqlx::Row;
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::error::{map_sqlx_error, with_retry};
use crate::rows::{self, error_text, pairs, split};

/// [`chokaq_core::Backend::start`].
pub(crate) async fn start(b: &PgBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    let (ids, done) = b.guarded("start", &b.sql().start, worker, leases).await?;
    Ok(split(&ids, &done))
}

/// [`chokaq_core::Backend::heartbeat`].
pub(crate) async fn heartbeat(b: &PgBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
    validate::lease_list("heartbeat", leases)?;
    let (ids, lease_nums) = pairs(leases);
    if ids.is_empty() {
        return Ok(HeartbeatReport::default());
    }
    let sql = &b.sql().heartbeat;
    let rows: Vec<(Uuid, bool)> = with_retry(|| {
        sqlx::query_as::<_, (Uuid, bool)>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&b.kept)
    })
    .await?;
    let held: HashMap<Uuid, bool> = rows.into_iter().collect();
    Ok(HeartbeatReport::merge(ids.iter().map(|id| (JobId(*id), held.get(id).copied()))))
}

/// [`chokaq_core::Backend::complete`].
pub(crate) async fn complete(b: &PgBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    let (ids, mut done) = b.guarded("complete", &b.sql().complete, worker, leases).await?;
    b.completed_before(worker, leases, &mut done).await?;
    Ok(split(&ids, &done))
}

/// [`chokaq_core::Backend::fail`].
pub(crate) async fn fail(
    b: &PgBackend,
    worker: WorkerId,
    lease: LeaseRef,
    outcome: FailAction,
) -> Result<Fenced<FailOutcome>> {
    outcome.validate()?;
    let (act, delay, error, reason) = match &outcome {
        FailAction::Retry { delay, error } => ("retry", *delay, Some(error_text(error)), DeadReason::Failed),
        FailAction::Snooze { delay } => ("snooze", *delay, None, DeadReason::Failed),
        FailAction::DeadLetter { reason, error } => ("dead", Duration::ZERO, Some(error_text(error)), *reason),
        FailAction::Cancelled { error } => {
            ("dead", Duration::ZERO, error.as_deref().map(error_text), DeadReason::Cancelled)
        }
    };
    let row = with_retry(|| {
        sqlx::query(&b.sql().fail)
            .bind(worker.0)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(act)
            .bind(rows::micros(delay))
            .bind(error.as_deref())
            .bind(reason.as_str())
            .fetch_optional(&b.kept)
    })
    .await?;
    let missing = || Error::new(ErrorKind::Other, "fail: no due time returned");
    let Some(row) = row else {
        // Not held: the outcome this lease already wrote, if it did (a repeat), else lost.
        let row = with_retry(|| {
            sqlx::query(&b.sql().fail_standing)
                .bind(worker.0)
                .bind(lease.id.0)
                .bind(lease.lease.0)
                .fetch_optional(&b.kept)
        })
        .await?;
        let Some(row) = row else { return Ok(Fenced::LeaseLost) };
        let at: Option<Timestamp> = row.try_get("at").map_err(map_sqlx_error)?;
        let stood: Option<String> = row.try_get("reason").map_err(map_sqlx_error)?;
        return Ok(Fenced::Done(match (stood, &outcome) {
            (Some(r), _) => FailOutcome::DeadLettered(DeadReason::parse(&r)?),
            (None, FailAction::Snooze { .. }) => FailOutcome::Snoozed { until: at.ok_or_else(missing)? },
            (None, _) => FailOutcome::Retried { at: at.ok_or_else(missing)? },
        }));
    };
    let done: String = row.try_get("act").map_err(map_sqlx_error)?;
    let at: Option<Timestamp> = row.try_get("at").map_err(map_sqlx_error)?;
    Ok(Fenced::Done(match done.as_str() {
        "retry" => FailOutcome::Retried { at: at.ok_or_else(missing)? },
        "snooze" => FailOutcome::Snoozed { until: at.ok_or_else(missing)? },
        "cancelled" => FailOutcome::DeadLettered(DeadReason::Cancelled),
        _ => FailOutcome::DeadLettered(reason),
    }))
}

/// [`chokaq_core::Backend::release`].
pub(crate) async fn release(b: &PgBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    let (ids, done) = b.guarded("release", &b.sql().release, worker, leases).await?;
    Ok(split(&ids, &done))
}

impl PgBackend {
    /// Runs one of the guarded batch statements (`$1` worker, `$2` ids, `$3` leases) over every
    /// (id, lease) pair of the input (an id may come with several leases: the one that holds
    /// the row matches) and splits the input's ids into done and lost.
    pub(crate) async fn guarded(
        &self,
        op: &str,
        sql: &str,
        worker: WorkerId,
        leases: &[LeaseRef],
    ) -> Result<(Vec<Uuid>, HashSet<Uuid>)> {
        validate::lease_list(op, leases)?;
        let (ids, lease_nums) = pairs(leases);
        if ids.is_empty() {
            return Ok((ids, HashSet::new()));
        }
        let done: HashSet<Uuid> = with_retry(|| {
            sqlx::query_scalar::<_, Uuid>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&self.kept)
        })
        .await?
        .into_iter()
        .collect();
        Ok((ids, done))
    }

    /// Adds to `done` the ids of `leases` not in it that this worker already completed with a
    /// lease it names: a repeated complete reports the outcome that stands.
    pub(crate) async fn completed_before(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        done: &mut HashSet<Uuid>,
    ) -> Result<()> {
        let rest: Vec<LeaseRef> = leases.iter().filter(|l| !done.contains(&l.id.0)).copied().collect();
        if rest.is_empty() {
            return Ok(());
        }
        let (ids, lease_nums) = pairs(&rest);
        let sql = &self.sql().complete_standing;
        let found: Vec<Uuid> = with_retry(|| {
            sqlx::query_scalar::<_, Uuid>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&self.kept)
        })
        .await?;
        done.extend(found);
        Ok(())
    }
}
