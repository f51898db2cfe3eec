//! The bench itself: the run in its fixed order, the helpers every workload shares (progress
//! bars, WAL position, untimed fills, hot-table counts) and the enqueue workload. The other
//! workloads each have a module: `drain`, `raw`, `claim`, `pickup`.

mod claim;
mod drain;
mod pickup;
mod raw;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::MAX_ENQUEUE_BATCH;
use chokaq::{Backend, Error, JobKind, NewJob, QueueName, Result};
use chokaq_postgres::{map_sqlx_error, PgBackend};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::json;

use crate::args::{Args, Workload};
use crate::figures::{Rate, Results};
use crate::other;
use crate::timed::CallStats;

const NOOP_KIND: &str = "bench.noop.v1";
const PICKUP_KIND: &str = "bench.pickup.v1";
/// How long any single wait of the bench may take before it gives up with an error.
const WAIT_LIMIT: Duration = Duration::from_secs(900);

/// One run: the settings, the backend (plain and timed) and the schema it works in.
pub(crate) struct Bench {
    pub(crate) args: Args,
    pub(crate) pg: Arc<PgBackend>,
    pub(crate) calls: Arc<CallStats>,
    pub(crate) timed: Arc<dyn Backend>,
    pub(crate) schema: String,
    pub(crate) mp: MultiProgress,
    /// Pending jobs left in queue `bench` by the enqueue workload, for the first drain.
    pub(crate) bench_backlog: u64,
}

