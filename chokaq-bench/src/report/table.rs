//! The report: the table on stdout, each target with its measured ratio and verdict, and the
//! one-line JSON object of `--json`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::args::Args;
use crate::figures::{human, round1, round3, DrainFigures, Latency, PerJob, Rate, RawFigures, Results, TableCounts};

struct Target {
    name: String,
    rule: String,
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

/// `a / b` when both were measured.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a / b)
}

fn target(name: &str, rule: &str, measured: Option<f64>, threshold: f64, at_least: bool) -> Target {
    Target { name: name.to_string(), rule: rule.to_string(), measured, threshold, at_least }
}

fn targets(args: &Args, r: &Results) -> Vec<Target> {
    let drain = r.main_drain().map(|d| d.rate.per_s());
    let raw = r.raw.as_ref().map(|x| x.rate.per_s());
    let raw_min = r.raw_min.as_ref().map(|x| x.rate.per_s());
    let claim_small = r.claims.first().map(|c| c.all_queues.p50);
    let claim_large = r.claims.get(1).map(|c| c.all_queues.p50);
    let scheduled = r.scheduled.as_ref().map(|s| s.all_queues.p50);
    let single = r.single.as_ref().map(|s| s.client.per_s());
    let single_raw = r.single.as_ref().map(|s| s.raw.per_s());
    let h = args.handler_ms;
    vec![
        target("drain_vs_raw", "drain_jobs_per_s >= 0.8 x raw_drain_jobs_per_s", ratio(drain, raw), 0.8, true),
        target(
            "drain_vs_raw_min",
            "drain_jobs_per_s >= 0.9 x raw_min_drain_jobs_per_s",
            ratio(drain, raw_min),
            0.9,
            true,
        ),
        target(
            "capped_efficiency_h0",
            "capped_efficiency_h0 >= 0.8 (jobs/s over C / commit_rtt_ms_p50)",
            r.capped_efficiency(r.capped.as_ref()),
            0.8,
            true,
        ),
        Target {
            name: format!("capped_efficiency_h{h}"),
            rule: format!("capped_efficiency_h{h} >= 0.8 (jobs/s over C / ({h} ms + rtt))"),
            measured: r.capped_efficiency(r.capped_slow.as_ref()),
            threshold: 0.8,
            at_least: true,
        },
        target(
            "claim_1m_vs_10k",
            "claim_ms_p50_backlog_1m <= 1.5 x claim_ms_p50_backlog_10k",
            ratio(claim_large, claim_small),
            1.5,
            false,
        ),
        target(
            "claim_scheduled",
            "claim_ms_p50_scheduled_1m <= 1.5 x claim_ms_p50_backlog_10k",
            ratio(scheduled, claim_small),
            1.5,
            false,
        ),
        target(
            "enqueue_single",
            "enqueue_single_concurrent_jobs_per_s >= 0.8 x raw_insert_single_concurrent_per_s",
            ratio(single, single_raw),
            0.8,
            true,
        ),
        target(
            "heartbeat_hot",
            "heartbeat_hot_share >= 0.9",
            r.heartbeat.as_ref().and_then(|h| h.table.and_then(|t| t.hot_share())),
            0.9,
            true,
        ),
        target("pickup_p50", "pickup_ms_p50 <= 5 ms", r.pickup.as_ref().map(|p| p.latency.p50), 5.0, false),
        target("enqueue_rate", "enqueue_jobs_per_s >= 50,000", r.enqueue.as_ref().map(Rate::per_s), 50_000.0, true),
    ]
}

