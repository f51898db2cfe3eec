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

/// Row counts of one table from `pg_stat_user_tables` (a difference of two readings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TableCounts {
    pub(crate) inserts: i64,
    pub(crate) updates: i64,
    pub(crate) hot_updates: i64,
    pub(crate) deletes: i64,
}

impl std::ops::Sub for TableCounts {
    type Output = TableCounts;
    fn sub(self, o: TableCounts) -> TableCounts {
        TableCounts {
            inserts: self.inserts - o.inserts,
            updates: self.updates - o.updates,
            hot_updates: self.hot_updates - o.hot_updates,
            deletes: self.deletes - o.deletes,
        }
    }
}

impl TableCounts {
    /// HOT updates / updates (None without updates).
    pub(crate) fn hot_share(&self) -> Option<f64> {
        (self.updates > 0).then(|| self.hot_updates as f64 / self.updates as f64)
    }

    pub(crate) fn json(&self) -> Value {
        json!({ "inserts": self.inserts, "updates": self.updates, "hot_updates": self.hot_updates,
                "deletes": self.deletes, "hot_share": self.hot_share().map(round3) })
    }
}

/// What a drain cost, beside its WAL (in its `Rate`): the B-tree leaf entries its WAL added,
/// its round trips and statements, and the drained table's row counts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Costs {
    /// `Btree/INSERT_LEAF` + `INSERT_POST` + `SPLIT_L` + `SPLIT_R` records in the workload's
    /// WAL (server-wide, `pg_walinspect`); None where the extension is not available.
    pub(crate) index_entries: Option<i64>,
    pub(crate) round_trips: u64,
    pub(crate) statements: u64,
    /// The drained table's counts (None before PostgreSQL 15: no `pg_stat_force_next_flush`).
    pub(crate) table: Option<TableCounts>,
    /// The server's CPU time over the window, in microseconds (None: the server is not on
    /// this machine; see [`crate::server_cpu`]).
    pub(crate) server_cpu_us: Option<u64>,
}

impl Costs {
    pub(crate) fn per_job(&self, rate: &Rate) -> PerJob {
        let jobs = rate.jobs.max(1) as f64;
        PerJob {
            wal_bytes: rate.wal_bytes as f64 / jobs,
            index_entries: self.index_entries.map(|n| n as f64 / jobs),
            round_trips: self.round_trips as f64 / jobs,
            statements: self.statements as f64 / jobs,
            server_cpu_us: self.server_cpu_us.map(|us| us as f64 / jobs),
        }
    }
}

/// The per-job figures of `docs/performance.md` ("What each figure costs per job").
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct PerJob {
    pub(crate) wal_bytes: f64,
    pub(crate) index_entries: Option<f64>,
    pub(crate) round_trips: f64,
    pub(crate) statements: f64,
    /// The server's CPU time per job, in microseconds.
    pub(crate) server_cpu_us: Option<f64>,
}

