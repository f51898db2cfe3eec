//! The claim: a read-snapshot look for work, then the decision under the write lock.
//!
//! Keys and rate limits (issue 25, `docs/contract.md`): SQLite has one writer, and the claim's
//! `BEGIN IMMEDIATE` takes the write lock before its first read, so every count below (the
//! queue's active jobs, each key's Fetched + Processing jobs, each rate bucket's starts in the
//! window) is read under the lock, in statements that start after it is held, and no other
//! claimer can change it before this transaction commits: the per-key cap and the rate limit
//! are strict the way the queue cap is, with no lock of their own.
//!
//! A queue with neither a per-key cap nor a by-key rate limit keeps the plain plan: its first
//! `take` due jobs in claim order (a queue-wide rate limit only lowers `take`). A queue with
//! either walks its due jobs in claim order a page at a time ([`select_guarded`]): keys with
//! no room left are excluded in SQL (the page statement gets them as a JSON array), the rest
//! are taken while their room lasts, so a key at its cap never holds back other keys and the
//! walk reads about `take` rows plus the rows of keys that fill up during this very claim.
//!
//! The count (issue 40, L7): a rate window is never counted row by row (a limit of
//! 1000000/1d ran three million instructions of SQLite's machine in every claim). Every entry
//! of the starts log carries its ordinal `n` in its bucket under the limit in force (the
//! queue's for a queue-wide limit, the key's for a limit per key; 0 for a key-less entry under
//! a limit per key), written by the claim as the bucket's last ordinal plus one, under the
//! write lock. So a bucket's ordinals are consecutive and grow with the stamps (each claim
//! stamps after the previous one committed), the rescue's prune deletes a prefix of them (the
//! entries stamped at or before its window's start), and the window's count is the last
//! ordinal less the first one stamped after the window's start, plus one: two index searches,
//! whatever the window holds. A key is counted when the walk first meets it (not every key of
//! the window up front). A change of a limit's kind renumbers the queue's log
//! (`admin::control_queue`).

use std::collections::{HashMap, HashSet};

use chokaq_core::{validate, ClaimMode, ClaimParams, ClaimedJob, DeadReason, JobStatus, QueueName, Result};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::error::{corrupt, map_err};
use crate::rows::{self, now_us};

/// A claim candidate: enough to merge per-queue lists into the global order.
struct Candidate {
    id: uuid::Uuid,
    priority: i64,
    due: i64,
    /// The queue is rate-limited: the claim logs this job's start.
    logged: bool,
    /// The limit is per key: the start is numbered in its key's bucket (else the queue's).
    by_key: bool,
    /// The queue has a per-key cap (the slot ledger of `Faults::key_slot_double_free`).
    keyed: bool,
}

/// Rows of `(ckey, n)` as a map.
fn key_map(rows: Vec<SqliteRow>) -> Result<HashMap<String, i64>> {
    rows.iter()
        .map(|r| Ok((r.try_get::<String, _>("ckey").map_err(map_err)?, r.try_get::<i64, _>("n").map_err(map_err)?)))
        .collect()
}

/// What the keys of one queue may still take in this claim.
struct KeyRoom {
    /// The per-key cap, if any.
    cap: Option<i64>,
    /// Fetched + Processing jobs per key (keys with none are absent).
    running: HashMap<String, i64>,
    /// The by-key rate limit's starts allowed per window, if any.
    rate: Option<i64>,
    /// The window's start (starts stamped after it count).
    since: i64,
    /// Starts per key in the current window, of the keys counted so far (each when the walk
    /// first meets it: two index searches, [`KeyRoom::count`]).
    started: HashMap<String, i64>,
}

impl KeyRoom {
    /// Counts `key`'s starts in the window, once (a limit per key only).
    async fn count(
        &mut self,
        b: &SqliteBackend,
        conn: &mut SqliteConnection,
        queue: &QueueName,
        key: &str,
    ) -> Result<()> {
        if self.rate.is_some() && !self.started.contains_key(key) {
            let n: i64 = sqlx::query_scalar(&b.sql.rate_count_key)
                .bind(queue.as_str())
                .bind(key)
                .bind(self.since)
                .fetch_one(&mut *conn)
                .await
                .map_err(map_err)?;
            self.started.insert(key.to_string(), n);
        }
        Ok(())
    }

    /// How many more jobs of `key` may be taken, before this claim took any (its starts counted
    /// first, [`KeyRoom::count`]).
    fn room(&self, key: &str) -> i64 {
        let mut room = i64::MAX;
        if let Some(cap) = self.cap {
            room = room.min(cap - self.running.get(key).copied().unwrap_or(0));
        }
        if let Some(jobs) = self.rate {
            room = room.min(jobs - self.started.get(key).copied().unwrap_or(0));
        }
        room
    }

