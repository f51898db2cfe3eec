//! The flags of `chokaq-bench` (clap) and their checks; a bad setting is `InvalidInput`
//! (exit code 2).

use std::fmt;

use chokaq::core::MAX_ENQUEUE_BATCH;
use chokaq::{Error, Result};
use clap::{Parser, ValueEnum};

/// Jobs per claim of the `raw_b500` loop.
pub(crate) const RAW_B500_BATCH: u32 = 500;

// The workloads `--workloads` selects (they run in this order: the ones that fill a million
// jobs come last, so their tables and WAL do not weigh on the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Workload {
    Enqueue,
    /// Issue 42: `--jobs` unique jobs (by arguments, each new) against as many plain jobs
    /// just before, same batch and callers (`enqueue_unique_vs_enqueue`).
    EnqueueUnique,
    /// One job per `Client::enqueue` call from concurrent tasks, beside the same INSERT run
    /// bare, one row per autocommit statement.
    EnqueueSingle,
    Drain,
    /// 8 slots with `lookahead(500)` and `unwritten_outcomes(500)`: the throughput setting
    /// that trades re-runs after a crash for fewer commits (issue 38).
    DrainExposure,
    Raw,
    /// The raw loop claiming [`RAW_B500_BATCH`] jobs at a time (same statements, server, jobs
    /// and loops as `raw`).
    RawB500,
    /// The minimal skip-locked loop: a six-column table with one partial index.
    RawMin,
    /// The commit round trip, then the capped drain with handler time 0 and `--handler-ms`.
    Capped,
    /// The share of heartbeat updates that are HOT.
    Heartbeat,
    Pickup,
    /// `--mp-processes` worker processes of `chokaq/examples/multi_process.rs`.
    MultiProcess,
    /// Issue 25's keyed workloads: the keyed drain, the hot key and the keyed claim.
    Keyed,
    /// Issue 25's rate-limited queue.
    Rate,
    Claim,
    /// Claim cost with a million jobs due tomorrow and a trickle of due ones.
    Scheduled,
    /// Issue 41: a fan-out and fan-in of `--workflow-tasks` (its enqueue and its drain), a
    /// chain of `--workflow-chain` steps (the step latency) and the claim beside
    /// `--workflow-waiting` waiting tasks (PostgreSQL).
    Workflow,
    /// A page of 50 of `list_jobs` under each single filter over `--list-archived` archived
    /// jobs (`list_page_ms`; PostgreSQL and MySQL).
    List,
}

impl Workload {
    /// The name `--workloads` takes.
    pub(crate) fn name(self) -> String {
        self.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string())
    }
}

