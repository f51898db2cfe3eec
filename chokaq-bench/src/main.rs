//! `chokaq-bench`: measures chokaq on your own PostgreSQL.
//!
//! ```text
//! cargo run --release -p chokaq-bench -- --url <URL> [--json]
//! ```
//!
//! It creates a fresh schema (`chokaq_bench_<hex>`), runs the workloads (enqueue, drain by the
//! worker runtime, the raw skip-locked loop, the capped drain, claim cost against a small and a
//! large backlog, pickup latency), drops the schema and prints a table, then each target with
//! its measured ratio. With `--json` the last line of stdout is one JSON object with every
//! figure and the settings. The URL is never printed. See `docs/performance.md`.

use chokaq_core::BackendExt;
use std::collections::BTreeMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chokaq::core::testing::TestSupport;
use chokaq::core::{
    validate, BatchOutcome, CancelOutcome, Capabilities, ClaimMode, ClaimParams, ClaimedJob, FailAction, FailOutcome,
    Fenced, HeartbeatReport, JobPage, LeaseRef, ListJobsParams, PurgeParams, QueueControl, QueueSettings,
    RequeueOutcome, RescueParams, RescueReport, StatsSnapshot, Wakeups, MAX_ENQUEUE_BATCH,
};
use chokaq::{
    Backend, CancellationToken, Enqueued, Error, ErrorKind, JobContext, JobId, JobKind, JobRecord, NewJob, QueueName,
    Result, Worker, WorkerId,
};
use chokaq_postgres::{map_sqlx_error, PgBackend, PgConfig};
use clap::{Parser, ValueEnum};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{json, Value};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const NOOP_KIND: &str = "bench.noop.v1";
const PICKUP_KIND: &str = "bench.pickup.v1";
/// How long any single wait of the bench may take before it gives up with an error.
const WAIT_LIMIT: Duration = Duration::from_secs(900);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
enum Workload {
    Enqueue,
    Drain,
    Raw,
    Capped,
    Claim,
    Pickup,
}

/// Benchmarks chokaq on a PostgreSQL database (a fresh schema is created and dropped).
#[derive(Parser)]
#[command(name = "chokaq-bench", version)]
struct Args {
    /// PostgreSQL URL (never printed). Default: $CHOKAQ_TEST_POSTGRES_URL, then the local test database.
    #[arg(long, env = "CHOKAQ_BENCH_URL", hide_env_values = true)]
    url: Option<String>,
    /// Jobs of the enqueue, drain, raw and capped workloads.
    #[arg(long, default_value_t = 100_000)]
    jobs: u32,
    /// Jobs per enqueue_many call in the enqueue workload.
    #[arg(long, default_value_t = 5_000)]
    enqueue_batch: usize,
    /// Concurrent enqueue_many callers in the enqueue workload.
    #[arg(long, default_value_t = 1)]
    enqueue_tasks: usize,
    /// Worker slots of the drains, comma separated (e.g. 1,4,8,16,64). The first 8 (else the
    /// first entry) is `drain_jobs_per_s`.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    drain_concurrency: Vec<u32>,
    /// Pool size of the backend (the raw loop uses the same pool).
    #[arg(long, default_value_t = 10)]
    connections: u32,
    /// Concurrent raw loops (default: one per pool connection).
    #[arg(long)]
    raw_loops: Option<u32>,
    /// Jobs per raw claim.
    #[arg(long, default_value_t = 10)]
    raw_batch: u32,
    /// The cap (max_workers) of the capped drain; its worker has as many slots.
    #[arg(long, default_value_t = 8)]
    cap: u32,
    /// The drain workers' first back-off step after an empty claim, ms (default: the
    /// runtime's own default, 20 ms). For experiments.
    #[arg(long)]
    min_poll_ms: Option<u64>,
    /// Jobs of the capped drain (fewer than --jobs by default: the capped drain is slow).
    #[arg(long, default_value_t = 20_000)]
    capped_jobs: u32,
    /// Small backlog of the claim-cost workload.
    #[arg(long, default_value_t = 10_000)]
    backlog_small: u32,
    /// Large backlog of the claim-cost workload.
    #[arg(long, default_value_t = 1_000_000)]
    backlog_large: u32,
    /// Queues the claim-cost backlog is spread over.
    #[arg(long, default_value_t = 10)]
    claim_queues: u32,
    /// Timed claims per backlog size (each is claim, then an untimed complete and refill).
    #[arg(long, default_value_t = 500)]
    claim_samples: u32,
    /// Jobs of the pickup-latency workload.
    #[arg(long, default_value_t = 2_000)]
    pickup_jobs: u32,
    /// Enqueues per second of the pickup-latency workload (one at a time).
    #[arg(long, default_value_t = 200.0)]
    pickup_rate: f64,
    /// Which workloads to run (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "enqueue,drain,raw,capped,claim,pickup")]
    workloads: Vec<Workload>,
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    json: bool,
    /// Keep the schema at the end (to inspect it).
    #[arg(long)]
    keep_schema: bool,
}

impl fmt::Debug for Args {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Args")
            .field("url", &self.url.as_ref().map(|_| "<redacted>"))
            .field("jobs", &self.jobs)
            .field("drain_concurrency", &self.drain_concurrency)
            .field("connections", &self.connections)
            .finish_non_exhaustive()
    }
}

