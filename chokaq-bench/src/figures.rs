//! What each workload measured: rates, latencies (nearest-rank quantiles) and the results of
//! a whole run.

use serde_json::{json, Value};

use crate::timed::CallFigures;

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Latency {
    pub(crate) samples: usize,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
    pub(crate) mean: f64,
}

impl Latency {
    pub(crate) fn of(mut ms: Vec<f64>) -> Self {
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

    pub(crate) fn json(&self) -> Value {
        json!({ "samples": self.samples, "p50_ms": round3(self.p50), "p90_ms": round3(self.p90),
                "p99_ms": round3(self.p99), "max_ms": round3(self.max), "mean_ms": round3(self.mean) })
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Rate {
    pub(crate) jobs: u64,
    pub(crate) secs: f64,
    pub(crate) wal_bytes: i64,
}

impl Rate {
    pub(crate) fn per_s(&self) -> f64 {
        self.jobs as f64 / self.secs
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct DrainFigures {
    pub(crate) concurrency: u32,
    pub(crate) capped: Option<u32>,
    pub(crate) rate: Rate,
    pub(crate) claim: CallFigures,
    pub(crate) complete: CallFigures,
    pub(crate) heartbeat: CallFigures,
    pub(crate) other: CallFigures,
}

impl DrainFigures {
    pub(crate) fn json(&self) -> Value {
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
pub(crate) struct RawFigures {
    pub(crate) loops: u32,
    pub(crate) batch: u32,
    pub(crate) rate: Rate,
    pub(crate) claim: CallFigures,
    pub(crate) delete: CallFigures,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimFigures {
    pub(crate) backlog: u64,
    pub(crate) all_queues: Latency,
    pub(crate) one_queue: Latency,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct PickupFigures {
    pub(crate) jobs: u32,
    pub(crate) rate: f64,
    pub(crate) latency: Latency,
    /// Handlers that started before their enqueue call had returned (counted as 0 ms).
    pub(crate) early: u32,
    pub(crate) enqueue_call: Latency,
}

#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) enqueue: Option<Rate>,
    pub(crate) drains: Vec<DrainFigures>,
    pub(crate) raw: Option<RawFigures>,
    pub(crate) capped: Option<DrainFigures>,
    pub(crate) fill: Vec<(String, Rate)>,
    pub(crate) claims: Vec<ClaimFigures>,
    pub(crate) pickup: Option<PickupFigures>,
}

impl Results {
    pub(crate) fn main_drain(&self) -> Option<&DrainFigures> {
        self.drains.iter().find(|d| d.concurrency == 8).or_else(|| self.drains.first())
    }
}

pub(crate) fn human(n: u64) -> String {
    if n >= 1_000_000 && n % 1_000_000 == 0 {
        format!("{}m", n / 1_000_000)
    } else if n >= 1000 && n % 1000 == 0 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
