//! The workers table (live worker processes) and the finished-jobs throughput.

use std::time::Duration;

use chokaq_core::{
    Error, ErrorKind, Result, ThroughputBucket, ThroughputParams, WorkerId, WorkerProcess, WorkerRegistration,
};
use sqlx::Row;

use crate::backend::{commit, MysqlBackend};
use crate::bounded::ReadConn;
use crate::error::{map_err, Path};
use crate::rows::{dur_us, text, ts};

/// Microseconds in a minute: throughput buckets are `finished_at - finished_at % MINUTE_US`.
const MINUTE_US: i64 = 60_000_000;

/// [`chokaq_core::Backend::register_worker`].
pub(crate) async fn register(b: &MysqlBackend, reg: &WorkerRegistration) -> Result<()> {
    reg.validate()?;
    let queues: Vec<&str> = reg.queues.iter().map(|q| q.as_str()).collect();
    let queues = serde_json::to_string(&queues)?;
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        sqlx::query(&b.sql.register_worker)
            .bind(reg.worker.0)
            .bind(&reg.host)
            .bind(i64::from(reg.pid))
            .bind(&queues)
            .bind(i64::from(reg.concurrency))
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        commit(tx).await
    })
    .await
}

/// [`chokaq_core::Backend::deregister_worker`].
pub(crate) async fn deregister(b: &MysqlBackend, worker: WorkerId) -> Result<bool> {
    let n = sqlx::query(&b.sql.deregister_worker).bind(worker.0).execute(&b.pool).await.map_err(map_err)?;
    Ok(n.rows_affected() > 0)
}

/// [`chokaq_core::Backend::list_workers`].
pub(crate) async fn list(b: &MysqlBackend) -> Result<Vec<WorkerProcess>> {
    let mut r = ReadConn::open(b).await?;
    let out = sqlx::query(&b.sql.list_workers).fetch_all(r.conn()).await.map_err(map_err);
    let rows = r.finish(out).await?;
    let corrupt = |what: &str| Error::new(ErrorKind::Other, format!("mysql: unexpected stored value: {what}"));
    rows.iter()
        .map(|r| {
            let queues = text(r, "queues")?;
            Ok(WorkerProcess {
                worker: WorkerId(r.try_get("worker_id").map_err(map_err)?),
                host: text(r, "host")?,
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
pub(crate) async fn prune(b: &MysqlBackend, stale_after: Duration) -> Result<u64> {
    let stale_us = dur_us("stale_after", stale_after)?;
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        let n = sqlx::query(&b.sql.prune_workers)
            .bind(now.saturating_sub(stale_us))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        commit(tx).await?;
        Ok(n.rows_affected())
    })
    .await
}

/// [`chokaq_core::Backend::throughput`].
pub(crate) async fn throughput(b: &MysqlBackend, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
    params.validate()?;
    let window = dur_us("window", params.window)?;
    let mut r = ReadConn::open(b).await?;
    let since = match b.now(r.conn()).await {
        Ok(now) => now - window,
        Err(e) => return r.finish(Err(e)).await,
    };
    let mut q = sqlx::query(match &params.queue {
        None => &b.sql.throughput_all,
        Some(_) => &b.sql.throughput_queue,
    });
    for _ in 0..3 {
        q = q.bind(MINUTE_US).bind(since);
        if let Some(name) = &params.queue {
            q = q.bind(name.as_str());
        }
    }
    let out = q.fetch_all(r.conn()).await.map_err(map_err);
    let rows = r.finish(out).await?;
    rows.iter()
        .map(|r| {
            Ok(ThroughputBucket {
                queue: text(r, "queue")?,
                minute: ts(r.try_get("minute").map_err(map_err)?)?,
                finished: u64::try_from(r.try_get::<i64, _>("finished").map_err(map_err)?).unwrap_or(0),
                failed: u64::try_from(r.try_get::<i64, _>("failed").map_err(map_err)?).unwrap_or(0),
                retried: u64::try_from(r.try_get::<i64, _>("retried").map_err(map_err)?).unwrap_or(0),
            })
        })
        .collect()
}