    /// The keys at their cap (a key whose rate window is full joins them when the walk meets
    /// it).
    fn full(&self) -> Vec<String> {
        let mut keys: Vec<String> =
            self.running.iter().filter(|(_, n)| self.cap.is_some_and(|c| c <= **n)).map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys
    }
}

/// The first `take` due jobs of `queue` in claim order that the keys' room lets through (a key
/// cap of 0 lets no keyed job through; jobs without a key are bound by neither per-key rule).
async fn select_guarded(
    b: &SqliteBackend,
    conn: &mut SqliteConnection,
    queue: &QueueName,
    now: i64,
    take: i64,
    room: &mut KeyRoom,
) -> Result<Vec<(uuid::Uuid, i64, i64)>> {
    let no_keyed = i64::from(room.cap == Some(0));
    let mut excluded = room.full();
    let mut known_full: HashSet<String> = excluded.iter().cloned().collect();
    let mut taken: HashMap<String, i64> = HashMap::new();
    let mut out = Vec::new();
    let page = (take * 2 + 16).min(1000);
    let mut after: Option<(i64, i64, uuid::Uuid)> = None;
    loop {
        let rows = sqlx::query(&b.sql.claim_candidates_keyed)
            .bind(queue.as_str())
            .bind(now)
            .bind(no_keyed)
            .bind(serde_json::to_string(&excluded)?)
            .bind(after.map(|a| a.0))
            .bind(after.map(|a| a.1))
            .bind(after.map(|a| a.2))
            .bind(page)
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        let n = i64::try_from(rows.len()).map_err(|_| corrupt("page size"))?;
        for r in rows {
            let id: uuid::Uuid = r.try_get("id").map_err(map_err)?;
            let priority: i64 = r.try_get("priority").map_err(map_err)?;
            let due: i64 = r.try_get("due").map_err(map_err)?;
            after = Some((priority, due, id));
            if let Some(key) = r.try_get::<Option<String>, _>("ckey").map_err(map_err)? {
                if known_full.contains(&key) {
                    // Filled or found full earlier in this page: the next pages exclude it.
                    continue;
                }
                room.count(b, conn, queue, &key).await?;
                let left = room.room(&key) - taken.get(&key).copied().unwrap_or(0);
                if left <= 0 {
                    // Its window was full before this claim.
                    known_full.insert(key.clone());
                    excluded.push(key);
                    continue;
                }
                *taken.entry(key.clone()).or_insert(0) += 1;
                if left == 1 {
                    known_full.insert(key.clone());
                    excluded.push(key);
                }
            }
            out.push((id, priority, due));
            if out.len() as i64 == take {
                return Ok(out);
            }
        }
        if n < page {
            return Ok(out);
        }
    }
}

/// `Faults::key_check_then_act`: each key's running count read in a read snapshot before the
/// write lock (the bug: the claim then trusts it under the lock).
async fn stale_key_counts(b: &SqliteBackend, queues: &[&QueueName]) -> Result<HashMap<String, HashMap<String, i64>>> {
    let mut tx = b.begin_read().await?;
    let mut out = HashMap::new();
    for q in queues {
        let rows = sqlx::query(&b.sql.key_running).bind(q.as_str()).fetch_all(&mut *tx).await.map_err(map_err)?;
        out.insert(q.as_str().to_string(), key_map(rows)?);
    }
    tx.rollback().await.map_err(map_err)?;
    Ok(out)
}