impl PerJob {
    pub(crate) fn json(&self) -> Value {
        json!({ "wal_bytes": round1(self.wal_bytes), "index_entries": self.index_entries.map(round3),
                "round_trips": round3(self.round_trips), "statements": round3(self.statements),
                "server_cpu_us": self.server_cpu_us.map(round1) })
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct DrainFigures {
    /// Worker runtimes on the backend (1 but in the spread capped drains).
    pub(crate) workers: u32,
    /// Slots of each.
    pub(crate) concurrency: u32,
    pub(crate) capped: Option<u32>,
    /// The exposure drain's settings: (look-ahead, unwritten outcomes); None: the defaults.
    pub(crate) exposure: Option<(u32, u32)>,
    /// The handler's time (a sleep), ms; 0 for a no-op.
    pub(crate) handler_ms: u64,
    /// The handlers' mean time as measured around the sleep, ms (0 for a no-op).
    pub(crate) handler_ms_measured: f64,
    pub(crate) rate: Rate,
    pub(crate) claim: CallFigures,
    pub(crate) complete_and_claim: CallFigures,
    /// Jobs completed by the `complete_and_claim` calls.
    pub(crate) completed_in_claim: u64,
    pub(crate) start: CallFigures,
    pub(crate) complete: CallFigures,
    pub(crate) heartbeat: CallFigures,
    pub(crate) other: CallFigures,
    pub(crate) costs: Costs,
}

impl DrainFigures {
    /// Every claim call, with or without completions.
    pub(crate) fn claims(&self) -> CallFigures {
        self.claim + self.complete_and_claim
    }

    /// Every backend call of the drain.
    pub(crate) fn calls(&self) -> u64 {
        self.claims().calls + self.start.calls + self.complete.calls + self.heartbeat.calls + self.other.calls
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "workers": self.workers,
            "concurrency": self.concurrency,
            "max_workers": self.capped,
            "lookahead": self.exposure.map(|e| e.0),
            "unwritten_outcomes": self.exposure.map(|e| e.1),
            "handler_ms": self.handler_ms,
            "handler_ms_measured": round3(self.handler_ms_measured),
            "jobs": self.rate.jobs,
            "seconds": round3(self.rate.secs),
            "jobs_per_s": round1(self.rate.per_s()),
            "wal_bytes_per_job": round1(self.rate.wal_bytes as f64 / self.rate.jobs as f64),
            "per_job": self.costs.per_job(&self.rate).json(),
            "jobs_hot": self.costs.table.map(|t| t.json()),
            "claim": self.claim.json(),
            "complete_and_claim": self.complete_and_claim.json(),
            "completed_in_claim": self.completed_in_claim,
            "start": self.start.json(),
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
    /// The second statement: the raw loop's DELETE, the raw_min loop's UPDATE to done.
    pub(crate) finish: CallFigures,
    pub(crate) costs: Costs,
}

impl RawFigures {
    pub(crate) fn json(&self, finish: &str) -> Value {
        json!({
            "loops": self.loops, "batch": self.batch, "jobs": self.rate.jobs, "seconds": round3(self.rate.secs),
            "jobs_per_s": round1(self.rate.per_s()),
            "wal_bytes_per_job": round1(self.rate.wal_bytes as f64 / self.rate.jobs as f64),
            "per_job": self.costs.per_job(&self.rate).json(),
            "table": self.costs.table.map(|t| t.json()),
            "claim": self.claim.json(), finish: self.finish.json(),
        })
    }
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

/// One job per call from concurrent tasks: `Client::enqueue`, and the same INSERT bare.
#[derive(Debug, Clone, Default)]
pub(crate) struct SingleFigures {
    pub(crate) tasks: u32,
    pub(crate) client: Rate,
    pub(crate) client_call: Latency,
    pub(crate) raw: Rate,
    pub(crate) raw_call: Latency,
    /// The bare INSERT through the backend's pool.
    pub(crate) pool: Rate,
    pub(crate) pool_call: Latency,
    /// The bare INSERT through the pool, with a NOTIFY every 3 ms beside it.
    pub(crate) pool_notify: Rate,
    pub(crate) pool_notify_call: Latency,
}

/// Heartbeats over jobs in Processing, and how many of their row updates were HOT.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeartbeatFigures {
    pub(crate) jobs: u32,
    pub(crate) rounds: u32,
    pub(crate) call: Latency,
    /// `jobs_hot`'s counters over the heartbeats (None before PostgreSQL 15).
    pub(crate) table: Option<TableCounts>,
    pub(crate) wal_bytes: i64,
    pub(crate) index_entries: Option<i64>,
}

/// Claim cost with scheduled (not yet due) jobs in the queues.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScheduledFigures {
    pub(crate) scheduled: u64,
    pub(crate) due: u32,
    pub(crate) all_queues: Latency,
}

/// The multi-process drain: the example's own figures.
#[derive(Debug, Clone, Default)]
pub(crate) struct MultiFigures {
    pub(crate) processes: u32,
    pub(crate) concurrency: u32,
    pub(crate) rate: Rate,
    /// Jobs each worker process reported completed.
    pub(crate) per_process: Vec<u64>,
    /// The server's CPU time over the whole example run (its enqueue, migration and stats
    /// polling included), in microseconds.
    pub(crate) server_cpu_us: Option<u64>,
    /// The worker processes' claim and complete calls and released look-ahead jobs, summed.
    pub(crate) claim_calls: u64,
    pub(crate) complete_calls: u64,
    pub(crate) released: u64,
    /// MultiXact ids the server assigned over the run (shared row locks held by several
    /// sessions at once), from `pg_control_checkpoint()` after a CHECKPOINT on each side
    /// (None without the rights).
    pub(crate) multixacts: Option<i64>,
}

impl MultiFigures {
    /// The server's CPU time per job of the run, in microseconds.
    pub(crate) fn server_cpu_per_job(&self) -> Option<f64> {
        self.server_cpu_us.map(|us| us as f64 / self.rate.jobs.max(1) as f64)
    }
}

/// The keyed workloads (issue 25): the keyed drain, the hot key and the keyed claim. With
/// `unsupported` (the backend's `control_queue` answered `Unsupported` for the per-key cap)
/// nothing was measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyedFigures {
    pub(crate) unsupported: bool,
    pub(crate) keys: u32,
    pub(crate) cap: u32,
    pub(crate) concurrency: u32,
    /// The keyed drain: `--jobs` jobs over `keys` keys at `cap`.
    pub(crate) drain: Option<Rate>,
    /// The keyed drain's claim and complete calls (where the backend is the timed wrapper).
    pub(crate) drain_claim: Option<crate::timed::CallFigures>,
    pub(crate) drain_complete: Option<crate::timed::CallFigures>,
    /// The hot key: jobs of the hot key (cap 1), and of one key each (`keys` of them).
    pub(crate) hot_jobs: u64,
    pub(crate) cold_jobs: u64,
    /// Seconds until the last of the one-key jobs' handlers returned: alone, and behind the hot key.
    pub(crate) cold_alone_s: Option<f64>,
    pub(crate) cold_with_hot_s: Option<f64>,
    /// Jobs of the hot key completed while the one-key jobs drained.
    pub(crate) hot_ran: u64,
    /// Claim-10 latency with `claim_backlog` distinct keys in the backlog.
    pub(crate) claim_backlog: u64,
    pub(crate) claim: Option<Latency>,
}

impl KeyedFigures {
    /// The keyed drain's jobs/s.
    pub(crate) fn drain_per_s(&self) -> Option<f64> {
        self.drain.as_ref().map(Rate::per_s)
    }