impl Args {
    fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::invalid(m.to_string()));
        if self.jobs == 0 {
            return bad("--jobs must be at least 1");
        }
        if self.enqueue_batch == 0 || self.enqueue_batch > MAX_ENQUEUE_BATCH {
            return Err(Error::invalid(format!("--enqueue-batch must be 1 to {MAX_ENQUEUE_BATCH}")));
        }
        if self.enqueue_tasks == 0 || self.enqueue_tasks > 64 {
            return bad("--enqueue-tasks must be 1 to 64");
        }
        if self.drain_concurrency.is_empty() || self.drain_concurrency.iter().any(|&c| c == 0 || c > 1000) {
            return bad("--drain-concurrency entries must be 1 to 1000");
        }
        if self.connections < 2 || self.connections > 500 {
            return bad("--connections must be 2 to 500");
        }
        if self.raw_loops == Some(0) || self.raw_batch == 0 || self.raw_batch > 1000 {
            return bad("--raw-loops must be at least 1 and --raw-batch 1 to 1000");
        }
        if self.capped_jobs == 0 {
            return bad("--capped-jobs must be at least 1");
        }
        if self.cap == 0 || self.cap > 1000 {
            return bad("--cap must be 1 to 1000");
        }
        if self.claim_queues == 0 || self.claim_queues > 100 {
            return bad("--claim-queues must be 1 to 100");
        }
        if self.backlog_small < 10 * self.claim_queues || self.backlog_large < self.backlog_small {
            return bad("need --backlog-large >= --backlog-small >= 10 x --claim-queues");
        }
        if self.claim_samples == 0 || self.pickup_jobs == 0 {
            return bad("--claim-samples and --pickup-jobs must be at least 1");
        }
        if !(self.pickup_rate.is_finite() && self.pickup_rate > 0.0 && self.pickup_rate <= 10_000.0) {
            return bad("--pickup-rate must be in (0, 10000]");
        }
        Ok(())
    }

    fn has(&self, w: Workload) -> bool {
        self.workloads.contains(&w)
    }

    fn raw_loops(&self) -> u32 {
        self.raw_loops.unwrap_or(self.connections)
    }
}

fn other(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg)
}

// ---------------------------------------------------------------------------------------------
// A backend wrapper that counts and times the calls the runtime makes (two clock reads a call).

#[derive(Debug, Default)]
struct CallStat {
    calls: AtomicU64,
    items: AtomicU64,
    /// Calls that returned no job.
    empty: AtomicU64,
    nanos: AtomicU64,
}

impl CallStat {
    fn record(&self, items: usize, t0: Instant) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(items as u64, Ordering::Relaxed);
        if items == 0 {
            self.empty.fetch_add(1, Ordering::Relaxed);
        }
        self.nanos.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    fn reset(&self) {
        self.calls.store(0, Ordering::Relaxed);
        self.items.store(0, Ordering::Relaxed);
        self.empty.store(0, Ordering::Relaxed);
        self.nanos.store(0, Ordering::Relaxed);
    }

    fn snapshot(&self) -> CallFigures {
        let calls = self.calls.load(Ordering::Relaxed);
        let items = self.items.load(Ordering::Relaxed);
        let nanos = self.nanos.load(Ordering::Relaxed);
        CallFigures {
            calls,
            items,
            empty: self.empty.load(Ordering::Relaxed),
            mean_ms: if calls == 0 { 0.0 } else { nanos as f64 / calls as f64 / 1e6 },
            busy_s: nanos as f64 / 1e9,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct CallFigures {
    calls: u64,
    items: u64,
    empty: u64,
    mean_ms: f64,
    /// Sum of the calls' durations (calls may overlap).
    busy_s: f64,
}

impl CallFigures {
    fn json(&self) -> Value {
        json!({ "calls": self.calls, "jobs": self.items, "empty_calls": self.empty, "mean_ms": round3(self.mean_ms), "busy_s": round3(self.busy_s) })
    }
}

#[derive(Debug, Default)]
struct CallStats {
    claim: CallStat,
    complete: CallStat,
    heartbeat: CallStat,
    other: CallStat,
}

impl CallStats {
    fn reset(&self) {
        self.claim.reset();
        self.complete.reset();
        self.heartbeat.reset();
        self.other.reset();
    }
}

/// The PostgreSQL backend with its claim, complete and heartbeat calls counted and timed.
#[derive(Debug, Clone)]
struct Timed {
    inner: Arc<PgBackend>,
    stats: Arc<CallStats>,
}

#[async_trait]
impl Backend for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn migrate(&self) -> Result<()> {
        self.inner.migrate().await
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        self.inner.enqueue_many(jobs).await
    }
    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        let t0 = Instant::now();
        let r = self.inner.claim(req).await;
        self.stats.claim.record(r.as_ref().map_or(0, Vec::len), t0);
        r
    }
    /// Forwarded, or the wrapper would replace the backend's one-round-trip override with the
    /// trait's default (two calls) and time a worker unlike the one a user runs. Counted as a
    /// claim call (its completions ride along).
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        let t0 = Instant::now();
        let r = self.inner.complete_and_claim(worker, leases, req).await;
        self.stats.claim.record(r.as_ref().map_or(0, |(_, jobs)| jobs.len()), t0);
        r
    }
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let t0 = Instant::now();
        let r = self.inner.start(worker, leases).await;
        self.stats.other.record(leases.len(), t0);
        r
    }
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        let t0 = Instant::now();
        let r = self.inner.heartbeat(worker, leases).await;
        self.stats.heartbeat.record(leases.len(), t0);
        r
    }
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let t0 = Instant::now();
        let r = self.inner.complete(worker, leases).await;
        self.stats.complete.record(leases.len(), t0);
        r
    }
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        let t0 = Instant::now();
        let r = self.inner.fail(worker, lease, outcome).await;
        self.stats.other.record(1, t0);
        r
    }
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let t0 = Instant::now();
        let r = self.inner.release(worker, leases).await;
        self.stats.other.record(leases.len(), t0);
        r
    }
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        let t0 = Instant::now();
        let r = self.inner.rescue(params).await;
        self.stats.other.record(0, t0);
        r
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.inner.cancel(id).await
    }
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        self.inner.control_queue(queue, control).await
    }
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        let t0 = Instant::now();
        let r = self.inner.queue_settings(queue).await;
        self.stats.other.record(0, t0);
        r
    }
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        self.inner.requeue_dead(id).await
    }
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        let t0 = Instant::now();
        let r = self.inner.purge(req).await;
        self.stats.other.record(0, t0);
        r
    }
    async fn stats(&self) -> Result<StatsSnapshot> {
        self.inner.stats().await
    }
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.inner.get_job(id).await
    }
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        self.inner.list_jobs(filter).await
    }
    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        self.inner.wakeups().await
    }
}

