//! The runner binary end to end, as CI runs it: a clean run against PostgreSQL passes every
//! case, a run with a deliberately broken statement (`--inject-fault`) fails, and an
//! unreachable URL exits 2 at once without printing its password.
//!
//! `cargo test -p chokaq-conformance --features postgres,fault-injection --test runner`
//! (URL from `CHOKAQ_TEST_POSTGRES_URL`; an unreachable server skips the database checks with
//! a printed reason unless `CHOKAQ_TEST_REQUIRE` names `postgres`).

use std::io::Read;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use chokaq_conformance::{is_required, ENV_CHILD_FAULT, ENV_CHILD_ROLE, ENV_CHILD_SCHEMA, ENV_CHILD_URL};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const RUNNER: &str = env!("CARGO_BIN_EXE_chokaq-conformance");
/// Per-run limit, a guard against a hang: the whole suite takes about 7 s on the 2-core dev
/// machine when it is quiet, and over 50 s beside other test binaries and builds.
const RUN_LIMIT: Duration = Duration::from_secs(180);

fn url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| DEFAULT_URL.into())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

async fn connect(url: &str) -> Result<PgConnection, String> {
    let opts = PgConnectOptions::from_str(url).map_err(|e| format!("bad CHOKAQ_TEST_POSTGRES_URL: {e}"))?;
    match tokio::time::timeout(Duration::from_secs(10), PgConnection::connect_with(&opts)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("postgres unreachable: {e}")),
        Err(_) => Err("postgres unreachable: no answer within 10 s".into()),
    }
}

/// `true` when the database checks can run; `false` (with the reason printed) when the server
/// is unreachable and not required. Panics when it is required but unreachable.
fn postgres_available(test: &str) -> bool {
    match runtime().block_on(connect(&url())) {
        Ok(c) => {
            drop(c);
            true
        }
        Err(why) if is_required("postgres") => panic!("{why} (and CHOKAQ_TEST_REQUIRE requires it)"),
        Err(why) => {
            println!("{test}: skipped: {why}");
            false
        }
    }
}

/// How many schemas named `schema` exist (0 once the runner dropped it).
fn schema_count(schema: &str) -> i64 {
    runtime().block_on(async {
        let mut c = connect(&url()).await.expect("postgres reachable");
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname = $1")
            .bind(schema)
            .fetch_one(&mut c)
            .await
            .expect("count schemas");
        n
    })
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Runs the runner binary with `args` and waits for it (killed after [`RUN_LIMIT`]). The
/// child-process variables are cleared so the runner starts as a parent.
fn run(args: &[&str]) -> Output {
    run_with_url(args, None)
}

/// [`run`], with `url` in `CHOKAQ_CONFORMANCE_URL` (the way the docs recommend: not on the
/// command line).
fn run_with_url(args: &[&str], url: Option<&str>) -> Output {
    let started = Instant::now();
    let mut cmd = Command::new(RUNNER);
    cmd.args(args)
        .env_remove(ENV_CHILD_ROLE)
        .env_remove(ENV_CHILD_SCHEMA)
        .env_remove(ENV_CHILD_URL)
        .env_remove(ENV_CHILD_FAULT);
    if let Some(url) = url {
        cmd.env(ENV_CHILD_URL, url);
    }
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the runner");
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s)
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).map(|_| s)
    });
    // Poll for the exit against a deadline.
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the runner") {
            break status;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("runner {args:?} did not finish within {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        code: status.code(),
        stdout: out_reader.join().expect("stdout reader").expect("read stdout"),
        stderr: err_reader.join().expect("stderr reader").expect("read stderr"),
        elapsed: started.elapsed(),
    }
}

fn case_names() -> Vec<String> {
    let o = run(&["--list"]);
    assert_eq!(o.code, Some(0), "--list: {}", o.stderr);
    let names: Vec<String> = o.stdout.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    assert!(names.len() >= 50, "--list printed only {} names", names.len());
    names
}