    /// The one-key jobs' drain time behind the hot key over their time alone.
    pub(crate) fn hot_ratio(&self) -> Option<f64> {
        Some(self.cold_with_hot_s? / self.cold_alone_s?)
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "unsupported": self.unsupported,
            "keys": self.keys,
            "key_max_workers": self.cap,
            "concurrency": self.concurrency,
            "drain": self.drain.as_ref().map(|d| json!({
                "jobs": d.jobs, "seconds": round3(d.secs), "jobs_per_s": round1(d.per_s()),
                "claim": self.drain_claim.map(|c| c.json()),
                "complete": self.drain_complete.map(|c| c.json()),
            })),
            "hot": json!({
                "hot_jobs": self.hot_jobs, "cold_jobs": self.cold_jobs,
                "cold_alone_s": self.cold_alone_s.map(round3), "cold_with_hot_s": self.cold_with_hot_s.map(round3),
                "hot_ran_meanwhile": self.hot_ran, "ratio": self.hot_ratio().map(round3),
            }),
            "claim": json!({ "backlog": self.claim_backlog, "distinct_keys": self.claim_backlog,
                             "latency": self.claim.map(|l| l.json()) }),
        })
    }
}

/// The rate-limited queue: every start's database stamp, read back from the archive.
#[derive(Debug, Clone, Default)]
pub(crate) struct RateFigures {
    /// The backend's `control_queue` answered `Unsupported` for the rate limit.
    pub(crate) unsupported: bool,
    pub(crate) limit: Option<chokaq::core::RateLimit>,
    pub(crate) secs: u32,
    pub(crate) claimers: u32,
    /// Claim calls (empty ones too).
    pub(crate) claims: u64,
    pub(crate) starts: u64,
    /// The most stamps in any half-open window `[s, s + per)`.
    pub(crate) max_in_window: u64,
    /// From the first stamp to the last, seconds.
    pub(crate) span_s: f64,
    /// The most starts the limit allows over the span: `jobs x (floor(span / per) + 1)`.
    pub(crate) allowed: u64,
}

