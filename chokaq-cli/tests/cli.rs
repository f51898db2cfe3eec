//! The `chokaq` binary against real PostgreSQL, MariaDB / MySQL and SQLite: every subcommand
//! with its exit code and output, in `--json` and table form; a bad URL; an unmigrated schema;
//! dead-letter retries racing each other in two processes. No output may ever contain the
//! password.
//!
//! PostgreSQL: `CHOKAQ_TEST_POSTGRES_URL`, else `postgres://postgres@127.0.0.1:5432/test`, a
//! fresh schema per test (dropped after). MariaDB / MySQL: `CHOKAQ_TEST_MYSQL_URL`, else
//! `mysql://root@127.0.0.1:3306/test`, a fresh database per test (dropped after); when the URL
//! has no password, each test also gets its own user with [`SECRET`] as its password and
//! privileges on that database only (dropped after), so that the CLI logs in with a password.
//! When a server is unreachable its cases are ignored, unless `CHOKAQ_TEST_REQUIRE` names it
//! (`postgres`, `mysql`; then they fail). SQLite: a file in a fresh temporary directory per
//! test.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use chokaq::core::{ClaimMode, ClaimParams};
use chokaq::{Backend, BackendExt, DeadReason, FailAction, JobId, NewJob, QueueName, WorkerId};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

type TestResult = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($arg:tt)+) => {
        match (&$left, &$right) {
            (l, r) => {
                if l != r {
                    return Err(format!("{}: expected {:?}, got {:?}", format!($($arg)+), r, l));
                }
            }
        }
    };
}

#[path = "cases/commands.rs"]
mod commands;
#[path = "cases/config.rs"]
mod config;
#[path = "cases/enqueue.rs"]
mod enqueue;
#[path = "cases/flows.rs"]
mod flows;
#[path = "cases/keyed.rs"]
mod keyed;
use commands::*;
#[path = "cases/operator.rs"]
mod operator;
#[path = "cases/outputs.rs"]
mod outputs;
#[path = "cases/unique.rs"]
mod unique;
#[path = "cases/usage.rs"]
mod usage;
use usage::{bad_url, bin, help_and_usage};

const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// Put into every URL the tests pass (PostgreSQL's trust authentication ignores it): no
/// output may contain it.
const SECRET: &str = "cli-s3cret-pw";

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn pg_url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_PG_URL.to_string())
}

/// The PostgreSQL URL with [`SECRET`] as the password when it has none (trust auth).
fn pg_url_with_secret() -> String {
    let url = pg_url();
    match url.strip_prefix("postgres://").and_then(|rest| rest.split_once('@')) {
        Some((user, host)) if !user.contains(':') => format!("postgres://{user}:{SECRET}@{host}"),
        _ => url,
    }
}

fn mysql_url() -> String {
    std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_MYSQL_URL.to_string())
}

/// A MySQL URL's parts: scheme, user info, host (and port), database, query (with its `?`).
fn mysql_url_parts(url: &str) -> Option<(&str, &str, &str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let (userinfo, rest) = rest.rsplit_once('@').unwrap_or(("", rest));
    let (hostport, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let (db, query) = rest.find('?').map_or((rest, ""), |i| (&rest[..i], &rest[i..]));
    Some((scheme, userinfo, hostport, db, query))
}

/// The statements run as the URL's user to set up (and to drop) a test's own MariaDB / MySQL
/// user `schema` with [`SECRET`] as its password and every privilege on database `schema`.
async fn mysql_admin(statements: &[String]) -> Result<(), String> {
    use sqlx::{Connection, Executor, MySqlConnection};
    let mut conn = MySqlConnection::connect(&mysql_url()).await.map_err(err)?;
    for sql in statements {
        conn.execute(sql.as_str()).await.map_err(|e| format!("{sql}: {e}"))?;
    }
    let _ = conn.close().await;
    Ok(())
}

/// The URL the CLI gets for a MariaDB / MySQL test database `schema`: when the configured URL
/// has no password, that of a user made for the test (see the module docs), who starts its
/// sessions in its own database; else the configured URL.
async fn mysql_url_for(schema: &str) -> Result<String, String> {
    let url = mysql_url();
    let (scheme, userinfo, hostport, _, query) = mysql_url_parts(&url).ok_or("CHOKAQ_TEST_MYSQL_URL is no URL")?;
    if userinfo.contains(':') {
        return Ok(url);
    }
    // Identifiers made here, from `chokaq_cli_<hex>`: nothing to quote but the name itself.
    mysql_admin(&[
        format!("CREATE DATABASE `{schema}`"),
        format!("CREATE USER '{schema}'@'%' IDENTIFIED BY '{SECRET}'"),
        format!("GRANT ALL PRIVILEGES ON `{schema}`.* TO '{schema}'@'%'"),
    ])
    .await?;
    Ok(format!("{scheme}://{schema}:{SECRET}@{hostport}/{schema}{query}"))
}

fn required(what: &str) -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").is_ok_and(|v| v.split(',').any(|s| s.trim() == what))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Postgres,
    Mysql,
    Sqlite,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
            Kind::Sqlite => "sqlite",
        }
    }
}