/// The schema the runner printed in its first line (`... schema chokaq_t_<hex>, ...`).
fn printed_schema(stdout: &str) -> String {
    let first = stdout.lines().next().unwrap_or_default();
    let schema = first
        .split_once("schema ")
        .map(|(_, rest)| rest.split(|c: char| c == ',' || c.is_whitespace()).next().unwrap_or_default())
        .unwrap_or_default();
    assert!(
        schema.starts_with("chokaq_t_") && schema.len() == "chokaq_t_".len() + 16,
        "no fresh schema in the first line: {first:?}"
    );
    schema.to_string()
}

/// The closing line `P passed, F failed` (the last stdout line), as (P, F).
fn closing(stdout: &str) -> (usize, usize) {
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    let parse = || -> Option<(usize, usize)> {
        let (p, rest) = last.split_once(" passed, ")?;
        let f = rest.strip_suffix(" failed")?;
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(p) || !all_digits(f) {
            return None;
        }
        Some((p.parse().ok()?, f.parse().ok()?))
    };
    parse().unwrap_or_else(|| panic!("closing line is not `N passed, N failed`: {last:?}\n{stdout}"))
}

/// The per-case lines: (name, outcome word: `ok`, `FAILED` or `ignored`).
fn case_lines(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("case ")?;
            let (name, outcome) = rest.split_once(" ... ")?;
            let word = outcome.split_whitespace().next().unwrap_or_default();
            Some((name.trim().to_string(), word.to_string()))
        })
        .collect()
}

#[test]
fn clean_run_passes_every_case_and_drops_its_schema() {
    if !postgres_available("clean_run_passes_every_case_and_drops_its_schema") {
        return;
    }
    let names = case_names();
    let url = url();
    let o = run_with_url(&[], Some(&url));
    println!("clean run: {:.1} s, exit {:?}", o.elapsed.as_secs_f64(), o.code);
    assert_eq!(o.code, Some(0), "clean run failed:\n{}\n{}", o.stdout, o.stderr);
    let lines = case_lines(&o.stdout);
    for name in &names {
        let n = lines.iter().filter(|(l, _)| l == name).count();
        assert_eq!(n, 1, "case {name} printed {n} times, expected once:\n{}", o.stdout);
    }
    assert_eq!(lines.len(), names.len(), "case lines vs --list:\n{}", o.stdout);
    let ignored = lines.iter().filter(|(_, w)| w == "ignored").count();
    let ok = lines.iter().filter(|(_, w)| w == "ok").count();
    assert_eq!(ok + ignored, names.len(), "every line is ok or ignored:\n{}", o.stdout);
    // The closing line is exactly `N passed, 0 failed` with N = cases - ignored.
    let last = o.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
    assert_eq!(last, format!("{} passed, 0 failed", names.len() - ignored));
    assert_eq!(closing(&o.stdout), (names.len() - ignored, 0));
    println!("clean run: {last} ({ignored} ignored, {} cases listed)", names.len());
    let schema = printed_schema(&o.stdout);
    assert_eq!(schema_count(&schema), 0, "schema {schema} left behind");
    assert!(!o.stdout.contains(&url) && !o.stderr.contains(&url), "the URL was printed");
}

