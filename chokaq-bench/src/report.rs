//! The report: the table on stdout, each target with its measured ratio and verdict, and the
//! one-line JSON object of `--json`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::args::Args;
use crate::figures::{human, round1, round3, DrainFigures, Latency, Rate, Results};

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

pub(crate) fn print_table(args: &Args, env: &Value, r: &Results) {
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

pub(crate) fn to_json(args: &Args, env: &Value, r: &Results) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse as args;
    use crate::figures::{ClaimFigures, PickupFigures, RawFigures};

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
}