// ---------------------------------------------------------------------------------------------
// Figures.

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[derive(Debug, Clone, Copy, Default)]
struct Latency {
    samples: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

impl Latency {
    fn of(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        let mean = if ms.is_empty() { f64::NAN } else { ms.iter().sum::<f64>() / ms.len() as f64 };
        Latency {
            samples: ms.len(),
            p50: quantile(&ms, 0.5),
            p90: quantile(&ms, 0.9),
            p99: quantile(&ms, 0.99),
            max: ms.last().copied().unwrap_or(f64::NAN),
            mean,
        }
    }

    fn json(&self) -> Value {
        json!({ "samples": self.samples, "p50_ms": round3(self.p50), "p90_ms": round3(self.p90),
                "p99_ms": round3(self.p99), "max_ms": round3(self.max), "mean_ms": round3(self.mean) })
    }
}

#[derive(Debug, Clone, Default)]
struct Rate {
    jobs: u64,
    secs: f64,
    wal_bytes: i64,
}

impl Rate {
    fn per_s(&self) -> f64 {
        self.jobs as f64 / self.secs
    }
}

#[derive(Debug, Clone, Default)]
struct DrainFigures {
    concurrency: u32,
    capped: Option<u32>,
    rate: Rate,
    claim: CallFigures,
    complete: CallFigures,
    heartbeat: CallFigures,
    other: CallFigures,
}

impl DrainFigures {
    fn json(&self) -> Value {
        json!({
            "concurrency": self.concurrency,
            "max_workers": self.capped,
            "jobs": self.rate.jobs,
            "seconds": round3(self.rate.secs),
            "jobs_per_s": round1(self.rate.per_s()),
            "wal_bytes_per_job": round1(self.rate.wal_bytes as f64 / self.rate.jobs as f64),
            "claim": self.claim.json(),
            "complete": self.complete.json(),
            "heartbeat": self.heartbeat.json(),
            "other_calls": self.other.json(),
        })
    }
}

#[derive(Debug, Clone, Default)]
struct RawFigures {
    loops: u32,
    batch: u32,
    rate: Rate,
    claim: CallFigures,
    delete: CallFigures,
}

#[derive(Debug, Clone, Default)]
struct ClaimFigures {
    backlog: u64,
    all_queues: Latency,
    one_queue: Latency,
}

#[derive(Debug, Clone, Default)]
struct PickupFigures {
    jobs: u32,
    rate: f64,
    latency: Latency,
    /// Handlers that started before their enqueue call had returned (counted as 0 ms).
    early: u32,
    enqueue_call: Latency,
}

#[derive(Debug, Default)]
struct Results {
    enqueue: Option<Rate>,
    drains: Vec<DrainFigures>,
    raw: Option<RawFigures>,
    capped: Option<DrainFigures>,
    fill: Vec<(String, Rate)>,
    claims: Vec<ClaimFigures>,
    pickup: Option<PickupFigures>,
}

impl Results {
    fn main_drain(&self) -> Option<&DrainFigures> {
        self.drains.iter().find(|d| d.concurrency == 8).or_else(|| self.drains.first())
    }
}

// ---------------------------------------------------------------------------------------------
// The bench.

struct Bench {
    args: Args,
    pg: Arc<PgBackend>,
    calls: Arc<CallStats>,
    timed: Arc<dyn Backend>,
    schema: String,
    mp: MultiProgress,
    /// Pending jobs left in queue `bench` by the enqueue workload, for the first drain.
    bench_backlog: u64,
}

impl fmt::Debug for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bench").field("args", &self.args).field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl Bench {
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