/// Benchmarks chokaq on a PostgreSQL database (a fresh schema is created and dropped).
#[derive(Parser)]
#[command(name = "chokaq-bench", version)]
pub(crate) struct Args {
    /// PostgreSQL URL (never printed). Default: $CHOKAQ_TEST_POSTGRES_URL, then the local test database.
    #[arg(long, env = "CHOKAQ_BENCH_URL", hide_env_values = true)]
    pub(crate) url: Option<String>,
    /// Jobs of the enqueue workload, the drains of 8 slots or more, the raw, raw_b500 and
    /// raw_min loops and (by default) the multi-process drain.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) jobs: u32,
    /// Jobs per enqueue_many call in the enqueue workload.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) enqueue_batch: usize,
    /// Concurrent enqueue_many callers in the enqueue workload.
    #[arg(long, default_value_t = 1)]
    pub(crate) enqueue_tasks: usize,
    /// Worker slots of the drains, comma separated (e.g. 1,4,8,16,64): each is
    /// `drain_jobs_per_s_c<N>`; the 8 (else the first entry) is also `drain_jobs_per_s`.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    pub(crate) drain_concurrency: Vec<u32>,
    /// Jobs of a drain with fewer than 8 slots (0: --jobs). A single slot drains about a
    /// thousand jobs a second, so --jobs would take most of the run.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) low_drain_jobs: u32,
    /// Pool size of the backend (the raw loop uses the same pool).
    #[arg(long, default_value_t = 10)]
    pub(crate) connections: u32,
    /// Concurrent raw loops, and raw_b500 loops (default: one per pool connection).
    #[arg(long)]
    pub(crate) raw_loops: Option<u32>,
    /// Jobs per raw claim (the raw loop and the raw_min loop).
    #[arg(long, default_value_t = 10)]
    pub(crate) raw_batch: u32,
    /// Concurrent raw_min loops, each on its own connection.
    #[arg(long, default_value_t = 8)]
    pub(crate) raw_min_loops: u32,
    /// Jobs of each run of the single-job enqueue workload (chokaq and the bare INSERT).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) single_jobs: u32,
    /// Concurrent tasks of the single-job enqueue workload.
    #[arg(long, default_value_t = 8)]
    pub(crate) single_tasks: u32,
    /// The cap (max_workers) of the capped drains; their worker has as many slots.
    #[arg(long, default_value_t = 8)]
    pub(crate) cap: u32,
    /// The drain workers' first back-off step after an empty claim, ms (default: the
    /// runtime's own default, 20 ms). For experiments.
    #[arg(long)]
    pub(crate) min_poll_ms: Option<u64>,
    /// Jobs of the capped drain with handler time 0 (fewer than --jobs: the capped drain is slow).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) capped_jobs: u32,
    /// Handler time of the second capped drain, ms (a sleep in the handler).
    #[arg(long, default_value_t = 5)]
    pub(crate) handler_ms: u64,
    /// Jobs of the capped drain with handler time --handler-ms.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) capped_slow_jobs: u32,
    /// Timed one-row autocommit UPDATEs of `commit_rtt_ms_p50`.
    #[arg(long, default_value_t = 500)]
    pub(crate) rtt_samples: u32,
    /// Jobs put into Processing by the heartbeat workload.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) heartbeat_jobs: u32,
    /// Heartbeat calls over all of them (each one backend call).
    #[arg(long, default_value_t = 20)]
    pub(crate) heartbeat_rounds: u32,
    /// Small backlog of the claim-cost workload.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) backlog_small: u32,
    /// Large backlog of the claim-cost workload.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) backlog_large: u32,
    /// Queues the claim-cost backlog (and the scheduled jobs) are spread over.
    #[arg(long, default_value_t = 10)]
    pub(crate) claim_queues: u32,
    /// Timed claims per backlog size (each is claim, then an untimed complete and refill).
    #[arg(long, default_value_t = 500)]
    pub(crate) claim_samples: u32,
    /// Pending jobs due tomorrow in the scheduled workload.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) scheduled_jobs: u32,
    /// Due jobs beside them (re-enqueued as they are claimed); at most 10, the claim's limit.
    #[arg(long, default_value_t = 5)]
    pub(crate) scheduled_due: u32,
    /// Timed claims of the scheduled workload (slow on a claim that scans the scheduled jobs).
    #[arg(long, default_value_t = 200)]
    pub(crate) scheduled_samples: u32,
    /// Archived jobs of the list workload (10 queues, 1,000 kinds, 100 tags).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) list_archived: u32,
    /// Hot jobs of the list workload (1 % of them Processing).
    #[arg(long, default_value_t = 100_000)]
    pub(crate) list_hot: u32,
    /// Timed pages per filter of the list workload.
    #[arg(long, default_value_t = 20)]
    pub(crate) list_samples: u32,
    /// Jobs of the pickup-latency workload.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) pickup_jobs: u32,
    /// Enqueues per second of the pickup-latency workload (one at a time).
    #[arg(long, default_value_t = 200.0)]
    pub(crate) pickup_rate: f64,
    /// Worker processes of the multi-process drain.
    #[arg(long, default_value_t = 4)]
    pub(crate) mp_processes: u32,
    /// Slots per worker process of the multi-process drain.
    #[arg(long, default_value_t = 8)]
    pub(crate) mp_concurrency: u32,
    /// Jobs of the multi-process drain (default: --jobs).
    #[arg(long)]
    pub(crate) mp_jobs: Option<u32>,
    /// The multi_process example's binary (default: built with `cargo build --release -p
    /// chokaq --features postgres --example multi_process` in this workspace).
    #[arg(long)]
    pub(crate) mp_exe: Option<std::path::PathBuf>,
    /// Keys of the keyed drain (its jobs are --jobs, key i mod keys) and jobs of one key each
    /// in the hot-key workload.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) keyed_keys: u32,
    /// The per-key cap (key_max_workers) of the keyed drain and the keyed claim.
    #[arg(long, default_value_t = 2)]
    pub(crate) key_cap: u32,
    /// Jobs of the hot key (cap 1) in the hot-key workload (default: half of --jobs).
    #[arg(long)]
    pub(crate) hot_jobs: Option<u32>,
    /// The rate limit of the rate-limited queue, N/PERIOD (e.g. 500/1s, 10/250ms).
    #[arg(long, default_value = "500/1s")]
    pub(crate) rate_limit: String,
    /// How long the claim loops drive the rate-limited queue, seconds.
    #[arg(long, default_value_t = 10)]
    pub(crate) rate_secs: u32,
    /// Concurrent claim loops on the rate-limited queue.
    #[arg(long, default_value_t = 4)]
    pub(crate) rate_claimers: u32,
    /// Tasks of the workflow workload's fan-out and fan-in (a root, the middle ones, a sink).
    #[arg(long, default_value_t = 10_001)]
    pub(crate) workflow_tasks: u32,
    /// Steps of the workflow workload's chain (the step latency).
    #[arg(long, default_value_t = 200)]
    pub(crate) workflow_chain: u32,
    /// Waiting tasks beside the claim of the workflow workload.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) workflow_waiting: u32,
    /// Which workloads to run (comma separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "enqueue,enqueue-unique,enqueue-single,drain,drain-exposure,raw,raw-b500,raw-min,capped,heartbeat,pickup,multi-process,keyed,rate,claim,scheduled,workflow,list"
    )]
    pub(crate) workloads: Vec<Workload>,
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    pub(crate) json: bool,
    /// Keep the schema at the end (to inspect it).
    #[arg(long)]
    pub(crate) keep_schema: bool,
    /// A schema design to measure against the shipped one (issue 38): its DDL is applied to
    /// the bench's schema after `migrate` (see `experiment.rs` and docs/performance.md).
    #[arg(long, value_enum)]
    pub(crate) experiment: Option<crate::experiment::Experiment>,
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
    pub(crate) fn check(&self) -> Result<()> {
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
        if self.capped_jobs == 0 || self.capped_slow_jobs == 0 {
            return bad("--capped-jobs and --capped-slow-jobs must be at least 1");
        }
        if self.cap == 0 || self.cap > 1000 {
            return bad("--cap must be 1 to 1000");
        }
        if self.handler_ms > 10_000 || self.rtt_samples == 0 {
            return bad("--handler-ms must be at most 10000 and --rtt-samples at least 1");
        }
        if self.raw_min_loops == 0 || self.raw_min_loops > 100 || self.single_tasks == 0 || self.single_tasks > 100 {
            return bad("--raw-min-loops and --single-tasks must be 1 to 100");
        }
        if self.single_jobs < self.single_tasks {
            return bad("--single-jobs must be at least --single-tasks");
        }
        if self.heartbeat_jobs == 0 || self.heartbeat_jobs > 100_000 || self.heartbeat_rounds == 0 {
            return bad("--heartbeat-jobs must be 1 to 100000 and --heartbeat-rounds at least 1");
        }
        if self.scheduled_due == 0 || self.scheduled_due > 10 || self.scheduled_samples == 0 {
            return bad("--scheduled-due must be 1 to 10 and --scheduled-samples at least 1");
        }
        if self.mp_processes == 0 || self.mp_processes > 64 || self.mp_concurrency == 0 || self.mp_concurrency > 1000 {
            return bad("--mp-processes must be 1 to 64 and --mp-concurrency 1 to 1000");
        }
        if self.mp_jobs == Some(0) {
            return bad("--mp-jobs must be at least 1");
        }
        if self.list_archived == 0 || self.list_archived > 1_000_000 || self.list_hot < 100 || self.list_samples == 0 {
            return bad("--list-archived must be 1 to 1000000, --list-hot at least 100 and --list-samples at least 1");
        }
        if self.claim_queues == 0 || self.claim_queues > 100 {
            return bad("--claim-queues must be 1 to 100");
        }
        if self.backlog_small < 10 * self.claim_queues || self.backlog_large < self.backlog_small {
            return bad("need --backlog-large >= --backlog-small >= 10 x --claim-queues");
        }
        if self.keyed_keys == 0 || self.keyed_keys > 1_000_000 || self.key_cap == 0 || self.key_cap > 1000 {
            return bad("--keyed-keys must be 1 to 1000000 and --key-cap 1 to 1000");
        }
        if self.hot_jobs == Some(0) {
            return bad("--hot-jobs must be at least 1");
        }
        self.rate_limit()?;
        if self.rate_secs == 0 || self.rate_secs > 3600 || self.rate_claimers == 0 || self.rate_claimers > 100 {
            return bad("--rate-secs must be 1 to 3600 and --rate-claimers 1 to 100");
        }
        if self.claim_samples == 0 || self.pickup_jobs == 0 {
            return bad("--claim-samples and --pickup-jobs must be at least 1");
        }
        if !(self.pickup_rate.is_finite() && self.pickup_rate > 0.0 && self.pickup_rate <= 10_000.0) {
            return bad("--pickup-rate must be in (0, 10000]");
        }
        Ok(())
    }

    pub(crate) fn has(&self, w: Workload) -> bool {
        self.workloads.contains(&w)
    }

    pub(crate) fn raw_loops(&self) -> u32 {
        self.raw_loops.unwrap_or(self.connections)
    }

    /// Jobs of a drain with `concurrency` slots.
    pub(crate) fn drain_jobs(&self, concurrency: u32) -> u32 {
        if concurrency < 8 && self.low_drain_jobs > 0 {
            self.low_drain_jobs
        } else {
            self.jobs
        }
    }

    pub(crate) fn mp_jobs(&self) -> u32 {
        self.mp_jobs.unwrap_or(self.jobs)
    }

    /// Jobs of the hot key (at least 1).
    pub(crate) fn hot_jobs(&self) -> u32 {
        self.hot_jobs.unwrap_or(self.jobs / 2).max(1)
    }

    /// `--rate-limit`, parsed (a queue-wide limit).
    pub(crate) fn rate_limit(&self) -> Result<chokaq::core::RateLimit> {
        chokaq::core::RateLimit::parse(&self.rate_limit, false)
    }

    /// The keyed workloads' settings.
    pub(crate) fn keyed(&self) -> crate::bench::KeyedSettings {
        crate::bench::KeyedSettings {
            jobs: u64::from(self.jobs),
            keys: self.keyed_keys,
            cap: self.key_cap,
            hot_jobs: u64::from(self.hot_jobs()),
            claim_backlog: u64::from(self.backlog_small),
            claim_queues: self.claim_queues,
            claim_samples: self.claim_samples,
            min_poll_ms: self.min_poll_ms,
        }
    }
}

