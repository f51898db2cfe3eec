//! The bench itself: the run in its fixed order, the helpers every workload shares (progress
//! bars, WAL position, index entries from the WAL, table counters, untimed fills, hot-table
//! counts) and the enqueue workload. The other workloads each have a module: `single`,
//! `drain`, `raw` (the three raw loops), `capped`, `heartbeat`, `pickup`, `multi`, `claim` (with
//! the scheduled claim).

mod capped;
mod claim;
mod drain;
mod heartbeat;
mod keyed;
mod multi;
mod pickup;
mod raw;
mod single;
mod unique;
mod workflow;

pub(crate) use keyed::{keyed, rate_limited, KeyedSettings, NoSettle, Settle};

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::{Timestamp, MAX_ENQUEUE_BATCH};
use chokaq::{Backend, Error, JobKind, NewJob, QueueName, Result};
use chokaq_postgres::{map_sqlx_error, PgBackend};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::json;

use crate::args::{Args, Workload, RAW_B500_BATCH};
use crate::figures::{Rate, Results, TableCounts};
use crate::other;
use crate::server_cpu::ServerCpu;
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
    /// The database URL (never printed; passed to the multi-process example's environment).
    pub(crate) url: String,
    pub(crate) mp: MultiProgress,
    /// Pending jobs left in queue `bench` by the enqueue workload, for the first drain.
    pub(crate) bench_backlog: u64,
    /// PostgreSQL 15 or later: table counters can be flushed on demand
    /// (`pg_stat_force_next_flush`), so HOT shares are measured.
    pub(crate) stats_flush: bool,
    /// The schema of `pg_walinspect`, when it could be used: index entries are counted.
    pub(crate) walinspect: Option<String>,
    /// The server's CPU reader, or why it cannot be read (the server is elsewhere).
    pub(crate) server_cpu: std::result::Result<ServerCpu, String>,
    /// Set while the exposure drain runs: its (look-ahead, unwritten outcomes).
    pub(crate) exposure: Option<(u32, u32)>,
}

/// The exposure drain's look-ahead and unwritten-outcome bound.
pub(crate) const EXPOSURE: (u32, u32) = (500, 500);

/// PostgreSQL between a fill and a timed part: VACUUM ANALYZE of the hot table, as before
/// every drain.
pub(crate) struct PgSettle {
    pg: Arc<PgBackend>,
    schema: String,
}

#[async_trait::async_trait]
impl Settle for PgSettle {
    async fn settle(&self) -> Result<()> {
        sqlx::raw_sql(&format!("VACUUM (ANALYZE) \"{}\".jobs_hot", self.schema))
            .execute(self.pg.pool())
            .await
            .map_err(map_sqlx_error)?;
        checkpoint(self.pg.as_ref()).await;
        Ok(())
    }
}

/// A CHECKPOINT before a timed drain, so that every drain starts in the same state: a
/// checkpoint that falls inside a drain makes it write full-page images of every page it
/// touches first (drain figures moved between 5,100 and 9,200 jobs/s from run to run without
/// it). Needs superuser or `pg_checkpoint`; without them the drain runs anyway, with a note.
pub(crate) async fn checkpoint(pg: &PgBackend) {
    if let Err(e) = sqlx::raw_sql("CHECKPOINT").execute(pg.pool()).await {
        eprintln!("note: CHECKPOINT before a timed drain failed ({e}); figures may vary more between runs");
    }
}

/// The start of a measured window: WAL position and, optionally, one table's counters.
pub(crate) struct Probe {
    lsn: String,
    table: Option<(String, TableCounts)>,
    cpu_us: Option<u64>,
}

/// What a window cost: WAL bytes, B-tree leaf entries (from the WAL) and the table's counters.
pub(crate) struct Probed {
    pub(crate) wal_bytes: i64,
    pub(crate) index_entries: Option<i64>,
    pub(crate) table: Option<TableCounts>,
    /// The server's CPU time over the window, in microseconds (None: not readable here).
    pub(crate) server_cpu_us: Option<u64>,
    /// The window's WAL by record type: (type, records, bytes), the largest first.
    pub(crate) wal_records: Vec<(String, i64, i64)>,
}

/// `records` as one line per job: `type records/job bytes/job`, for the figures' notes.
pub(crate) fn wal_records_line(records: &[(String, i64, i64)], jobs: u64) -> String {
    let jobs = jobs.max(1) as f64;
    records
        .iter()
        .map(|(t, n, b)| format!("{t} {:.2}/job {:.0} B/job", *n as f64 / jobs, *b as f64 / jobs))
        .collect::<Vec<_>>()
        .join("; ")
}

