//! One job per call from concurrent tasks: `Client::enqueue` as a user calls it, beside the
//! same INSERT statement run bare, one row per autocommit statement, with no wake-up. Two more
//! runs of the bare statement break the difference down: through the backend's pool (a
//! checkout per statement), and through the pool while NOTIFYs go out as often as the
//! backend's notifier sends them under load (one per `MIN_GAP`, 3 ms).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::DEFAULT_MAX_ATTEMPTS;
use chokaq::{Backend, Client, Error, JobId, JobKind, NewJob, QueueName, Result};
use chokaq_postgres::map_sqlx_error;
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::Connection;

use super::{Bench, NOOP_KIND};
use crate::figures::{Latency, Rate, SingleFigures};
use crate::other;

const CLIENT_QUEUE: &str = "single";
const RAW_QUEUE: &str = "single_raw";

/// Where the bare INSERT runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// Each task on a connection of its own (the baseline).
    Own,
    /// The backend's pool: a checkout per statement, as the enqueue takes one.
    Pool,
    /// The pool, while another pooled session sends a NOTIFY to the backend's channel every
    /// 3 ms (the notifier's most under load).
    PoolNotify,
}

/// The gap between the NOTIFYs of the `PoolNotify` run (the notifier's `MIN_GAP`).
const NOTIFY_GAP: Duration = Duration::from_millis(3);

/// One run's jobs and elapsed time, and each call's milliseconds.
struct Run {
    jobs: u64,
    secs: f64,
    wal_bytes: i64,
    call_ms: Vec<f64>,
}

impl Bench {
    /// The single-job enqueue paths, in the order raw, pool, pool + notify, client, then the
    /// same backwards (half the jobs each time), so a machine that slows down or speeds up
    /// during the workload weighs on all alike. The rows are deleted afterwards (untimed).
    pub(super) async fn single(&self) -> Result<SingleFigures> {
        let n = u64::from(self.args.single_jobs);
        let tasks = self.args.single_tasks;
        let (first, second) = (n / 2, n - n / 2);
        let mut client = Vec::new();
        let (mut raw, mut pool, mut pool_notify) = (Vec::new(), Vec::new(), Vec::new());
        raw.push(self.single_raw(first, 0, Via::Own).await?);
        pool.push(self.single_raw(first, n, Via::Pool).await?);
        pool_notify.push(self.single_raw(first, 2 * n, Via::PoolNotify).await?);
        client.push(self.single_client(first, 0).await?);
        client.push(self.single_client(second, first).await?);
        pool_notify.push(self.single_raw(second, 2 * n + first, Via::PoolNotify).await?);
        pool.push(self.single_raw(second, n + first, Via::Pool).await?);
        raw.push(self.single_raw(second, first, Via::Own).await?);
        for (q, expected) in [(CLIENT_QUEUE, n), (RAW_QUEUE, 3 * n)] {
            let (hot, _) = self.hot_counts(q).await?;
            if hot != expected {
                return Err(other(format!("single enqueue: queue {q} holds {hot} jobs, expected {expected}")));
            }
        }
        self.exec(&format!("DELETE FROM {}.jobs_hot WHERE queue IN ('{CLIENT_QUEUE}', '{RAW_QUEUE}')", self.q()))
            .await?;
        self.vacuum_hot().await?;
        let total = |runs: &[Run]| {
            let (jobs, secs, wal_bytes) =
                runs.iter().fold((0, 0.0, 0), |(j, s, w), r| (j + r.jobs, s + r.secs, w + r.wal_bytes));
            let ms: Vec<f64> = runs.iter().flat_map(|r| r.call_ms.iter().copied()).collect();
            (Rate { jobs, secs, wal_bytes }, Latency::of(ms))
        };
        let (client, client_call) = total(&client);
        let (raw, raw_call) = total(&raw);
        let (pool, pool_call) = total(&pool);
        let (pool_notify, pool_notify_call) = total(&pool_notify);
        Ok(SingleFigures { tasks, client, client_call, raw, raw_call, pool, pool_call, pool_notify, pool_notify_call })
    }

    /// `n` jobs (numbered from `from`), one `Client::enqueue` each, from the tasks.
    async fn single_client(&self, n: u64, from: u64) -> Result<Run> {
        let tasks = u64::from(self.args.single_tasks);
        let client = Arc::new(Client::new(self.pg.clone() as Arc<dyn Backend>));
        let queue = QueueName::new(CLIENT_QUEUE)?;
        let kind = JobKind::new(NOOP_KIND)?;
        let pb = self.bar("enqueue x1 (client)", n);
        let lsn = self.wal_lsn().await?;
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for t in 0..tasks {
            let (client, queue, kind, pb) = (client.clone(), queue.clone(), kind.clone(), pb.clone());
            handles.push(tokio::spawn(async move {
                let mut ms = Vec::new();
                // Task t takes jobs t, t + tasks, ...
                for i in (t..n).step_by(tasks as usize) {
                    let job = NewJob::new(queue.clone(), kind.clone()).json(json!({ "n": from + i }));
                    let c0 = Instant::now();
                    let out = client.enqueue(job).await?;
                    ms.push(c0.elapsed().as_secs_f64() * 1e3);
                    if out.duplicate {
                        return Err(other("single enqueue: a job without a key came back a duplicate"));
                    }
                    pb.inc(1);
                }
                Ok::<_, Error>(ms)
            }));
        }
        let mut call_ms = Vec::with_capacity(n as usize);
        for h in handles {
            call_ms.extend(h.await.map_err(|e| other(format!("enqueue task failed: {e}")))??);
        }
        let secs = t0.elapsed().as_secs_f64();
        let wal_bytes = self.wal_since(&lsn).await?;
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        Ok(Run { jobs: n, secs, wal_bytes, call_ms })
    }