    /// One drain of `n` jobs of queue `bench` by a worker with `concurrency` slots.
    async fn drain(&mut self, concurrency: u32, cap: Option<u32>, res: &mut Results) -> Result<DrainFigures> {
        let n = match cap {
            Some(_) => self.args.capped_jobs,
            None => self.args.jobs,
        };
        let n = u64::from(n).max(self.bench_backlog);
        let queue = QueueName::new("bench")?;
        if self.bench_backlog < n {
            self.fill(
                &format!("fill for drain x{concurrency}"),
                std::slice::from_ref(&queue),
                n - self.bench_backlog,
                res,
            )
            .await?;
            self.bench_backlog = n;
        }
        self.pg.control_queue(&queue, QueueControl::SetMaxWorkers(cap)).await?;
        let (hot0, archived0) = self.hot_counts("bench").await?;
        if hot0 != n {
            return Err(other(format!("the drain expects {n} pending jobs, the queue holds {hot0}")));
        }
        self.vacuum_hot().await?;
        let label = match cap {
            Some(c) => format!("drain x{concurrency} cap {c}"),
            None => format!("drain x{concurrency}"),
        };
        let pb = self.bar(&label, n);
        let mut builder = Worker::builder(self.timed.clone())
            .queue("bench")
            .concurrency(concurrency)
            .register_raw(NOOP_KIND, |_payload, _ctx: JobContext| async { Ok(()) });
        if let Some(ms) = self.args.min_poll_ms {
            builder = builder.min_poll_interval(Duration::from_millis(ms.max(1)));
        }
        let worker = builder.build()?;
        let lsn = self.wal_lsn().await?;
        self.calls.reset();
        let token = CancellationToken::new();
        let t0 = Instant::now();
        let (stats, fut) = worker.run_with_handle(token.clone());
        let run = tokio::spawn(fut);
        // Watch the worker's own counter (reading the database would slow the drain down).
        let deadline = t0 + WAIT_LIMIT;
        loop {
            let done = stats.report().completed;
            pb.set_position(done);
            if done >= n {
                break;
            }
            if Instant::now() > deadline || run.is_finished() {
                token.cancel();
                return Err(other(format!("drain x{concurrency}: only {done} of {n} jobs completed")));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let secs = t0.elapsed().as_secs_f64();
        let figures = DrainFigures {
            concurrency,
            capped: cap,
            rate: Rate { jobs: n, secs, wal_bytes: 0 },
            claim: self.calls.claim.snapshot(),
            complete: self.calls.complete.snapshot(),
            heartbeat: self.calls.heartbeat.snapshot(),
            other: self.calls.other.snapshot(),
        };
        let wal = self.wal_since(&lsn).await?;
        token.cancel();
        let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        if report.completed != n || report.failed != 0 || report.lease_lost != 0 {
            return Err(other(format!("drain x{concurrency}: unexpected worker report {report:?}")));
        }
        let (hot1, archived1) = self.hot_counts("bench").await?;
        if hot1 != 0 || archived1 != archived0 + n {
            return Err(other(format!(
                "drain x{concurrency}: {hot1} jobs left, archive grew by {}",
                archived1.saturating_sub(archived0)
            )));
        }
        self.bench_backlog = 0;
        if cap.is_some() {
            self.pg.control_queue(&queue, QueueControl::SetMaxWorkers(None)).await?;
        }
        Ok(DrainFigures { rate: Rate { wal_bytes: wal, ..figures.rate.clone() }, ..figures })
    }

    /// The physical limit: a bare copy of the hot table drained by `loops` concurrent loops of
    /// "claim `batch` with FOR UPDATE SKIP LOCKED, then DELETE them", no runtime, no leases.
    async fn raw(&mut self, res: &mut Results) -> Result<RawFigures> {
        let n = u64::from(self.args.jobs);
        let s = self.q();
        // The same rows the enqueue path writes: enqueue them, then move them to the bare table.
        let fillq = QueueName::new("rawfill")?;
        self.fill("fill for raw", std::slice::from_ref(&fillq), n, res).await?;
        self.exec(&format!("CREATE TABLE {s}.raw_jobs (LIKE {s}.jobs_hot INCLUDING ALL)")).await?;
        let cols: String = sqlx::query_scalar(
            "SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
               FROM information_schema.columns
              WHERE table_schema = $1 AND table_name = 'jobs_hot' AND is_generated = 'NEVER'",
        )
        .bind(&self.schema)
        .fetch_one(self.pg.pool())
        .await
        .map_err(map_sqlx_error)?;
        let moved = sqlx::query(&format!(
            "WITH m AS (DELETE FROM {s}.jobs_hot WHERE queue = $1 RETURNING *)
             INSERT INTO {s}.raw_jobs ({cols}) SELECT {cols} FROM m"
        ))
        .bind(fillq.as_str())
        .execute(self.pg.pool())
        .await
        .map_err(map_sqlx_error)?
        .rows_affected();
        if moved != n {
            return Err(other(format!("raw: moved {moved} rows, expected {n}")));
        }
        self.exec(&format!("VACUUM (ANALYZE) {s}.raw_jobs")).await?;
        self.vacuum_hot().await?;

        let claim_sql = Arc::new(format!(
            "UPDATE {s}.raw_jobs
                SET status = 2, attempt = attempt + 1, worker_id = $1, started_at = now(), heartbeat_at = now(),
                    updated_at = now()
              WHERE id IN (SELECT id FROM {s}.raw_jobs
                            WHERE queue = $2 AND status = 0 AND due_at <= now()
                            ORDER BY priority DESC, due_at, id
                            LIMIT $3
                              FOR UPDATE SKIP LOCKED)
             RETURNING id"
        ));
        let delete_sql = Arc::new(format!("DELETE FROM {s}.raw_jobs WHERE id = ANY($1)"));
        let loops = self.args.raw_loops();
        let batch = i64::from(self.args.raw_batch);
        let pb = self.bar(&format!("raw x{loops} loops"), n);
        let done = Arc::new(AtomicU64::new(0));
        let claim_stat = Arc::new(CallStat::default());
        let delete_stat = Arc::new(CallStat::default());
        let lsn = self.wal_lsn().await?;
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..loops {
            let pool = self.pg.pool().clone();
            let (claim_sql, delete_sql) = (claim_sql.clone(), delete_sql.clone());
            let (done, claim_stat, delete_stat, pb) =
                (done.clone(), claim_stat.clone(), delete_stat.clone(), pb.clone());
            let worker = WorkerId::random().0;
            handles.push(tokio::spawn(async move {
                loop {
                    let t = Instant::now();
                    let ids: Vec<uuid::Uuid> = sqlx::query_scalar(&claim_sql)
                        .bind(worker)
                        .bind("rawfill")
                        .bind(batch)
                        .fetch_all(&pool)
                        .await
                        .map_err(map_sqlx_error)?;
                    claim_stat.record(ids.len(), t);
                    if ids.is_empty() {
                        return Ok::<(), Error>(());
                    }
                    let t = Instant::now();
                    let gone = sqlx::query(&delete_sql)
                        .bind(&ids)
                        .execute(&pool)
                        .await
                        .map_err(map_sqlx_error)?
                        .rows_affected();
                    delete_stat.record(gone as usize, t);
                    done.fetch_add(gone, Ordering::Relaxed);
                    pb.inc(gone);
                }
            }));
        }
        for h in handles {
            h.await.map_err(|e| other(format!("raw loop failed: {e}")))??;
        }
        let secs = t0.elapsed().as_secs_f64();
        let wal = self.wal_since(&lsn).await?;
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {s}.raw_jobs"))
            .fetch_one(self.pg.pool())
            .await
            .map_err(map_sqlx_error)?;
        let got = done.load(Ordering::Relaxed);
        if got != n || left != 0 {
            return Err(other(format!("raw: deleted {got} of {n}, {left} left")));
        }
        self.exec(&format!("DROP TABLE {s}.raw_jobs")).await?;
        Ok(RawFigures {
            loops,
            batch: self.args.raw_batch,
            rate: Rate { jobs: n, secs, wal_bytes: wal },
            claim: claim_stat.snapshot(),
            delete: delete_stat.snapshot(),
        })
    }

    /// Claim-10 latency with `backlog` Pending rows spread over the claim queues: each sample
    /// is a timed claim (Start mode), then an untimed complete and a refill of as many jobs.
    async fn claim_cost(&self, backlog: u64, res: &mut Results) -> Result<ClaimFigures> {
        let queues: Vec<QueueName> =
            (0..self.args.claim_queues).map(|i| QueueName::new(format!("claim{i}"))).collect::<Result<_>>()?;
        let have: u64 = {
            let s = self.pg.stats().await?;
            queues.iter().filter_map(|q| s.queue(q.as_str())).map(|q| q.pending + q.fetched + q.processing).sum()
        };
        if have > backlog {
            return Err(other(format!("claim backlog already holds {have} > {backlog}")));
        }
        self.fill(&format!("fill backlog {}", human(backlog)), &queues, backlog - have, res).await?;
        self.vacuum_hot().await?;
        let worker = WorkerId::random();
        let kind = JobKind::new(NOOP_KIND)?;
        let samples = self.args.claim_samples as usize;
        let warmup = 20usize;
        let pb = self.bar(&format!("claim @ {}", human(backlog)), (2 * (samples + warmup)) as u64);
        let mut all_ms = Vec::with_capacity(samples);
        let mut one_ms = Vec::with_capacity(samples);
        for i in 0..2 * (samples + warmup) {
            // Even samples ask every queue (a worker serving all of them), odd ones one queue.
            let ask = if i % 2 == 0 { queues.clone() } else { vec![queues[(i / 2) % queues.len()].clone()] };
            let req = ClaimParams::new(worker, ask, 10, ClaimMode::Start);
            let t0 = Instant::now();
            let jobs = self.pg.claim(&req).await?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if jobs.len() != 10 {
                return Err(other(format!("claim from a backlog of {backlog} returned {} jobs", jobs.len())));
            }
            if i >= 2 * warmup {
                if i % 2 == 0 {
                    all_ms.push(ms);
                } else {
                    one_ms.push(ms);
                }
            }
            let leases: Vec<LeaseRef> = jobs.iter().map(ClaimedJob::lease_ref).collect();
            let out = self.pg.complete(worker, &leases).await?;
            if out.done.len() != leases.len() {
                return Err(other(format!("complete lost {} leases", out.lost.len())));
            }
            let refill: Vec<NewJob> =
                jobs.iter().map(|j| NewJob::new(j.queue.clone(), kind.clone()).json(json!({ "n": i }))).collect();
            self.pg.enqueue_many(refill).await?;
            pb.inc(1);
        }
        pb.finish_with_message("done");
        Ok(ClaimFigures { backlog, all_queues: Latency::of(all_ms), one_queue: Latency::of(one_ms) })
    }

    /// Enqueue-to-handler-start latency: one job at a time at a steady rate into an idle worker
    /// woken by LISTEN/NOTIFY.
    async fn pickup(&self) -> Result<PickupFigures> {
        let n = self.args.pickup_jobs as usize;
        let started: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; n]));
        let seen = started.clone();
        let worker = Worker::builder(self.timed.clone())
            .queue("pickup")
            .concurrency(8)
            .register_raw(PICKUP_KIND, move |payload: Value, _ctx: JobContext| {
                let now = Instant::now();
                if let Some(i) = payload.get("n").and_then(Value::as_u64) {
                    if let Some(slot) = seen.lock().unwrap().get_mut(i as usize) {
                        *slot = Some(now);
                    }
                }
                async { Ok(()) }
            })
            .build()?;
        let token = CancellationToken::new();
        let (stats, fut) = worker.run_with_handle(token.clone());
        let run = tokio::spawn(fut);
        let result = self.pickup_run(n, &started, &stats).await;
        token.cancel();
        let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
        let mut fig = result?;
        if report.completed != n as u64 || report.failed != 0 {
            return Err(other(format!("pickup: unexpected worker report {report:?}")));
        }
        fig.jobs = n as u32;
        fig.rate = self.args.pickup_rate;
        Ok(fig)
    }

    async fn pickup_run(
        &self,
        n: usize,
        started: &Mutex<Vec<Option<Instant>>>,
        stats: &chokaq::StatsHandle,
    ) -> Result<PickupFigures> {
        // Ready once the worker made its first (empty) claim: its LISTEN is set up by then.
        let deadline = Instant::now() + Duration::from_secs(30);
        while stats.report().claim_calls == 0 {
            if Instant::now() > deadline {
                return Err(other("pickup: the worker never claimed"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let queue = QueueName::new("pickup")?;
        let kind = JobKind::new(PICKUP_KIND)?;
        let pb = self.bar(&format!("pickup @ {}/s", self.args.pickup_rate), n as u64);
        let mut returned = Vec::with_capacity(n);
        let mut call_ms = Vec::with_capacity(n);
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / self.args.pickup_rate));
        for i in 0..n {
            tick.tick().await;
            let job = NewJob::new(queue.clone(), kind.clone()).json(json!({ "n": i }));
            let t0 = Instant::now();
            self.pg.enqueue(job).await?;
            let t1 = Instant::now();
            call_ms.push((t1 - t0).as_secs_f64() * 1e3);
            returned.push(t1);
            pb.inc(1);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while stats.report().completed < n as u64 {
            if Instant::now() > deadline {
                return Err(other(format!("pickup: {} of {n} jobs completed", stats.report().completed)));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        pb.finish_with_message("done");
        let started = started.lock().unwrap();
        let mut ms = Vec::with_capacity(n);
        let mut early = 0u32;
        for (i, r) in returned.iter().enumerate() {
            let s = started[i].ok_or_else(|| other(format!("pickup: job {i} never started")))?;
            if s < *r {
                early += 1;
            }
            ms.push(s.saturating_duration_since(*r).as_secs_f64() * 1e3);
        }
        Ok(PickupFigures { jobs: 0, rate: 0.0, latency: Latency::of(ms), early, enqueue_call: Latency::of(call_ms) })
    }

    async fn run(&mut self, res: &mut Results) -> Result<()> {
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
}

fn human(n: u64) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 {
        format!("{}m", n / 1_000_000)
    } else if n >= 1000 && n % 1000 == 0 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Report.

struct Target {
    name: &'static str,
    rule: &'static str,
    /// The measured ratio (or value) and the threshold it is held to.
    measured: Option<f64>,
    threshold: f64,
    at_least: bool,
}

impl Target {
    fn met(&self) -> Option<bool> {
        self.measured.map(|m| if self.at_least { m >= self.threshold } else { m <= self.threshold })
    }
}

fn targets(r: &Results) -> Vec<Target> {
    let drain = r.main_drain().map(|d| d.rate.per_s());
    let raw = r.raw.as_ref().map(|x| x.rate.per_s());
    let capped = r.capped.as_ref().map(|x| x.rate.per_s());
    let claim_small = r.claims.first().map(|c| c.all_queues.p50);
    let claim_large = r.claims.get(1).map(|c| c.all_queues.p50);
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    vec![
        Target {
            name: "drain_vs_raw",
            rule: "drain_jobs_per_s >= 0.8 x raw_drain_jobs_per_s",
            measured: ratio(drain, raw),
            threshold: 0.8,
            at_least: true,
        },
        Target {
            name: "capped_vs_drain",
            rule: "capped_drain_jobs_per_s >= 0.7 x drain_jobs_per_s",
            measured: ratio(capped, drain),
            threshold: 0.7,
            at_least: true,
        },
        Target {
            name: "claim_1m_vs_10k",
            rule: "claim_ms_p50_backlog_1m <= 1.5 x claim_ms_p50_backlog_10k",
            measured: ratio(claim_large, claim_small),
            threshold: 1.5,
            at_least: false,
        },
        Target {
            name: "pickup_p50",
            rule: "pickup_ms_p50 <= 10 ms",
            measured: r.pickup.as_ref().map(|p| p.latency.p50),
            threshold: 10.0,
            at_least: false,
        },
        Target {
            name: "enqueue_rate",
            rule: "enqueue_jobs_per_s >= 50,000",
            measured: r.enqueue.as_ref().map(Rate::per_s),
            threshold: 50_000.0,
            at_least: true,
        },
    ]
}

fn verdict(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "MET",
        Some(false) => "NOT MET",
        None => "n/a (not run)",
    }
}

fn print_table(args: &Args, env: &Value, r: &Results) {
    println!();
    println!("chokaq-bench  {}  {}", env["date"].as_str().unwrap_or(""), env["server"].as_str().unwrap_or(""));
    println!(
        "settings: jobs {} (capped {}), enqueue batch {} x{} callers, pool {} connections, raw {} loops x claim {}, cap {}, synchronous_commit {}",
        args.jobs,
        args.capped_jobs,
        args.enqueue_batch,
        args.enqueue_tasks,
        args.connections,
        args.raw_loops(),
        args.raw_batch,
        args.cap,
        env["synchronous_commit"].as_str().unwrap_or("?"),
    );
    println!();
    println!("{:<34} {:>10} {:>9} {:>12}  notes", "throughput", "jobs", "seconds", "jobs/s");
    println!("{}", "-".repeat(100));
    let row = |name: &str, rate: &Rate, notes: String| {
        println!("{:<34} {:>10} {:>9.2} {:>12.0}  {}", name, rate.jobs, rate.secs, rate.per_s(), notes);
    };
    let wal = |rate: &Rate| format!("WAL {:.0} B/job", rate.wal_bytes as f64 / rate.jobs.max(1) as f64);
    if let Some(e) = &r.enqueue {
        row(&format!("enqueue (batches of {})", args.enqueue_batch), e, wal(e));
    }
    let drain_notes = |d: &DrainFigures| {
        format!(
            "{:.1} jobs/claim ({:.2} ms, {} empty), {:.1} jobs/complete ({:.2} ms), {}",
            d.claim.items as f64 / d.claim.calls.max(1) as f64,
            d.claim.mean_ms,
            d.claim.empty,
            d.complete.items as f64 / d.complete.calls.max(1) as f64,
            d.complete.mean_ms,
            wal(&d.rate)
        )
    };
    for d in &r.drains {
        row(&format!("drain, runtime, {} slots", d.concurrency), &d.rate, drain_notes(d));
    }
    if let Some(x) = &r.raw {
        row(
            &format!("raw loop, {} loops x claim {}", x.loops, x.batch),
            &x.rate,
            format!("claim {:.2} ms, delete {:.2} ms, {}", x.claim.mean_ms, x.delete.mean_ms, wal(&x.rate)),
        );
    }
    if let Some(d) = &r.capped {
        row(&format!("drain, {} slots, max_workers {}", d.concurrency, d.capped.unwrap_or(0)), &d.rate, drain_notes(d));
    }
    for (label, rate) in &r.fill {
        row(&format!("({label}: 10k batches x2)"), rate, wal(rate));
    }
    if !r.claims.is_empty() || r.pickup.is_some() {
        println!();
        println!("{:<34} {:>10} {:>9} {:>9} {:>9} {:>9}", "latency (ms)", "samples", "p50", "p90", "p99", "max");
        println!("{}", "-".repeat(100));
        let lat = |name: &str, l: &Latency| {
            println!("{:<34} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3}", name, l.samples, l.p50, l.p90, l.p99, l.max);
        };
        for c in &r.claims {
            lat(&format!("claim 10, {} queues, backlog {}", args.claim_queues, human(c.backlog)), &c.all_queues);
            lat(&format!("claim 10, 1 queue, backlog {}", human(c.backlog)), &c.one_queue);
        }
        if let Some(p) = &r.pickup {
            lat(&format!("pickup (enqueue -> start) @ {}/s", p.rate), &p.latency);
            lat("  enqueue call itself", &p.enqueue_call);
            if p.early > 0 {
                println!(
                    "  ({} of {} handlers started before their enqueue call returned; counted as 0 ms)",
                    p.early, p.jobs
                );
            }
        }
    }
    println!();
    println!("targets");
    println!("{}", "-".repeat(100));
    for t in targets(r) {
        let m = t.measured.map_or("-".to_string(), |m| format!("{m:.3}"));
        println!("{:<18} {:<58} measured {:>10}  {}", t.name, t.rule, m, verdict(t.met()));
    }
}

fn to_json(args: &Args, env: &Value, r: &Results) -> Value {
    let mut o = serde_json::Map::new();
    let f = |x: Option<f64>| x.map(round1);
    o.insert("enqueue_jobs_per_s".into(), json!(f(r.enqueue.as_ref().map(Rate::per_s))));
    o.insert("drain_jobs_per_s".into(), json!(f(r.main_drain().map(|d| d.rate.per_s()))));
    o.insert("raw_drain_jobs_per_s".into(), json!(f(r.raw.as_ref().map(|x| x.rate.per_s()))));
    o.insert("capped_drain_jobs_per_s".into(), json!(f(r.capped.as_ref().map(|x| x.rate.per_s()))));
    o.insert("claim_ms_p50_backlog_10k".into(), json!(r.claims.first().map(|c| round3(c.all_queues.p50))));
    o.insert("claim_ms_p50_backlog_1m".into(), json!(r.claims.get(1).map(|c| round3(c.all_queues.p50))));
    o.insert("pickup_ms_p50".into(), json!(r.pickup.as_ref().map(|p| round3(p.latency.p50))));
    o.insert("pickup_ms_p99".into(), json!(r.pickup.as_ref().map(|p| round3(p.latency.p99))));
    let by_c: BTreeMap<String, f64> =
        r.drains.iter().map(|d| (d.concurrency.to_string(), round1(d.rate.per_s()))).collect();
    o.insert("drain_jobs_per_s_by_concurrency".into(), json!(by_c));
    o.insert("drains".into(), Value::Array(r.drains.iter().map(DrainFigures::json).collect()));
    o.insert("capped".into(), json!(r.capped.as_ref().map(DrainFigures::json)));
    o.insert(
        "raw".into(),
        json!(r.raw.as_ref().map(|x| json!({
            "loops": x.loops, "batch": x.batch, "jobs": x.rate.jobs, "seconds": round3(x.rate.secs),
            "jobs_per_s": round1(x.rate.per_s()),
            "wal_bytes_per_job": round1(x.rate.wal_bytes as f64 / x.rate.jobs as f64),
            "claim": x.claim.json(), "delete": x.delete.json(),
        }))),
    );
    o.insert(
        "enqueue".into(),
        json!(r.enqueue.as_ref().map(|e| json!({
            "jobs": e.jobs, "seconds": round3(e.secs), "jobs_per_s": round1(e.per_s()),
            "wal_bytes_per_job": round1(e.wal_bytes as f64 / e.jobs as f64),
        }))),
    );
    o.insert(
        "fills".into(),
        Value::Array(
            r.fill
                .iter()
                .map(|(l, x)| json!({ "label": l, "jobs": x.jobs, "seconds": round3(x.secs), "jobs_per_s": round1(x.per_s()) }))
                .collect(),
        ),
    );
    o.insert(
        "claim_cost".into(),
        Value::Array(
            r.claims
                .iter()
                .map(|c| json!({ "backlog": c.backlog, "all_queues": c.all_queues.json(), "one_queue": c.one_queue.json() }))
                .collect(),
        ),
    );
    o.insert(
        "pickup".into(),
        json!(r.pickup.as_ref().map(|p| json!({
            "jobs": p.jobs, "rate_per_s": p.rate, "latency": p.latency.json(), "early": p.early,
            "enqueue_call": p.enqueue_call.json(),
        }))),
    );
    o.insert(
        "targets".into(),
        Value::Array(
            targets(r)
                .iter()
                .map(|t| {
                    json!({ "name": t.name, "rule": t.rule, "measured": t.measured.map(round3),
                                 "threshold": t.threshold, "verdict": verdict(t.met()) })
                })
                .collect(),
        ),
    );
    o.insert(
        "settings".into(),
        json!({
            "jobs": args.jobs,
            "enqueue_batch": args.enqueue_batch,
            "enqueue_tasks": args.enqueue_tasks,
            "drain_concurrency": args.drain_concurrency,
            "connections": args.connections,
            "raw_loops": args.raw_loops(),
            "raw_batch": args.raw_batch,
            "cap": args.cap,
            "capped_jobs": args.capped_jobs,
            "min_poll_ms": args.min_poll_ms,
            "backlog_small": args.backlog_small,
            "backlog_large": args.backlog_large,
            "claim_queues": args.claim_queues,
            "claim_samples": args.claim_samples,
            "pickup_jobs": args.pickup_jobs,
            "pickup_rate": args.pickup_rate,
            "workloads": args.workloads.iter().map(|w| format!("{w:?}").to_lowercase()).collect::<Vec<_>>(),
        }),
    );
    o.insert("environment".into(), env.clone());
    Value::Object(o)
}

async fn environment(pg: &PgBackend) -> Result<Value> {
    let row: (String, String, String, String) = sqlx::query_as(
        "SELECT version(), current_setting('synchronous_commit'), current_setting('fsync'), current_setting('shared_buffers')",
    )
    .fetch_one(pg.pool())
    .await
    .map_err(map_sqlx_error)?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(json!({
        "date": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "server": row.0.split(" on ").next().unwrap_or(&row.0),
        "synchronous_commit": row.1,
        "fsync": row.2,
        "shared_buffers": row.3,
        "client_cores": cores,
    }))
}

async fn main_inner(args: Args) -> Result<()> {
    args.check()?;
    let url = args
        .url
        .clone()
        .or_else(|| std::env::var("CHOKAQ_TEST_POSTGRES_URL").ok())
        .unwrap_or_else(|| DEFAULT_URL.to_string());
    let schema = format!("chokaq_bench_{:016x}", rand::random::<u64>());
    validate::schema_name(&schema)?;
    let pg = Arc::new(PgBackend::connect(PgConfig::new(url).schema(&schema).max_connections(args.connections)).await?);
    let env = environment(&pg).await?;
    if env["synchronous_commit"].as_str() != Some("on") {
        eprintln!("warning: synchronous_commit is {} (durable commits need on)", env["synchronous_commit"]);
    }
    let calls = Arc::new(CallStats::default());
    let timed: Arc<dyn Backend> = Arc::new(Timed { inner: pg.clone(), stats: calls.clone() });
    let mp = MultiProgress::new();
    eprintln!("chokaq-bench: schema {schema}, {}", env["server"].as_str().unwrap_or(""));
    let mut bench = Bench { args, pg: pg.clone(), calls, timed, schema, mp, bench_backlog: 0 };
    let mut res = Results::default();
    let outcome = tokio::select! {
        r = async {
            pg.migrate().await?;
            bench.run(&mut res).await
        } => r,
        _ = tokio::signal::ctrl_c() => Err(other("interrupted")),
    };
    if bench.args.keep_schema {
        eprintln!("chokaq-bench: kept schema {}", bench.schema);
    } else if let Err(e) = pg.drop_schema().await {
        eprintln!("chokaq-bench: could not drop schema {}: {e}", bench.schema);
    }
    outcome?;
    print_table(&bench.args, &env, &res);
    if bench.args.json {
        println!("{}", to_json(&bench.args, &env, &res));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match main_inner(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == ErrorKind::InvalidInput => {
            eprintln!("chokaq-bench: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("chokaq-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["chokaq-bench"];
        v.extend_from_slice(extra);
        Args::try_parse_from(v).unwrap()
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 51.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[7.0], 0.5), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
        let l = Latency::of(vec![3.0, 1.0, 2.0]);
        assert_eq!((l.samples, l.p50, l.max, l.mean), (3, 2.0, 3.0, 2.0));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(10_000), "10k");
        assert_eq!(human(1_000_000), "1m");
        assert_eq!(human(1_500), "1500");
    }

    #[test]
    fn defaults_are_the_documented_run() {
        let a = args(&[]);
        assert!(a.check().is_ok());
        assert_eq!(
            (a.jobs, a.capped_jobs, a.connections, a.raw_loops(), a.raw_batch, a.cap),
            (100_000, 20_000, 10, 10, 10, 8)
        );
        assert_eq!(a.drain_concurrency, vec![8]);
        assert_eq!((a.backlog_small, a.backlog_large, a.claim_queues), (10_000, 1_000_000, 10));
        assert_eq!(a.workloads.len(), 6);
        let a = args(&["--drain-concurrency", "1,4,8,16,64", "--workloads", "claim,pickup"]);
        assert_eq!(a.drain_concurrency, vec![1, 4, 8, 16, 64]);
        assert!(a.has(Workload::Claim) && !a.has(Workload::Drain));
    }

    #[test]
    fn bad_settings_are_invalid_input() {
        for bad in [
            &["--jobs", "0"][..],
            &["--enqueue-batch", "10001"],
            &["--drain-concurrency", "0"],
            &["--connections", "1"],
            &["--raw-loops", "0"],
            &["--backlog-small", "50"],
            &["--backlog-large", "5000"],
            &["--pickup-rate", "0"],
            &["--capped-jobs", "0"],
        ] {
            let e = args(bad).check().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_url() {
        let a = args(&["--url", "postgres://u:hunter2@db/x"]);
        let d = format!("{a:?}");
        assert!(!d.contains("hunter2") && d.contains("redacted"), "{d}");
    }

    #[test]
    fn targets_compare_the_right_figures() {
        let rate = |jobs: u64, secs: f64| Rate { jobs, secs, wal_bytes: 0 };
        let drain = |c: u32, per_s: u64| DrainFigures { concurrency: c, rate: rate(per_s, 1.0), ..Default::default() };
        let r = Results {
            enqueue: Some(rate(60_000, 1.0)),
            drains: vec![drain(1, 100), drain(8, 900)],
            raw: Some(RawFigures { rate: rate(1000, 1.0), ..Default::default() }),
            capped: Some(drain(8, 600)),
            claims: vec![
                ClaimFigures {
                    backlog: 10_000,
                    all_queues: Latency { p50: 2.0, ..Default::default() },
                    ..Default::default()
                },
                ClaimFigures {
                    backlog: 1_000_000,
                    all_queues: Latency { p50: 3.2, ..Default::default() },
                    ..Default::default()
                },
            ],
            pickup: Some(PickupFigures { latency: Latency { p50: 4.0, ..Default::default() }, ..Default::default() }),
            ..Default::default()
        };
        let t: Vec<(f64, Option<bool>)> = targets(&r).iter().map(|t| (round3(t.measured.unwrap()), t.met())).collect();
        assert_eq!(
            t,
            vec![
                (0.9, Some(true)),
                (0.667, Some(false)),
                (1.6, Some(false)),
                (4.0, Some(true)),
                (60_000.0, Some(true))
            ]
        );
        let j = to_json(&args(&[]), &json!({}), &r);
        for key in [
            "enqueue_jobs_per_s",
            "drain_jobs_per_s",
            "raw_drain_jobs_per_s",
            "capped_drain_jobs_per_s",
            "claim_ms_p50_backlog_10k",
            "claim_ms_p50_backlog_1m",
            "pickup_ms_p50",
            "pickup_ms_p99",
        ] {
            assert!(j[key].is_number(), "{key}: {}", j[key]);
        }
        assert_eq!(j["drain_jobs_per_s"], json!(900.0));
        assert_eq!(j["drain_jobs_per_s_by_concurrency"]["1"], json!(100.0));
        assert!(targets(&Results::default()).iter().all(|t| t.met().is_none()));
    }

    /// The whole bench, tiny sizes, on the test database: every workload runs, its exact-count
    /// checks hold, and the schema is gone afterwards.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tiny_run_end_to_end() {
        let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
        let before = schemas(&url).await;
        let a = args(&[
            "--url",
            &url,
            "--jobs",
            "600",
            "--enqueue-batch",
            "250",
            "--drain-concurrency",
            "1,8",
            "--capped-jobs",
            "100",
            "--backlog-small",
            "200",
            "--backlog-large",
            "1000",
            "--claim-samples",
            "20",
            "--pickup-jobs",
            "40",
            "--json",
        ]);
        main_inner(a).await.unwrap();
        let after = schemas(&url).await;
        assert!(after.iter().all(|s| before.contains(s)), "bench schema left behind: {after:?}");
    }

    async fn schemas(url: &str) -> Vec<String> {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let v = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'chokaq_bench_%'")
            .fetch_all(&pool)
            .await
            .unwrap();
        pool.close().await;
        v
    }
}
