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

#[path = "cases/keyed.rs"]
mod keyed;
#[path = "cases/operator.rs"]
mod operator;

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
// Cases that need no database

fn bin(args: &[&str]) -> Result<Out, String> {
    let out = Out::of(
        Command::new(env!("CARGO_BIN_EXE_chokaq"))
            .env_remove("DATABASE_URL")
            .env_remove("CHOKAQ_SCHEMA")
            .args(args)
            .output()
            .map_err(err)?,
    );
    Ok(out)
}

/// `--help` of the binary and of every subcommand exits 0; usage errors exit 2; a missing
/// URL exits 2 and says how to give one; the help never shows DATABASE_URL's value.
fn help_and_usage() -> TestResult {
    let top = bin(&["--help"])?;
    ensure_eq!(top.code, 0, "--help");
    for word in ["migrate", "stats", "queues", "jobs", "dead", "purge", "workers", "Exit codes"] {
        ensure!(top.stdout.contains(word), "--help does not mention {word}: {}", top.stdout);
    }
    for sub in [
        &["migrate"][..],
        &["stats"],
        &["queues"],
        &["queues", "pause"],
        &["queues", "cap"],
        &["queues", "zombie-timeout"],
        &["jobs", "list"],
        &["jobs", "show"],
        &["jobs", "cancel"],
        &["dead", "list"],
        &["dead", "retry"],
        &["purge"],
        &["workers"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let out = bin(&args)?;
        ensure_eq!(out.code, 0, "{args:?}");
        ensure!(out.stdout.contains("Usage: chokaq"), "{args:?}: {}", out.stdout);
    }
    let secret_env = Command::new(env!("CARGO_BIN_EXE_chokaq"))
        .env("DATABASE_URL", format!("postgres://u:{SECRET}@h/db"))
        .arg("--help")
        .output()
        .map_err(err)?;
    ensure!(!String::from_utf8_lossy(&secret_env.stdout).contains(SECRET), "--help shows DATABASE_URL's value");
    for bad in [
        &["frobnicate"][..],
        &["stats", "--nope"],
        &["queues", "cap", "q"],
        &["queues", "cap", "q", "lots"],
        &["purge", "--table", "archive"],
        &["purge", "--table", "hot", "--older-than", "1d"],
        &["purge", "--table", "archive", "--older-than", "7x"],
        &["dead", "retry"],
        &["dead", "retry", "--all"],
        &["jobs", "list", "--limit", "0"],
    ] {
        let out = bin(bad)?;
        ensure_eq!(out.code, 2, "exit code of {bad:?} (stderr {})", out.stderr);
    }
    let no_url = bin(&["stats"])?;
    ensure_eq!(no_url.code, 2, "no URL");
    ensure!(no_url.stderr.contains("DATABASE_URL"), "{}", no_url.stderr);
    let v = bin(&["--version"])?;
    ensure_eq!(v.code, 0, "--version");
    ensure!(v.stdout.starts_with("chokaq "), "{}", v.stdout);
    Ok(())
}

/// A URL of an unknown scheme, an unrecognised one, or a server that refuses: exit 2, 2 and
/// 5, errors that say what is expected, no password anywhere (table and JSON form).
fn bad_url() -> TestResult {
    for url in [format!("redis://root:{SECRET}@h/db"), format!("{SECRET}-not-a-url")] {
        for json in [false, true] {
            let mut args = vec!["--url", url.as_str()];
            if json {
                args.push("--json");
            }
            args.push("stats");
            let out = bin(&args)?;
            out.check_secret(&url, &args)?;
            ensure_eq!(out.code, 2, "exit code with URL {url:?} (stderr {})", out.stderr);
            if json {
                let e = out.json_error()?;
                ensure_eq!(e["error"]["exit_code"].as_u64(), Some(2), "JSON exit code");
                ensure!(e["error"]["message"].as_str().unwrap_or("").contains("expected postgres://"), "{e}");
            } else {
                ensure!(out.stderr.starts_with("error: "), "{}", out.stderr);
                ensure!(out.stderr.contains("expected postgres://"), "{}", out.stderr);
            }
        }
    }
    let refused = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
    let out = bin(&["--url", &refused, "--connect-timeout", "2s", "stats"])?;
    out.check_secret(&refused, &["stats"])?;
    ensure_eq!(out.code, 5, "exit code of a refused connection (stderr {})", out.stderr);
    ensure!(out.stderr.contains("hint: check that the database is running"), "{}", out.stderr);
    // Reported at once, not after the connect timeout (the pool tries a refused connection
    // again until then).
    let t0 = std::time::Instant::now();
    let out = bin(&["--url", &refused, "--connect-timeout", "30s", "workers"])?;
    ensure_eq!(out.code, 5, "exit code of a refused connection, 30 s timeout (stderr {})", out.stderr);
    ensure!(t0.elapsed() < Duration::from_secs(5), "refused connection reported after {:?}", t0.elapsed());
    ensure!(out.stderr.to_lowercase().contains("refused"), "the refusal is named: {}", out.stderr);
    let out = bin(&["--url", &refused, "--connect-timeout", "2s", "--json", "workers"])?;
    out.check_secret(&refused, &["workers"])?;
    ensure_eq!(out.json_error()?["error"]["exit_code"].as_u64(), Some(5), "JSON exit code of a refused connection");
    Ok(())
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

/// Exact counts per queue and state, the lag of a queue whose oldest due job is an hour old,
/// and the totals; JSON and table.
async fn stats(db: Arc<Db>) -> TestResult {
    let (a, b) = (db.q("a"), db.q("b"));
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    db.enqueue(NewJob::build(a.as_str(), "k").unwrap().run_at(hour_ago)).await?;
    db.enqueue(NewJob::build(a.as_str(), "k").unwrap()).await?;
    db.archived(&b, 2).await?;
    db.dead(&b, 1).await?;
    db.enqueue(NewJob::build(b.as_str(), "k").unwrap()).await?;
    db.start(WorkerId::random(), &b, 1).await?;
    let v = db.ok_json(&["stats"])?;
    let find =
        |q: &QueueName| v["queues"].as_array().and_then(|a| a.iter().find(|x| x["queue"] == q.as_str()).cloned());
    let qa = find(&a).ok_or("queue a missing")?;
    let qb = find(&b).ok_or("queue b missing")?;
    let counts =
        |x: &Value| ["pending", "fetched", "processing", "archived", "dead"].map(|k| x[k].as_u64().unwrap_or(u64::MAX));
    ensure_eq!(counts(&qa), [2, 0, 0, 0, 0], "queue a");
    ensure_eq!(counts(&qb), [0, 0, 1, 2, 1], "queue b");
    ensure_eq!(counts(&v["total"]), [2, 0, 1, 2, 1], "total");
    let lag = qa["lag_seconds"].as_f64().ok_or("no lag for queue a")?;
    ensure!((3590.0..3700.0).contains(&lag), "lag of queue a: {lag}");
    ensure!(qb["lag_seconds"].is_null(), "queue b has no due job: {}", qb["lag_seconds"]);
    let table = rows(&db.ok_table(&["stats"])?);
    ensure_eq!(
        table[0],
        ["QUEUE", "STATE", "PENDING", "FETCHED", "PROCESSING", "ARCHIVED", "FAILED", "CANCELLED", "LAG"],
        "header"
    );
    let row_a = table.iter().find(|r| r[0] == a.as_str()).ok_or("no table row for a")?;
    ensure_eq!(row_a[1..8], ["running", "2", "0", "0", "0", "0", "0"], "table row a");
    ensure!(row_a[8] == "1h" || row_a[8].starts_with("59m"), "table lag of a: {row_a:?}");
    let row_b = table.iter().find(|r| r[0] == b.as_str()).ok_or("no table row for b")?;
    ensure_eq!(row_b[1..], ["running", "0", "0", "1", "2", "1", "0", "-"], "table row b");
    ensure_eq!(table.last().cloned().unwrap_or_default(), ["TOTAL", "2", "0", "1", "2", "1", "0"], "total row");
    Ok(())
}

/// Queue controls: pause, resume, deactivate, activate, cap N and none, zombie timeout and
/// none, each read back through the backend; the list; bad names and values.
async fn queues(db: Arc<Db>) -> TestResult {
    let q = db.q("ctl");
    db.enqueue(NewJob::build(q.as_str(), "k").unwrap()).await?;
    let qs = q.as_str();
    let settings = || async { db.backend.queue_settings(&q).await.map_err(err) };
    let v = db.ok_json(&["queues", "pause", qs])?;
    ensure_eq!((v["queue"].as_str(), v["paused"].as_bool()), (Some(qs), Some(true)), "pause --json");
    ensure!(settings().await?.is_paused, "paused in the database");
    let t = db.ok_table(&["queues", "resume", qs])?;
    ensure!(t.contains(&format!("queue {qs}: resumed")) && t.contains("running"), "{t}");
    ensure!(!settings().await?.is_paused, "resumed in the database");
    db.ok_json(&["queues", "deactivate", qs])?;
    ensure!(!settings().await?.is_active, "deactivated");
    let t = db.ok_table(&["queues"])?;
    let row = rows(&t).into_iter().find(|r| r[0] == qs).ok_or("queue not listed")?;
    ensure_eq!(row[1..7], ["inactive", "none", "none", "none", "default", "retry"], "listed row");
    db.ok_json(&["queues", "activate", qs])?;
    ensure!(settings().await?.is_active, "activated");
    let v = db.ok_json(&["queues", "cap", qs, "3"])?;
    ensure_eq!(v["max_workers"].as_u64(), Some(3), "cap 3");
    ensure_eq!(settings().await?.max_workers, Some(3), "cap in the database");
    db.ok_table(&["queues", "cap", qs, "none"])?;
    ensure_eq!(settings().await?.max_workers, None, "cap none");
    let v = db.ok_json(&["queues", "zombie-timeout", qs, "5m"])?;
    ensure_eq!(v["zombie_timeout_seconds"].as_f64(), Some(300.0), "zombie timeout");
    ensure_eq!(settings().await?.zombie_timeout, Some(Duration::from_secs(300)), "zombie timeout in the database");
    db.ok_json(&["queues", "zombie-timeout", qs, "none"])?;
    ensure_eq!(settings().await?.zombie_timeout, None, "zombie timeout none");
    let list = db.ok_json(&["queues", "list"])?;
    let listed: Vec<String> =
        list.as_array().ok_or("list")?.iter().filter_map(|x| x["queue"].as_str().map(String::from)).collect();
    ensure_eq!(listed, vec![qs.to_string()], "queues list --json");
    for bad in [&["queues", "pause", "bad queue!"][..], &["queues", "cap", qs, "100000000"]] {
        let out = db.run(bad)?;
        ensure_eq!(out.code, 2, "exit code of {bad:?} (stderr {})", out.stderr);
    }
    Ok(())
}

/// Issue 26, item 9: `queues pause` of a queue with no job and no settings is refused unless
/// `--create` (as River's QueuePause refuses an unknown queue), and writes nothing; once
/// created, the empty paused queue is listed by `queues list` and by `stats` (with its state).
async fn empty_queues(db: Arc<Db>) -> TestResult {
    let q = db.q("empty");
    let qs = q.as_str();
    let out = db.run(&["queues", "pause", qs])?;
    ensure_eq!(out.code, 3, "exit code of pausing an unknown queue (stdout {} stderr {})", out.stdout, out.stderr);
    ensure!(out.stderr.contains("--create"), "the refusal names --create: {}", out.stderr);
    ensure!(db.backend.queue_settings(&q).await.map_err(err)?.updated_at.is_none(), "the refusal wrote a control row");
    let t = db.ok_table(&["queues", "pause", qs, "--create"])?;
    ensure!(t.contains(&format!("queue {qs}: paused")), "{t}");
    let row = rows(&db.ok_table(&["queues", "list"])?).into_iter().find(|r| r[0] == qs).ok_or("queue not listed")?;
    ensure_eq!(row[1], "paused", "listed state");
    let v = db.ok_json(&["stats"])?;
    let s = v["queues"].as_array().and_then(|a| a.iter().find(|x| x["queue"] == qs).cloned()).ok_or("not in stats")?;
    ensure_eq!((s["pending"].as_u64(), s["paused"].as_bool()), (Some(0), Some(true)), "stats of {qs}");
    let table = rows(&db.ok_table(&["stats"])?);
    let row = table.iter().find(|r| r[0] == qs).ok_or("no stats row")?;
    ensure_eq!(row[1], "paused", "stats table state of {qs}");
    // A known queue (here: paused) needs no --create.
    db.ok_json(&["queues", "resume", qs])?;
    Ok(())
}

/// Jobs: list with every filter and cursor paging (each id exactly once), show (JSON with
/// the payload, table), cancel of a pending and a running job, unknown and bad ids.
async fn jobs(db: Arc<Db>) -> TestResult {
    let (q, other) = (db.q("jobs"), db.q("other"));
    let mut ids = Vec::new();
    for i in 0..5 {
        let j = NewJob::build(q.as_str(), if i < 3 { "mail.send" } else { "mail.bounce" })
            .unwrap()
            .json(serde_json::json!({ "n": i }))
            .tag(if i % 2 == 0 { "even" } else { "odd" });
        ids.push(db.enqueue(j).await?);
    }
    db.enqueue(NewJob::build(other.as_str(), "mail.send").unwrap()).await?;
    let running = db.start(WorkerId::random(), &q, 1).await?.remove(0);
    ensure_eq!(running.id, ids[0], "the oldest job is claimed first");

    let all = db.ok_json(&["jobs", "list", "--queue", q.as_str()])?;
    ensure_eq!(ids_of(&all), id_strings(&ids), "jobs list --queue");
    ensure!(all["next"].is_null(), "one page: {}", all["next"]);
    ensure_eq!(all["jobs"][0]["state"].as_str(), Some("processing"), "state of the claimed job");
    ensure!(all["jobs"][0].get("payload").is_none(), "a listing carries no payload");
    let pending = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--status", "pending"])?;
    ensure_eq!(ids_of(&pending), id_strings(&ids[1..]), "--status pending");
    let kind = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--kind", "mail.bounce"])?;
    ensure_eq!(ids_of(&kind), id_strings(&ids[3..]), "--kind");
    let tag = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--tag", "odd"])?;
    ensure_eq!(ids_of(&tag), id_strings(&[ids[1], ids[3]]), "--tag");
    let future = db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--since", "2999-01-01T00:00:00Z"])?;
    ensure_eq!(ids_of(&future), Vec::<String>::new(), "--since in the future");
    let window =
        db.ok_json(&["jobs", "list", "--queue", q.as_str(), "--since", "1h", "--until", "2999-01-01T00:00:00Z"])?;
    ensure_eq!(ids_of(&window).len(), 5, "--since 1h --until the future");
    let everything = db.ok_json(&["jobs", "list", "--limit", "1000"])?;
    ensure_eq!(ids_of(&everything).len(), 6, "every hot job");
    // Paging: 2 + 2 + 1, each id once, the cursor printed in both forms.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for page in 0..3 {
        let mut args = vec!["jobs", "list", "--queue", q.as_str(), "--limit", "2"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let v = db.ok_json(&args)?;
        seen.extend(ids_of(&v));
        after = v["next"].as_str().map(String::from);
        ensure_eq!(after.is_some(), page < 2, "a next cursor after page {page}");
    }
    ensure_eq!(seen, id_strings(&ids), "pages of 2");
    let t = db.ok_table(&["jobs", "list", "--queue", q.as_str(), "--limit", "2"])?;
    let lines = rows(&t);
    ensure_eq!(lines[0], ["ID", "STATE", "QUEUE", "KIND", "ATTEMPT", "PRIORITY", "CREATED", "DUE"], "header");
    ensure_eq!(
        lines[1][..5],
        [ids[0].to_string(), "processing".into(), q.to_string(), "mail.send".into(), "1/25".into()],
        "first row"
    );
    ensure_eq!(
        lines.last().cloned().unwrap_or_default(),
        ["next", "page:", "--after", &ids[1].to_string()],
        "cursor line"
    );

    let show = db.ok_json(&["jobs", "show", &ids[2].to_string()])?;
    ensure_eq!(show["payload"], serde_json::json!({ "n": 2 }), "payload of show");
    ensure_eq!((show["state"].as_str(), show["kind"].as_str()), (Some("pending"), Some("mail.send")), "show");
    ensure_eq!(strs(&show["tags"]), vec!["even".to_string()], "tags");
    let t = db.ok_table(&["jobs", "show", &ids[2].to_string()])?;
    ensure!(t.contains("payload") && t.contains("{\"n\":2}") && t.contains("pending"), "{t}");
    let unknown = JobId::new().to_string();
    let out = db.run(&["jobs", "show", &unknown])?;
    ensure_eq!(out.code, 3, "show of an unknown id");
    ensure!(out.stderr.contains(&format!("no job {unknown}")), "{}", out.stderr);
    ensure_eq!(
        db.run(&["--json", "jobs", "show", &unknown])?.json_error()?["error"]["exit_code"].as_u64(),
        Some(3),
        "JSON"
    );
    ensure_eq!(db.run(&["jobs", "show", "not-a-uuid"])?.code, 2, "show of a bad id");

    let v = db.ok_json(&["jobs", "cancel", &ids[4].to_string()])?;
    ensure_eq!(v["outcome"].as_str(), Some("cancelled"), "cancel of a pending job");
    let r = db.backend.get_job(ids[4]).await.map_err(err)?.ok_or("gone")?;
    ensure_eq!(r.location, chokaq::core::JobLocation::Dead(DeadReason::Cancelled), "cancelled job");
    let out = db.run(&["jobs", "cancel", &ids[4].to_string()])?;
    ensure_eq!(out.code, 3, "cancel of a dead job (stderr {})", out.stderr);
    let t = db.ok_table(&["jobs", "cancel", &ids[0].to_string()])?;
    ensure!(t.contains("cancel requested"), "cancel of a running job: {t}");
    ensure!(db.backend.get_job(ids[0]).await.map_err(err)?.ok_or("gone")?.cancel_requested, "cancel_requested");
    Ok(())
}

/// Dead letters: list (JSON and table, with reason and error), retry one (then again: 3),
/// retry every one of a queue with a count, a conflict (exit 4).
async fn dead(db: Arc<Db>) -> TestResult {
    let (q, other) = (db.q("dead"), db.q("other"));
    let ids = db.dead(&q, 5).await?;
    db.dead(&other, 1).await?;
    let v = db.ok_json(&["dead", "list", "--queue", q.as_str()])?;
    ensure_eq!(ids_of(&v), id_strings(&ids), "dead list");
    ensure_eq!(
        (v["jobs"][0]["reason"].as_str(), v["jobs"][0]["state"].as_str()),
        (Some("failed"), Some("dead")),
        "reason"
    );
    let t = rows(&db.ok_table(&["dead", "list", "--queue", q.as_str()])?);
    ensure_eq!(t[0], ["ID", "QUEUE", "KIND", "REASON", "ATTEMPT", "FINISHED", "LAST", "ERROR"], "header");
    ensure_eq!(
        t[1][..5],
        [ids[0].to_string(), q.to_string(), "cli.test".into(), "failed".into(), "1/25".into()],
        "row"
    );
    ensure_eq!(t[1].last().cloned(), Some(ids[0].to_string()), "last error (boom <id>)");

    let v = db.ok_json(&["dead", "retry", &ids[0].to_string()])?;
    ensure_eq!(v["outcome"].as_str(), Some("requeued"), "retry");
    let r = db.backend.get_job(ids[0]).await.map_err(err)?.ok_or("gone")?;
    ensure_eq!(
        (r.location, r.attempt),
        (chokaq::core::JobLocation::Hot(chokaq::core::JobStatus::Pending), 0),
        "requeued job"
    );
    let out = db.run(&["dead", "retry", &ids[0].to_string()])?;
    ensure_eq!(out.code, 3, "a second retry (stderr {})", out.stderr);
    ensure!(out.stderr.contains("already requeued"), "{}", out.stderr);

    let t = db.ok_table(&["dead", "retry", "--queue", q.as_str(), "--all", "--yes"])?;
    ensure!(t.contains(&format!("queue {q}: requeued 4, skipped 0")), "{t}");
    let left = db.ok_json(&["dead", "list", "--queue", q.as_str()])?;
    ensure_eq!(ids_of(&left).len(), 0, "no dead letters left in {q}");
    ensure_eq!(ids_of(&db.ok_json(&["dead", "list", "--queue", other.as_str()])?).len(), 1, "the other queue's");
    let v = db.ok_json(&["dead", "retry", "--queue", q.as_str(), "--all", "--yes"])?;
    ensure_eq!(
        (v["requeued"].as_u64(), v["skipped"].as_u64(), v["conflicts"].as_u64()),
        (Some(0), Some(0), Some(0)),
        "nothing left"
    );

    // A conflict: the dead letter's idempotency key is held by a live job of its queue.
    let c = db.q("conflict");
    db.enqueue(NewJob::build(c.as_str(), "k").unwrap().idempotency_key("K1")).await?;
    let w = WorkerId::random();
    let j = db.start(w, &c, 1).await?.remove(0);
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() };
    db.backend.fail(w, j.lease_ref(), dl).await.map_err(err)?.done().ok_or("fail lost")?;
    db.enqueue(NewJob::build(c.as_str(), "k").unwrap().idempotency_key("K1")).await?;
    let out = db.run(&["dead", "retry", &j.id.to_string()])?;
    ensure_eq!(out.code, 4, "retry of a conflicting dead letter (stderr {})", out.stderr);
    ensure!(out.stderr.contains("idempotency key"), "{}", out.stderr);
    let (code, v) = db.json(&["dead", "retry", "--queue", c.as_str(), "--all", "--yes"])?;
    ensure_eq!(code, 4, "--all with a conflict");
    ensure_eq!((v["requeued"].as_u64(), v["conflicts"].as_u64()), (Some(0), Some(1)), "--all counts");
    ensure_eq!(strs(&v["conflict_ids"]), vec![j.id.to_string()], "conflict ids");
    Ok(())
}

/// Two processes retry the same dead letters at once: every one is requeued exactly once.
/// One id: exactly one process requeues it (exit 0), the other finds it gone (exit 3). A whole
/// queue: the two counts of requeued add up to exactly the number of dead letters.
async fn retry_race(db: Arc<Db>) -> TestResult {
    // The real race: the same id, two processes started together.
    let r = db.q("race1");
    for round in 0..5 {
        let id = db.dead(&r, 1).await?.remove(0).to_string();
        let children: Vec<_> = (0..2).map(|_| db.spawn(&["--json", "dead", "retry", &id])).collect();
        let mut codes = Vec::new();
        for c in children {
            let out = Out::of(c.map_err(err)?.wait_with_output().map_err(err)?);
            out.check_secret(&db.url, &["dead", "retry"])?;
            codes.push(out.code);
        }
        codes.sort_unstable();
        ensure_eq!(codes, vec![0, 3], "round {round}: exit codes of two racing retries of one id");
        // Take the requeued job out of the way so the next round's claim finds only its own.
        let w = WorkerId::random();
        let j = db.start(w, &r, 1).await?.remove(0);
        db.backend.complete_one(w, j.lease_ref()).await.map_err(err)?.done().ok_or("complete lost")?;
    }
    let all = db.q("raceall");
    let n = 60;
    let ids = db.dead(&all, n).await?;
    let children: Vec<_> =
        (0..2).map(|_| db.spawn(&["--json", "dead", "retry", "--queue", all.as_str(), "--all", "-y"])).collect();
    let mut requeued = 0;
    for c in children {
        let out = Out::of(c.map_err(err)?.wait_with_output().map_err(err)?);
        out.check_secret(&db.url, &["dead", "retry", "--all"])?;
        ensure_eq!(out.code, 0, "exit code of a racing --all (stderr {})", out.stderr);
        let v: Value = serde_json::from_str(&out.stdout).map_err(err)?;
        ensure_eq!(v["conflicts"].as_u64(), Some(0), "conflicts");
        requeued += v["requeued"].as_u64().ok_or("requeued")?;
    }
    ensure_eq!(requeued, u64::from(n), "jobs requeued by the two processes together");
    let stats = db.backend.stats().await.map_err(err)?;
    let s = stats.queue(all.as_str()).ok_or("queue missing")?;
    ensure_eq!((s.pending, s.dead), (u64::from(n), 0), "(pending, dead) after the race");
    for id in ids {
        let p = db.backend.get_job(id).await.map_err(err)?.ok_or("gone")?;
        ensure_eq!(p.location, chokaq::core::JobLocation::Hot(chokaq::core::JobStatus::Pending), "{id}");
    }
    Ok(())
}

/// Purge: a dry run counts and deletes nothing; a purge by age and queue deletes exactly the
/// rows named; both tables; JSON and table.
async fn purge(db: Arc<Db>) -> TestResult {
    let (q, other) = (db.q("purge"), db.q("keep"));
    let mut finished = db.archived(&q, 3).await?;
    finished.extend(db.archived(&other, 2).await?);
    finished.extend(db.dead(&q, 2).await?);
    let count = |table: &str, queue: &QueueName| {
        let v = db.ok_json(&["jobs", "list", "--table", table, "--queue", queue.as_str()]);
        v.map(|v| ids_of(&v).len())
    };
    let v = db.ok_json(&["purge", "--table", "archive", "--older-than", "7d", "--dry-run"])?;
    ensure_eq!((v["would_purge"].as_u64(), v["dry_run"].as_bool()), (Some(0), Some(true)), "dry run, 7 days");
    // The rows finished a moment ago: poll until the database clock is past them.
    let mut latest = chrono::DateTime::<chrono::Utc>::MIN_UTC;
    for id in &finished {
        let r = db.backend.get_job(*id).await.map_err(err)?.ok_or("gone")?;
        latest = latest.max(r.finished_at.ok_or("no finish time")?);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db.backend.stats().await.map_err(err)?.taken_at.ok_or("no taken_at")? <= latest {
        ensure!(std::time::Instant::now() < deadline, "the database clock did not pass {latest}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let v = db.ok_json(&["purge", "--table", "archive", "--older-than", "0s", "--queue", q.as_str(), "--dry-run"])?;
    ensure_eq!(v["would_purge"].as_u64(), Some(3), "dry run, queue {q}");
    ensure_eq!(count("archive", &q)?, 3, "nothing deleted by the dry run");
    let t = db.ok_table(&["purge", "--table", "archive", "--older-than", "0s", "--dry-run"])?;
    ensure!(t.starts_with("would purge 5 jobs from the archive table"), "{t}");
    let t = db.ok_table(&["purge", "--table", "archive", "--older-than", "0s", "--queue", q.as_str(), "--yes"])?;
    ensure!(t.starts_with(&format!("purged 3 jobs of queue {q} from the archive table")), "{t}");
    ensure_eq!((count("archive", &q)?, count("archive", &other)?), (0, 2), "archive after the purge");
    let v = db.ok_json(&["purge", "--table", "dead", "--older-than", "0s", "--queue", q.as_str(), "-y"])?;
    ensure_eq!((v["purged"].as_u64(), v["table"].as_str()), (Some(2), Some("dead")), "dead purge");
    ensure_eq!(count("dead", &q)?, 0, "dead letters after the purge");
    Ok(())
}

/// Workers: the rows the backend holds, exactly (JSON), and a table row; none is "no live
/// workers".
async fn workers(db: Arc<Db>) -> TestResult {
    ensure_eq!(db.ok_json(&["workers"])?, serde_json::json!([]), "no workers");
    ensure!(db.ok_table(&["workers"])?.contains("no live workers"), "empty table");
    let reg = chokaq::core::WorkerRegistration {
        worker: WorkerId::random(),
        host: "web-7.example".into(),
        pid: 4242,
        queues: vec![QueueName::new("emails").unwrap(), QueueName::new("reports").unwrap()],
        concurrency: 16,
    };
    db.backend.register_worker(&reg).await.map_err(err)?;
    let v = db.ok_json(&["workers"])?;
    let rows_ = v.as_array().ok_or("array")?;
    ensure_eq!(rows_.len(), 1, "workers listed");
    let w = &rows_[0];
    ensure_eq!(
        (w["worker"].as_str(), w["host"].as_str(), w["pid"].as_u64(), strs(&w["queues"]), w["concurrency"].as_u64()),
        (
            Some(reg.worker.to_string().as_str()),
            Some("web-7.example"),
            Some(4242),
            vec!["emails".to_string(), "reports".to_string()],
            Some(16)
        ),
        "worker row"
    );
    ensure!(w["last_seen_seconds_ago"].as_f64().is_some_and(|s| s < 600.0), "{w}");
    let t = rows(&db.ok_table(&["workers"])?);
    ensure_eq!(t[0], ["WORKER", "HOST", "PID", "QUEUES", "CONCURRENCY", "STARTED", "LAST", "SEEN"], "header");
    ensure_eq!(
        t[1][..5],
        [reg.worker.to_string(), "web-7.example".into(), "4242".into(), "emails,reports".into(), "16".into()],
        "row"
    );
    Ok(())
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

/// `chokaq web`: refused without an auth choice and with `--no-auth` off loopback (exit 2);
/// served with a bearer token: 401 without it, the overview with it; SIGTERM-free stop by kill.
async fn web(db: Arc<Db>) -> TestResult {
    let out = db.run(&["web"])?;
    ensure_eq!(out.code, 2, "web without an auth choice (stderr {})", out.stderr);
    ensure!(out.stderr.contains("--token, --basic or --no-auth"), "{}", out.stderr);
    let out = db.run(&["web", "--no-auth", "--listen", "0.0.0.0:18080"])?;
    ensure_eq!(out.code, 2, "--no-auth on 0.0.0.0 (stderr {})", out.stderr);
    ensure!(out.stderr.contains("loopback"), "{}", out.stderr);
    // Issue 26: a blank or short token is refused before anything listens.
    for (token, needle) in [("   ", "blank"), ("short-token", "at least 16")] {
        let out = db.run(&["web", "--token", token])?;
        ensure_eq!(out.code, 2, "--token {token:?} (stderr {})", out.stderr);
        ensure!(out.stderr.contains(needle) && !out.stderr.contains("short-token"), "{}", out.stderr);
    }
    // A free port, then the dashboard on it with a bearer token.
    let port = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?.local_addr().map_err(err)?.port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = db
        .cmd(&["web", "--listen", &listen])
        .env("CHOKAQ_WEB_TOKEN", "s3cret-token-0123456789")
        .spawn()
        .map_err(err)?;
    let get = |auth: Option<&str>| -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&listen)?;
        let auth = auth.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        write!(c, "GET / HTTP/1.1\r\nHost: {listen}\r\n{auth}Connection: close\r\n\r\n")?;
        let mut s = String::new();
        c.read_to_string(&mut s)?;
        Ok(s)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let page = loop {
        match get(Some("s3cret-token-0123456789")) {
            Ok(s) => break s,
            Err(_) if std::time::Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => {
                let _ = child.kill();
                return Err(format!("the dashboard never answered on {listen}: {e}"));
            }
        }
    };
    let anon = get(None).map_err(err)?;
    let wrong = get(Some("wrong")).map_err(err)?;
    let _ = child.kill();
    let _ = child.wait();
    ensure!(page.starts_with("HTTP/1.1 200"), "with the token: {}", &page[..page.len().min(200)]);
    ensure!(page.contains("Overview"), "the overview page: {}", &page[..page.len().min(400)]);
    ensure!(anon.starts_with("HTTP/1.1 401"), "without a token: {}", &anon[..anon.len().min(200)]);
    ensure!(wrong.starts_with("HTTP/1.1 401"), "with a wrong token: {}", &wrong[..wrong.len().min(200)]);
    ensure!(
        !page.contains(&db.url) && !page.contains("s3cret-token-0123456789"),
        "the page shows the URL or the token"
    );
    Ok(())
}

/// Issue 15: `stats` and `schedules` show the schedule rows; `schedules pause` / `resume`
/// flip one; an unknown name is exit 3.
async fn schedules(db: Arc<Db>) -> TestResult {
    ensure_eq!(db.ok_json(&["schedules"])?, serde_json::json!([]), "no schedules");
    let name = format!("cli.sched.{:08x}", rand::random::<u32>());
    let def = chokaq::core::ScheduleDef::new(name.clone(), "every:60s", "UTC");
    db.backend.register_schedule(&def).await.map_err(err)?;
    let v = db.ok_json(&["stats"])?;
    let rows = v["schedules"].as_array().ok_or("stats has no schedules")?;
    ensure_eq!(rows.len(), 1, "schedules in stats");
    ensure_eq!(rows[0]["name"].as_str(), Some(name.as_str()), "name");
    ensure_eq!((rows[0]["spec"].as_str(), rows[0]["enabled"].as_bool()), (Some("every:60s"), Some(true)), "row");
    let table = db.ok_table(&["stats"])?;
    ensure!(table.contains("SCHEDULE") && table.contains(&name) && table.contains("active"), "{table}");
    let v = db.ok_json(&["schedules", "pause", &name])?;
    ensure_eq!(v["enabled"].as_bool(), Some(false), "paused");
    let listed = db.ok_table(&["schedules"])?;
    ensure!(listed.contains(&name) && listed.contains("paused"), "{listed}");
    ensure!(db.ok_table(&["schedules", "resume", &name])?.contains("resumed"), "resume");
    let rows = db.backend.list_schedules().await.map_err(err)?;
    ensure_eq!(rows.iter().find(|r| r.name == name).map(|r| r.enabled), Some(true), "enabled again");
    let out = db.run(&["schedules", "pause", "no.such.schedule"])?;
    ensure_eq!(out.code, 3, "unknown schedule (stderr {})", out.stderr);
    Ok(())
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let mut trials = vec![
        Trial::test("help_and_usage", || help_and_usage().map_err(Failed::from)),
        Trial::test("bad_url", || bad_url().map_err(Failed::from)),
        Trial::test("sqlite::missing_file", || operator::sqlite_missing_file().map_err(Failed::from)),
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
            trial("hostile_text", kind, operator::hostile_text),
            trial("keyed_controls", kind, keyed::keyed_controls),
            trial("keyed_stats", kind, keyed::keyed_stats),
            trial("confirmations", kind, operator::confirmations),
            trial("closed_pipe", kind, operator::closed_pipe),
        ];
        #[cfg(unix)]
        these.push(trial("web_says_it_stopped", kind, operator::web_says_it_stopped));
        these.push(trial("web_port_in_use", kind, operator::web_port_in_use));
        if kind != Kind::Sqlite {
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
