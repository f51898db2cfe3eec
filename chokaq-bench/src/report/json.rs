//! The one-line JSON object of `--json`: the headline figures, the per-job costs, each
//! workload's details, the targets with their verdicts, the settings and the environment.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::targets::targets;
use super::{per_job_columns, vs_raw};
use crate::args::{Args, RAW_B500_BATCH};
use crate::figures::{round1, round3, DrainFigures, Rate, Results};

pub(crate) fn to_json(args: &Args, env: &Value, r: &Results) -> Value {
    let mut o = serde_json::Map::new();
    let f = |x: Option<f64>| x.map(round1);
    let f3 = |x: Option<f64>| x.map(round3);
    let h = args.handler_ms;
    o.insert("enqueue_jobs_per_s".into(), json!(f(r.enqueue.as_ref().map(Rate::per_s))));
    o.insert("enqueue_unique_jobs_per_s".into(), json!(f(r.enqueue_unique.as_ref().map(Rate::per_s))));
    o.insert(
        "enqueue_unique_baseline_jobs_per_s".into(),
        json!(f(r.enqueue_unique_baseline.as_ref().map(Rate::per_s))),
    );
    o.insert("enqueue_unique_vs_enqueue".into(), json!(f3(r.enqueue_unique_vs_enqueue())));
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
    if args.mp_processes > 1 {
        o.insert(
            format!("drain_jobs_per_s_1x{}", args.mp_concurrency),
            json!(f(r.multi_1.as_ref().map(|m| m.rate.per_s()))),
        );
    }
    o.insert("drain_exposure_jobs_per_s".into(), json!(f(r.exposure.as_ref().map(|d| d.rate.per_s()))));
    o.insert(
        "drain_exposure_vs_raw_b500".into(),
        json!(f3(vs_raw(r.exposure.as_ref(), r).iter().find(|(n, _)| *n == "raw_b500").and_then(|(_, v)| *v))),
    );
    o.insert("raw_drain_jobs_per_s".into(), json!(f(r.raw.as_ref().map(|x| x.rate.per_s()))));
    o.insert("raw_min_drain_jobs_per_s".into(), json!(f(r.raw_min.as_ref().map(|x| x.rate.per_s()))));
    o.insert("raw_b500_drain_jobs_per_s".into(), json!(f(r.raw_b500.as_ref().map(|x| x.rate.per_s()))));
    // The main drain against each raw loop (the targets' ratios); each drain's are in `drains`.
    for (name, v) in vs_raw(r.main_drain(), r) {
        o.insert(format!("drain_vs_{name}"), json!(f3(v)));
    }
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
    // Issue 41: the workflow workload.
    let wf = r.workflow.as_ref();
    o.insert("workflow_jobs_per_s".into(), json!(f(wf.map(|w| w.drain.per_s()))));
    o.insert("workflow_enqueue_jobs_per_s".into(), json!(f(wf.map(|w| w.enqueue.per_s()))));
    o.insert("workflow_step_ms_p50".into(), json!(wf.map(|w| round3(w.step.p50))));
    o.insert("workflow_step_ms_p99".into(), json!(wf.map(|w| round3(w.step.p99))));
    o.insert("claim_ms_p50_waiting_1m".into(), json!(wf.map(|w| round3(w.claim_waiting.p50))));
    if let Some(w) = wf {
        o.insert(
            "workflow".into(),
            json!({
                "tasks": w.tasks,
                "enqueue_s": round3(w.enqueue.secs),
                "enqueue_wal_bytes": w.enqueue.wal_bytes,
                "drain_s": round3(w.drain.secs),
                "drain_wal_bytes_per_task": round1(w.drain.wal_bytes as f64 / w.tasks.max(1) as f64),
                "chain": w.chain,
                "step_ms": { "p50": round3(w.step.p50), "p90": round3(w.step.p90), "p99": round3(w.step.p99), "max": round3(w.step.max) },
                "waiting": w.waiting,
                "claim_waiting_ms": { "p50": round3(w.claim_waiting.p50), "p99": round3(w.claim_waiting.p99) },
            }),
        );
    }
    // Issue 25: null when not run, or when the backend does not support the control.
    let keyed = r.keyed.as_ref();
    o.insert("keyed_drain_jobs_per_s".into(), json!(f(keyed.and_then(|k| k.drain_per_s()))));
    o.insert(
        "keyed_drain_vs_drain".into(),
        json!(f3(keyed.and_then(|k| k.drain_per_s()).zip(r.main_drain()).map(|(k, d)| k / d.rate.per_s()))),
    );
    o.insert("keyed_hot_ratio".into(), json!(f3(keyed.and_then(|k| k.hot_ratio()))));
    o.insert("claim_ms_p50_keys_10k".into(), json!(f3(keyed.and_then(|k| k.claim.map(|l| l.p50)))));
    let rate = r.rate.as_ref().filter(|x| !x.unsupported);
    o.insert("rate_limited_max_in_window".into(), json!(rate.map(|x| x.max_in_window)));
    o.insert("rate_limited_utilisation".into(), json!(f3(rate.and_then(|x| x.utilisation()))));
    o.insert("keyed".into(), json!(keyed.map(|k| k.json())));
    o.insert("rate_limited".into(), json!(r.rate.as_ref().map(|x| x.json())));
    if let Some(list) = &r.list {
        o.insert("list_page_ms".into(), list["list_page_ms"].clone());
        o.insert("list".into(), list["list"].clone());
    }
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
    o.insert("server_cpu_note".into(), json!(r.server_cpu_note));
    let by_c: BTreeMap<String, f64> =
        r.drains.iter().map(|d| (d.concurrency.to_string(), round1(d.rate.per_s()))).collect();
    o.insert("drain_jobs_per_s_by_concurrency".into(), json!(by_c));
    // Each drain's figures, with its jobs/s over each raw loop's.
    let drain_json = |d: &DrainFigures| {
        let mut v = d.json();
        for (name, x) in vs_raw(Some(d), r) {
            v[format!("drain_vs_{name}")] = json!(f3(x));
        }
        v
    };
    o.insert("drains".into(), Value::Array(r.drains.iter().map(drain_json).collect()));
    o.insert("drain_exposure".into(), json!(r.exposure.as_ref().map(drain_json)));
    o.insert("capped".into(), json!(r.capped.as_ref().map(drain_json)));
    o.insert("capped_slow".into(), json!(r.capped_slow.as_ref().map(drain_json)));
    o.insert("capped_spread".into(), json!(r.capped_spread.as_ref().map(drain_json)));
    o.insert("capped_spread_slow".into(), json!(r.capped_spread_slow.as_ref().map(drain_json)));
    o.insert("commit_rtt".into(), json!(r.commit_rtt.map(|l| l.json())));
    o.insert("raw".into(), json!(r.raw.as_ref().map(|x| x.json("delete"))));
    o.insert("raw_min".into(), json!(r.raw_min.as_ref().map(|x| x.json("update"))));
    o.insert("raw_b500".into(), json!(r.raw_b500.as_ref().map(|x| x.json("delete"))));
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
    let multi_json = |m: &crate::figures::MultiFigures| {
        json!({
            "processes": m.processes, "concurrency": m.concurrency, "jobs": m.rate.jobs,
            "seconds": round3(m.rate.secs), "jobs_per_s": round1(m.rate.per_s()), "per_process": m.per_process,
            "server_cpu_us_per_job": m.server_cpu_per_job().map(round1),
            "claim_calls": m.claim_calls, "complete_calls": m.complete_calls, "released": m.released,
            "multixacts": m.multixacts,
        })
    };
    o.insert("multi_process".into(), json!(r.multi.as_ref().map(multi_json)));
    o.insert("multi_process_1".into(), json!(r.multi_1.as_ref().map(multi_json)));
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
                                 "threshold": t.threshold, "verdict": t.verdict() })
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
            "raw_b500_batch": RAW_B500_BATCH,
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
            "keyed_jobs": args.jobs,
            "keyed_keys": args.keyed_keys,
            "key_cap": args.key_cap,
            "hot_jobs": args.hot_jobs(),
            "rate_limit": args.rate_limit,
            "rate_secs": args.rate_secs,
            "rate_claimers": args.rate_claimers,
            "workloads": args.workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
        }),
    );
    o.insert("environment".into(), env.clone());
    Value::Object(o)
}