/// Parses `chokaq-bench` with these flags (the tests' way to build settings).
#[cfg(test)]
pub(crate) fn parse(extra: &[&str]) -> Args {
    let mut v = vec!["chokaq-bench"];
    v.extend_from_slice(extra);
    Args::try_parse_from(v).unwrap()
}

#[cfg(test)]
mod tests {
    use super::parse as args;
    use super::*;
    use chokaq::ErrorKind;

    #[test]
    fn defaults_are_the_documented_run() {
        let a = args(&[]);
        assert!(a.check().is_ok());
        assert_eq!(
            (a.jobs, a.capped_jobs, a.connections, a.raw_loops(), a.raw_batch, a.cap),
            (100_000, 20_000, 10, 10, 10, 8)
        );
        assert_eq!(a.drain_concurrency, vec![1, 8, 64]);
        assert_eq!((a.drain_jobs(1), a.drain_jobs(8), a.drain_jobs(64)), (20_000, 100_000, 100_000));
        assert_eq!((a.backlog_small, a.backlog_large, a.claim_queues), (10_000, 1_000_000, 10));
        assert_eq!((a.scheduled_jobs, a.scheduled_due, a.single_tasks, a.raw_min_loops), (1_000_000, 5, 8, 8));
        assert_eq!((a.handler_ms, a.mp_processes, a.mp_concurrency, a.mp_jobs()), (5, 4, 8, 100_000));
        assert_eq!(a.workloads.len(), 18);
        assert_eq!((a.workflow_tasks, a.workflow_chain, a.workflow_waiting), (10_001, 200, 1_000_000));
        assert_eq!((a.keyed_keys, a.key_cap, a.hot_jobs(), a.rate_secs, a.rate_claimers), (1_000, 2, 50_000, 10, 4));
        assert_eq!(a.rate_limit().unwrap().to_string(), "500/1000ms");
        assert_eq!(args(&["--jobs", "600"]).hot_jobs(), 300);
        assert!(a.has(Workload::RawB500) && Workload::RawB500.name() == "raw-b500");
        let mut sorted = a.workloads.clone();
        sorted.sort();
        assert_eq!(sorted, a.workloads, "the default list is in run order");
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
            &["--scheduled-due", "11"],
            &["--single-jobs", "4"],
            &["--mp-processes", "0"],
            &["--heartbeat-rounds", "0"],
            &["--key-cap", "0"],
            &["--hot-jobs", "0"],
            &["--rate-limit", "0/1s"],
            &["--rate-limit", "500/0ms"],
            &["--rate-secs", "0"],
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
}
