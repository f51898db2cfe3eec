//! The flags of `chokaq-bench` (clap) and their checks; a bad setting is `InvalidInput`
//! (exit code 2).

use std::fmt;

use chokaq::core::MAX_ENQUEUE_BATCH;
use chokaq::{Error, Result};
use clap::{Parser, ValueEnum};

// The workloads `--workloads` selects (they run in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Workload {
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
pub(crate) struct Args {
    /// PostgreSQL URL (never printed). Default: $CHOKAQ_TEST_POSTGRES_URL, then the local test database.
    #[arg(long, env = "CHOKAQ_BENCH_URL", hide_env_values = true)]
    pub(crate) url: Option<String>,
    /// Jobs of the enqueue, drain, raw and capped workloads.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) jobs: u32,
    /// Jobs per enqueue_many call in the enqueue workload.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) enqueue_batch: usize,
    /// Concurrent enqueue_many callers in the enqueue workload.
    #[arg(long, default_value_t = 1)]
    pub(crate) enqueue_tasks: usize,
    /// Worker slots of the drains, comma separated (e.g. 1,4,8,16,64). The first 8 (else the
    /// first entry) is `drain_jobs_per_s`.
    #[arg(long, value_delimiter = ',', default_value = "8")]
    pub(crate) drain_concurrency: Vec<u32>,
    /// Pool size of the backend (the raw loop uses the same pool).
    #[arg(long, default_value_t = 10)]
    pub(crate) connections: u32,
    /// Concurrent raw loops (default: one per pool connection).
    #[arg(long)]
    pub(crate) raw_loops: Option<u32>,
    /// Jobs per raw claim.
    #[arg(long, default_value_t = 10)]
    pub(crate) raw_batch: u32,
    /// The cap (max_workers) of the capped drain; its worker has as many slots.
    #[arg(long, default_value_t = 8)]
    pub(crate) cap: u32,
    /// The drain workers' first back-off step after an empty claim, ms (default: the
    /// runtime's own default, 20 ms). For experiments.
    #[arg(long)]
    pub(crate) min_poll_ms: Option<u64>,
    /// Jobs of the capped drain (fewer than --jobs by default: the capped drain is slow).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) capped_jobs: u32,
    /// Small backlog of the claim-cost workload.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) backlog_small: u32,
    /// Large backlog of the claim-cost workload.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) backlog_large: u32,
    /// Queues the claim-cost backlog is spread over.
    #[arg(long, default_value_t = 10)]
    pub(crate) claim_queues: u32,
    /// Timed claims per backlog size (each is claim, then an untimed complete and refill).
    #[arg(long, default_value_t = 500)]
    pub(crate) claim_samples: u32,
    /// Jobs of the pickup-latency workload.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) pickup_jobs: u32,
    /// Enqueues per second of the pickup-latency workload (one at a time).
    #[arg(long, default_value_t = 200.0)]
    pub(crate) pickup_rate: f64,
    /// Which workloads to run (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "enqueue,drain,raw,capped,claim,pickup")]
    pub(crate) workloads: Vec<Workload>,
    /// Print one JSON object with every figure as the last line.
    #[arg(long)]
    pub(crate) json: bool,
    /// Keep the schema at the end (to inspect it).
    #[arg(long)]
    pub(crate) keep_schema: bool,
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

    pub(crate) fn has(&self, w: Workload) -> bool {
        self.workloads.contains(&w)
    }

    pub(crate) fn raw_loops(&self) -> u32 {
        self.raw_loops.unwrap_or(self.connections)
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
}
