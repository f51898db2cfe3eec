//! Reads: queue settings, stats, `get_job` (`list_jobs` is in [`crate::list`]). The multi-statement ones run in one
//! read-only REPEATABLE READ transaction (one snapshot, no locks), so what they report is
//! consistent: a job moving between tables is counted exactly once.

use std::collections::HashMap;

use chokaq_core::{
    validate, JobId, JobRecord, KeyCount, QueueName, QueueSettings, QueueStats, Result, StatsSnapshot, MAX_BUSIEST_KEYS,
};
use sqlx::mysql::{MySqlConnection, MySqlRow};
use sqlx::Row;

use crate::backend::MysqlBackend;
use crate::bounded::ReadConn;
use crate::error::{corrupt, map_err};
use crate::rows::{self, text, ts, Src};

/// [`chokaq_core::Backend::queue_settings`].
pub(crate) async fn queue_settings(b: &MysqlBackend, queue: &QueueName) -> Result<QueueSettings> {
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
fn count(r: &MySqlRow) -> Result<u64> {
    Ok(u64::try_from(r.try_get::<i64, _>("n").map_err(map_err)?).unwrap_or(0))
}

/// [`chokaq_core::Backend::stats`].
pub(crate) async fn stats(b: &MysqlBackend) -> Result<StatsSnapshot> {
    let mut r = ReadConn::open(b).await?;
    let out = stats_on(b, r.conn()).await;
    r.finish(out).await
}

/// [`stats`] on `conn`, in one read transaction.
async fn stats_on(b: &MysqlBackend, conn: &mut MySqlConnection) -> Result<StatsSnapshot> {
    let mut tx = b.begin_read_on(conn).await?;
    let now = b.now(&mut tx).await?;
    let mut per: HashMap<String, QueueStats> = HashMap::new();
    let mut snap = StatsSnapshot { taken_at: Some(ts(now)?), ..StatsSnapshot::default() };
    let hot = sqlx::query(&b.sql.stats_hot).fetch_all(&mut *tx).await.map_err(map_err)?;
    for r in hot {
        let queue = text(&r, "queue")?;
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
        let queue = text(&r, "queue")?;
        let due: i64 = r.try_get("due").map_err(map_err)?;
        entry(&mut per, queue).oldest_due_at = Some(ts(due)?);
    }
    for r in sqlx::query(&b.sql.stats_archive).fetch_all(&mut *tx).await.map_err(map_err)? {
        entry(&mut per, text(&r, "queue")?).archived += count(&r)?;
    }
    for r in sqlx::query(&b.sql.stats_dead).fetch_all(&mut *tx).await.map_err(map_err)? {
        let cancelled = u64::try_from(r.try_get::<i64, _>("cancelled").map_err(map_err)?).unwrap_or(0);
        let qs = entry(&mut per, text(&r, "queue")?);
        qs.dead += count(&r)?;
        qs.cancelled += cancelled;
    }
    // The busiest keys, from the same snapshot: most running first, ties by key.
    for r in sqlx::query(&b.sql.stats_keys).fetch_all(&mut *tx).await.map_err(map_err)? {
        let key = text(&r, "k")?;
        let running = count(&r)?;
        entry(&mut per, text(&r, "queue")?).busiest_keys.push(KeyCount { key, running });
    }
    for qs in per.values_mut() {
        qs.busiest_keys.sort_by(|a, b| b.running.cmp(&a.running).then_with(|| a.key.cmp(&b.key)));
        qs.busiest_keys.truncate(MAX_BUSIEST_KEYS);
    }
    for r in sqlx::query(&b.sql.stats_queues).fetch_all(&mut *tx).await.map_err(map_err)? {
        let name = QueueName::new(text(&r, "name")?)?;
        let settings = rows::settings(&r, &name)?;
        entry(&mut per, name.to_string()).settings = Some(settings);
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
pub(crate) async fn get_job(b: &MysqlBackend, id: JobId) -> Result<Option<JobRecord>> {
    let mut r = ReadConn::open(b).await?;
    let out = get_job_on(b, r.conn(), id).await;
    r.finish(out).await
}

/// [`get_job`] on `conn`, in one read transaction.
async fn get_job_on(b: &MysqlBackend, conn: &mut MySqlConnection, id: JobId) -> Result<Option<JobRecord>> {
    let mut tx = b.begin_read_on(conn).await?;
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