/// The keys a full run puts at the top level of its JSON line (the default settings).
#[cfg(test)]
pub(crate) const HEADLINE_KEYS: [&str; 47] = [
    "enqueue_jobs_per_s",
    "enqueue_unique_jobs_per_s",
    "enqueue_unique_baseline_jobs_per_s",
    "enqueue_unique_vs_enqueue",
    "enqueue_single_concurrent_jobs_per_s",
    "raw_insert_single_concurrent_per_s",
    "drain_jobs_per_s",
    "drain_jobs_per_s_c1",
    "drain_jobs_per_s_c8",
    "drain_jobs_per_s_c64",
    "drain_jobs_per_s_4x8",
    "drain_jobs_per_s_1x8",
    "drain_exposure_jobs_per_s",
    "drain_exposure_vs_raw_b500",
    "raw_drain_jobs_per_s",
    "raw_min_drain_jobs_per_s",
    "raw_b500_drain_jobs_per_s",
    "drain_vs_raw",
    "drain_vs_raw_min",
    "drain_vs_raw_b500",
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
    "workflow_jobs_per_s",
    "workflow_enqueue_jobs_per_s",
    "workflow_step_ms_p50",
    "workflow_step_ms_p99",
    "claim_ms_p50_waiting_1m",
    "pickup_ms_p50",
    "pickup_ms_p99",
    "keyed_drain_jobs_per_s",
    "keyed_drain_vs_drain",
    "keyed_hot_ratio",
    "claim_ms_p50_keys_10k",
    "rate_limited_max_in_window",
    "rate_limited_utilisation",
    "per_job",
    "targets",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse as args;
    use crate::report::sample_results;

    #[test]
    fn json_has_every_figure() {
        let r = sample_results();
        let j = to_json(&args(&[]), &json!({}), &r);
        for key in HEADLINE_KEYS {
            assert!(!j[key].is_null(), "{key} missing");
        }
        assert_eq!(j["drain_jobs_per_s"], json!(900.0));
        assert_eq!(j["drain_jobs_per_s_c64"], json!(2000.0));
        assert_eq!(j["drain_jobs_per_s_4x8"], json!(1200.0));
        assert_eq!(
            (j["drain_jobs_per_s_1x8"].clone(), j["drain_exposure_jobs_per_s"].clone()),
            (json!(1000.0), json!(1000.0))
        );
        assert_eq!(j["multi_process"]["server_cpu_us_per_job"], json!(100.0));
        assert_eq!(j["per_job"]["chokaq_drain"]["server_cpu_us"], json!(888.9));
        assert_eq!(j["drain_jobs_per_s_by_concurrency"]["1"], json!(100.0));
        assert_eq!(j["capped_efficiency_h5"], json!(0.875));
        assert_eq!(
            (j["capped_spread_efficiency_h0"].clone(), j["capped_spread_efficiency_h5"].clone()),
            (json!(0.5), json!(0.77))
        );
        assert_eq!(j["heartbeat_hot_share"], json!(0.95));
        assert_eq!(
            [
                &j["keyed_drain_jobs_per_s"],
                &j["keyed_drain_vs_drain"],
                &j["keyed_hot_ratio"],
                &j["claim_ms_p50_keys_10k"]
            ],
            [&json!(720.0), &json!(0.8), &json!(1.8), &json!(2.4)]
        );
        assert_eq!(
            (j["rate_limited_max_in_window"].clone(), j["rate_limited_utilisation"].clone()),
            (json!(500), json!(0.95))
        );
        // A backend without the keyed controls: null figures, flagged.
        let mut u = sample_results();
        u.keyed = Some(crate::figures::KeyedFigures { unsupported: true, ..Default::default() });
        u.rate = Some(crate::figures::RateFigures { unsupported: true, ..Default::default() });
        let ju = to_json(&args(&[]), &json!({}), &u);
        for key in [
            "keyed_drain_jobs_per_s",
            "keyed_hot_ratio",
            "claim_ms_p50_keys_10k",
            "rate_limited_max_in_window",
            "rate_limited_utilisation",
        ] {
            assert!(ju[key].is_null(), "{key}: {}", ju[key]);
        }
        assert_eq!(
            (ju["keyed"]["unsupported"].clone(), ju["rate_limited"]["unsupported"].clone()),
            (json!(true), json!(true))
        );
        assert_eq!(j["drain_hot_share"], json!(0.0));
        // 8,000 index entries over 900 jobs; 100 round trips; 1,000 B of WAL a job.
        let d = &j["per_job"]["chokaq_drain"];
        assert_eq!((d["index_entries"].clone(), d["round_trips"].clone()), (json!(8.889), json!(0.111)));
        assert_eq!(d["wal_bytes"], json!(1000.0));
        // Each drain against the three raw loops (1,000, 1,100 and 2,250 jobs/s).
        assert_eq!(j["raw_b500_drain_jobs_per_s"], json!(2250.0));
        assert_eq!(
            [&j["drain_vs_raw"], &j["drain_vs_raw_min"], &j["drain_vs_raw_b500"]],
            [&json!(0.9), &json!(0.818), &json!(0.4)]
        );
        let c64 = &j["drains"][2];
        assert_eq!(c64["concurrency"], json!(64));
        assert_eq!(
            [&c64["drain_vs_raw"], &c64["drain_vs_raw_min"], &c64["drain_vs_raw_b500"]],
            [&json!(2.0), &json!(1.818), &json!(0.889)]
        );
        assert_eq!(j["capped"]["drain_vs_raw"], json!(3.0));
        assert_eq!((j["raw_b500"]["batch"].clone(), j["settings"]["raw_b500_batch"].clone()), (json!(500), json!(500)));
        let names: Vec<&str> = j["targets"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        for t in ["drain_vs_raw", "drain_exposure_vs_raw_b500", "drain_wal_per_job", "capped_spread_efficiency_h5"] {
            assert!(names.contains(&t), "target {t} missing: {names:?}");
        }
        for col in ["chokaq_drain", "chokaq_exposure", "raw", "raw_min", "raw_b500"] {
            for k in ["wal_bytes", "index_entries", "round_trips", "statements", "hot_share", "server_cpu_us"] {
                assert!(j["per_job"][col][k].is_number(), "per_job.{col}.{k}");
            }
        }
        // A raw loop that did not run leaves its ratio null.
        let j = to_json(&args(&[]), &json!({}), &Results { raw_b500: None, ..sample_results() });
        assert!(j["drain_vs_raw_b500"].is_null() && j["drains"][0]["drain_vs_raw_b500"].is_null());
        assert_eq!(j["drain_vs_raw"], json!(0.9));
        // Another handler time and process layout name their keys after themselves.
        let j = to_json(&args(&["--handler-ms", "10", "--mp-processes", "2"]), &json!({}), &r);
        assert!(j["capped_efficiency_h10"].is_number() && j["drain_jobs_per_s_2x8"].is_number());
        assert!(j.get("capped_efficiency_h5").is_none());
    }
}