impl fmt::Debug for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bench").field("args", &self.args).field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl Bench {
    /// Runs the selected workloads in their fixed order, adding their figures to `res`.
    pub(crate) async fn run(&mut self, res: &mut Results) -> Result<()> {
        if self.args.has(Workload::Enqueue) {
            self.enqueue_workload(res).await?;
        }
        if self.args.has(Workload::Drain) {
            for c in self.args.drain_concurrency.clone() {
                let d = self.drain(c, None, res).await?;
                res.drains.push(d);
            }
        }
        if self.args.has(Workload::Raw) {
            res.raw = Some(self.raw(res).await?);
        }
        if self.args.has(Workload::Capped) {
            let cap = self.args.cap;
            res.capped = Some(self.drain(cap, Some(cap), res).await?);
        }
        if self.args.has(Workload::Claim) {
            let small = self.claim_cost(u64::from(self.args.backlog_small), res).await?;
            res.claims.push(small);
            let large = self.claim_cost(u64::from(self.args.backlog_large), res).await?;
            res.claims.push(large);
        }
        if self.args.has(Workload::Pickup) {
            res.pickup = Some(self.pickup().await?);
        }
        Ok(())
    }

    fn q(&self) -> String {
        format!("\"{}\"", self.schema)
    }

    fn bar(&self, prefix: &str, len: u64) -> ProgressBar {
        let pb = self.mp.add(ProgressBar::new(len));
        let style =
            ProgressStyle::with_template("{prefix:>24} [{bar:32}] {pos:>8}/{len:<8} {per_sec:>14} {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        pb.set_style(style);
        pb.set_prefix(prefix.to_string());
        pb
    }

    async fn wal_lsn(&self) -> Result<String> {
        sqlx::query_scalar::<_, String>("SELECT pg_current_wal_insert_lsn()::text")
            .fetch_one(self.pg.pool())
            .await
            .map_err(map_sqlx_error)
    }

    async fn wal_since(&self, lsn: &str) -> Result<i64> {
        sqlx::query_scalar::<_, f64>("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::float8")
            .bind(lsn)
            .fetch_one(self.pg.pool())
            .await
            .map(|b| b as i64)
            .map_err(map_sqlx_error)
    }

    async fn exec(&self, sql: &str) -> Result<()> {
        sqlx::raw_sql(sql).execute(self.pg.pool()).await.map_err(map_sqlx_error)?;
        Ok(())
    }

    async fn vacuum_hot(&self) -> Result<()> {
        self.exec(&format!("VACUUM (ANALYZE) {}.jobs_hot", self.q())).await
    }

    /// Enqueues `n` no-op jobs spread round-robin over `queues`, `batch` a call, from `tasks`
    /// concurrent callers; returns the elapsed time.
    async fn enqueue_jobs(
        &self,
        queues: &[QueueName],
        n: u64,
        batch: usize,
        tasks: usize,
        prebuild: bool,
        pb: &ProgressBar,
    ) -> Result<Duration> {
        let kind = JobKind::new(NOOP_KIND)?;
        let queues: Arc<Vec<QueueName>> = Arc::new(queues.to_vec());
        // Batch b holds jobs [b * batch, min(n, (b + 1) * batch)); lane t takes b = t, t + tasks, ...
        let batches = n.div_ceil(batch as u64);
        let build = {
            let (queues, kind) = (queues.clone(), kind.clone());
            move |b: u64| -> Vec<NewJob> {
                let (lo, hi) = (b * batch as u64, ((b + 1) * batch as u64).min(n));
                (lo..hi)
                    .map(|i| {
                        let q = queues[(i % queues.len() as u64) as usize].clone();
                        NewJob::new(q, kind.clone()).json(json!({ "n": i }))
                    })
                    .collect()
            }
        };
        // The timed workload builds its jobs before the clock starts; fills build each batch
        // just before its call (a million jobs would not fit comfortably in memory).
        let mut lanes: Vec<Vec<(u64, Option<Vec<NewJob>>)>> = vec![Vec::new(); tasks];
        for b in 0..batches {
            lanes[(b % tasks as u64) as usize].push((b, prebuild.then(|| build(b))));
        }
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for lane in lanes {
            let be = self.pg.clone();
            let pb = pb.clone();
            let build = build.clone();
            handles.push(tokio::spawn(async move {
                for (b, jobs) in lane {
                    let jobs = jobs.unwrap_or_else(|| build(b));
                    let len = jobs.len();
                    let out = be.enqueue_many(jobs).await?;
                    if out.len() != len || out.iter().any(|e| e.duplicate) {
                        return Err(other(format!("enqueue_many returned {} results for {len} jobs", out.len())));
                    }
                    pb.inc(len as u64);
                }
                Ok::<(), Error>(())
            }));
        }
        for h in handles {
            h.await.map_err(|e| other(format!("enqueue task failed: {e}")))??;
        }
        Ok(t0.elapsed())
    }

    /// Untimed: puts `n` Pending no-op jobs into `queues` (10,000 a call, two callers).
    async fn fill(&self, label: &str, queues: &[QueueName], n: u64, res: &mut Results) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let pb = self.bar(label, n);
        let lsn = self.wal_lsn().await?;
        let el = self.enqueue_jobs(queues, n, MAX_ENQUEUE_BATCH, 2, false, &pb).await?;
        let wal = self.wal_since(&lsn).await?;
        pb.finish_with_message("done");
        res.fill.push((label.to_string(), Rate { jobs: n, secs: el.as_secs_f64(), wal_bytes: wal }));
        Ok(())
    }

    async fn hot_counts(&self, queue: &str) -> Result<(u64, u64)> {
        let s = self.pg.stats().await?;
        let hot = s.queue(queue).map_or(0, |q| q.pending + q.fetched + q.processing);
        Ok((hot, s.archived))
    }

    async fn enqueue_workload(&mut self, res: &mut Results) -> Result<()> {
        let n = u64::from(self.args.jobs);
        let pb = self.bar("enqueue", n);
        let lsn = self.wal_lsn().await?;
        let el = self
            .enqueue_jobs(&[QueueName::new("bench")?], n, self.args.enqueue_batch, self.args.enqueue_tasks, true, &pb)
            .await?;
        let wal = self.wal_since(&lsn).await?;
        pb.finish_with_message("done");
        let (hot, _) = self.hot_counts("bench").await?;
        if hot != n {
            return Err(other(format!("after enqueueing {n} jobs the queue holds {hot}")));
        }
        self.bench_backlog = n;
        res.enqueue = Some(Rate { jobs: n, secs: el.as_secs_f64(), wal_bytes: wal });
        Ok(())
    }
}
