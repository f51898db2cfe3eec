//! Reads on the reader pool: queue settings, stats, `get_job` (`list_jobs` is in
//! [`crate::list`]). Each runs on a
//! read-only connection; the multi-statement ones inside one read transaction (one WAL
//! snapshot), so what they report is consistent.

use std::collections::HashMap;

use chokaq_core::{
    validate, JobId, JobRecord, KeyCount, QueueName, QueueSettings, QueueStats, Result, StatsSnapshot, MAX_BUSIEST_KEYS,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Row};

use crate::backend::SqliteBackend;
use crate::bounded::ReadConn;
use crate::error::{corrupt, map_err};
use crate::rows::{self, now_us, ts, Src};

/// [`chokaq_core::Backend::queue_settings`].
pub(crate) async fn queue_settings(b: &SqliteBackend, queue: &QueueName) -> Result<QueueSettings> {
    validate::queue_name(queue.as_str())?;
    let mut r = ReadConn::open(b).await?;
    let out = b.read_settings(r.conn(), queue).await;
    r.finish(out).await
}

/// The per-queue entry of a snapshot, created on first use.
fn entry(per: &mut HashMap<String, QueueStats>, queue: String) -> &mut QueueStats {
    per.entry(queue.clone()).or_insert_with(|| QueueStats { queue, ..QueueStats::default() })
}

/// A `count(*)` as a row count.
fn count(r: &sqlx::sqlite::SqliteRow) -> Result<u64> {
    Ok(u64::try_from(r.try_get::<i64, _>("n").map_err(map_err)?).unwrap_or(0))
}

/// [`chokaq_core::Backend::stats`].
pub(crate) async fn stats(b: &SqliteBackend) -> Result<StatsSnapshot> {
    let mut r = ReadConn::open(b).await?;
    let out = stats_on(b, r.conn()).await;
    r.finish(out).await
}

/// [`stats`] on `conn`, in one read transaction.
async fn stats_on(b: &SqliteBackend, conn: &mut SqliteConnection) -> Result<StatsSnapshot> {
    let mut tx = conn.begin().await.map_err(map_err)?;
    let now = now_us();
    let mut per: HashMap<String, QueueStats> = HashMap::new();
    let mut snap = StatsSnapshot { taken_at: Some(ts(now)?), ..StatsSnapshot::default() };
    let hot = sqlx::query(&b.sql.stats_hot).fetch_all(&mut *tx).await.map_err(map_err)?;
    for r in hot {
        let queue: String = r.try_get("queue").map_err(map_err)?;
        let status: i64 = r.try_get("status").map_err(map_err)?;
        let n = count(&r)?;
        let qs = entry(&mut per, queue);
        match status {
            // Scheduled (3) is Pending whose due time was ahead when it was written.
            0 | 3 => qs.pending += n,
            1 => qs.fetched += n,
            2 => qs.processing += n,
            other => return Err(corrupt(format!("status {other}"))),
        }
    }
    let lag = sqlx::query(&b.sql.stats_lag).bind(now).fetch_all(&mut *tx).await.map_err(map_err)?;
    for r in lag {
        let queue: String = r.try_get("queue").map_err(map_err)?;
        let due: i64 = r.try_get("due").map_err(map_err)?;
        entry(&mut per, queue).oldest_due_at = Some(ts(due)?);
    }
    for r in sqlx::query(&b.sql.stats_archive).fetch_all(&mut *tx).await.map_err(map_err)? {
        let queue: String = r.try_get("queue").map_err(map_err)?;
        entry(&mut per, queue).archived += count(&r)?;
    }
    for r in sqlx::query(&b.sql.stats_dead).fetch_all(&mut *tx).await.map_err(map_err)? {
        let queue: String = r.try_get("queue").map_err(map_err)?;
        let cancelled = u64::try_from(r.try_get::<i64, _>("cancelled").map_err(map_err)?).unwrap_or(0);
        let qs = entry(&mut per, queue);
        qs.dead += count(&r)?;
        qs.cancelled += cancelled;
    }
    for r in sqlx::query(&b.sql.stats_queues).fetch_all(&mut *tx).await.map_err(map_err)? {
        let name = QueueName::new(r.try_get::<String, _>("name").map_err(map_err)?)?;
        let settings = rows::settings(&r, &name)?;
        entry(&mut per, name.to_string()).settings = Some(settings);
    }
    // The busiest keys, from the same snapshot (most running first, ties by key).
    let top = i64::try_from(MAX_BUSIEST_KEYS).unwrap_or(i64::MAX);
    for r in sqlx::query(&b.sql.stats_busiest_keys).bind(top).fetch_all(&mut *tx).await.map_err(map_err)? {
        let queue: String = r.try_get("queue").map_err(map_err)?;
        let key: String = r.try_get("ckey").map_err(map_err)?;
        entry(&mut per, queue).busiest_keys.push(KeyCount { key, running: count(&r)? });
    }
    tx.rollback().await.map_err(map_err)?;
    let mut queues: Vec<QueueStats> = per.into_values().collect();
    queues.sort_by(|a, b| a.queue.cmp(&b.queue));
    for q in queues {
        snap.push(q);
    }
    Ok(snap)
}

/// [`chokaq_core::Backend::get_job`]: hot, then archive, then dead-letter, in one snapshot.
pub(crate) async fn get_job(b: &SqliteBackend, id: JobId) -> Result<Option<JobRecord>> {
    let mut r = ReadConn::open(b).await?;
    let out = get_job_on(b, r.conn(), id).await;
    r.finish(out).await
}

/// [`get_job`] on `conn`, in one read transaction.
async fn get_job_on(b: &SqliteBackend, conn: &mut SqliteConnection, id: JobId) -> Result<Option<JobRecord>> {
    let mut tx = conn.begin().await.map_err(map_err)?;
    let mut found = None;
    for (sql, src) in [(&b.sql.get_hot, Src::Hot), (&b.sql.get_archive, Src::Archive), (&b.sql.get_dead, Src::Dead)] {
        let row = sqlx::query(sql).bind(id.0).fetch_optional(&mut *tx).await.map_err(map_err)?;
        if let Some(row) = row {
            found = Some(rows::record(&row, src)?);
            break;
        }
    }
    tx.rollback().await.map_err(map_err)?;
    Ok(found)
}