    /// `n` rows through the enqueue's own INSERT statement, one a statement, no wake-up: each
    /// task on a connection of its own (opened before the clock starts), or on the backend's
    /// pool, there with or without NOTIFYs beside (`Via`).
    async fn single_raw(&self, n: u64, from: u64, via: Via) -> Result<Run> {
        let tasks = u64::from(self.args.single_tasks);
        let insert = chokaq_postgres::all_statements(&self.schema)?
            .into_iter()
            .find(|(name, _)| *name == "enqueue")
            .map(|(_, sql)| Arc::new(sql))
            .ok_or_else(|| other("the backend has no enqueue statement"))?;
        let opts = self.pg.pool().connect_options();
        let mut conns = Vec::new();
        for _ in 0..tasks {
            conns.push(match via {
                Via::Own => Some(sqlx::PgConnection::connect_with(&opts).await.map_err(map_sqlx_error)?),
                Via::Pool | Via::PoolNotify => None,
            });
        }
        let label = match via {
            Via::Own => "insert x1 (raw)",
            Via::Pool => "insert x1 (raw, pool)",
            Via::PoolNotify => "insert x1 (raw, pool, notify)",
        };
        let pb = self.bar(label, n);
        let lsn = self.wal_lsn().await?;
        let stop = Arc::new(AtomicBool::new(false));
        let notifier = (via == Via::PoolNotify).then(|| {
            let (pool, stop) = (self.pg.pool().clone(), stop.clone());
            let channel = format!("{}_jobs", self.schema);
            tokio::spawn(async move {
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(&channel)
                        .bind(RAW_QUEUE)
                        .execute(&pool)
                        .await
                        .map_err(map_sqlx_error)?;
                    sent += 1;
                    tokio::time::sleep(NOTIFY_GAP.saturating_sub(t.elapsed())).await;
                }
                Ok::<_, Error>(sent)
            })
        });
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for (t, mut conn) in (0..tasks).zip(conns) {
            let (insert, pb, pool) = (insert.clone(), pb.clone(), self.pg.pool().clone());
            handles.push(tokio::spawn(async move {
                let mut ms = Vec::new();
                for i in (t..n).step_by(tasks as usize) {
                    let payload = json!({ "n": from + i }).to_string();
                    let c0 = Instant::now();
                    // The same binds as the backend's enqueue of one job without idempotency key, delay,
                    // concurrency key or unique key.
                    let q = sqlx::query_as(&insert)
                        .bind(vec![JobId::new().0])
                        .bind(vec![RAW_QUEUE])
                        .bind(vec![NOOP_KIND])
                        .bind(vec![payload.as_str()])
                        .bind(vec!["[]"])
                        .bind(vec![None::<&str>])
                        .bind(vec![0i32])
                        .bind(vec![None::<DateTime<Utc>>])
                        .bind(vec![None::<i64>])
                        .bind(vec![DEFAULT_MAX_ATTEMPTS])
                        .bind(vec![None::<&str>])
                        // No concurrency key (issue 25).
                        .bind(vec![None::<&str>])
                        // Not unique (issue 42): key, states, settings, end of period; key and settings on the row.
                        .bind(vec![None::<&str>])
                        .bind(vec![None::<i32>])
                        .bind(vec![None::<&str>])
                        .bind(vec![None::<DateTime<Utc>>])
                        .bind(vec![None::<Vec<u8>>])
                        .bind(vec![None::<&str>]);
                    let rows: Vec<(uuid::Uuid, i64)> = match conn.as_mut() {
                        Some(c) => q.fetch_all(c).await,
                        None => q.fetch_all(&pool).await,
                    }
                    .map_err(map_sqlx_error)?;
                    ms.push(c0.elapsed().as_secs_f64() * 1e3);
                    if rows.len() != 1 {
                        return Err(other(format!("raw insert returned {} rows", rows.len())));
                    }
                    pb.inc(1);
                }
                Ok::<_, Error>((ms, conn))
            }));
        }
        let mut call_ms = Vec::with_capacity(n as usize);
        let mut conns = Vec::new();
        for h in handles {
            let (ms, conn) = h.await.map_err(|e| other(format!("insert task failed: {e}")))??;
            call_ms.extend(ms);
            conns.push(conn);
        }
        let secs = t0.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        if let Some(h) = notifier {
            let sent = h.await.map_err(|e| other(format!("notify task failed: {e}")))??;
            if sent == 0 {
                return Err(other("the notify run sent no NOTIFY"));
            }
        }
        let wal_bytes = self.wal_since(&lsn).await?;
        for c in conns.into_iter().flatten() {
            c.close().await.map_err(map_sqlx_error)?;
        }
        pb.finish_with_message(format!("{:.0} rows/s", n as f64 / secs));
        Ok(Run { jobs: n, secs, wal_bytes, call_ms })
    }
}
