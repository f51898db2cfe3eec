//! `chokaq-bench`: measures chokaq on your own PostgreSQL.
//!
//! ```text
//! cargo run --release -p chokaq-bench -- --url <URL> [--json]
//! ```
//!
//! It creates a fresh schema (`chokaq_bench_<hex>`), runs the workloads (batch and single-job
//! enqueue, drains by the worker runtime at several concurrencies, the raw skip-locked loop
//! claiming 10 and 500 at a time and the minimal one, the commit round trip and the capped drains, the heartbeat's HOT share,
//! pickup latency, the multi-process example, claim cost against a small and a large backlog
//! and beside a million scheduled jobs), drops the schema and prints a table, then each
//! target with its measured ratio. With `--json` the last line of stdout is one JSON object
//! with every figure and the settings. The URL is never printed. See `docs/performance.md`.
//!
//! The modules: `args` (the flags and their checks), `bench` (the run, its shared helpers and
//! the enqueue workload; `bench::single` the single-job enqueue, `bench::drain` by the
//! runtime, `bench::raw` the three bare skip-locked loops, `bench::capped` the commit round trip
//! and the capped drains, `bench::heartbeat` the HOT share, `bench::pickup` the pickup
//! latency, `bench::multi` the multi-process example, `bench::claim` the claim cost),
//! `timed` (the backend wrapper that counts and times the runtime's calls), `figures` (what
//! each workload measured) and `report` (`report::table` the table, `report::targets` the
//! targets, `report::json` the `--json` line).

mod args;
mod bench;
mod experiment;
mod figures;
mod list;
mod mysql;
mod report;
mod server_cpu;
mod timed;

use std::process::ExitCode;
use std::sync::Arc;

use chokaq::core::testing::TestSupport;
use chokaq::core::validate;
use chokaq::{Backend, Error, ErrorKind, Result};
use chokaq_postgres::{map_sqlx_error, PgBackend, PgConfig};
use clap::Parser;
use indicatif::MultiProgress;
use serde_json::{json, Value};

use crate::args::Args;
use crate::bench::Bench;
use crate::figures::Results;
use crate::report::{print_table, to_json};
use crate::timed::{CallStats, Timed};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn other(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg)
}

async fn environment(pg: &PgBackend) -> Result<Value> {
    let row: (String, String, String, String) = sqlx::query_as(
        "SELECT version(), current_setting('synchronous_commit'), current_setting('fsync'), current_setting('shared_buffers')",
    )
    .fetch_one(pg.pool())
    .await
    .map_err(map_sqlx_error)?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(json!({
        "date": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "server": row.0.split(" on ").next().unwrap_or(&row.0),
        "synchronous_commit": row.1,
        "fsync": row.2,
        "shared_buffers": row.3,
        "client_cores": cores,
    }))
}

/// A fresh schema name for one run, `chokaq_bench_<hex>`.
fn new_schema() -> String {
    format!("chokaq_bench_{:016x}", rand::random::<u64>())
}

/// One run in a fresh schema; returns its JSON object (printed with `--json`).
async fn main_inner(args: Args) -> Result<Value> {
    if let Some(url) = args.url.clone().filter(|u| mysql::is_mysql(u)) {
        args.check()?;
        let json = mysql::run(&args, &url).await?;
        if args.json {
            println!("{json}");
        }
        return Ok(json);
    }
    run_in(args, new_schema()).await
}

