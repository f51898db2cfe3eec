//! The workers table (live worker processes) and the finished-jobs throughput:
//! [`chokaq_core::Backend::register_worker`], `deregister_worker`, `list_workers`,
//! `prune_workers` and `throughput`.

use std::time::Duration;

use chokaq_core::{
    Error, ErrorKind, Result, ThroughputBucket, ThroughputParams, Timestamp, WorkerId, WorkerProcess,
    WorkerRegistration,
};
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::bounded::Session;
use crate::error::with_retry;
use crate::rows::{self};

/// [`chokaq_core::Backend::register_worker`].
pub(crate) async fn register_worker(b: &PgBackend, reg: &WorkerRegistration) -> Result<()> {
    reg.validate()?;
    let queues: Vec<&str> = reg.queues.iter().map(|q| q.as_str()).collect();
    with_retry(|| {
        sqlx::query(&b.sql().register_worker)
            .bind(reg.worker.0)
            .bind(&reg.host)
            .bind(i64::from(reg.pid))
            .bind(&queues)
            .bind(i64::from(reg.concurrency))
            .execute(&b.kept)
    })
    .await?;
    Ok(())
}

/// [`chokaq_core::Backend::deregister_worker`].
pub(crate) async fn deregister_worker(b: &PgBackend, worker: WorkerId) -> Result<bool> {
    let n =
        with_retry(|| sqlx::query(&b.sql().deregister_worker).bind(worker.0).execute(&b.kept)).await?.rows_affected();
    Ok(n > 0)
}

/// [`chokaq_core::Backend::list_workers`].
pub(crate) async fn list_workers(b: &PgBackend) -> Result<Vec<WorkerProcess>> {
    type Row = (Uuid, String, i64, Vec<String>, i64, Timestamp, Timestamp);
    let q = || sqlx::query_as(&b.sql().list_workers);
    let rows: Vec<Row> = match b.read_deadline {
        Some(d) => {
            let mut s = Session::open(b, d).await?;
            let r = q().fetch_all(s.conn()).await;
            s.finish(r).await?
        }
        None => with_retry(|| q().fetch_all(&b.kept)).await?,
    };
    rows.into_iter()
        .map(|(id, host, pid, queues, concurrency, started_at, last_seen_at)| {
            Ok(WorkerProcess {
                worker: WorkerId(id),
                host,
                pid: u32::try_from(pid).map_err(|_| Error::new(ErrorKind::Other, "stored pid out of range"))?,
                queues,
                concurrency: u32::try_from(concurrency)
                    .map_err(|_| Error::new(ErrorKind::Other, "stored concurrency out of range"))?,
                started_at,
                last_seen_at,
            })
        })
        .collect::<Result<Vec<_>>>()
}

/// [`chokaq_core::Backend::prune_workers`].
pub(crate) async fn prune_workers(b: &PgBackend, stale_after: Duration) -> Result<u64> {
    let n = with_retry(|| sqlx::query(&b.sql().prune_workers).bind(rows::micros(stale_after)).execute(&b.kept))
        .await?
        .rows_affected();
    Ok(n)
}

/// [`chokaq_core::Backend::throughput`].
pub(crate) async fn throughput(b: &PgBackend, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
    params.validate()?;
    let window = rows::micros(params.window);
    if let Some(d) = b.read_deadline {
        let mut s = Session::open(b, d).await?;
        let r = match &params.queue {
            None => sqlx::query_as(&b.sql().throughput_all).bind(window).fetch_all(s.conn()).await,
            Some(q) => {
                sqlx::query_as(&b.sql().throughput_queue).bind(window).bind(q.as_str()).fetch_all(s.conn()).await
            }
        };
        return Ok(buckets(s.finish(r).await?));
    }
    let rows: Vec<(String, Timestamp, i64, i64, i64)> = with_retry(|| async {
        let mut tx = b.kept.begin().await?;
        sqlx::query(&b.sql().no_jit).execute(&mut *tx).await?;
        let rows = match &params.queue {
            None => sqlx::query_as(&b.sql().throughput_all).bind(window).fetch_all(&mut *tx).await?,
            Some(q) => {
                sqlx::query_as(&b.sql().throughput_queue).bind(window).bind(q.as_str()).fetch_all(&mut *tx).await?
            }
        };
        tx.commit().await?;
        Ok(rows)
    })
    .await?;
    Ok(buckets(rows))
}

/// The throughput rows as buckets.
fn buckets(rows: Vec<(String, Timestamp, i64, i64, i64)>) -> Vec<ThroughputBucket> {
    rows.into_iter()
        .map(|(queue, minute, finished, failed, retried)| ThroughputBucket {
            queue,
            minute,
            finished: finished.max(0) as u64,
            failed: failed.max(0) as u64,
            retried: retried.max(0) as u64,
        })
        .collect()
}
