//! A guarded queue's part of the claim (a queue cap, a key cap or a rate limit, issue 25): its
//! control row locked `FOR UPDATE`, the counts after the lock ([`guarded_take`]), and the
//! keyed pick ([`pick_keyed`]).
//!
//! The count (issue 40, L7): a rate window is never counted row by row (a limit of 1000000/1d
//! read a million index entries in every claim). Every entry of the starts log carries its
//! ordinal `n` in its bucket under the limit in force (the queue's for a queue-wide limit, the
//! key's for a limit per key; 0 for a key-less entry under a limit per key), written by the
//! claim as the bucket's last ordinal plus one while it holds the control row (`FOR UPDATE`,
//! from its count to its commit). So a bucket's ordinals are consecutive and grow with the
//! stamps (each claim stamps with a clock read after the lock, after the previous holder
//! committed), the rescue's prune, which takes the same lock, deletes a prefix of them (the
//! entries stamped at or before its window's start), and the window's count is the last
//! ordinal less the first one stamped after the window's start, plus one: two index descents,
//! whatever the window holds. A change of a limit's kind renumbers the queue's log under the
//! same lock (`admin::control_queue`).

use std::collections::HashMap;

use chokaq_core::{QueueName, Result};
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::Open;
use crate::backend::{MysqlBackend, Tx};
use crate::error::{corrupt, map_err};
use crate::rows;

/// What a claim may take from one queue, as read under its control row's lock.
pub(super) struct Take<'a> {
    pub(super) queue: &'a QueueName,
    pub(super) take: i64,
    pub(super) scheduled: bool,
    /// Per-key allowances (a key cap or a per-key rate limit), else `None`.
    pub(super) keys: Option<Keys>,
    /// Rate limited: every start of this claim in the queue is logged.
    pub(super) logged: bool,
    /// The limit is per key.
    pub(super) by_key: bool,
}

/// The per-key allowances of one keyed queue for one claim.
pub(super) struct Keys {
    /// A key cap of 0: no keyed job may be taken.
    none: bool,
    /// The key cap.
    cap: Option<i64>,
    /// A limit per key: the starts a key may have in its window, and the window's start.
    rate: Option<(i64, i64)>,
    /// What the keys seen (running, or met by the pick, each counted then) may take still.
    left: HashMap<String, i64>,
}

impl Keys {
    /// Counts the keys of `keys` not seen yet (their running jobs are those of `running`, none
    /// for a key not in it) and notes what each may take: under its cap and in its window,
    /// whichever is less. One statement for all of them, two index descents per key.
    async fn count(
        &mut self,
        b: &MysqlBackend,
        tx: &mut sqlx::MySqlConnection,
        queue: &QueueName,
        keys: Vec<String>,
        running: &HashMap<String, i64>,
    ) -> Result<()> {
        let mut new: Vec<String> = keys.into_iter().filter(|k| !self.left.contains_key(k)).collect();
        new.sort_unstable();
        new.dedup();
        if new.is_empty() {
            return Ok(());
        }
        let window = match self.rate {
            Some((_, since)) => {
                let mut out = HashMap::new();
                let rows = sqlx::query(&b.sql.window_by_key)
                    .bind(queue.as_str())
                    .bind(queue.as_str())
                    .bind(since)
                    .bind(serde_json::to_string(&new)?)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(map_err)?;
                for r in rows {
                    out.insert(rows::text(&r, "k")?, r.try_get::<i64, _>("n").map_err(map_err)?);
                }
                out
            }
            None => HashMap::new(),
        };
        for k in new {
            let by_cap = self.cap.map(|cap| cap - running.get(&k).copied().unwrap_or(0));
            let by_rate = self.rate.map(|(jobs, _)| jobs - window.get(&k).copied().unwrap_or(0));
            let allow = by_cap.into_iter().chain(by_rate).min().unwrap_or(i64::MAX).max(0);
            self.left.insert(k, allow);
        }
        Ok(())
    }
}

