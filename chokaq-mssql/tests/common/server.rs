//! The SQL Server of a test binary other than the conformance ones (`tests/locks.rs`,
//! `tests/upgrade.rs`): found as the conformance binaries find theirs (`source::decide`: a URL
//! in `CHOKAQ_TEST_MSSQL_URL`, else a Docker container with `CHOKAQ_TEST_MSSQL_DOCKER=1`), and
//! each case a libtest-mimic trial, ignored with the reason where no server is reachable
//! (`CHOKAQ_TEST_REQUIRE=mssql` makes that a failure). Each case works in a fresh schema of the
//! conformance database with READ_COMMITTED_SNAPSHOT OFF, and drops it at the end.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use chokaq_conformance::libtest_mimic::{self, Arguments, Completion, Failed, Trial};
use chokaq_core::testing::TestSupport;
use chokaq_core::Backend;
use chokaq_mssql::{MssqlBackend, MssqlConfig};

use super::source::{decide, probe_docker, Inputs, Source};
use super::{docker, RCSI_OFF};

/// What a case returns: `Err` with the reason it failed.
pub type CaseResult = Result<(), String>;
/// A case: the server's connection string in, its result out.
pub type CaseFn = fn(String) -> Pin<Box<dyn Future<Output = CaseResult> + Send>>;

/// A raw session of its own on the server (not pooled, not the backend's): what another
/// process or login would do.
pub type Session = chokaq_mssql::RawSession;

/// Runs `cases` as trials against the server this process finds, or lists them as ignored
/// with the reason.
pub fn run_cases(cases: Vec<(&'static str, CaseFn)>, always: Vec<Trial>) -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    let (server, container) = match decide(&Inputs::from_env(&args), probe_docker) {
        Source::Url(url) => (Ok(url), None),
        Source::Parent => (Err("a child process of a conformance run runs no case of its own".to_string()), None),
        Source::Unavailable(why) => (Err(why), None),
        Source::Docker => match rt.block_on(docker::start()) {
            Ok(s) => (Ok(s.url.clone()), Some(s)),
            Err(e) => (Err(format!("Docker answers, but SQL Server did not start: {e}")), None),
        },
    };
    let required = chokaq_conformance::is_required("mssql");
    let handle = rt.handle().clone();
    let mut trials = always;
    for (name, case) in cases {
        let server = server.clone();
        let handle = handle.clone();
        trials.push(Trial::ignorable_test(name, move || match server {
            Err(why) if !required => Ok(Completion::ignored_with(format!("no SQL Server: {why}"))),
            Err(why) => Err(Failed::from(format!("{why} (and {} requires it)", chokaq_conformance::ENV_REQUIRE))),
            Ok(url) => handle.block_on(case(url)).map(|()| Completion::Completed).map_err(Failed::from),
        }));
    }
    let code = libtest_mimic::run(&Arguments::from_args(), trials).exit_code();
    if let Some(s) = container {
        rt.block_on(s.stop());
    }
    code
}

/// The backend on a fresh, migrated schema of the test database, and the schema's name.
pub async fn backend(url: &str) -> Result<(MssqlBackend, String), String> {
    let schema = chokaq_conformance::fresh_schema_name();
    let b = unmigrated(url, &schema).await?;
    b.migrate().await.map_err(|e| format!("migrate: {e}"))?;
    Ok((b, schema))
}

/// The backend on schema `schema` of the test database (created if missing), not migrated.
pub async fn unmigrated(url: &str, schema: &str) -> Result<MssqlBackend, String> {
    let cfg = MssqlConfig::from_url(url).and_then(|c| c.schema(schema)).map_err(|e| e.to_string())?;
    let (cfg, _, _) = MssqlBackend::ensure_database(cfg, RCSI_OFF.database, RCSI_OFF.rcsi, RCSI_OFF.snapshot)
        .await
        .map_err(|e| format!("ensure_database: {e}"))?;
    MssqlBackend::connect(cfg).await.map_err(|e| format!("connect: {e}"))
}

/// Drops the backend's schema.
pub async fn drop(b: &MssqlBackend) -> CaseResult {
    b.drop_schema().await.map_err(|e| format!("drop_schema: {e}"))
}

/// A session of its own, in the test database, opened through chokaq's own parse of the
/// connection string (`MssqlConfig::open_session`), as the backend's connections are: the
/// one `CHOKAQ_TEST_MSSQL_URL` serves both, with or without TLS.
pub async fn session(url: &str) -> Result<Session, String> {
    let cfg = MssqlConfig::from_url(url)
        .and_then(|c| c.database(RCSI_OFF.database))
        .map_err(|e| format!("connection string: {e}"))?;
    let mut s = cfg.open_session("chokaq-test-session").await.map_err(|e| format!("login: {e}"))?;
    // The session options every pooled connection of the backend sets (and every earlier
    // version's did): filtered indexes need them.
    exec(
        &mut s,
        "SET ANSI_NULLS ON; SET ANSI_PADDING ON; SET ANSI_WARNINGS ON; SET ARITHABORT ON; \
         SET CONCAT_NULL_YIELDS_NULL ON; SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF;",
    )
    .await?;
    Ok(s)
}

/// Runs one batch on a raw session, all its results read.
pub async fn exec(s: &mut Session, sql: &str) -> CaseResult {
    s.simple_query(sql).await.map_err(|e| format!("{e}"))?.into_results().await.map_err(|e| format!("{e}"))?;
    Ok(())
}

/// The first column of the first row of a batch, as a count.
pub async fn count(s: &mut Session, sql: &str) -> Result<i64, String> {
    let row = s.simple_query(sql).await.map_err(|e| format!("{e}"))?.into_row().await.map_err(|e| format!("{e}"))?;
    row.and_then(|r| r.get::<i64, _>(0)).ok_or_else(|| format!("no count from {sql}"))
}

/// `f` must finish within `limit`.
pub async fn within<T>(what: &str, limit: Duration, f: impl Future<Output = T>) -> Result<T, String> {
    let t = Instant::now();
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| format!("{what} did not return within {limit:?} (it waited)"))
        .inspect(|_| eprintln!("[{what}: {:?}]", t.elapsed()))
}

/// Fails with `msg` unless `cond`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> CaseResult {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}
