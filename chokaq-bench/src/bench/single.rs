//! One job per call from concurrent tasks: `Client::enqueue` as a user calls it, beside the
//! same INSERT statement run bare, one row per autocommit statement, with no wake-up.

use std::sync::Arc;
use std::time::Instant;

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

/// One run's jobs and elapsed time, and each call's milliseconds.
struct Run {
    jobs: u64,
    secs: f64,
    wal_bytes: i64,
    call_ms: Vec<f64>,
}

impl Bench {
    /// The two single-job enqueue paths, in the order raw, client, client, raw (half the jobs
    /// each time), so a machine that slows down or speeds up during the workload weighs on
    /// both alike. The rows are deleted afterwards (untimed).
    pub(super) async fn single(&self) -> Result<SingleFigures> {
        let n = u64::from(self.args.single_jobs);
        let tasks = self.args.single_tasks;
        let (first, second) = (n / 2, n - n / 2);
        let mut client = Vec::new();
        let mut raw = Vec::new();
        raw.push(self.single_raw(first, 0).await?);
        client.push(self.single_client(first, 0).await?);
        client.push(self.single_client(second, first).await?);
        raw.push(self.single_raw(second, first).await?);
        for q in [CLIENT_QUEUE, RAW_QUEUE] {
            let (hot, _) = self.hot_counts(q).await?;
            if hot != n {
                return Err(other(format!("single enqueue: queue {q} holds {hot} jobs, expected {n}")));
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
        Ok(SingleFigures { tasks, client, client_call, raw, raw_call })
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

    /// `n` rows through the enqueue's own INSERT statement, one a statement, each task on a
    /// connection of its own (opened before the clock starts), no wake-up.
    async fn single_raw(&self, n: u64, from: u64) -> Result<Run> {
        let tasks = u64::from(self.args.single_tasks);
        let insert = chokaq_postgres::all_statements(&self.schema)?
            .into_iter()
            .find(|(name, _)| *name == "enqueue")
            .map(|(_, sql)| Arc::new(sql))
            .ok_or_else(|| other("the backend has no enqueue statement"))?;
        let opts = self.pg.pool().connect_options();
        let mut conns = Vec::new();
        for _ in 0..tasks {
            conns.push(sqlx::PgConnection::connect_with(&opts).await.map_err(map_sqlx_error)?);
        }
        let pb = self.bar("insert x1 (raw)", n);
        let lsn = self.wal_lsn().await?;
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for (t, mut conn) in (0..tasks).zip(conns) {
            let (insert, pb) = (insert.clone(), pb.clone());
            handles.push(tokio::spawn(async move {
                let mut ms = Vec::new();
                for i in (t..n).step_by(tasks as usize) {
                    let payload = json!({ "n": from + i }).to_string();
                    let c0 = Instant::now();
                    // The same binds as the backend's enqueue of one job without key or delay.
                    let rows: Vec<(uuid::Uuid, i64)> = sqlx::query_as(&insert)
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
                        .fetch_all(&mut conn)
                        .await
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
        let wal_bytes = self.wal_since(&lsn).await?;
        for c in conns {
            c.close().await.map_err(map_sqlx_error)?;
        }
        pb.finish_with_message(format!("{:.0} rows/s", n as f64 / secs));
        Ok(Run { jobs: n, secs, wal_bytes, call_ms })
    }
}