/// Per-key counts: (key, n) rows of `key_running`.
async fn key_counts(
    conn: &mut sqlx::MySqlConnection,
    sql: &str,
    queue: &QueueName,
    since: Option<i64>,
) -> Result<HashMap<String, i64>> {
    let mut q = sqlx::query(sql).bind(queue.as_str());
    if let Some(since) = since {
        q = q.bind(since);
    }
    let mut out = HashMap::new();
    for r in q.fetch_all(&mut *conn).await.map_err(map_err)? {
        out.insert(rows::text(&r, "k")?, r.try_get::<i64, _>("n").map_err(map_err)?);
    }
    Ok(out)
}

/// A guarded queue (a queue cap, a key cap or a rate limit): its control row locked
/// `FOR UPDATE` (claimers of the queue take turns), its settings as they stand now, then the
/// counts, each a statement that starts after the lock (READ COMMITTED: a fresh snapshot that
/// sees every claim the previous holder committed): the queue's active jobs, its window's
/// starts, the running jobs and window starts per key. `None`: nothing to take (paused,
/// inactive, no control row).
///
/// A rate-limited queue's window ends at the database's clock read after the lock, and the
/// claim's `now` (its stamps, Start mode's `started_at`) moves up to it: the rescue's prune
/// takes the same lock and reads its clock after it too (`admin::prune_starts`), so every
/// entry it deleted is older than any window a later claim counts. A clock read before the
/// lock (the probe's) could be older than a prune that ran while the claim waited, and the
/// window would miss the entries that prune deleted (issue 36 hole 4; `tests/rate_race.rs`).
/// A later stamp than the count's end is safe: the count covered every entry after its own
/// window's start, later ones included.
pub(super) async fn guarded_take<'a>(
    b: &MysqlBackend,
    tx: &mut Tx,
    o: &Open<'a>,
    limit: i64,
    now: &mut i64,
) -> Result<Option<Take<'a>>> {
    // Broken on purpose (check-then-act): the per-key counts are read before the lock.
    let early = if b.faults.key_check_before_lock && o.keyed {
        let mut conn = b.pool.acquire().await.map_err(map_err)?;
        let counts = key_counts(&mut conn, &b.sql.key_running, o.queue, None).await?;
        // The window between the check and the lock, as a slow network or a busy server
        // widens it: without it the race was not always hit (CI, two runs at once on 2 cores:
        // "fault key_check_before_lock was NOT caught: every case passed").
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        Some(counts)
    } else {
        None
    };
    let row = sqlx::query(&b.sql.lock_queue).bind(o.queue.as_str()).fetch_optional(&mut **tx).await.map_err(map_err)?;
    let Some(row) = row else { return Ok(None) };
    let int = |c: &str| row.try_get::<Option<i64>, _>(c).map_err(map_err);
    let (max, key_cap, rate_jobs, rate_per_ms) =
        (int("max_workers")?, int("key_max_workers")?, int("rate_jobs")?, int("rate_per_ms")?);
    let by_key = row.try_get::<i64, _>("rate_by_key").map_err(map_err)? != 0;
    let paused = row.try_get::<i64, _>("is_paused").map_err(map_err)? != 0;
    let active = row.try_get::<i64, _>("is_active").map_err(map_err)? != 0;
    if paused || !active {
        return Ok(None);
    }
    let mut take = limit;
    if let Some(max) = max {
        let active: i64 = sqlx::query_scalar(&b.sql.active_count)
            .bind(o.queue.as_str())
            .fetch_one(&mut **tx)
            .await
            .map_err(map_err)?;
        take = (max - active).clamp(0, take);
    }
    // A bucket may take `jobs - started`; the broken variant one more.
    let slack = i64::from(b.faults.rate_window_off_by_one);
    if rate_jobs.is_some() && rate_per_ms.is_some() {
        *now = (*now).max(b.now(tx).await?);
    }
    let now = *now;
    let rate = rate_jobs.zip(rate_per_ms).map(|(jobs, ms)| (jobs, now - ms * 1000));
    if let (Some((jobs, since)), false) = (rate, by_key) {
        let started: i64 = sqlx::query_scalar(&b.sql.window_total)
            .bind(o.queue.as_str())
            .bind(o.queue.as_str())
            .bind(since)
            .fetch_one(&mut **tx)
            .await
            .map_err(map_err)?;
        take = take.min((jobs + slack - started).max(0));
    }
    let keyed_rate = rate.filter(|_| by_key);
    let keys = if key_cap.is_some() || keyed_rate.is_some() {
        let running = match (key_cap, early) {
            (None, _) => HashMap::new(),
            (Some(_), Some(early)) => early,
            (Some(_), None) => key_counts(tx, &b.sql.key_running, o.queue, None).await?,
        };
        let mut keys = Keys {
            none: key_cap == Some(0),
            cap: key_cap,
            rate: keyed_rate.map(|(jobs, since)| (jobs + slack, since)),
            left: HashMap::new(),
        };
        // The running keys now (the pick leaves out those with nothing left); every other key
        // when the pick first meets it.
        keys.count(b, tx, o.queue, running.keys().cloned().collect(), &running).await?;
        Some(keys)
    } else {
        None
    };
    let by_key = rate.is_some() && by_key;
    Ok(Some(Take { queue: o.queue, take, scheduled: o.scheduled, keys, logged: rate.is_some(), by_key }))
}

