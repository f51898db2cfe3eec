//! The workers table (live worker processes) and the finished-jobs throughput.

use std::time::Duration;

use chokaq_core::{
    Error, ErrorKind, Result, ThroughputBucket, ThroughputParams, WorkerId, WorkerProcess, WorkerRegistration,
};
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::bounded::ReadConn;
use crate::error::map_err;
use crate::rows::{dur_us, now_us, ts};

/// Microseconds in a minute: throughput buckets are `finished_at - finished_at % MINUTE_US`.
const MINUTE_US: i64 = 60_000_000;

/// [`chokaq_core::Backend::register_worker`].
pub(crate) async fn register(b: &SqliteBackend, reg: &WorkerRegistration) -> Result<()> {
    reg.validate()?;
    let queues: Vec<&str> = reg.queues.iter().map(|q| q.as_str()).collect();
    let queues = serde_json::to_string(&queues)?;
    let mut tx = b.begin_write().await?;
    sqlx::query(&b.sql.register_worker)
        .bind(reg.worker.0)
        .bind(&reg.host)
        .bind(i64::from(reg.pid))
        .bind(&queues)
        .bind(i64::from(reg.concurrency))
        .bind(now_us())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
    commit(tx).await
}

/// [`chokaq_core::Backend::deregister_worker`].
pub(crate) async fn deregister(b: &SqliteBackend, worker: WorkerId) -> Result<bool> {
    let mut tx = b.begin_write().await?;
    let n = sqlx::query(&b.sql.deregister_worker).bind(worker.0).execute(&mut *tx).await.map_err(map_err)?;
    commit(tx).await?;
    Ok(n.rows_affected() > 0)
}

/// [`chokaq_core::Backend::list_workers`].
pub(crate) async fn list(b: &SqliteBackend) -> Result<Vec<WorkerProcess>> {
    let mut r = ReadConn::open(b).await?;
    let out = sqlx::query(&b.sql.list_workers).fetch_all(r.conn()).await.map_err(map_err);
    let rows = r.finish(out).await?;
    let corrupt = |what: &str| Error::new(ErrorKind::Other, format!("sqlite: unexpected stored value: {what}"));
    rows.iter()
        .map(|r| {
            let queues: String = r.try_get("queues").map_err(map_err)?;
            Ok(WorkerProcess {
                worker: WorkerId(r.try_get("worker_id").map_err(map_err)?),
                host: r.try_get("host").map_err(map_err)?,
                pid: u32::try_from(r.try_get::<i64, _>("pid").map_err(map_err)?).map_err(|_| corrupt("worker pid"))?,
                queues: serde_json::from_str(&queues).map_err(|_| corrupt("worker queues"))?,
                concurrency: u32::try_from(r.try_get::<i64, _>("concurrency").map_err(map_err)?)
                    .map_err(|_| corrupt("worker concurrency"))?,
                started_at: ts(r.try_get("started_at").map_err(map_err)?)?,
                last_seen_at: ts(r.try_get("last_seen_at").map_err(map_err)?)?,
            })
        })
        .collect()
}

/// [`chokaq_core::Backend::prune_workers`].
pub(crate) async fn prune(b: &SqliteBackend, stale_after: Duration) -> Result<u64> {
    let stale_us = dur_us("stale_after", stale_after)?;
    let mut tx = b.begin_write().await?;
    let n = sqlx::query(&b.sql.prune_workers)
        .bind(now_us().saturating_sub(stale_us))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
    commit(tx).await?;
    Ok(n.rows_affected())
}

/// [`chokaq_core::Backend::throughput`].
pub(crate) async fn throughput(b: &SqliteBackend, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
    params.validate()?;
    let since = now_us() - dur_us("window", params.window)?;
    let mut r = ReadConn::open(b).await?;
    let out = match &params.queue {
        None => sqlx::query(&b.sql.throughput_all).bind(since).bind(MINUTE_US).fetch_all(r.conn()).await,
        Some(q) => {
            sqlx::query(&b.sql.throughput_queue).bind(since).bind(MINUTE_US).bind(q.as_str()).fetch_all(r.conn()).await
        }
    }
    .map_err(map_err);
    let rows = r.finish(out).await?;
    rows.iter()
        .map(|r| {
            Ok(ThroughputBucket {
                queue: r.try_get("queue").map_err(map_err)?,
                minute: ts(r.try_get("minute").map_err(map_err)?)?,
                finished: u64::try_from(r.try_get::<i64, _>("finished").map_err(map_err)?).unwrap_or(0),
                failed: u64::try_from(r.try_get::<i64, _>("failed").map_err(map_err)?).unwrap_or(0),
                retried: u64::try_from(r.try_get::<i64, _>("retried").map_err(map_err)?).unwrap_or(0),
            })
        })
        .collect()
}