#[test]
fn injected_fault_fails_the_run() {
    if !postgres_available("injected_fault_fails_the_run") {
        return;
    }
    let lease_cases = case_names().into_iter().filter(|n| n.contains("lease_")).count();
    let url = url();
    let o = run(&["--url", &url, "--inject-fault", "complete_without_lease_guard", "--filter", "lease_"]);
    println!("fault run: {:.1} s, exit {:?}", o.elapsed.as_secs_f64(), o.code);
    assert_eq!(o.code, Some(1), "a run with a broken complete must exit 1:\n{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("fault injected: complete_without_lease_guard"), "{}", o.stdout);
    let (passed, failed) = closing(&o.stdout);
    assert!(failed >= 1, "no case caught the fault:\n{}", o.stdout);
    let lines = case_lines(&o.stdout);
    assert_eq!(lines.len(), lease_cases, "one line per lease_ case:\n{}", o.stdout);
    assert_eq!(lines.iter().filter(|(_, w)| w == "FAILED").count(), failed);
    assert_eq!(lines.iter().filter(|(_, w)| w == "ok").count(), passed);
    println!("fault run: {passed} passed, {failed} failed; failed cases:");
    for (name, _) in lines.iter().filter(|(_, w)| w == "FAILED") {
        println!("  {name}");
    }
    let schema = printed_schema(&o.stdout);
    assert_eq!(schema_count(&schema), 0, "schema {schema} left behind");
}

#[test]
fn unreachable_url_exits_2_without_its_password() {
    // Needs no database: port 1 refuses at once.
    let o = run(&["--url", "postgres://u:s3cr3tpw@127.0.0.1:1/db"]);
    println!("unreachable: {:.2} s, exit {:?}, stderr {:?}", o.elapsed.as_secs_f64(), o.code, o.stderr.trim());
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    assert!(o.elapsed < Duration::from_secs(15), "took {:?}", o.elapsed);
    assert!(o.stderr.contains("error: cannot use the postgres database"), "unclear error: {}", o.stderr);
    assert!(o.stderr.contains("cannot connect"), "no reason given: {}", o.stderr);
    for text in [&o.stdout, &o.stderr] {
        assert!(!text.contains("s3cr3tpw"), "password printed: {text}");
    }
    assert!(!o.stdout.contains("passed,"), "no suite should run: {}", o.stdout);
}

#[test]
fn a_refused_login_prints_its_cause_without_the_password() {
    if !postgres_available("a_refused_login_prints_its_cause_without_the_password") {
        return;
    }
    // The server answers, but the database does not exist: its reason must show.
    let base = url();
    let Some((server, _db)) = base.rsplit_once('/') else { panic!("no database in the test URL") };
    let (scheme, rest) = server.split_once("://").expect("a URL");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let bad = format!("{scheme}://postgres:s3cr3tpw@{rest}/chokaq_no_such_database");
    let o = run_with_url(&[], Some(&bad));
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("chokaq_no_such_database"), "the server's reason is missing: {}", o.stderr);
    for text in [&o.stdout, &o.stderr] {
        assert!(!text.contains("s3cr3tpw"), "password printed: {text}");
    }
}

/// `mssql://` is one of the forms `MssqlConfig::from_url` takes: a build with the `mssql`
/// feature tries it (nothing listens on port 1), one without names the feature.
#[test]
fn a_sql_server_url_is_taken_or_names_the_feature() {
    let o = run_with_url(&[], Some("mssql://sa:s3cr3tpw@127.0.0.1:1/db"));
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    if cfg!(feature = "mssql") {
        assert!(o.stderr.contains("error: cannot use the mssql database"), "{}", o.stderr);
    } else {
        assert!(o.stderr.contains("--features mssql"), "{}", o.stderr);
    }
    assert!(!o.stderr.contains("s3cr3tpw") && !o.stdout.contains("s3cr3tpw"));
}

#[test]
fn unknown_fault_is_rejected_and_the_option_is_hidden() {
    let o = run(&["--url", "postgres://u:s3cr3tpw@127.0.0.1:1/db", "--inject-fault", "no_such_fault"]);
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("complete_without_lease_guard"), "should list the faults: {}", o.stderr);
    assert!(!o.stderr.contains("s3cr3tpw") && !o.stdout.contains("s3cr3tpw"));
    let help = run(&["--help"]);
    assert_eq!(help.code, Some(0));
    assert!(!help.stdout.contains("inject-fault"), "--inject-fault must stay hidden:\n{}", help.stdout);
}
