//! The claim: one transaction that locks due rows with `FOR UPDATE SKIP LOCKED` in priority and
//! due order, marks them with leases of its own, and reads back exactly what it took, by lease.
//!
//! Lock order, the same for every claimer (so racing claimers cannot deadlock): the control
//! rows of the capped queues in name order (`FOR UPDATE`: claimers of a capped queue take
//! turns, and the active count that follows, a fresh READ COMMITTED snapshot, sees every claim
//! the previous holder committed), then the due Scheduled rows being promoted (in due order),
//! then job rows, which are only ever skipped, never waited for. The lease counter is bumped
//! by an autocommitted statement on a pool of its own, after the rows are locked, so its row
//! lock is held for that statement only and a re-claim of a job always gets a larger lease.

use chokaq_core::{validate, ClaimMode, ClaimParams, ClaimedJob, DeadReason, JobStatus, QueueName, Result};
use sqlx::Row;

use crate::backend::{commit, MysqlBackend};
use crate::error::{corrupt, map_err, mysql_code, Path, DUP_ENTRY};
use crate::rows;

/// A claim candidate: enough to merge per-queue lists into the global order.
struct Candidate {
    id: uuid::Uuid,
    priority: i64,
    due: i64,
}

/// [`chokaq_core::Backend::claim`].
pub(crate) async fn claim(b: &MysqlBackend, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
    req.validate()?;
    // A claim that finds a cap set on a queue it read as uncapped starts again (at most a few
    // times: a cap is set by an operator, not in a loop), now taking the capped path; so does
    // the first claim of a queue, once it made the queue's control row.
    for _ in 0..6 {
        if let Some(out) = b.retrying(Path::Claim, || claim_once(b, req)).await? {
            return Ok(out);
        }
    }
    Err(chokaq_core::Error::new(chokaq_core::ErrorKind::Transient, "the queue controls kept changing during the claim"))
}