/// One test's database: the URL and schema the CLI gets, and a backend to seed and check it.
struct Db {
    kind: Kind,
    url: String,
    schema: String,
    backend: Arc<dyn Backend>,
    dir: Option<PathBuf>,
}

impl Db {
    /// A fresh database; `migrated` runs the migrations first.
    async fn fresh(kind: Kind, migrated: bool) -> Result<Db, String> {
        let schema = format!("chokaq_cli_{:016x}", rand::random::<u64>());
        let (url, dir) = match kind {
            Kind::Postgres => (pg_url_with_secret(), None),
            Kind::Mysql => (mysql_url_for(&schema).await?, None),
            Kind::Sqlite => {
                let dir = std::env::temp_dir().join(&schema);
                std::fs::create_dir_all(&dir).map_err(err)?;
                (format!("sqlite:{}", dir.join("jobs.db").display()), Some(dir))
            }
        };
        let backend = if migrated {
            chokaq::connect_and_migrate(&url, &schema).await.map_err(err)?
        } else {
            chokaq::connect(&url, &schema).await.map_err(err)?
        };
        Ok(Db { kind, url, schema, backend, dir })
    }

    async fn cleanup(self) {
        match self.kind {
            Kind::Postgres => {
                use chokaq_core::testing::TestSupport;
                let cfg = chokaq_postgres::PgConfig::new(pg_url()).schema(&self.schema).max_connections(1);
                if let Ok(pg) = chokaq_postgres::PgBackend::connect(cfg).await {
                    let _ = pg.drop_schema().await;
                }
            }
            Kind::Mysql => {
                use chokaq_core::testing::TestSupport;
                drop(self.backend);
                let cfg = chokaq_mysql::MysqlConfig::new(mysql_url()).schema(&self.schema).max_connections(1);
                if let Ok(my) = chokaq_mysql::MysqlBackend::connect(cfg).await {
                    let _ = my.drop_schema().await;
                }
                if !self.url.eq(&mysql_url()) {
                    let drop_user = format!("DROP USER IF EXISTS '{}'@'%'", self.schema);
                    if let Err(e) = mysql_admin(&[drop_user]).await {
                        eprintln!("could not drop the test user {}: {e}", self.schema);
                    }
                }
            }
            Kind::Sqlite => {
                drop(self.backend);
                if let Some(d) = self.dir {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
        }
    }

    /// The binary with this database's URL and schema in its environment.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_chokaq"));
        c.env_remove("CHOKAQ_SCHEMA").env("DATABASE_URL", &self.url).arg("--schema").arg(&self.schema).args(args);
        c
    }

    /// Starts the binary with its output captured (for processes that race).
    fn spawn(&self, args: &[&str]) -> std::io::Result<std::process::Child> {
        self.cmd(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()
    }

    /// Runs the binary; checks that no output holds the password or the URL.
    fn run(&self, args: &[&str]) -> Result<Out, String> {
        let out = Out::of(self.cmd(args).output().map_err(err)?);
        out.check_secret(&self.url, args)?;
        Ok(out)
    }

    /// Runs with `--json` and parses stdout.
    fn json(&self, args: &[&str]) -> Result<(i32, Value), String> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.run(&all)?;
        let v = if out.stdout.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&out.stdout)
                .map_err(|e| format!("{args:?}: stdout is not JSON ({e}): {}", out.stdout))?
        };
        Ok((out.code, v))
    }

    /// Runs with `--json`, expecting exit 0.
    fn ok_json(&self, args: &[&str]) -> Result<Value, String> {
        let (code, v) = self.json(args)?;
        ensure_eq!(code, 0, "exit code of {args:?} (output {v})");
        Ok(v)
    }

    /// Runs in table form, expecting exit 0; returns stdout.
    fn ok_table(&self, args: &[&str]) -> Result<String, String> {
        let out = self.run(args)?;
        ensure_eq!(out.code, 0, "exit code of {args:?} (stderr {})", out.stderr);
        Ok(out.stdout)
    }

    fn q(&self, label: &str) -> QueueName {
        QueueName::new(format!("{label}_{:08x}", rand::random::<u32>())).unwrap()
    }

    async fn enqueue(&self, job: NewJob) -> Result<JobId, String> {
        Ok(self.backend.enqueue(job).await.map_err(err)?.id)
    }

    /// `n` jobs of `queue` claimed and started by `w`.
    async fn start(&self, w: WorkerId, queue: &QueueName, n: u32) -> Result<Vec<chokaq::core::ClaimedJob>, String> {
        let got =
            self.backend.claim(&ClaimParams::new(w, vec![queue.clone()], n, ClaimMode::Start)).await.map_err(err)?;
        ensure_eq!(got.len(), n as usize, "claimed from {queue}");
        Ok(got)
    }

    /// `n` dead letters (reason failed) in `queue`; their ids.
    async fn dead(&self, queue: &QueueName, n: u32) -> Result<Vec<JobId>, String> {
        for i in 0..n {
            self.enqueue(NewJob::build(queue.as_str(), "cli.test").unwrap().json(serde_json::json!({ "i": i })))
                .await?;
        }
        let w = WorkerId::random();
        let mut ids = Vec::new();
        for j in self.start(w, queue, n).await? {
            let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: format!("boom {}", j.id) };
            self.backend.fail(w, j.lease_ref(), dl).await.map_err(err)?.done().ok_or("fail lost")?;
            ids.push(j.id);
        }
        Ok(ids)
    }

    /// `n` archived jobs in `queue`; their ids.
    async fn archived(&self, queue: &QueueName, n: u32) -> Result<Vec<JobId>, String> {
        for _ in 0..n {
            self.enqueue(NewJob::build(queue.as_str(), "cli.test").unwrap()).await?;
        }
        let w = WorkerId::random();
        let mut ids = Vec::new();
        for j in self.start(w, queue, n).await? {
            self.backend.complete_one(w, j.lease_ref()).await.map_err(err)?.done().ok_or("complete lost")?;
            ids.push(j.id);
        }
        Ok(ids)
    }
}

