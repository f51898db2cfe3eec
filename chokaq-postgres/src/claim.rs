//! [`chokaq_core::Backend::claim`] and [`chokaq_core::Backend::complete_and_claim`]: one call of
//! the plpgsql claim functions (`migrations/functions.sql`); rows that cannot be decoded are
//! dead-lettered under the claim's lease.

use std::collections::HashSet;

use chokaq_core::{validate, BatchOutcome, ClaimMode, ClaimParams, ClaimedJob, LeaseRef, Result, WorkerId};
use sqlx::Row;
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::error::{map_sqlx_error, with_retry};
use crate::rows::{self, pairs, sorted_claims, split};

/// [`chokaq_core::Backend::claim`].
pub(crate) async fn claim(b: &PgBackend, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
    req.validate()?;
    let queues: Vec<String> = req.queues.iter().map(|q| q.as_str().to_owned()).collect();
    let mode = mode_code(req.mode);
    let rows = with_retry(|| {
        sqlx::query(&b.sql().claim)
            .bind(req.worker.0)
            .bind(&queues)
            .bind(req.limit as i32)
            .bind(mode)
            .fetch_all(&b.kept)
    })
    .await?;
    let (jobs, bad) = sorted_claims(&rows)?;
    b.dead_letter_undecodable(req.worker, bad).await?;
    Ok(jobs)
}

/// [`chokaq_core::Backend::complete_and_claim`].
pub(crate) async fn complete_and_claim(
    b: &PgBackend,
    worker: WorkerId,
    leases: &[LeaseRef],
    req: &ClaimParams,
) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
    req.validate()?;
    validate::lease_list("complete_and_claim", leases)?;
    let (ids, lease_nums) = pairs(leases);
    let queues: Vec<String> = req.queues.iter().map(|q| q.as_str().to_owned()).collect();
    let mode = mode_code(req.mode);
    let rows = with_retry(|| {
        sqlx::query(&b.sql().complete_and_claim)
            .bind(worker.0)
            .bind(&ids)
            .bind(&lease_nums)
            .bind(&queues)
            .bind(req.limit as i32)
            .bind(mode)
            .fetch_all(&b.kept)
    })
    .await?;
    let mut done: HashSet<Uuid> = HashSet::new();
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        if done.is_empty() {
            let ids: Vec<Uuid> = row.try_get("o_done").map_err(map_sqlx_error)?;
            done.extend(ids);
        }
        let id: Option<Uuid> = row.try_get("id").map_err(map_sqlx_error)?;
        if id.is_some() {
            claimed.push(row);
        }
    }
    let (jobs, bad) = sorted_claims(&claimed)?;
    b.dead_letter_undecodable(worker, bad).await?;
    b.completed_before(worker, leases, &mut done).await?;
    Ok((split(&ids, &done), jobs))
}

impl PgBackend {
    /// Moves claimed rows that could not be decoded to the dead-letter table (guarded by the
    /// claim's lease), so they neither fail their batch nor come back after the fetched
    /// timeout.
    pub(crate) async fn dead_letter_undecodable(&self, worker: WorkerId, bad: Vec<rows::Undecodable>) -> Result<()> {
        for b in bad {
            tracing::error!(job_id = %b.id, reason = %b.reason, "claimed row cannot be decoded: dead-lettered");
            with_retry(|| {
                sqlx::query(&self.sql().dead_undecodable)
                    .bind(worker.0)
                    .bind(b.id)
                    .bind(b.lease)
                    .bind(&b.reason)
                    .fetch_optional(&self.kept)
            })
            .await?;
        }
        Ok(())
    }
}

/// The claim functions' `p_mode`: 0 reserve, 1 hold, 2 start (`migrations/functions.sql`).
fn mode_code(mode: ClaimMode) -> i16 {
    match mode {
        ClaimMode::Reserve => 0,
        ClaimMode::Hold => 1,
        ClaimMode::Start => 2,
    }
}