/// One run in `schema` (created, and dropped at the end unless --keep-schema).
async fn run_in(args: Args, schema: String) -> Result<Value> {
    args.check()?;
    let url = args
        .url
        .clone()
        .or_else(|| std::env::var("CHOKAQ_TEST_POSTGRES_URL").ok())
        .unwrap_or_else(|| DEFAULT_URL.to_string());
    validate::schema_name(&schema)?;
    let pg = Arc::new(
        PgBackend::connect(PgConfig::new(url.clone()).schema(&schema).max_connections(args.connections)).await?,
    );
    let env = environment(&pg).await?;
    if env["synchronous_commit"].as_str() != Some("on") {
        eprintln!("warning: synchronous_commit is {} (durable commits need on)", env["synchronous_commit"]);
    }
    let calls = Arc::new(CallStats::default());
    let timed: Arc<dyn Backend> = Arc::new(Timed { inner: pg.clone(), stats: calls.clone() });
    let mp = MultiProgress::new();
    eprintln!("chokaq-bench: schema {schema}, {}", env["server"].as_str().unwrap_or(""));
    let mut bench = Bench {
        args,
        pg: pg.clone(),
        calls,
        timed,
        schema,
        url,
        mp,
        bench_backlog: 0,
        stats_flush: false,
        walinspect: None,
        server_cpu: Err("not probed yet".into()),
        exposure: None,
    };
    let mut res = Results::default();
    let outcome = tokio::select! {
        r = async {
            pg.migrate().await?;
            if let Some(x) = bench.args.experiment {
                experiment::apply(&pg, &bench.schema, x).await?;
            }
            bench.run(&mut res).await
        } => r,
        _ = tokio::signal::ctrl_c() => Err(other("interrupted")),
    };
    if bench.args.keep_schema {
        eprintln!("chokaq-bench: kept schema {}", bench.schema);
    } else if let Err(e) = pg.drop_schema().await {
        eprintln!("chokaq-bench: could not drop schema {}: {e}", bench.schema);
    }
    outcome?;
    print_table(&bench.args, &env, &res);
    let json = to_json(&bench.args, &env, &res);
    if bench.args.json {
        println!("{json}");
    }
    Ok(json)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match main_inner(args).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) if e.kind() == ErrorKind::InvalidInput => {
            eprintln!("chokaq-bench: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("chokaq-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse as args;

    /// The whole bench, tiny sizes, on the test database: every workload runs, its exact-count
    /// checks hold, every headline figure is in the JSON, and the schema is gone afterwards
    /// (this run's schema only: another run on the same server may have one of its own).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tiny_run_end_to_end() {
        let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
        let a = args(&[
            "--url",
            &url,
            "--jobs",
            "600",
            "--enqueue-batch",
            "250",
            "--drain-concurrency",
            "1,8,64",
            "--low-drain-jobs",
            "300",
            "--capped-jobs",
            "100",
            "--backlog-small",
            "200",
            "--backlog-large",
            "1000",
            "--claim-samples",
            "20",
            "--pickup-jobs",
            "40",
            "--single-jobs",
            "40",
            "--capped-slow-jobs",
            "40",
            "--rtt-samples",
            "20",
            "--heartbeat-jobs",
            "50",
            "--heartbeat-rounds",
            "3",
            "--scheduled-jobs",
            "2000",
            "--scheduled-samples",
            "10",
            // Every workload but the multi-process drain (it builds an example in release
            // mode; `bench::multi` tests how its output is read).
            "--workloads",
            "enqueue,enqueue-unique,enqueue-single,drain,drain-exposure,raw,raw-b500,raw-min,capped,heartbeat,pickup,keyed,rate,claim,scheduled,workflow,list",
            "--workflow-tasks",
            "60",
            "--workflow-chain",
            "10",
            "--workflow-waiting",
            "5000",
            "--keyed-keys",
            "50",
            "--hot-jobs",
            "200",
            "--rate-limit",
            "100/500ms",
            "--rate-secs",
            "2",
            "--list-archived",
            "20000",
            "--list-hot",
            "1000",
            "--list-samples",
            "3",
            "--json",
        ]);
        let schema = new_schema();
        let json = run_in(a, schema.clone()).await.unwrap();
        for key in crate::report::HEADLINE_KEYS {
            // The multi-process drain is not run here.
            if !["drain_jobs_per_s_4x8", "drain_jobs_per_s_1x8"].contains(&key) {
                assert!(!json[key].is_null(), "{key} missing: {json}");
            }
        }
        for t in json["targets"].as_array().unwrap() {
            // Not run here; and a tiny run's server CPU can be under one clock tick.
            if t["name"].as_str().is_some_and(|n| n.starts_with("multi_") || n.contains("server_cpu")) {
                continue;
            }
            assert!(t["measured"].is_number(), "target not measured: {t}");
        }
        assert_eq!(json["raw_b500"]["batch"], json!(500));
        // The rate limit held over the start stamps read back (100 a 500 ms window).
        let max = json["rate_limited_max_in_window"].as_u64().unwrap();
        assert!(max > 0 && max <= 100, "rate_limited_max_in_window {max}: {json}");
        for filter in ["queue", "kind", "tag", "last_10_min", "status_processing"] {
            assert!(json["list_page_ms"][filter].is_number(), "list_page_ms.{filter}: {json}");
        }
        let left = schemas_named(&url, &schema).await;
        assert!(left.is_empty(), "bench schema left behind: {left:?}");
    }

    /// Those of `schema` and its multi-process schema (`<schema>_mp`) that exist.
    async fn schemas_named(url: &str, schema: &str) -> Vec<String> {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let v = sqlx::query_scalar(
            "SELECT nspname::text FROM pg_namespace WHERE nspname = $1 OR nspname LIKE $1 || '\\_mp%'",
        )
        .bind(schema)
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        v
    }
}