#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn of(o: Output) -> Out {
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    fn check_secret(&self, url: &str, args: &[&str]) -> TestResult {
        for (name, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            ensure!(!text.contains(SECRET), "{args:?}: {name} holds the password: {text}");
            ensure!(!text.contains(url), "{args:?}: {name} holds the URL: {text}");
        }
        Ok(())
    }

    /// The JSON error document of stderr (`--json`).
    fn json_error(&self) -> Result<Value, String> {
        serde_json::from_str(self.stderr.trim()).map_err(|e| format!("stderr is not JSON ({e}): {}", self.stderr))
    }
}

/// Lines of a table, each split on whitespace.
fn rows(table: &str) -> Vec<Vec<String>> {
    table.lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

fn ids_of(v: &Value) -> Vec<String> {
    v["jobs"]
        .as_array()
        .map(|a| a.iter().map(|j| j["id"].as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default()
}

fn id_strings(ids: &[JobId]) -> Vec<String> {
    ids.iter().map(ToString::to_string).collect()
}

// ---------------------------------------------------------------------------------------------
// Cases per database

/// Every read on an unmigrated schema exits 6 and says to run `chokaq migrate`; `migrate`
/// fixes it (twice is fine).
async fn unmigrated(kind: Kind) -> TestResult {
    let db = Db::fresh(kind, false).await?;
    let out = async {
        for args in [&["stats"][..], &["queues"], &["jobs", "list"], &["dead", "list"], &["workers"]] {
            let out = db.run(args)?;
            ensure_eq!(out.code, 6, "exit code of {args:?} unmigrated (stderr {})", out.stderr);
            ensure!(out.stderr.contains("schema not migrated: run `chokaq migrate`"), "{args:?}: {}", out.stderr);
        }
        let out = db.run(&["--json", "stats"])?;
        ensure_eq!(out.code, 6, "--json stats unmigrated");
        let e = out.json_error()?;
        ensure_eq!(e["error"]["exit_code"].as_u64(), Some(6), "JSON exit code");
        ensure!(e["error"]["message"].as_str().unwrap_or("").contains("run `chokaq migrate`"), "{e}");
        ensure!(db.ok_table(&["migrate"])?.contains("is migrated"), "migrate output");
        let v = db.ok_json(&["migrate"])?;
        ensure_eq!(v["migrated"].as_bool(), Some(true), "migrate --json");
        ensure_eq!(db.ok_json(&["stats"])?["total"]["pending"].as_u64(), Some(0), "stats after migrate");
        Ok(())
    }
    .await;
    db.cleanup().await;
    out
}

async fn on_fresh<F, Fut>(kind: Kind, f: F) -> TestResult
where
    F: FnOnce(Arc<Db>) -> Fut,
    Fut: std::future::Future<Output = TestResult>,
{
    let db = Arc::new(Db::fresh(kind, true).await?);
    let out = f(db.clone()).await;
    match Arc::try_unwrap(db) {
        Ok(db) => db.cleanup().await,
        Err(_) => eprintln!("a test kept its database handle: not cleaned up"),
    }
    out
}

// ---------------------------------------------------------------------------------------------

fn trial<F, Fut>(name: &str, kind: Kind, f: F) -> Trial
where
    F: FnOnce(Arc<Db>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = TestResult>,
{
    let label = kind.label();
    Trial::test(format!("{label}::{name}"), move || runtime().block_on(on_fresh(kind, f)).map_err(Failed::from))
        .with_kind(label)
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let mut trials = vec![
        Trial::test("help_and_usage", || help_and_usage().map_err(Failed::from)),
        Trial::test("bad_url", || bad_url().map_err(Failed::from)),
        Trial::test("sqlite::missing_file", || operator::sqlite_missing_file().map_err(Failed::from)),
        Trial::test("url_and_path_errors", || config::url_and_path_errors().map_err(Failed::from)),
        Trial::test("mysql::connect_timeout_is_the_flags", || {
            config::mysql_connect_timeout_is_the_flags().map_err(Failed::from)
        }),
    ];
    #[cfg(unix)]
    trials.push(Trial::test("sqlite::file_is_private", || operator::sqlite_file_is_private().map_err(Failed::from)));
    let (pg_ok, my_ok) = runtime().block_on(async {
        let pg = chokaq::connect(&pg_url(), "chokaq_probe").await.is_ok();
        let my = chokaq::connect(&mysql_url(), "chokaq_probe").await.is_ok();
        (pg, my)
    });
    for kind in [Kind::Sqlite, Kind::Postgres, Kind::Mysql] {
        let label = kind.label();
        let mut these = vec![
            Trial::test(format!("{label}::unmigrated"), move || {
                runtime().block_on(unmigrated(kind)).map_err(Failed::from)
            })
            .with_kind(label),
            trial("stats", kind, stats),
            trial("queues", kind, queues),
            trial("empty_queues", kind, empty_queues),
            trial("jobs", kind, jobs),
            trial("dead", kind, dead),
            trial("retry_race", kind, retry_race),
            trial("purge", kind, purge),
            trial("workers", kind, workers),
            trial("web", kind, web),
            trial("schedules", kind, schedules),
            trial("jobs_enqueue", kind, enqueue::jobs_enqueue),
            trial("hostile_text", kind, operator::hostile_text),
            trial("keyed_controls", kind, keyed::keyed_controls),
            trial("keyed_stats", kind, keyed::keyed_stats),
            trial("unique_show", kind, unique::unique_show),
            trial("output_show", kind, outputs::output_show),
            trial("workflows_and_batches", kind, flows::workflows_and_batches),
            trial("confirmations", kind, operator::confirmations),
            trial("closed_pipe", kind, operator::closed_pipe),
        ];
        #[cfg(unix)]
        these.push(trial("web_says_it_stopped", kind, operator::web_says_it_stopped));
        these.push(trial("web_port_in_use", kind, operator::web_port_in_use));
        if kind != Kind::Sqlite {
            these.push(trial("tls_refused", kind, config::tls_refused));
            these.push(trial("missing_privilege", kind, config::missing_privilege));
            these.push(
                Trial::test(format!("{label}::missing_database_and_role"), move || {
                    operator::missing_database_and_role(kind).map_err(Failed::from)
                })
                .with_kind(label),
            );
        }
        let (reachable, server, env) = match kind {
            Kind::Postgres => (pg_ok, "PostgreSQL", "CHOKAQ_TEST_POSTGRES_URL"),
            Kind::Mysql => (my_ok, "MariaDB / MySQL", "CHOKAQ_TEST_MYSQL_URL"),
            Kind::Sqlite => (true, "", ""),
        };
        if !reachable {
            if required(label) {
                these = these
                    .into_iter()
                    .map(|t| {
                        let name = t.name().to_string();
                        Trial::test(name, move || {
                            Err(format!("{server} is unreachable and CHOKAQ_TEST_REQUIRE names {label}").into())
                        })
                    })
                    .collect();
            } else {
                eprintln!("{server} unreachable at {env} (or the default): its cases are ignored");
                these = these.into_iter().map(|t| t.with_ignored_flag(true)).collect();
            }
        }
        trials.extend(these);
    }
    libtest_mimic::run(&args, trials).exit_code()
}