/// A keyed queue's pick: due Pending rows in claim order, locked, at most `take`, none of a
/// key beyond its allowance. Keys with nothing left are left out by the statement (they
/// hold back nobody); when a pick returns more rows of a key than it may take, the extra rows
/// are dropped (locked until the commit, not claimed), the key joins the left-out ones, and
/// the pick goes on after the last row returned. The keys a round meets for the first time
/// are counted before it takes from them ([`Keys::count`]). Every round but the last exhausts a
/// key that this claim took from or meets a key that had nothing left before it (its rows
/// dropped and the key left out from then on), so it ends within `take + 1` rounds plus one
/// per such key met.
pub(super) async fn pick_keyed(
    b: &MysqlBackend,
    tx: &mut Tx,
    q: &QueueName,
    now: i64,
    take: i64,
    keys: &mut Keys,
) -> Result<Vec<MySqlRow>> {
    let mut full: Vec<String> = keys.left.iter().filter(|(_, n)| **n <= 0).map(|(k, _)| k.clone()).collect();
    full.sort_unstable();
    let mut out: Vec<MySqlRow> = Vec::new();
    let mut cursor: Option<(i32, i64, uuid::Uuid)> = None;
    loop {
        let want = take - out.len() as i64;
        if want <= 0 {
            break;
        }
        let (p, d, id) = cursor.unwrap_or((0, 0, uuid::Uuid::nil()));
        let rows = sqlx::query(&b.sql.claim_pick_keyed)
            .bind(q.as_str())
            .bind(now)
            .bind(i64::from(!keys.none))
            .bind(serde_json::to_string(&full)?)
            .bind(i64::from(cursor.is_some()))
            .bind(p)
            .bind(p)
            .bind(d)
            .bind(d)
            .bind(id)
            .bind(want)
            .fetch_all(&mut **tx)
            .await
            .map_err(map_err)?;
        let got = rows.len() as i64;
        let mut dropped = false;
        // The keys met for the first time: counted now (no running jobs: those were counted).
        let met =
            rows.iter().filter_map(|r| rows::opt_text(r, "concurrency_key").transpose()).collect::<Result<_>>()?;
        keys.count(b, tx, q, met, &HashMap::new()).await?;
        for row in rows {
            cursor = Some((
                row.try_get("priority").map_err(map_err)?,
                row.try_get("due_at").map_err(map_err)?,
                row.try_get("id").map_err(map_err)?,
            ));
            let Some(key) = rows::opt_text(&row, "concurrency_key")? else {
                out.push(row);
                continue;
            };
            let left = keys.left.get_mut(&key).ok_or_else(|| corrupt("a key the pick met was not counted"))?;
            if *left > 0 {
                *left -= 1;
                if *left == 0 {
                    full.push(key);
                }
                out.push(row);
            } else {
                dropped = true;
                if !full.contains(&key) {
                    // Full before this claim (met for the first time): left out from now on.
                    full.push(key);
                }
            }
        }
        if got < want || !dropped {
            break;
        }
    }
    Ok(out)
}
