//! Acceptance tests of the worker runtime on PostgreSQL.
//!
//! A custom harness (libtest-mimic): each case is a named, filterable trial with its own fresh
//! schema `chokaq_t_<hex>`, so cases run in parallel. The URL comes from
//! `CHOKAQ_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`). When the
//! database is unreachable every case is ignored, unless `CHOKAQ_TEST_REQUIRE` names
//! `postgres`: then every case fails.
//!
//! The multi-process cases re-execute this test binary as worker processes (env
//! `CHOKAQ_RT_CHILD` set): each handler run appends `<job id>\n` to the process's own file,
//! outside the queue tables, so handler runs are counted independently of the database.
//! `handler_aborting_the_process_is_dead_lettered` uses the same children with a handler that
//! aborts its process as soon as it begins.

#[macro_use]
mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq::core::{DeadReason, JobLocation, JobTable, ListJobsParams, RescueParams};
use chokaq::{Backend, CancellationToken, Client, JobBuilder, JobContext, JobId, MaintenanceConfig, Worker};
use chokaq_core::testing::TestSupport;
use chokaq_postgres::{PgBackend, PgConfig};
use common::{err, Count, TestResult};
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

// The cases, by what they test (`tests/postgres/*.rs`).
#[path = "postgres/abort.rs"]
mod abort;
#[path = "postgres/listen.rs"]
mod listen;
#[path = "postgres/processes.rs"]
mod processes;

use abort::*;
use listen::*;
use processes::*;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const CHILD_ENV: &str = "CHOKAQ_RT_CHILD";
/// Set in a child whose handler aborts the process as soon as it begins.
const ABORT_ENV: &str = "CHOKAQ_RT_ABORT";

fn url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

fn required() -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").map(|v| v.split(',').any(|s| s.trim() == "postgres")).unwrap_or(false)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn fresh_schema_name() -> String {
    format!("chokaq_t_{:016x}", rand::random::<u64>())
}

async fn connect(schema: &str, pool: u32) -> chokaq::Result<PgBackend> {
    PgBackend::connect(PgConfig::new(url()).schema(schema).max_connections(pool)).await
}

async fn fresh(pool: u32) -> Result<Arc<PgBackend>, String> {
    let b = connect(&fresh_schema_name(), pool).await.map_err(err)?;
    b.migrate().await.map_err(err)?;
    Ok(Arc::new(b))
}

/// Runs a scenario on a fresh schema and drops the schema afterwards (also on failure).
fn on_fresh<F, Fut>(f: F) -> Result<(), Failed>
where
    F: FnOnce(Arc<PgBackend>) -> Fut,
    Fut: std::future::Future<Output = TestResult>,
{
    runtime().block_on(async {
        let b = fresh(8).await?;
        let out = f(b.clone()).await;
        if let Err(e) = b.drop_schema().await {
            eprintln!("could not drop schema {}: {e}", b.schema());
        }
        out
    })?;
    Ok(())
}

fn main() -> ExitCode {
    if std::env::var_os(CHILD_ENV).is_some() {
        return child_main();
    }
    let args = Arguments::from_args();
    let reachable = runtime().block_on(async { connect("chokaq_probe", 1).await.is_ok() });
    let require = required();
    let mut trials = vec![
        Trial::test("typed_roundtrip", || on_fresh(common::typed_roundtrip)),
        Trial::test("retry_backoff_and_fatal", || on_fresh(common::retry_and_fatal)),
        Trial::test("poison_and_panic", || on_fresh(common::poison_and_panic)),
        Trial::test("timeout_retries", || on_fresh(common::timeout_retries)),
        Trial::test("operator_cancel_from_another_process", || {
            on_fresh(|b| async move {
                // The operator uses its own pool on the same schema, as another process would.
                let operator = Arc::new(connect(b.schema(), 2).await.map_err(err)?);
                common::operator_cancel(b, operator).await
            })
        }),
        Trial::test("shutdown_releases_prefetch_and_hands_back", || on_fresh(common::shutdown_releases_prefetch)),
        Trial::test("pause_releases_prefetch", || on_fresh(common::pause_releases_prefetch)),
        Trial::test("pause_keeps_lookahead_running", || on_fresh(common::pause_keeps_lookahead_running)),
        Trial::test("lease_lost_discards_outcome", || on_fresh(common::lease_lost_discards_outcome)),
        Trial::test("snooze_does_not_count", || on_fresh(common::snooze_does_not_count)),
        Trial::test("dropped_worker_hands_back", || on_fresh(common::dropped_worker_hands_back)),
        Trial::test("wakeup_beats_polling", || on_fresh(common::wakeup_beats_polling)),
        Trial::test("keyed_cap_under_the_runtime", || on_fresh(common::keyed_cap_under_the_runtime)),
        Trial::test("twenty_workers_share_one_listener", || {
            runtime().block_on(async { twenty_workers_share_one_listener().await.map_err(Failed::from) })
        }),
        Trial::test("ten_thousand_jobs_four_processes", || on_fresh(|b| multi_process(b, false))),
        Trial::test("ten_thousand_jobs_one_process_sigkilled", || on_fresh(|b| multi_process(b, true))),
        Trial::test("handler_aborting_the_process_is_dead_lettered", || on_fresh(aborting_handler)),
    ];
    if !reachable {
        if require {
            trials = trials
                .into_iter()
                .map(|t| {
                    let name = t.name().to_string();
                    Trial::test(name, || Err("PostgreSQL is unreachable and CHOKAQ_TEST_REQUIRE names postgres".into()))
                })
                .collect();
        } else {
            eprintln!("PostgreSQL unreachable at the configured URL: every case is ignored");
            trials = trials.into_iter().map(|t| t.with_ignored_flag(true)).collect();
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}
