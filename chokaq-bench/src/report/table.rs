//! The table on stdout: throughput, each drain against the raw loops, the cost per job,
//! latencies, the heartbeat's HOT share, and every target with its verdict.

use serde_json::Value;

use super::targets::targets;
use super::{per_job_columns, raw_loops, vs_raw};
use crate::args::{Args, RAW_B500_BATCH};
use crate::figures::{human, DrainFigures, Latency, PerJob, Rate, RawFigures, Results, TableCounts};

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
        "settings: jobs {} (capped {} / {} at {} ms), enqueue batch {} x{} callers, pool {} connections, raw {} loops x claim {} (raw_b500: claim {}), raw_min {} loops, cap {}, synchronous_commit {}",
        args.jobs,
        args.capped_jobs,
        args.capped_slow_jobs,
        args.handler_ms,
        args.enqueue_batch,
        args.enqueue_tasks,
        args.connections,
        args.raw_loops(),
        args.raw_batch,
        RAW_B500_BATCH,
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
    if let (Some(u), Some(p)) = (&r.enqueue_unique, &r.enqueue_unique_baseline) {
        row(&format!("enqueue, plain (batches of {}, unique baseline)", args.enqueue_batch), p, wal(p));
        row(&format!("enqueue, unique by args (batches of {})", args.enqueue_batch), u, wal(u));
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
        row(&drain_name(d), &d.rate, drain_notes(d));
    }
    if let Some(x) = &r.raw {
        row(&format!("raw loop, {} loops x claim {}", x.loops, x.batch), &x.rate, raw_notes(x, "delete"));
    }
    if let Some(x) = &r.raw_b500 {
        row(&format!("raw_b500 loop, {} loops x claim {}", x.loops, x.batch), &x.rate, raw_notes(x, "delete"));
    }
    if let Some(x) = &r.raw_min {
        row(&format!("raw_min loop, {} loops x claim {}", x.loops, x.batch), &x.rate, raw_notes(x, "update"));
    }
    for d in [&r.capped, &r.capped_slow, &r.capped_spread, &r.capped_spread_slow].into_iter().flatten() {
        row(
            &drain_name(d),
            &d.rate,
            format!(
                "efficiency {}, handler {:.2} ms measured, {}",
                opt(r.capped_efficiency(Some(d)), 3),
                d.handler_ms_measured,
                drain_notes(d)
            ),
        );
    }
    if let Some(d) = &r.exposure {
        let (l, u) = d.exposure.unwrap_or_default();
        row(&format!("drain, {} slots, lookahead {l}, unwritten {u}", d.concurrency), &d.rate, drain_notes(d));
    }
    for m in [&r.multi_1, &r.multi].into_iter().flatten() {
        row(
            &format!("multi-process, {} x {} slots", m.processes, m.concurrency),
            &m.rate,
            format!(
                "per process {:?}, server CPU {} us/job (the example's own clock and whole run, enqueue included), {} claim calls, {} complete calls, {} released, {} MultiXacts",
                m.per_process,
                opt(m.server_cpu_per_job(), 1),
                m.claim_calls,
                m.complete_calls,
                m.released,
                m.multixacts.map_or("n/a".to_string(), |n| n.to_string())
            ),
        );
    }
    for (label, rate) in &r.fill {
        row(&format!("({label}: 10k batches x2)"), rate, wal(rate));
    }
    print_vs_raw(r);
    let per_job = per_job_columns(r);
    if per_job.iter().any(|(_, p, _)| p.is_some()) {
        println!();
        let cells = |c: [String; 5]| format!("{:>14} {:>14} {:>14} {:>14} {:>14}", c[0], c[1], c[2], c[3], c[4]);
        let heads = ["chokaq drain", "exposure drain", "raw loop", "raw_min loop", "raw_b500 loop"].map(String::from);
        println!("{:<36} {}", "cost per job", cells(heads));
        println!("{}", "-".repeat(111));
        let line = |name: &str, f: &dyn Fn(&PerJob) -> Option<f64>, digits: usize| {
            println!("{:<36} {}", name, cells(per_job.map(|(_, p, _)| opt(p.as_ref().and_then(f), digits))));
        };
        line("WAL bytes/job", &|p| Some(p.wal_bytes), 0);
        line("index entries/job", &|p| p.index_entries, 2);
        line("round trips/job", &|p| Some(p.round_trips), 3);
        line("statements/job", &|p| Some(p.statements), 3);
        line("server CPU us/job", &|p| p.server_cpu_us, 1);
        let hot = per_job.map(|(_, _, t)| opt(t.and_then(|t| t.hot_share()), 3));
        println!("{:<36} {}", "HOT share of updates", cells(hot));
        if let Some(why) = &r.server_cpu_note {
            println!("(server CPU not measured: {why})");
        }
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
    print_keyed(r);
    println!();
    println!("targets");
    println!("{}", "-".repeat(100));
    let targets = targets(args, r);
    let name_width = targets.iter().map(|t| t.name.len()).max().unwrap_or(0);
    let rule_width = targets.iter().map(|t| t.rule.len()).max().unwrap_or(0);
    for t in targets {
        let m = t.measured.map_or("-".to_string(), |m| format!("{m:.3}"));
        println!("{:<name_width$} {:<rule_width$} measured {:>10}  {}", t.name, t.rule, m, t.verdict());
    }
}