impl fmt::Debug for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bench").field("args", &self.args).field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl Bench {
    /// Runs the selected workloads in their fixed order, adding their figures to `res`.
    pub(crate) async fn run(&mut self, res: &mut Results) -> Result<()> {
        self.probes().await?;
        res.server_cpu_note = self.server_cpu.as_ref().err().cloned();
        // Built (or found) first, so a build failure costs no run.
        let mp_exe = if self.args.has(Workload::MultiProcess) { Some(self.multi_process_exe().await?) } else { None };
        if self.args.has(Workload::Enqueue) {
            self.enqueue_workload(res).await?;
        }
        if self.args.has(Workload::EnqueueUnique) {
            self.enqueue_unique_workload(res).await?;
        }
        if self.args.has(Workload::EnqueueSingle) {
            res.single = Some(self.single().await?);
        }
        if self.args.has(Workload::Drain) {
            // The drains of --jobs first: the first drain takes the enqueue's backlog whole,
            // which a smaller drain (fewer than 8 slots) should not.
            let mut order = self.args.drain_concurrency.clone();
            order.sort_by_key(|&c| self.args.drain_jobs(c) < self.args.jobs);
            for c in order {
                let d = self.drain(c, None, 0, res).await?;
                res.drains.push(d);
            }
            res.drains.sort_by_key(|d| d.concurrency);
        }
        if self.args.has(Workload::DrainExposure) {
            self.exposure = Some(EXPOSURE);
            let d = self.drain(8, None, 0, res).await;
            self.exposure = None;
            res.exposure = Some(d?);
        }
        if self.args.has(Workload::Raw) {
            res.raw = Some(self.raw("raw", self.args.raw_batch, res).await?);
        }
        if self.args.has(Workload::RawB500) {
            res.raw_b500 = Some(self.raw("raw_b500", RAW_B500_BATCH, res).await?);
        }
        if self.args.has(Workload::RawMin) {
            res.raw_min = Some(self.raw_min().await?);
        }
        if self.args.has(Workload::Capped) {
            self.capped(res).await?;
        }
        if self.args.has(Workload::Heartbeat) {
            res.heartbeat = Some(self.heartbeat().await?);
        }
        if self.args.has(Workload::Pickup) {
            res.pickup = Some(self.pickup().await?);
        }
        if let Some(exe) = mp_exe {
            // Like with like: one process, then --mp-processes, each on a fresh schema.
            if self.args.mp_processes > 1 {
                res.multi_1 = Some(self.multi_process(&exe, 1).await?);
            }
            res.multi = Some(self.multi_process(&exe, self.args.mp_processes).await?);
        }
        if self.args.has(Workload::Keyed) {
            let settle = PgSettle { pg: self.pg.clone(), schema: self.schema.clone() };
            res.keyed = Some(keyed(&self.timed, &self.args.keyed(), &settle, Some(&self.calls)).await?);
        }
        if self.args.has(Workload::Rate) {
            let settle = PgSettle { pg: self.pg.clone(), schema: self.schema.clone() };
            let a = &self.args;
            res.rate = Some(
                rate_limited(&self.timed, a.rate_limit()?, a.rate_secs, a.rate_claimers, a.min_poll_ms, &settle)
                    .await?,
            );
        }
        if self.args.has(Workload::Claim) {
            let small = self.claim_cost(u64::from(self.args.backlog_small), res).await?;
            res.claims.push(small);
            let large = self.claim_cost(u64::from(self.args.backlog_large), res).await?;
            res.claims.push(large);
        }
        if self.args.has(Workload::Scheduled) {
            res.scheduled = Some(self.scheduled_claim(res).await?);
        }
        if self.args.has(Workload::Workflow) {
            self.workflow_workload(res).await?;
        }
        if self.args.has(Workload::List) {
            res.list = Some(self.list().await?);
        }
        Ok(())
    }

    /// The list workload ([`crate::list`]): the archive filled by one INSERT … SELECT, the hot
    /// table through the backend, then the timed pages.
    async fn list(&self) -> Result<serde_json::Value> {
        let t0 = Instant::now();
        sqlx::query(&crate::list::pg_archive_fill(&self.schema))
            .bind(i64::from(self.args.list_archived))
            .execute(self.pg.pool())
            .await
            .map_err(map_sqlx_error)?;
        sqlx::query(&format!("VACUUM ANALYZE \"{}\".jobs_archive", self.schema))
            .execute(self.pg.pool())
            .await
            .map_err(map_sqlx_error)?;
        let hot = crate::list::fill_hot(self.pg.as_ref(), u64::from(self.args.list_hot)).await?;
        sqlx::query(&format!("VACUUM ANALYZE \"{}\".jobs_hot", self.schema))
            .execute(self.pg.pool())
            .await
            .map_err(map_sqlx_error)?;
        eprintln!(
            "list: {} archived, {} hot ({hot} Processing) in {:.1} s",
            self.args.list_archived,
            self.args.list_hot,
            t0.elapsed().as_secs_f64()
        );
        crate::list::pages(
            self.pg.as_ref(),
            u64::from(self.args.list_archived),
            u64::from(self.args.list_hot),
            self.args.list_samples,
        )
        .await
    }

    /// What the server offers for the cost figures: table counters flushed on demand (15+),
    /// and `pg_walinspect` (installed in the bench's schema unless the database has it).
    async fn probes(&mut self) -> Result<()> {
        let pool = self.pg.pool();
        let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
            .fetch_one(pool)
            .await
            .map_err(map_sqlx_error)?;
        self.stats_flush = version >= 150_000;
        if !self.stats_flush {
            eprintln!("chokaq-bench: PostgreSQL before 15: no HOT shares (pg_stat_force_next_flush is 15+)");
        }
        let installed: Option<String> = sqlx::query_scalar(
            "SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
              WHERE e.extname = 'pg_walinspect'",
        )
        .fetch_optional(pool)
        .await
        .map_err(map_sqlx_error)?;
        let backend: i32 =
            sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(pool).await.map_err(map_sqlx_error)?;
        self.server_cpu = ServerCpu::detect(backend as u32);
        if let Err(why) = &self.server_cpu {
            eprintln!("chokaq-bench: server CPU per job is not measured: {why}");
        }
        self.walinspect = match installed {
            Some(s) => Some(s),
            None => match self.exec(&format!("CREATE EXTENSION pg_walinspect SCHEMA {}", self.q())).await {
                Ok(()) => Some(self.q()),
                Err(e) => {
                    eprintln!("chokaq-bench: no pg_walinspect ({e}): index entries are not counted");
                    None
                }
            },
        };
        Ok(())
    }

    /// Makes every pooled session publish its table counters now (15+; a session otherwise
    /// publishes them at most once a second). Holds every connection the pool may have (a
    /// connection just released is returned to the pool by a task of its own, so waiting for
    /// all of them is the only way to be sure of the last one). Call with nothing else
    /// running; a session held elsewhere for seconds (a worker's listener) is given up on.
    async fn flush_stats(&self) -> Result<()> {
        if !self.stats_flush {
            return Ok(());
        }
        let pool = self.pg.pool();
        let mut held = Vec::new();
        for _ in 0..pool.options().get_max_connections() {
            match tokio::time::timeout(Duration::from_secs(5), pool.acquire()).await {
                Ok(c) => held.push(c.map_err(map_sqlx_error)?),
                Err(_) => {
                    eprintln!("chokaq-bench: a pooled session stayed busy; table counters may lag");
                    break;
                }
            }
        }
        for c in &mut held {
            // The flush happens before the server reports the statement done.
            sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut **c).await.map_err(map_sqlx_error)?;
        }
        Ok(())
    }

    /// A table's counters as published (call `flush_stats` first).
    async fn table_counts(&self, table: &str) -> Result<TableCounts> {
        let (inserts, updates, hot_updates, deletes): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relid = $1::regclass",
        )
        .bind(format!("{}.{table}", self.q()))
        .fetch_one(self.pg.pool())
        .await
        .map_err(map_sqlx_error)?;
        Ok(TableCounts { inserts, updates, hot_updates, deletes })
    }

    /// Starts a measured window (with nothing else running): the WAL position and `table`'s
    /// counters.
    pub(crate) async fn probe(&self, table: Option<&str>) -> Result<Probe> {
        let table = match table {
            Some(t) if self.stats_flush => {
                self.flush_stats().await?;
                Some((t.to_string(), self.table_counts(t).await?))
            }
            _ => None,
        };
        let lsn = self.wal_lsn().await?;
        Ok(Probe { lsn, table, cpu_us: self.server_cpu_us() })
    }

    /// Ends a measured window (once its sessions are idle or closed).
    pub(crate) async fn probed(&self, p: Probe) -> Result<Probed> {
        let server_cpu_us = self.server_cpu_us().zip(p.cpu_us).map(|(b, a)| b.saturating_sub(a));
        let wal_bytes = self.wal_since(&p.lsn).await?;
        let table = match p.table {
            Some((t, before)) => {
                self.flush_stats().await?;
                Some(self.table_counts(&t).await? - before)
            }
            None => None,
        };
        let index_entries = self.index_entries_since(&p.lsn).await;
        let wal_records = self.wal_records_since(&p.lsn).await;
        Ok(Probed { wal_bytes, index_entries, table, server_cpu_us, wal_records })
    }

    /// The WAL since `lsn` by record type, server-wide: (type, records, bytes with full-page
    /// images), the largest first (`pg_walinspect`; empty without it).
    async fn wal_records_since(&self, lsn: &str) -> Vec<(String, i64, i64)> {
        let Some(ext) = self.walinspect.as_ref() else { return Vec::new() };
        let sql = format!(
            "SELECT \"resource_manager/record_type\", count::int8, (record_size + fpi_size)::int8
               FROM {ext}.pg_get_wal_stats($1::pg_lsn, pg_current_wal_flush_lsn(), true)
              WHERE count > 0 AND pg_current_wal_flush_lsn() > $1::pg_lsn
              ORDER BY record_size + fpi_size DESC LIMIT 10"
        );
        sqlx::query_as::<_, (String, i64, i64)>(&sql).bind(lsn).fetch_all(self.pg.pool()).await.unwrap_or_default()
    }

    /// B-tree leaf entries written since `lsn`, server-wide: one `INSERT_LEAF` or
    /// `INSERT_POST` record per entry, or the `SPLIT_L`/`SPLIT_R` record that carries it when
    /// the insert split the page (an internal page's split, rare, counts one too many).
    async fn index_entries_since(&self, lsn: &str) -> Option<i64> {
        let ext = self.walinspect.as_ref()?;
        let sql = format!(
            "SELECT CASE WHEN pg_current_wal_flush_lsn() <= $1::pg_lsn THEN 0 ELSE (
                 SELECT coalesce(sum(count), 0)::int8
                   FROM {ext}.pg_get_wal_stats($1::pg_lsn, pg_current_wal_flush_lsn(), true)
                  WHERE \"resource_manager/record_type\"
                        IN ('Btree/INSERT_LEAF', 'Btree/INSERT_POST', 'Btree/SPLIT_L', 'Btree/SPLIT_R')) END"
        );
        match sqlx::query_scalar::<_, i64>(&sql).bind(lsn).fetch_one(self.pg.pool()).await {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("chokaq-bench: could not read the WAL since {lsn}: {}", map_sqlx_error(e));
                None
            }
        }
    }

    /// The server's CPU time so far, when it runs on this machine.
    pub(crate) fn server_cpu_us(&self) -> Option<u64> {
        self.server_cpu.as_ref().ok().map(ServerCpu::read_us)
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
        self.exec(&format!("VACUUM (ANALYZE) {}.jobs_hot", self.q())).await?;
        checkpoint(self.pg.as_ref()).await;
        Ok(())
    }

    /// Enqueues `n` no-op jobs spread round-robin over `queues`, `batch` a call, from `tasks`
    /// concurrent callers, due now or at `at`, unique by `unique` (None: not unique); returns
    /// the elapsed time.
    #[allow(clippy::too_many_arguments)]
    async fn enqueue_jobs(
        &self,
        queues: &[QueueName],
        n: u64,
        batch: usize,
        tasks: usize,
        prebuild: bool,
        at: Option<Timestamp>,
        unique: Option<chokaq::core::UniqueOpts>,
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
                        let mut job = NewJob::new(q, kind.clone()).json(json!({ "n": i }));
                        job.unique.clone_from(&unique);
                        match at {
                            Some(t) => job.run_at(t),
                            None => job,
                        }
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
        self.fill_at(label, queues, n, None, res).await
    }

    /// [`Bench::fill`] with the jobs due at `at` (None: now).
    async fn fill_at(
        &self,
        label: &str,
        queues: &[QueueName],
        n: u64,
        at: Option<Timestamp>,
        res: &mut Results,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let pb = self.bar(label, n);
        let lsn = self.wal_lsn().await?;
        let el = self.enqueue_jobs(queues, n, MAX_ENQUEUE_BATCH, 2, false, at, None, &pb).await?;
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
            .enqueue_jobs(
                &[QueueName::new("bench")?],
                n,
                self.args.enqueue_batch,
                self.args.enqueue_tasks,
                true,
                None,
                None,
                &pb,
            )
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