impl RateFigures {
    /// Fills `starts`, `max_in_window`, `span_s` and `allowed` from the start stamps
    /// (microseconds, any order).
    pub(crate) fn set_stamps(&mut self, mut stamps: Vec<i64>) {
        let Some(limit) = self.limit else { return };
        stamps.sort_unstable();
        let per = limit.per_millis() * 1000;
        self.starts = stamps.len() as u64;
        self.max_in_window = max_in_window(&stamps, per);
        let span = match (stamps.first(), stamps.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        };
        self.span_s = span as f64 / 1e6;
        self.allowed =
            if stamps.is_empty() { 0 } else { u64::from(limit.jobs) * (span / per) as u64 + u64::from(limit.jobs) };
    }

    /// Starts over the starts the limit allows over the run's span.
    pub(crate) fn utilisation(&self) -> Option<f64> {
        (self.allowed > 0).then(|| self.starts as f64 / self.allowed as f64)
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "unsupported": self.unsupported,
            "limit": self.limit.map(|l| l.to_string()),
            "seconds": self.secs, "claimers": self.claimers, "claims": self.claims,
            "starts": self.starts, "span_s": round3(self.span_s), "allowed": self.allowed,
            "max_in_window": (!self.unsupported).then_some(self.max_in_window),
            "utilisation": self.utilisation().map(round3),
        })
    }
}

