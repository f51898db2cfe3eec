//! The dashboard's HTTP surface against real databases: every endpoint with and without
//! auth, every action without / with a wrong CSRF token, read-only refusal, mounting under a
//! prefix, escaping of user data, filters and keyset paging.
//!
//! A custom harness (libtest-mimic): each case runs once on PostgreSQL (a fresh schema
//! `chokaq_t_<hex>`, dropped afterwards; URL from `CHOKAQ_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), once on MariaDB / MySQL (a fresh database
//! `chokaq_t_<hex>`, dropped afterwards; URL from `CHOKAQ_TEST_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`) and once on SQLite (a fresh file in the temp
//! directory). An unreachable server makes its cases ignored, or failed when
//! `CHOKAQ_TEST_REQUIRE` names it (`postgres`, `mysql`). Requests go through
//! `tower::ServiceExt::oneshot` (one case also through a real listener). The keyed cases
//! (issue 25) run on the memory backend too.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::Router;
use chokaq_core::testing::TestSupport;
use chokaq_core::{
    Backend, BackendExt, ClaimMode, ClaimParams, DeadReason, ErrorKind, FailAction, JobId, JobLocation, JobStatus,
    NewJob, QueueName, WorkerId, WorkerRegistration,
};
use chokaq_mysql::{MysqlBackend, MysqlConfig};
use chokaq_postgres::{PgBackend, PgConfig};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;
use tower::ServiceExt;

type TestResult = Result<(), String>;
type Case = fn(Arc<dyn Backend>) -> Pin<Box<dyn Future<Output = TestResult> + Send>>;

const PREFIX: &str = "/ops/jobs";
const TOKEN: &str = "test-token-7f3a-0c41";
const BEARER: &str = "Bearer test-token-7f3a-0c41";

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

macro_rules! ensure_eq {
    ($a:expr, $b:expr, $($arg:tt)+) => {{
        match (&$a, &$b) {
            (a, b) => {
                if a != b {
                    return Err(format!("{}: {:?} != {:?}", format!($($arg)+), a, b));
                }
            }
        }
    }};
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

// The cases, by what they test (moved out of this file, 1,340 lines, without change).
#[path = "api/actions.rs"]
mod actions;
#[path = "api/auth.rs"]
mod auth;
#[path = "api/outputs.rs"]
mod outputs;
#[path = "api/pages.rs"]
mod pages;
#[path = "api/support.rs"]
mod support;
#[path = "api/unique.rs"]
mod unique;

use actions::*;
use auth::*;
use outputs::*;
use pages::*;
use support::*;
use unique::*;

fn keyed_cases() -> Vec<(&'static str, Case)> {
    vec![
        ("keyed_controls_and_pages", |b| Box::pin(keyed_controls_and_pages(b))),
        ("unique_job_page", |b| Box::pin(unique_job_page(b))),
        ("output_job_page", |b| Box::pin(output_job_page(b))),
    ]
}

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        ("every_get_needs_auth", |b| Box::pin(every_get_needs_auth(b))),
        ("every_action_needs_auth_and_csrf", |b| Box::pin(every_action_needs_auth_and_csrf(b))),
        ("read_only_refuses_and_hides", |b| Box::pin(read_only_refuses_and_hides(b))),
        ("overview_counts", |b| Box::pin(overview_counts(b))),
        ("overview_snapshot", |b| Box::pin(overview_snapshot(b))),
        ("cancels_and_empty_queues", |b| Box::pin(cancels_and_empty_queues(b))),
        ("user_data_is_escaped", |b| Box::pin(user_data_is_escaped(b))),
        ("filters_and_paging", |b| Box::pin(filters_and_paging(b))),
        ("actions_take_effect", |b| Box::pin(actions_take_effect(b))),
        ("mounting", |b| Box::pin(mounting(b))),
        ("workers_page", |b| Box::pin(workers_page(b))),
        ("schedules_page", |b| Box::pin(schedules_page(b))),
        ("errors", |b| Box::pin(errors(b))),
        ("basic_and_no_auth", |b| Box::pin(basic_and_no_auth(b))),
        ("real_listener", |b| Box::pin(real_listener(b))),
    ]
}

