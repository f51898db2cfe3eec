//! The report: the table on stdout (`table`), each target with its measured ratio and verdict
//! (`targets`), and the one-line JSON object of `--json` (`json`). What they share is here:
//! the drains against the raw loops and the columns of the per-job cost table.

mod json;
mod table;
mod targets;

pub(crate) use json::to_json;
#[cfg(test)]
pub(crate) use json::HEADLINE_KEYS;
pub(crate) use table::print_table;

use crate::figures::{DrainFigures, PerJob, RawFigures, Results, TableCounts};

/// `a / b` when both were measured.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a / b)
}

/// The raw loops every drain is compared with, in the order of the table's columns and the
/// JSON's keys: the key's suffix (`drain_vs_<name>`) and the loop's figures.
fn raw_loops(r: &Results) -> [(&'static str, Option<&RawFigures>); 3] {
    [("raw", r.raw.as_ref()), ("raw_min", r.raw_min.as_ref()), ("raw_b500", r.raw_b500.as_ref())]
}

/// A drain's jobs/s over each raw loop's (None for a loop that did not run): `drain_vs_raw`,
/// `drain_vs_raw_min`, `drain_vs_raw_b500`.
fn vs_raw(d: Option<&DrainFigures>, r: &Results) -> [(&'static str, Option<f64>); 3] {
    let drain = d.map(|d| d.rate.per_s());
    raw_loops(r).map(|(name, x)| (name, ratio(drain, x.map(|x| x.rate.per_s()))))
}

/// The columns of the cost table: name, per-job figures and table counters of the main
/// drain and of each raw loop.
fn per_job_columns(r: &Results) -> [(&'static str, Option<PerJob>, Option<TableCounts>); 5] {
    let raw = |x: &Option<RawFigures>| x.as_ref().map(|x| x.costs.per_job(&x.rate));
    let table = |x: &Option<RawFigures>| x.as_ref().and_then(|x| x.costs.table);
    let exposure = r.exposure.as_ref();
    [
        ("chokaq_drain", r.main_drain().map(|d| d.costs.per_job(&d.rate)), r.main_drain().and_then(|d| d.costs.table)),
        ("chokaq_exposure", exposure.map(|d| d.costs.per_job(&d.rate)), exposure.and_then(|d| d.costs.table)),
        ("raw", raw(&r.raw), table(&r.raw)),
        ("raw_min", raw(&r.raw_min), table(&r.raw_min)),
        ("raw_b500", raw(&r.raw_b500), table(&r.raw_b500)),
    ]
}

/// The results of a whole run, made up, for the report's tests.
#[cfg(test)]
pub(crate) fn sample_results() -> Results {
    use crate::figures::{
        ClaimFigures, Costs, HeartbeatFigures, KeyedFigures, Latency, MultiFigures, PickupFigures, Rate, RateFigures,
        ScheduledFigures, SingleFigures, WorkflowFigures,
    };
    let rate = |jobs: u64, secs: f64| Rate { jobs, secs, wal_bytes: jobs as i64 * 1000 };
    let p50 = |ms: f64| Latency { p50: ms, ..Default::default() };
    let table = |upd: i64, hot: i64| Some(TableCounts { updates: upd, hot_updates: hot, ..Default::default() });
    let costs = Costs {
        index_entries: Some(8_000),
        round_trips: 100,
        statements: 100,
        table: table(2_000, 0),
        server_cpu_us: Some(800_000),
    };
    let drain = |c: u32, per_s: u64| DrainFigures {
        workers: 1,
        concurrency: c,
        rate: rate(per_s, 1.0),
        costs,
        ..Default::default()
    };
    let capped = |h: u64, per_s: u64| DrainFigures { capped: Some(8), handler_ms: h, ..drain(8, per_s) };
    let raw = |batch: u32, per_s: u64| RawFigures { batch, rate: rate(per_s, 1.0), costs, ..Default::default() };
    Results {
        enqueue: Some(rate(60_000, 1.0)),
        enqueue_unique: Some(rate(45_000, 1.0)),
        enqueue_unique_baseline: Some(rate(50_000, 1.0)),
        workflow: Some(WorkflowFigures {
            tasks: 10_001,
            enqueue: rate(40_000, 1.0),
            drain: rate(500, 1.0),
            chain: 200,
            step: p50(4.0),
            waiting: 1_000_000,
            claim_waiting: p50(2.8),
        }),
        single: Some(SingleFigures { tasks: 8, client: rate(700, 1.0), raw: rate(1000, 1.0), ..Default::default() }),
        drains: vec![drain(1, 100), drain(8, 900), drain(64, 2000)],
        raw: Some(raw(10, 1000)),
        raw_min: Some(raw(10, 1100)),
        raw_b500: Some(raw(500, 2250)),
        commit_rtt: Some(p50(2.0)),
        // Ceilings: 8 / 2 ms = 4,000/s; 8 / 7 ms = 1,142.9/s.
        capped: Some(capped(0, 3000)),
        capped_slow: Some(capped(5, 1000)),
        capped_spread: Some(DrainFigures { workers: 8, concurrency: 1, ..capped(0, 2000) }),
        capped_spread_slow: Some(DrainFigures { workers: 8, concurrency: 1, ..capped(5, 880) }),
        heartbeat: Some(HeartbeatFigures { table: table(1000, 950), ..Default::default() }),
        claims: vec![
            ClaimFigures { backlog: 10_000, all_queues: p50(2.0), ..Default::default() },
            ClaimFigures { backlog: 1_000_000, all_queues: p50(3.2), ..Default::default() },
        ],
        scheduled: Some(ScheduledFigures { scheduled: 1_000_000, due: 5, all_queues: p50(40.0) }),
        pickup: Some(PickupFigures { latency: p50(4.0), ..Default::default() }),
        multi: Some(MultiFigures {
            processes: 4,
            concurrency: 8,
            rate: rate(1200, 1.0),
            per_process: vec![300; 4],
            server_cpu_us: Some(120_000),
            claim_calls: 400,
            complete_calls: 300,
            released: 0,
            multixacts: Some(10),
        }),
        multi_1: Some(MultiFigures {
            processes: 1,
            concurrency: 8,
            rate: rate(1000, 1.0),
            per_process: vec![1000],
            server_cpu_us: Some(90_000),
            claim_calls: 100,
            complete_calls: 100,
            released: 0,
            multixacts: Some(0),
        }),
        exposure: Some(DrainFigures { exposure: Some((500, 500)), ..drain(8, 1000) }),
        keyed: Some(KeyedFigures {
            keys: 1000,
            cap: 2,
            concurrency: 8,
            drain: Some(rate(720, 1.0)),
            hot_jobs: 50_000,
            cold_jobs: 1000,
            cold_alone_s: Some(0.5),
            cold_with_hot_s: Some(0.9),
            hot_ran: 10,
            claim_backlog: 10_000,
            claim: Some(p50(2.4)),
            ..Default::default()
        }),
        rate: Some(RateFigures {
            limit: Some(chokaq::core::RateLimit::new(500, std::time::Duration::from_secs(1))),
            secs: 10,
            claimers: 4,
            starts: 4750,
            max_in_window: 500,
            span_s: 9.5,
            allowed: 5000,
            ..Default::default()
        }),
        ..Default::default()
    }
}