/// The most of the sorted `stamps` in any half-open window `[s, s + width)`; the busiest
/// window starts at a stamp.
pub(crate) fn max_in_window(stamps: &[i64], width: i64) -> u64 {
    let (mut lo, mut best) = (0usize, 0usize);
    for hi in 0..stamps.len() {
        while stamps[hi] - stamps[lo] >= width {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u64
}

/// The workflow workload (issue 41, item 5).
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkflowFigures {
    /// Tasks of the fan-out and fan-in.
    pub(crate) tasks: u64,
    /// Its enqueue (one call).
    pub(crate) enqueue: Rate,
    /// Its drain by the runtime (8 slots).
    pub(crate) drain: Rate,
    /// Steps of the chain.
    pub(crate) chain: u32,
    /// From a step's handler return to the next step's handler start, milliseconds.
    pub(crate) step: Latency,
    /// Waiting tasks beside the claim.
    pub(crate) waiting: u64,
    /// Claim-10 latency (every queue) beside them.
    pub(crate) claim_waiting: Latency,
}

#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) enqueue: Option<Rate>,
    /// The enqueue-unique workload (issue 42): the unique jobs, and the plain jobs it measured
    /// just before them with the same batch and callers.
    pub(crate) enqueue_unique: Option<Rate>,
    pub(crate) enqueue_unique_baseline: Option<Rate>,
    /// The workflow workload (issue 41).
    pub(crate) workflow: Option<WorkflowFigures>,
    pub(crate) single: Option<SingleFigures>,
    pub(crate) drains: Vec<DrainFigures>,
    pub(crate) raw: Option<RawFigures>,
    /// The raw loop claiming 500 at a time.
    pub(crate) raw_b500: Option<RawFigures>,
    pub(crate) raw_min: Option<RawFigures>,
    pub(crate) commit_rtt: Option<Latency>,
    /// The capped drains: handler time 0, then `--handler-ms`.
    pub(crate) capped: Option<DrainFigures>,
    pub(crate) capped_slow: Option<DrainFigures>,
    /// The same two drains by C workers of one slot each (the cap shared across runtimes).
    pub(crate) capped_spread: Option<DrainFigures>,
    pub(crate) capped_spread_slow: Option<DrainFigures>,
    pub(crate) heartbeat: Option<HeartbeatFigures>,
    pub(crate) fill: Vec<(String, Rate)>,
    pub(crate) claims: Vec<ClaimFigures>,
    pub(crate) scheduled: Option<ScheduledFigures>,
    pub(crate) pickup: Option<PickupFigures>,
    pub(crate) multi: Option<MultiFigures>,
    /// The same example with one process of as many slots (like with like, issue 38).
    pub(crate) multi_1: Option<MultiFigures>,
    /// The exposure drain: 8 slots, look-ahead 500, 500 unwritten outcomes (issue 38).
    pub(crate) exposure: Option<DrainFigures>,
    /// The list workload's JSON (`list_page_ms` and `list`).
    pub(crate) list: Option<serde_json::Value>,
    /// The keyed workloads and the rate limit (None: not run).
    pub(crate) keyed: Option<KeyedFigures>,
    pub(crate) rate: Option<RateFigures>,
    /// Why the server's CPU was not measured (None: it was).
    pub(crate) server_cpu_note: Option<String>,
}

impl Results {
    /// Unique enqueue against the plain enqueue of the same workload.
    pub(crate) fn enqueue_unique_vs_enqueue(&self) -> Option<f64> {
        let (u, p) = (self.enqueue_unique.as_ref()?, self.enqueue_unique_baseline.as_ref()?);
        (p.per_s() > 0.0).then(|| u.per_s() / p.per_s())
    }

    pub(crate) fn main_drain(&self) -> Option<&DrainFigures> {
        self.drains.iter().find(|d| d.concurrency == 8).or_else(|| self.drains.first())
    }

    /// Capped jobs/s over the ceiling of a strict cap: C jobs per (handler + commit round
    /// trip), `C x 1000 / (h_ms + rtt_ms)` jobs/s.
    pub(crate) fn capped_efficiency(&self, d: Option<&DrainFigures>) -> Option<f64> {
        let d = d?;
        let rtt = self.commit_rtt?.p50;
        let cap = f64::from(d.capped?);
        let ceiling = cap * 1000.0 / (d.handler_ms as f64 + rtt);
        Some(d.rate.per_s() / ceiling)
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
    fn rate_window_and_utilisation() {
        // Window 1,000 us: [0, 1000) holds 0, 500, 999; 1000 starts the next window.
        assert_eq!(max_in_window(&[0, 500, 999, 1000, 1999], 1000), 3);
        assert_eq!(max_in_window(&[0, 1000, 2000], 1000), 1);
        assert_eq!(max_in_window(&[], 1000), 0);
        assert_eq!(max_in_window(&[5, 5, 5], 1), 3);
        let limit = chokaq::core::RateLimit::new(2, std::time::Duration::from_millis(1));
        let mut f = RateFigures { limit: Some(limit), ..Default::default() };
        // Span 2,500 us over 1 ms windows: 2 x (2 + 1) = 6 allowed; 5 starts, at most 2 a window.
        f.set_stamps(vec![2500, 0, 10, 1200, 1300]);
        assert_eq!((f.starts, f.max_in_window, f.allowed), (5, 2, 6));
        assert_eq!(f.utilisation().map(round3), Some(0.833));
        assert_eq!(RateFigures::default().utilisation(), None);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(10_000), "10k");
        assert_eq!(human(1_000_000), "1m");
        assert_eq!(human(1_500), "1500");
    }

    #[test]
    fn capped_efficiency_is_jobs_over_the_cap_ceiling() {
        let d = |h: u64, per_s: u64| DrainFigures {
            capped: Some(8),
            handler_ms: h,
            rate: Rate { jobs: per_s, secs: 1.0, wal_bytes: 0 },
            ..Default::default()
        };
        let r = Results { commit_rtt: Some(Latency { p50: 2.0, ..Default::default() }), ..Default::default() };
        // Ceiling 8 / 2 ms = 4,000/s with h = 0; 8 / 7 ms = 1,142.9/s with h = 5.
        assert_eq!(r.capped_efficiency(Some(&d(0, 3000))).map(round3), Some(0.75));
        assert_eq!(r.capped_efficiency(Some(&d(5, 1000))).map(round3), Some(0.875));
        assert_eq!(Results::default().capped_efficiency(Some(&d(0, 1))), None);
        let t = TableCounts { inserts: 0, updates: 10, hot_updates: 9, deletes: 0 };
        assert_eq!(t.hot_share(), Some(0.9));
        assert_eq!((t - t).hot_share(), None);
    }
}