// ---- harness ----------------------------------------------------------------------------

fn pg_url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn mysql_url() -> String {
    std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

fn required(what: &str) -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").map(|v| v.split(',').any(|s| s.trim() == what)).unwrap_or(false)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn on_postgres(case: Case) -> Result<(), Failed> {
    runtime().block_on(async {
        let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
        let pg = PgBackend::connect(PgConfig::new(pg_url()).schema(&schema).max_connections(4)).await.map_err(err)?;
        pg.migrate().await.map_err(err)?;
        let pg = Arc::new(pg);
        let out = case(pg.clone()).await;
        if let Err(e) = pg.drop_schema().await {
            eprintln!("could not drop schema {schema}: {e}");
        }
        out.map_err(Failed::from)
    })
}

fn on_mysql(case: Case) -> Result<(), Failed> {
    runtime().block_on(async {
        let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
        let my = MysqlBackend::connect(MysqlConfig::new(mysql_url()).schema(&schema).max_connections(4))
            .await
            .map_err(err)?;
        let my = Arc::new(my);
        let out = match my.migrate().await {
            Ok(()) => case(my.clone()).await,
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = my.drop_schema().await {
            eprintln!("could not drop database {schema}: {e}");
        }
        out.map_err(Failed::from)
    })
}

fn on_sqlite(case: Case) -> Result<(), Failed> {
    runtime().block_on(async {
        let dir = std::env::temp_dir().join(format!("chokaq-web-t-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).map_err(err)?;
        let out = async {
            let db = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string()))
                .await
                .map_err(err)?;
            db.migrate().await.map_err(err)?;
            let db = Arc::new(db);
            let out = case(db.clone()).await;
            db.close().await;
            out
        }
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        out.map_err(Failed::from)
    })
}

/// The memory backend (the reference semantics of issue 25's keyed cases).
fn on_memory(case: Case) -> Result<(), Failed> {
    runtime().block_on(case(Arc::new(chokaq_core::memory::MemoryBackend::new()))).map_err(Failed::from)
}

/// The trial of `case` on a server: run, failed (unreachable and required) or ignored.
fn server_trial(
    name: &str,
    label: &'static str,
    reachable: bool,
    run: fn(Case) -> Result<(), Failed>,
    case: Case,
) -> Trial {
    let name = format!("{label}::{name}");
    if reachable {
        Trial::test(name, move || run(case))
    } else if required(label) {
        Trial::test(name, move || Err(format!("{label} is unreachable and CHOKAQ_TEST_REQUIRE names {label}").into()))
    } else {
        Trial::test(name, || Ok(())).with_ignored_flag(true)
    }
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let (pg_ok, my_ok) = runtime().block_on(async {
        let pg = PgBackend::connect(PgConfig::new(pg_url()).schema("chokaq_probe").max_connections(1)).await.is_ok();
        let my = MysqlBackend::connect(MysqlConfig::new(mysql_url()).schema("chokaq_probe").max_connections(1))
            .await
            .is_ok();
        (pg, my)
    });
    let mut trials = Vec::new();
    for (name, case) in cases() {
        trials.push(server_trial(name, "postgres", pg_ok, on_postgres, case));
        trials.push(server_trial(name, "mysql", my_ok, on_mysql, case));
        trials.push(Trial::test(format!("sqlite::{name}"), move || on_sqlite(case)));
    }
    for (name, case) in keyed_cases() {
        trials.push(Trial::test(format!("memory::{name}"), move || on_memory(case)));
        trials.push(server_trial(name, "postgres", pg_ok, on_postgres, case));
        trials.push(server_trial(name, "mysql", my_ok, on_mysql, case));
        trials.push(Trial::test(format!("sqlite::{name}"), move || on_sqlite(case)));
    }
    for (ok, label, env) in [(pg_ok, "postgres", "CHOKAQ_TEST_POSTGRES_URL"), (my_ok, "mysql", "CHOKAQ_TEST_MYSQL_URL")]
    {
        if !ok && !required(label) {
            eprintln!("{label} unreachable at {env} (or the default): its cases are ignored");
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}