/// Each drain's jobs/s over each raw loop's, one row per drain (the uncapped ones, then the
/// capped ones), when any raw loop ran.
fn print_vs_raw(r: &Results) {
    let capped = [&r.capped, &r.capped_slow, &r.capped_spread, &r.capped_spread_slow];
    let drains: Vec<&DrainFigures> = r.drains.iter().chain(capped.into_iter().flatten()).collect();
    let loops = raw_loops(r);
    if drains.is_empty() || loops.iter().all(|(_, x)| x.is_none()) {
        return;
    }
    let width = drains.iter().map(|d| drain_name(d).len()).max().unwrap_or(0).max(36);
    println!();
    let [a, b, c] = loops.map(|(name, _)| format!("vs {name}"));
    println!("{:<width$} {a:>14} {b:>14} {c:>14}", "drain against the raw loops");
    println!("{}", "-".repeat(100));
    for d in drains {
        let [a, b, c] = vs_raw(Some(d), r).map(|(_, v)| opt(v, 3));
        println!("{:<width$} {a:>14} {b:>14} {c:>14}", drain_name(d));
    }
}

/// A drain's name in the tables.
fn drain_name(d: &DrainFigures) -> String {
    match d.capped {
        None => format!("drain, runtime, {} slots", d.concurrency),
        Some(cap) => {
            let shape = if d.workers > 1 {
                format!("{} workers x {} slot", d.workers, d.concurrency)
            } else {
                format!("{} slots", d.concurrency)
            };
            format!("drain, {shape}, max_workers {cap}, h {} ms", d.handler_ms)
        }
    }
}

/// Issue 25's figures: the keyed drain beside the drain, the hot key, the keyed claim beside
/// the claim at 10k, the rate-limited queue ("n/a (unsupported)" on a backend without them).
fn print_keyed(r: &Results) {
    if r.keyed.is_none() && r.rate.is_none() {
        return;
    }
    const NA: &str = "n/a (unsupported)";
    println!();
    println!("keys and rate limits");
    println!("{}", "-".repeat(100));
    if let Some(k) = &r.keyed {
        let drain = r.main_drain().map(|d| d.rate.per_s());
        match k.drain_per_s() {
            Some(x) => println!(
                "{:<36} {:>12.0} jobs/s  ({} jobs, {} keys, key_max_workers {}, {} slots); drain_jobs_per_s {}, ratio {}",
                "keyed drain",
                x,
                k.drain.as_ref().map_or(0, |d| d.jobs),
                k.keys,
                k.cap,
                k.concurrency,
                opt(drain, 0),
                opt(drain.map(|d| x / d), 3)
            ),
            None => println!("{:<36} {NA}", "keyed drain"),
        }
        for (what, c) in [("  its claims", k.drain_claim), ("  its completes", k.drain_complete)] {
            if let Some(c) = c.filter(|c| c.calls > 0) {
                println!(
                    "{:<36} {:>12.3} ms      ({} calls, {:.1} jobs a call, {:.3} s busy)",
                    what,
                    c.mean_ms,
                    c.calls,
                    c.items as f64 / c.calls as f64,
                    c.busy_s
                );
            }
        }
        match k.hot_ratio() {
            Some(x) => println!(
                "{:<36} {:>12.3}          ({} jobs of one key each: {} s alone, {} s behind {} jobs of one key at cap 1; {} of those ran meanwhile)",
                "keyed hot ratio",
                x,
                k.cold_jobs,
                opt(k.cold_alone_s, 3),
                opt(k.cold_with_hot_s, 3),
                k.hot_jobs,
                k.hot_ran
            ),
            None => println!("{:<36} {NA}", "keyed hot ratio"),
        }
        match k.claim {
            Some(l) => println!(
                "{:<36} {:>12.3} ms      ({} distinct keys in the backlog; claim_ms_p50_backlog_10k {} ms)",
                "claim 10 p50, keyed backlog",
                l.p50,
                k.claim_backlog,
                opt(r.claims.first().map(|c| c.all_queues.p50), 3)
            ),
            None => println!("{:<36} {NA}", "claim 10 p50, keyed backlog"),
        }
    }
    if let Some(x) = &r.rate {
        if x.unsupported {
            println!("{:<36} {NA}", "rate limited");
        } else {
            println!(
                "{:<36} {:>12}          (limit {}; {} starts by {} claim loops in {} s, span {:.3} s, {} allowed: utilisation {})",
                "rate limited: max in a window",
                x.max_in_window,
                x.limit.map_or_else(String::new, |l| l.to_string()),
                x.starts,
                x.claimers,
                x.secs,
                x.span_s,
                x.allowed,
                opt(x.utilisation(), 3)
            );
        }
    }
}