/// One claim transaction; `None` when a queue's control changed under it (start again).
async fn claim_once(b: &MysqlBackend, req: &ClaimParams) -> Result<Option<Vec<ClaimedJob>>> {
    let mut queues: Vec<&QueueName> = req.queues.iter().collect();
    queues.sort();
    queues.dedup();
    let limit = i64::from(req.limit);
    let start = req.mode == ClaimMode::Start;
    // Start and Hold set the heartbeat (the claim is the first one); Reserve clears it.
    let beat = matches!(req.mode, ClaimMode::Start | ClaimMode::Hold);

    let mut tx = b.begin().await?;
    let now = b.now(&mut tx).await?;
    // Which queues may give work, and how much: settings, then (plain reads) whether anything
    // is due; only then the capped queues' row locks, in name order.
    // (queue, its cap, whether due Scheduled rows wait for promotion)
    let mut plan: Vec<(&QueueName, Option<u32>, bool)> = Vec::new();
    for q in &queues {
        let s = b.read_settings(&mut tx, q).await?;
        if s.is_paused || !s.is_active || s.max_workers == Some(0) {
            continue;
        }
        let due: Vec<i64> = sqlx::query_scalar(&b.sql.any_due)
            .bind(q.as_str())
            .bind(now)
            .bind(q.as_str())
            .bind(now)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        if !due.is_empty() {
            plan.push((q, s.max_workers, due.contains(&3)));
        }
    }
    if plan.is_empty() {
        tx.rollback().await.map_err(map_err)?;
        return Ok(Some(Vec::new()));
    }
    let mut takes: Vec<(&QueueName, i64, bool)> = Vec::with_capacity(plan.len());
    for &(q, cap, scheduled) in &plan {
        let take = match cap {
            None => {
                // Share-lock the control row (created, committed at once, on a queue's first
                // claim), so a control changing it waits for this claim; a cap or pause set
                // meanwhile: start again.
                let row =
                    sqlx::query(&b.sql.share_queue).bind(q.as_str()).fetch_optional(&mut *tx).await.map_err(map_err)?;
                let Some(row) = row else {
                    // The queue's first claim: end this transaction (no lock is held while the
                    // row is made), insert the row in autocommit, and start again.
                    tx.rollback().await.map_err(map_err)?;
                    let made =
                        sqlx::query(&b.sql.insert_queue).bind(q.as_str()).bind(now).bind(now).execute(&b.pool).await;
                    match made {
                        Ok(_) => {}
                        Err(e) if mysql_code(&e) == Some(DUP_ENTRY) => {}
                        Err(e) => return Err(map_err(e)),
                    }
                    return Ok(None);
                };
                let capped = row.try_get::<Option<i64>, _>("max_workers").map_err(map_err)?.is_some();
                let paused = row.try_get::<i64, _>("is_paused").map_err(map_err)? != 0;
                let active = row.try_get::<i64, _>("is_active").map_err(map_err)? != 0;
                if capped || paused || !active {
                    tx.rollback().await.map_err(map_err)?;
                    return Ok(None);
                }
                limit
            }
            Some(_) => {
                sqlx::query(&b.sql.lock_queue).bind(q.as_str()).fetch_optional(&mut *tx).await.map_err(map_err)?;
                // The cap as it stands now that the row is ours (a control may have changed it).
                let s = b.read_settings(&mut tx, q).await?;
                if s.is_paused || !s.is_active {
                    continue;
                }
                let Some(max) = s.max_workers else {
                    takes.push((q, limit, scheduled));
                    continue;
                };
                let active: i64 = sqlx::query_scalar(&b.sql.active_count)
                    .bind(q.as_str())
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(map_err)?;
                (i64::from(max) - active).clamp(0, limit)
            }
        };
        if take > 0 {
            takes.push((q, take, scheduled));
        }
    }
    let mut candidates: Vec<Candidate> = Vec::new();
    for (q, take, scheduled) in takes {
        if scheduled {
            // The due Scheduled jobs become Pending first (at most 1,000 per call), each by
            // its primary key: a claimer promoting the same row waits for this one, then finds
            // it Pending already.
            let due: Vec<uuid::Uuid> = sqlx::query_scalar(&b.sql.due_scheduled)
                .bind(q.as_str())
                .bind(now)
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            for id in due {
                sqlx::query(&b.sql.promote_one).bind(id).execute(&mut *tx).await.map_err(map_err)?;
            }
        }
        let pick = if b.faults.claim_read_then_update {
            // Broken on purpose: the rows are read without a lock, then updated by id.
            b.sql.claim_pick.replace(" FOR UPDATE SKIP LOCKED", "")
        } else {
            b.sql.claim_pick.clone()
        };
        let rows =
            sqlx::query(&pick).bind(q.as_str()).bind(now).bind(take).fetch_all(&mut *tx).await.map_err(map_err)?;
        for r in rows {
            candidates.push(Candidate {
                id: r.try_get("id").map_err(map_err)?,
                priority: r.try_get::<i32, _>("priority").map_err(map_err)?.into(),
                due: r.try_get("due_at").map_err(map_err)?,
            });
        }
    }
    candidates.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.due.cmp(&b.due)).then(a.id.cmp(&b.id)));
    candidates.truncate(req.limit as usize);
    if candidates.is_empty() {
        tx.rollback().await.map_err(map_err)?;
        return Ok(Some(Vec::new()));
    }
    let count = i64::try_from(candidates.len()).map_err(|_| corrupt("claim size"))?;
    // The rows are locked: reserve their leases now, in a statement of its own.
    let top =
        sqlx::query(&b.sql.next_leases).bind(count).execute(&b.lease_pool).await.map_err(map_err)?.last_insert_id();
    let top = i64::try_from(top).map_err(|_| corrupt("lease counter"))?;
    let first = top - count + 1;
    let status = if start { JobStatus::Processing } else { JobStatus::Fetched };
    let claim_one = if b.faults.claim_read_then_update {
        // Broken on purpose: the update does not check that the row is still Pending.
        b.sql.claim_one.replace(" AND status = 0", "")
    } else {
        b.sql.claim_one.clone()
    };
    let mut taken = 0u64;
    for (i, c) in candidates.iter().enumerate() {
        taken += sqlx::query(&claim_one)
            .bind(i64::from(status.code()))
            .bind(req.worker.0)
            .bind(first + i as i64)
            .bind(now)
            .bind(i64::from(start))
            .bind(i64::from(start))
            .bind(now)
            .bind(i64::from(beat))
            .bind(now)
            .bind(c.id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
    }
    let rows = sqlx::query(&b.sql.claimed_rows)
        .bind(first)
        .bind(top)
        .bind(req.worker.0)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
    if rows.len() as u64 != taken {
        return Err(corrupt(format!("claim took {taken} rows but read back {}", rows.len())));
    }
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        // Each row on its own: one that cannot be decoded goes to the dead-letter table with
        // the reason, in this transaction, instead of failing its neighbours.
        match rows::claimed(&row) {
            Ok(job) => out.push(job),
            Err(e) => {
                let id: uuid::Uuid = row.try_get("id").map_err(map_err)?;
                let reason =
                    validate::error_text(&format!("undecodable row, dead-lettered by the claim: {}", e.message()));
                tracing::error!(job_id = %id, reason = %reason, "claimed row cannot be decoded: dead-lettered");
                b.dead_letter(&mut tx, now, chokaq_core::JobId(id), DeadReason::Failed, Some(&reason)).await?;
            }
        }
    }
    commit(tx).await?;
    Ok(Some(out))
}
