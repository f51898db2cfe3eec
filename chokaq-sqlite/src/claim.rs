//! The claim: a read-snapshot look for work, then the decision under the write lock.

use chokaq_core::{validate, ClaimMode, ClaimParams, ClaimedJob, DeadReason, JobStatus, QueueName, Result};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::error::{corrupt, map_err};
use crate::rows::{self, now_us};

/// A claim candidate: enough to merge per-queue lists into the global order.
struct Candidate {
    id: uuid::Uuid,
    priority: i64,
    due: i64,
}

/// Whether any of `queues` may have a claimable job, judged from a read snapshot.
async fn may_have_work(b: &SqliteBackend, queues: &[&QueueName]) -> Result<bool> {
    let mut tx = b.begin_read().await?;
    let now = now_us();
    let mut found = false;
    for q in queues {
        let s = b.read_settings(&mut tx, q).await?;
        if s.is_paused || !s.is_active || s.max_workers == Some(0) {
            continue;
        }
        if let Some(max) = s.max_workers {
            let active: i64 =
                sqlx::query_scalar(&b.sql.active_count).bind(q.as_str()).fetch_one(&mut *tx).await.map_err(map_err)?;
            if active >= i64::from(max) {
                continue;
            }
        }
        let due: Option<i64> = sqlx::query_scalar(&b.sql.any_due)
            .bind(q.as_str())
            .bind(now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        if due.is_some() {
            found = true;
            break;
        }
    }
    tx.rollback().await.map_err(map_err)?;
    Ok(found)
}

/// [`chokaq_core::Backend::claim`].
pub(crate) async fn claim(b: &SqliteBackend, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
    req.validate()?;
    let mut queues: Vec<&QueueName> = req.queues.iter().collect();
    queues.sort();
    queues.dedup();
    let limit = i64::from(req.limit);
    let start = req.mode == ClaimMode::Start;
    // Start and Hold set the heartbeat (the claim is the first one); Reserve clears it.
    let beat = matches!(req.mode, ClaimMode::Start | ClaimMode::Hold);

    // Idle pollers should not queue for the write lock: look first in a read snapshot.
    // A stale "nothing to do" only delays the next poll; the decision that matters
    // (which rows, under which cap) is taken again under the write lock below.
    if !may_have_work(b, &queues).await? {
        return Ok(Vec::new());
    }
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let mut candidates: Vec<Candidate> = Vec::new();
    for q in queues {
        let settings = b.read_settings(&mut tx, q).await?;
        if settings.is_paused || !settings.is_active {
            continue;
        }
        // Strict cap: the active count is read under the write lock, so no other claimer
        // can change it before this transaction commits. Uncapped queues skip the count.
        let take = match settings.max_workers {
            None => limit,
            Some(max) => {
                let active: i64 = sqlx::query_scalar(&b.sql.active_count)
                    .bind(q.as_str())
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(map_err)?;
                (i64::from(max) - active).clamp(0, limit)
            }
        };
        if take == 0 {
            continue;
        }
        // The due Scheduled jobs become Pending first (at most 1,000 per call; the next call
        // promotes the rest).
        sqlx::query(&b.sql.promote_due).bind(q.as_str()).bind(now).execute(&mut *tx).await.map_err(map_err)?;
        let rows = sqlx::query(&b.sql.claim_candidates)
            .bind(q.as_str())
            .bind(now)
            .bind(take)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        for r in rows {
            candidates.push(Candidate {
                id: r.try_get("id").map_err(map_err)?,
                priority: r.try_get("priority").map_err(map_err)?,
                due: r.try_get("due").map_err(map_err)?,
            });
        }
    }
    candidates.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.due.cmp(&b.due)).then(a.id.cmp(&b.id)));
    candidates.truncate(req.limit as usize);
    if candidates.is_empty() {
        tx.rollback().await.map_err(map_err)?;
        return Ok(Vec::new());
    }
    let count = i64::try_from(candidates.len()).map_err(|_| corrupt("claim size"))?;
    let top: i64 = sqlx::query_scalar(&b.sql.next_leases).bind(count).fetch_one(&mut *tx).await.map_err(map_err)?;
    let first = top - count + 1;
    let status = if start { JobStatus::Processing } else { JobStatus::Fetched };
    let mut out = Vec::with_capacity(candidates.len());
    for (i, c) in candidates.iter().enumerate() {
        let row: SqliteRow = sqlx::query(&b.sql.claim_one)
            .bind(i64::from(status.code()))
            .bind(req.worker.0)
            .bind(first + i as i64)
            .bind(now)
            .bind(i64::from(start))
            .bind(c.id)
            .bind(i64::from(beat))
            .fetch_one(&mut *tx)
            .await
            .map_err(map_err)?;
        // Each row on its own: one that cannot be decoded goes to the dead-letter table with
        // the reason, in this transaction, instead of failing its neighbours (and every later
        // claim, which would meet it again).
        match rows::claimed(&row) {
            Ok(job) => out.push(job),
            Err(e) => {
                let reason =
                    validate::error_text(&format!("undecodable row, dead-lettered by the claim: {}", e.message()));
                tracing::error!(job_id = %c.id, reason = %reason, "claimed row cannot be decoded: dead-lettered");
                sqlx::query(&b.sql.dead_letter)
                    .bind(now)
                    .bind(c.id)
                    .bind(DeadReason::Failed.as_str())
                    .bind(&reason)
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                sqlx::query(&b.sql.delete_hot).bind(c.id).execute(&mut *tx).await.map_err(map_err)?;
            }
        }
    }
    commit(tx).await?;
    Ok(out)
}