fn verdict(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "MET",
        Some(false) => "NOT MET",
        None => "n/a (not run)",
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

fn hot(t: Option<TableCounts>) -> String {
    t.and_then(|t| t.hot_share()).map_or("HOT -".to_string(), |h| format!("HOT {h:.2}"))
}

fn wal(rate: &Rate) -> String {
    format!("WAL {:.0} B/job", rate.wal_bytes as f64 / rate.jobs.max(1) as f64)
}

fn drain_notes(d: &DrainFigures) -> String {
    let claims = d.claims();
    format!(
        "{} claims of {:.1} jobs ({:.2} ms, {} empty, {} with completions), {} completes of {:.1} jobs ({:.2} ms), {} starts ({:.2} ms), {}, {}",
        claims.calls,
        claims.items as f64 / claims.calls.max(1) as f64,
        claims.mean_ms,
        claims.empty,
        d.complete_and_claim.calls,
        d.complete.calls,
        d.complete.items as f64 / d.complete.calls.max(1) as f64,
        d.complete.mean_ms,
        d.start.calls,
        d.start.mean_ms,
        hot(d.costs.table),
        wal(&d.rate)
    )
}

fn raw_notes(x: &RawFigures, finish: &str) -> String {
    format!(
        "claim {:.2} ms, {finish} {:.2} ms, {}, {}",
        x.claim.mean_ms,
        x.finish.mean_ms,
        hot(x.costs.table),
        wal(&x.rate)
    )
}

pub(crate) fn print_table(args: &Args, env: &Value, r: &Results) {
    println!();
    println!("chokaq-bench  {}  {}", env["date"].as_str().unwrap_or(""), env["server"].as_str().unwrap_or(""));
    println!(
        "settings: jobs {} (capped {} / {} at {} ms), enqueue batch {} x{} callers, pool {} connections, raw {} loops x claim {}, raw_min {} loops, cap {}, synchronous_commit {}",
        args.jobs,
        args.capped_jobs,
        args.capped_slow_jobs,
        args.handler_ms,
        args.enqueue_batch,
        args.enqueue_tasks,
        args.connections,
        args.raw_loops(),
        args.raw_batch,
        args.raw_min_loops,
        args.cap,
        env["synchronous_commit"].as_str().unwrap_or("?"),
    );
    println!();
    println!("{:<36} {:>10} {:>9} {:>12}  notes", "throughput", "jobs", "seconds", "jobs/s");
    println!("{}", "-".repeat(100));
    let row = |name: &str, rate: &Rate, notes: String| {
        println!("{:<36} {:>10} {:>9.2} {:>12.0}  {}", name, rate.jobs, rate.secs, rate.per_s(), notes);
    };
    if let Some(e) = &r.enqueue {
        row(&format!("enqueue (batches of {})", args.enqueue_batch), e, wal(e));
    }
    if let Some(x) = &r.single {
        row(
            &format!("enqueue x1, {} tasks, Client::enqueue", x.tasks),
            &x.client,
            format!("call p50 {:.2} ms, {}", x.client_call.p50, wal(&x.client)),
        );
        row(
            &format!("insert x1, {} connections, bare", x.tasks),
            &x.raw,
            format!("call p50 {:.2} ms, {}", x.raw_call.p50, wal(&x.raw)),
        );
        row(
            &format!("insert x1, {} tasks, pool", x.tasks),
            &x.pool,
            format!("call p50 {:.2} ms, {}", x.pool_call.p50, wal(&x.pool)),
        );
        row(
            &format!("insert x1, {} tasks, pool, NOTIFY/3ms", x.tasks),
            &x.pool_notify,
            format!("call p50 {:.2} ms, {}", x.pool_notify_call.p50, wal(&x.pool_notify)),
        );
    }
    for d in &r.drains {
        row(&format!("drain, runtime, {} slots", d.concurrency), &d.rate, drain_notes(d));
    }
    if let Some(x) = &r.raw {
        row(&format!("raw loop, {} loops x claim {}", x.loops, x.batch), &x.rate, raw_notes(x, "delete"));
    }
    if let Some(x) = &r.raw_min {
        row(&format!("raw_min loop, {} loops x claim {}", x.loops, x.batch), &x.rate, raw_notes(x, "update"));
    }
    for d in [&r.capped, &r.capped_slow, &r.capped_spread, &r.capped_spread_slow].into_iter().flatten() {
        let shape = if d.workers > 1 {
            format!("{} workers x {} slot", d.workers, d.concurrency)
        } else {
            format!("{} slots", d.concurrency)
        };
        row(
            &format!("drain, {shape}, max_workers {}, h {} ms", d.capped.unwrap_or(0), d.handler_ms),
            &d.rate,
            format!(
                "efficiency {}, handler {:.2} ms measured, {}",
                opt(r.capped_efficiency(Some(d)), 3),
                d.handler_ms_measured,
                drain_notes(d)
            ),
        );
    }
    if let Some(m) = &r.multi {
        row(
            &format!("multi-process, {} x {} slots", m.processes, m.concurrency),
            &m.rate,
            format!("per process {:?} (the example's own clock, enqueue included)", m.per_process),
        );
    }
    for (label, rate) in &r.fill {
        row(&format!("({label}: 10k batches x2)"), rate, wal(rate));
    }
    let per_job = per_job_columns(r);
    if per_job.iter().any(|(_, p, _)| p.is_some()) {
        println!();
        println!("{:<36} {:>14} {:>14} {:>14}", "cost per job", "chokaq drain", "raw loop", "raw_min loop");
        println!("{}", "-".repeat(100));
        let line = |name: &str, f: &dyn Fn(&PerJob) -> Option<f64>, digits: usize| {
            let cells: Vec<String> = per_job.iter().map(|(_, p, _)| opt(p.as_ref().and_then(f), digits)).collect();
            println!("{:<36} {:>14} {:>14} {:>14}", name, cells[0], cells[1], cells[2]);
        };
        line("WAL bytes/job", &|p| Some(p.wal_bytes), 0);
        line("index entries/job", &|p| p.index_entries, 2);
        line("round trips/job", &|p| Some(p.round_trips), 3);
        line("statements/job", &|p| Some(p.statements), 3);
        let cells: Vec<String> = per_job.iter().map(|(_, _, t)| opt(t.and_then(|t| t.hot_share()), 3)).collect();
        println!("{:<36} {:>14} {:>14} {:>14}", "HOT share of updates", cells[0], cells[1], cells[2]);
    }
    let any_latency = !r.claims.is_empty()
        || r.pickup.is_some()
        || r.scheduled.is_some()
        || r.commit_rtt.is_some()
        || r.heartbeat.is_some();
    if any_latency {
        println!();
        println!("{:<36} {:>10} {:>9} {:>9} {:>9} {:>9}", "latency (ms)", "samples", "p50", "p90", "p99", "max");
        println!("{}", "-".repeat(100));
        let lat = |name: &str, l: &Latency| {
            println!("{:<36} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3}", name, l.samples, l.p50, l.p90, l.p99, l.max);
        };
        if let Some(l) = &r.commit_rtt {
            lat("commit round trip (1-row UPDATE)", l);
        }
        for c in &r.claims {
            lat(&format!("claim 10, {} queues, backlog {}", args.claim_queues, human(c.backlog)), &c.all_queues);
            lat(&format!("claim 10, 1 queue, backlog {}", human(c.backlog)), &c.one_queue);
        }
        if let Some(s) = &r.scheduled {
            lat(&format!("claim 10, {} due + {} scheduled", s.due, human(s.scheduled)), &s.all_queues);
        }
        if let Some(h) = &r.heartbeat {
            lat(&format!("heartbeat call, {} jobs", h.jobs), &h.call);
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
    if let Some(h) = &r.heartbeat {
        println!();
        match h.table {
            Some(t) => println!(
                "heartbeat: {} of {} updates HOT ({} jobs x {} calls), {:.2} index entries and {:.0} B of WAL per update",
                t.hot_updates,
                t.updates,
                h.jobs,
                h.rounds,
                h.index_entries.map_or(f64::NAN, |n| n as f64 / t.updates.max(1) as f64),
                h.wal_bytes as f64 / t.updates.max(1) as f64,
            ),
            None => println!("heartbeat: HOT share not measured (PostgreSQL before 15)"),
        }
    }
    println!();
    println!("targets");
    println!("{}", "-".repeat(100));
    for t in targets(args, r) {
        let m = t.measured.map_or("-".to_string(), |m| format!("{m:.3}"));
        println!("{:<22} {:<72} measured {:>10}  {}", t.name, t.rule, m, verdict(t.met()));
    }
}

/// The columns of the cost table: name, per-job figures and table counters of the main
/// drain, the raw loop and the raw_min loop.
fn per_job_columns(r: &Results) -> [(&'static str, Option<PerJob>, Option<TableCounts>); 3] {
    let raw = |x: &Option<RawFigures>| x.as_ref().map(|x| x.costs.per_job(&x.rate));
    let table = |x: &Option<RawFigures>| x.as_ref().and_then(|x| x.costs.table);
    [
        ("chokaq_drain", r.main_drain().map(|d| d.costs.per_job(&d.rate)), r.main_drain().and_then(|d| d.costs.table)),
        ("raw", raw(&r.raw), table(&r.raw)),
        ("raw_min", raw(&r.raw_min), table(&r.raw_min)),
    ]
}

pub(crate) fn to_json(args: &Args, env: &Value, r: &Results) -> Value {
    let mut o = serde_json::Map::new();
    let f = |x: Option<f64>| x.map(round1);
    let f3 = |x: Option<f64>| x.map(round3);
    let h = args.handler_ms;
    o.insert("enqueue_jobs_per_s".into(), json!(f(r.enqueue.as_ref().map(Rate::per_s))));
    o.insert("enqueue_single_concurrent_jobs_per_s".into(), json!(f(r.single.as_ref().map(|s| s.client.per_s()))));
    o.insert("raw_insert_single_concurrent_per_s".into(), json!(f(r.single.as_ref().map(|s| s.raw.per_s()))));
    o.insert("drain_jobs_per_s".into(), json!(f(r.main_drain().map(|d| d.rate.per_s()))));
    for c in &args.drain_concurrency {
        let d = r.drains.iter().find(|d| d.concurrency == *c);
        o.insert(format!("drain_jobs_per_s_c{c}"), json!(f(d.map(|d| d.rate.per_s()))));
    }
    o.insert(
        format!("drain_jobs_per_s_{}x{}", args.mp_processes, args.mp_concurrency),
        json!(f(r.multi.as_ref().map(|m| m.rate.per_s()))),
    );
    o.insert("raw_drain_jobs_per_s".into(), json!(f(r.raw.as_ref().map(|x| x.rate.per_s()))));
    o.insert("raw_min_drain_jobs_per_s".into(), json!(f(r.raw_min.as_ref().map(|x| x.rate.per_s()))));
    o.insert("drain_hot_share".into(), json!(f3(r.main_drain().and_then(|d| d.costs.table?.hot_share()))));
    o.insert("commit_rtt_ms_p50".into(), json!(f3(r.commit_rtt.map(|l| l.p50))));
    o.insert("capped_drain_jobs_per_s".into(), json!(f(r.capped.as_ref().map(|x| x.rate.per_s()))));
    o.insert(format!("capped_drain_jobs_per_s_h{h}"), json!(f(r.capped_slow.as_ref().map(|x| x.rate.per_s()))));
    o.insert("capped_efficiency_h0".into(), json!(f3(r.capped_efficiency(r.capped.as_ref()))));
    o.insert(format!("capped_efficiency_h{h}"), json!(f3(r.capped_efficiency(r.capped_slow.as_ref()))));
    o.insert("capped_spread_drain_jobs_per_s".into(), json!(f(r.capped_spread.as_ref().map(|x| x.rate.per_s()))));
    o.insert(
        format!("capped_spread_drain_jobs_per_s_h{h}"),
        json!(f(r.capped_spread_slow.as_ref().map(|x| x.rate.per_s()))),
    );
    o.insert("capped_spread_efficiency_h0".into(), json!(f3(r.capped_efficiency(r.capped_spread.as_ref()))));
    o.insert(format!("capped_spread_efficiency_h{h}"), json!(f3(r.capped_efficiency(r.capped_spread_slow.as_ref()))));
    o.insert(
        "heartbeat_hot_share".into(),
        json!(f3(r.heartbeat.as_ref().and_then(|x| x.table.and_then(|t| t.hot_share())))),
    );
    o.insert("claim_ms_p50_backlog_10k".into(), json!(r.claims.first().map(|c| round3(c.all_queues.p50))));
    o.insert("claim_ms_p50_backlog_1m".into(), json!(r.claims.get(1).map(|c| round3(c.all_queues.p50))));
    o.insert("claim_ms_p50_scheduled_1m".into(), json!(r.scheduled.as_ref().map(|s| round3(s.all_queues.p50))));
    o.insert("pickup_ms_p50".into(), json!(r.pickup.as_ref().map(|p| round3(p.latency.p50))));
    o.insert("pickup_ms_p99".into(), json!(r.pickup.as_ref().map(|p| round3(p.latency.p99))));
    let per_job: serde_json::Map<String, Value> = per_job_columns(r)
        .iter()
        .map(|(name, p, t)| {
            let v = p.map(|p| {
                let mut v = p.json();
                v["hot_share"] = json!(t.and_then(|t| t.hot_share()).map(round3));
                v
            });
            (name.to_string(), json!(v))
        })
        .collect();
    o.insert("per_job".into(), Value::Object(per_job));
    let by_c: BTreeMap<String, f64> =
        r.drains.iter().map(|d| (d.concurrency.to_string(), round1(d.rate.per_s()))).collect();
    o.insert("drain_jobs_per_s_by_concurrency".into(), json!(by_c));
    o.insert("drains".into(), Value::Array(r.drains.iter().map(DrainFigures::json).collect()));
    o.insert("capped".into(), json!(r.capped.as_ref().map(DrainFigures::json)));
    o.insert("capped_slow".into(), json!(r.capped_slow.as_ref().map(DrainFigures::json)));
    o.insert("capped_spread".into(), json!(r.capped_spread.as_ref().map(DrainFigures::json)));
    o.insert("capped_spread_slow".into(), json!(r.capped_spread_slow.as_ref().map(DrainFigures::json)));
    o.insert("commit_rtt".into(), json!(r.commit_rtt.map(|l| l.json())));
    o.insert("raw".into(), json!(r.raw.as_ref().map(|x| x.json("delete"))));
    o.insert("raw_min".into(), json!(r.raw_min.as_ref().map(|x| x.json("update"))));
    o.insert(
        "enqueue".into(),
        json!(r.enqueue.as_ref().map(|e| json!({
            "jobs": e.jobs, "seconds": round3(e.secs), "jobs_per_s": round1(e.per_s()),
            "wal_bytes_per_job": round1(e.wal_bytes as f64 / e.jobs as f64),
        }))),
    );
    let rate_json = |x: &Rate| {
        json!({ "jobs": x.jobs, "seconds": round3(x.secs), "jobs_per_s": round1(x.per_s()),
                "wal_bytes_per_job": round1(x.wal_bytes as f64 / x.jobs.max(1) as f64) })
    };
    o.insert(
        "enqueue_single".into(),
        json!(r.single.as_ref().map(|s| json!({
            "tasks": s.tasks,
            "client": rate_json(&s.client), "client_call": s.client_call.json(),
            "raw": rate_json(&s.raw), "raw_call": s.raw_call.json(),
            "raw_pool": rate_json(&s.pool), "raw_pool_call": s.pool_call.json(),
            "raw_pool_notify": rate_json(&s.pool_notify), "raw_pool_notify_call": s.pool_notify_call.json(),
        }))),
    );
    o.insert(
        "heartbeat".into(),
        json!(r.heartbeat.as_ref().map(|h| json!({
            "jobs": h.jobs, "rounds": h.rounds, "call": h.call.json(),
            "jobs_hot": h.table.map(|t| t.json()),
            "wal_bytes": h.wal_bytes, "index_entries": h.index_entries,
        }))),
    );
    o.insert(
        "multi_process".into(),
        json!(r.multi.as_ref().map(|m| json!({
            "processes": m.processes, "concurrency": m.concurrency, "jobs": m.rate.jobs,
            "seconds": round3(m.rate.secs), "jobs_per_s": round1(m.rate.per_s()), "per_process": m.per_process,
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
        "scheduled_claim".into(),
        json!(r.scheduled.as_ref().map(|s| json!({
            "scheduled": s.scheduled, "due": s.due, "all_queues": s.all_queues.json(),
        }))),
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
            targets(args, r)
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
            "single_jobs": args.single_jobs,
            "single_tasks": args.single_tasks,
            "drain_concurrency": args.drain_concurrency,
            "low_drain_jobs": args.low_drain_jobs,
            "connections": args.connections,
            "raw_loops": args.raw_loops(),
            "raw_batch": args.raw_batch,
            "raw_min_loops": args.raw_min_loops,
            "cap": args.cap,
            "capped_jobs": args.capped_jobs,
            "capped_slow_jobs": args.capped_slow_jobs,
            "handler_ms": args.handler_ms,
            "rtt_samples": args.rtt_samples,
            "min_poll_ms": args.min_poll_ms,
            "heartbeat_jobs": args.heartbeat_jobs,
            "heartbeat_rounds": args.heartbeat_rounds,
            "backlog_small": args.backlog_small,
            "backlog_large": args.backlog_large,
            "claim_queues": args.claim_queues,
            "claim_samples": args.claim_samples,
            "scheduled_jobs": args.scheduled_jobs,
            "scheduled_due": args.scheduled_due,
            "scheduled_samples": args.scheduled_samples,
            "pickup_jobs": args.pickup_jobs,
            "pickup_rate": args.pickup_rate,
            "mp_processes": args.mp_processes,
            "mp_concurrency": args.mp_concurrency,
            "mp_jobs": args.mp_jobs(),
            "workloads": args.workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
        }),
    );
    o.insert("environment".into(), env.clone());
    Value::Object(o)
}

/// The keys a full run puts at the top level of its JSON line (the default settings).
#[cfg(test)]
pub(crate) const HEADLINE_KEYS: [&str; 26] = [
    "enqueue_jobs_per_s",
    "enqueue_single_concurrent_jobs_per_s",
    "raw_insert_single_concurrent_per_s",
    "drain_jobs_per_s",
    "drain_jobs_per_s_c1",
    "drain_jobs_per_s_c8",
    "drain_jobs_per_s_c64",
    "drain_jobs_per_s_4x8",
    "raw_drain_jobs_per_s",
    "raw_min_drain_jobs_per_s",
    "drain_hot_share",
    "commit_rtt_ms_p50",
    "capped_drain_jobs_per_s",
    "capped_drain_jobs_per_s_h5",
    "capped_efficiency_h0",
    "capped_efficiency_h5",
    "capped_spread_efficiency_h0",
    "capped_spread_efficiency_h5",
    "heartbeat_hot_share",
    "claim_ms_p50_backlog_10k",
    "claim_ms_p50_backlog_1m",
    "claim_ms_p50_scheduled_1m",
    "pickup_ms_p50",
    "pickup_ms_p99",
    "per_job",
    "targets",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse as args;
    use crate::figures::{
        ClaimFigures, Costs, HeartbeatFigures, MultiFigures, PickupFigures, RawFigures, ScheduledFigures, SingleFigures,
    };

    fn rate(jobs: u64, secs: f64) -> Rate {
        Rate { jobs, secs, wal_bytes: jobs as i64 * 1000 }
    }

    fn p50(ms: f64) -> Latency {
        Latency { p50: ms, ..Default::default() }
    }

    fn results() -> Results {
        let table = |upd: i64, hot: i64| Some(TableCounts { updates: upd, hot_updates: hot, ..Default::default() });
        let costs = Costs { index_entries: Some(8_000), round_trips: 100, statements: 100, table: table(2_000, 0) };
        let drain = |c: u32, per_s: u64| DrainFigures {
            workers: 1,
            concurrency: c,
            rate: rate(per_s, 1.0),
            costs,
            ..Default::default()
        };
        let capped = |h: u64, per_s: u64| DrainFigures { capped: Some(8), handler_ms: h, ..drain(8, per_s) };
        let raw = |per_s: u64| RawFigures { rate: rate(per_s, 1.0), costs, ..Default::default() };
        Results {
            enqueue: Some(rate(60_000, 1.0)),
            single: Some(SingleFigures {
                tasks: 8,
                client: rate(700, 1.0),
                raw: rate(1000, 1.0),
                ..Default::default()
            }),
            drains: vec![drain(1, 100), drain(8, 900), drain(64, 2000)],
            raw: Some(raw(1000)),
            raw_min: Some(raw(1100)),
            commit_rtt: Some(p50(2.0)),
            // Ceilings: 8 / 2 ms = 4,000/s; 8 / 7 ms = 1,142.9/s.
            capped: Some(capped(0, 3000)),
            capped_slow: Some(capped(5, 1000)),
            capped_spread: Some(DrainFigures { workers: 8, concurrency: 1, ..capped(0, 2000) }),
            capped_spread_slow: Some(DrainFigures { workers: 8, concurrency: 1, ..capped(5, 800) }),
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
            }),
            ..Default::default()
        }
    }

    #[test]
    fn targets_compare_the_right_figures() {
        let r = results();
        let a = args(&[]);
        let t: Vec<(String, f64, Option<bool>)> =
            targets(&a, &r).iter().map(|t| (t.name.clone(), round3(t.measured.unwrap()), t.met())).collect();
        let want = [
            ("drain_vs_raw", 0.9, true),
            ("drain_vs_raw_min", 0.818, false),
            ("capped_efficiency_h0", 0.75, false),
            ("capped_efficiency_h5", 0.875, true),
            ("claim_1m_vs_10k", 1.6, false),
            ("claim_scheduled", 20.0, false),
            ("enqueue_single", 0.7, false),
            ("heartbeat_hot", 0.95, true),
            ("pickup_p50", 4.0, true),
            ("enqueue_rate", 60_000.0, true),
        ];
        let want: Vec<(String, f64, Option<bool>)> =
            want.iter().map(|(n, m, ok)| (n.to_string(), *m, Some(*ok))).collect();
        assert_eq!(t, want);
        assert!(!t.iter().any(|(n, _, _)| n == "capped_vs_drain"), "retired");
        assert!(targets(&a, &Results::default()).iter().all(|t| t.met().is_none()));
    }

    #[test]
    fn json_has_every_figure() {
        let r = results();
        let j = to_json(&args(&[]), &json!({}), &r);
        for key in HEADLINE_KEYS {
            assert!(!j[key].is_null(), "{key} missing");
        }
        assert_eq!(j["drain_jobs_per_s"], json!(900.0));
        assert_eq!(j["drain_jobs_per_s_c64"], json!(2000.0));
        assert_eq!(j["drain_jobs_per_s_4x8"], json!(1200.0));
        assert_eq!(j["drain_jobs_per_s_by_concurrency"]["1"], json!(100.0));
        assert_eq!(j["capped_efficiency_h5"], json!(0.875));
        assert_eq!(
            (j["capped_spread_efficiency_h0"].clone(), j["capped_spread_efficiency_h5"].clone()),
            (json!(0.5), json!(0.7))
        );
        assert_eq!(j["heartbeat_hot_share"], json!(0.95));
        assert_eq!(j["drain_hot_share"], json!(0.0));
        // 8,000 index entries over 900 jobs; 100 round trips; 1,000 B of WAL a job.
        let d = &j["per_job"]["chokaq_drain"];
        assert_eq!((d["index_entries"].clone(), d["round_trips"].clone()), (json!(8.889), json!(0.111)));
        assert_eq!(d["wal_bytes"], json!(1000.0));
        for col in ["chokaq_drain", "raw", "raw_min"] {
            for k in ["wal_bytes", "index_entries", "round_trips", "statements", "hot_share"] {
                assert!(j["per_job"][col][k].is_number(), "per_job.{col}.{k}");
            }
        }
        // Another handler time and process layout name their keys after themselves.
        let j = to_json(&args(&["--handler-ms", "10", "--mp-processes", "2"]), &json!({}), &r);
        assert!(j["capped_efficiency_h10"].is_number() && j["drain_jobs_per_s_2x8"].is_number());
        assert!(j.get("capped_efficiency_h5").is_none());
    }
}