/// `Faults::key_slot_double_free`: frees the slot of job `id`'s key in the broken ledger (on
/// every outcome reported done, repeats included).
pub(crate) async fn fault_free_slot(b: &SqliteBackend, conn: &mut SqliteConnection, id: uuid::Uuid) -> Result<()> {
    if !b.faults.key_slot_double_free {
        return Ok(());
    }
    sqlx::query(&b.sql.fault_ledger_create).execute(&mut *conn).await.map_err(map_err)?;
    let row = sqlx::query(&b.sql.fault_job_key).bind(id).fetch_optional(&mut *conn).await.map_err(map_err)?;
    if let Some(row) = row {
        let queue: String = row.try_get("queue").map_err(map_err)?;
        if let Some(key) = row.try_get::<Option<String>, _>("ckey").map_err(map_err)? {
            sqlx::query(&b.sql.fault_ledger_add)
                .bind(queue)
                .bind(key)
                .bind(-1_i64)
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
        }
    }
    Ok(())
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
        // A queue-wide rate limit whose window is full (a stale snapshot only delays a poll).
        if let Some(limit) = s.rate_limit.filter(|l| !l.by_key) {
            let used: i64 = sqlx::query_scalar(&b.sql.rate_count_queue)
                .bind(q.as_str())
                .bind(now - limit.per_millis() * 1000)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            if used >= i64::from(limit.jobs) {
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
    let mut stale = if b.faults.key_check_then_act { Some(stale_key_counts(b, &queues).await?) } else { None };
    let mut tx = b.begin_write().await?;
    // The claim's stamp: `updated_at`, a Start claim's `started_at`, and the starts log's.
    let now = now_us();
    let mut candidates: Vec<Candidate> = Vec::new();
    for q in queues {
        let settings = b.read_settings(&mut tx, q).await?;
        if settings.is_paused || !settings.is_active {
            continue;
        }
        // Strict cap: the active count is read under the write lock, so no other claimer
        // can change it before this transaction commits. Uncapped queues skip the count.
        let mut take = match settings.max_workers {
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
        let key_cap = settings.key_max_workers.filter(|_| !b.faults.key_ignored).map(i64::from);
        let rate = settings.rate_limit;
        // The window of a claim stamped `now`: starts stamped after `now - per` (later ones
        // count too). A bucket may take `jobs - count` more.
        let since = rate.map(|l| now - l.per_millis() * 1000).unwrap_or(now);
        let slack = i64::from(b.faults.rate_off_by_one);
        if let Some(limit) = rate.filter(|l| !l.by_key) {
            let used: i64 = sqlx::query_scalar(&b.sql.rate_count_queue)
                .bind(q.as_str())
                .bind(since)
                .fetch_one(&mut *tx)
                .await
                .map_err(map_err)?;
            take = take.min(i64::from(limit.jobs) + slack - used).max(0);
        }
        if take == 0 {
            continue;
        }
        // The due Scheduled jobs become Pending first (at most 1,000 per call; the next call
        // promotes the rest).
        sqlx::query(&b.sql.promote_due).bind(q.as_str()).bind(now).execute(&mut *tx).await.map_err(map_err)?;
        let by_key_rate = rate.filter(|l| l.by_key);
        let picked: Vec<(uuid::Uuid, i64, i64)> = if key_cap.is_none() && by_key_rate.is_none() {
            let rows = sqlx::query(&b.sql.claim_candidates)
                .bind(q.as_str())
                .bind(now)
                .bind(take)
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            rows.iter()
                .map(|r| {
                    Ok((
                        r.try_get("id").map_err(map_err)?,
                        r.try_get("priority").map_err(map_err)?,
                        r.try_get("due").map_err(map_err)?,
                    ))
                })
                .collect::<Result<_>>()?
        } else {
            let running = match key_cap {
                None => HashMap::new(),
                Some(_) if b.faults.key_slot_double_free => {
                    sqlx::query(&b.sql.fault_ledger_create).execute(&mut *tx).await.map_err(map_err)?;
                    key_map(
                        sqlx::query(&b.sql.fault_ledger_read)
                            .bind(q.as_str())
                            .fetch_all(&mut *tx)
                            .await
                            .map_err(map_err)?,
                    )?
                }
                Some(_) => match stale.as_mut().and_then(|s| s.remove(q.as_str())) {
                    Some(counted_before_the_lock) => counted_before_the_lock,
                    None => key_map(
                        sqlx::query(&b.sql.key_running).bind(q.as_str()).fetch_all(&mut *tx).await.map_err(map_err)?,
                    )?,
                },
            };
            let mut room = KeyRoom {
                cap: key_cap,
                running,
                rate: by_key_rate.map(|l| i64::from(l.jobs) + slack),
                since,
                started: HashMap::new(),
            };
            select_guarded(b, &mut tx, q, now, take, &mut room).await?
        };
        let by_key = rate.is_some_and(|l| l.by_key);
        for (id, priority, due) in picked {
            candidates.push(Candidate { id, priority, due, logged: rate.is_some(), by_key, keyed: key_cap.is_some() });
        }
    }
    // Each queue gave its first `take` jobs in claim order that its rules let through; the
    // first `limit` of their merge is what one walk over all of them would take.
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
            Ok(job) => {
                if c.logged {
                    // One start per job, stamped with the claim's time (a Start claim's
                    // `started_at`), numbered in its bucket, in the claim's transaction.
                    sqlx::query(if c.by_key { &b.sql.rate_log_key } else { &b.sql.rate_log_queue })
                        .bind(job.queue.as_str())
                        .bind(job.concurrency_key.as_deref())
                        .bind(now)
                        .execute(&mut *tx)
                        .await
                        .map_err(map_err)?;
                }
                if c.keyed && b.faults.key_slot_double_free {
                    if let Some(key) = job.concurrency_key.as_deref() {
                        sqlx::query(&b.sql.fault_ledger_add)
                            .bind(job.queue.as_str())
                            .bind(key)
                            .bind(1_i64)
                            .execute(&mut *tx)
                            .await
                            .map_err(map_err)?;
                    }
                }
                out.push(job);
            }
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
