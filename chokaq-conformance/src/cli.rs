//! The runner binary's entry point, for any backend crate: [`runner_main`] / [`Runner`].
//!
//! A backend crate (in this repository or outside) ships its own runner in a few lines: a
//! `src/bin/...` or `examples/...` whose `main` calls [`runner_main`] with a function that
//! builds its [`Harness`] from the [`Target`] the command line names.

use std::fmt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Arg, CommandFactory, FromArgMatches, Parser};

use crate::cases::all_cases;
use crate::child::{maybe_run_child, ENV_CHILD_ROLE};
use crate::ctx::{ChildLauncher, StressSettings};
use crate::harness::{Harness, UrlHarness, ENV_CHILD_URL};
use crate::runner::{build_runtime, run_suite};

/// Env var carrying the runner's `--inject-fault NAME` to its child processes (an empty value
/// means no fault), so they run the same broken statements as the parent.
pub const ENV_CHILD_FAULT: &str = "CHOKAQ_CONFORMANCE_FAULT";

/// What the runner was asked to test, handed to the harness factory of [`runner_main`]: from
/// the command line and the environment, or in a child process of a multi-process case, from
/// the environment its parent gave it.
///
/// `Debug` never shows the URL.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Target {
    /// The database URL or connection string (env `CHOKAQ_CONFORMANCE_URL`, or `--url`).
    /// Never print it; the runner removes it (and its password) from the errors it prints.
    pub url: String,
    /// `--schema NAME`: run in this schema, created and migrated if missing, never dropped,
    /// instead of a fresh one (already a valid schema name). `None` in a child process:
    /// [`UrlHarness`] finds its parent's schema in the environment.
    pub schema: Option<String>,
    /// `--inject-fault NAME`: one of the names given to [`Runner::faults`] (always `None`
    /// when none were).
    pub fault: Option<String>,
}

impl Target {
    /// A target with just a URL (no `--schema`, no fault).
    pub fn new(url: impl Into<String>) -> Self {
        Target { url: url.into(), schema: None, fault: None }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("url", &"<redacted>")
            .field("schema", &self.schema)
            .field("fault", &self.fault)
            .finish()
    }
}

impl UrlHarness {
    /// The harness for a runner's [`Target`]: [`UrlHarness::new`] with its URL, plus its
    /// `--schema` when one was given.
    pub fn for_target<F>(name: impl Into<String>, target: &Target, connect: F) -> Self
    where
        F: Fn(String, String) -> futures::future::BoxFuture<'static, chokaq_core::Result<Arc<dyn crate::TestBackend>>>
            + Send
            + Sync
            + 'static,
    {
        let h = UrlHarness::new(name, Some(target.url.clone()), connect);
        match &target.schema {
            Some(schema) => h.schema(schema.clone()),
            None => h,
        }
    }
}

/// Runs the chokaq conformance suite against a database.
#[derive(Parser)]
#[command(name = "chokaq-conformance", version)]
struct Args {
    /// Database URL, e.g. postgres://user:password@host:5432/db. Prefer the environment
    /// variable: a command line shows in `ps`, and `cargo run` echoes it.
    #[arg(long, env = ENV_CHILD_URL, hide_env_values = true, required_unless_present = "list")]
    url: Option<String>,
    /// Run in this schema (created and migrated if missing, never dropped) instead of a fresh one.
    #[arg(long)]
    schema: Option<String>,
    /// Run only the cases whose name contains this text (e.g. `cap_`).
    #[arg(long)]
    filter: Option<String>,
    /// How many cases run at once.
    #[arg(long, default_value_t = 2)]
    parallel: usize,
    /// List the case names and exit.
    #[arg(long)]
    list: bool,
}

/// The runner binary, configured: [`Runner::new`] with the harness factory, options, then
/// [`Runner::main`]. [`runner_main`] is `Runner::new(make).main()`.
///
/// The binary runs every case (or those whose name contains `--filter`) and prints one line
/// per case (`ok`, `FAILED` or `ignored`, with the reason) and a closing line
/// `N passed, N failed`. Exit status: 0 nothing failed, 1 a case failed, 2 the database
/// could not be used (the factory refused the target, or opening or migrating failed: the
/// whole error chain is printed, without the URL or its password).
pub struct Runner<F> {
    make: F,
    faults: Vec<&'static str>,
}

impl<F> fmt::Debug for Runner<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner").field("faults", &self.faults).finish_non_exhaustive()
    }
}

/// The `main` of a runner binary: `make` builds the harness for the [`Target`] (an `Err` is
/// printed and ends the run with exit status 2; it must not contain the URL). See [`Runner`].
///
/// ```no_run
/// use std::sync::Arc;
///
/// use chokaq_conformance::{runner_main, TestBackend, UrlHarness};
/// use chokaq_core::memory::MemoryBackend;
///
/// fn main() -> std::process::ExitCode {
///     runner_main(|target| {
///         Ok(UrlHarness::for_target("memory", target, |_url, _schema| {
///             Box::pin(async { Ok(Arc::new(MemoryBackend::new()) as Arc<dyn TestBackend>) })
///         }))
///     })
/// }
/// ```
pub fn runner_main<F, H>(make: F) -> ExitCode
where
    F: Fn(&Target) -> Result<H, String>,
    H: Harness,
{
    Runner::new(make).main()
}

impl<F, H> Runner<F>
where
    F: Fn(&Target) -> Result<H, String>,
    H: Harness,
{
    /// A runner whose harness `make` builds from the [`Target`].
    pub fn new(make: F) -> Self {
        Runner { make, faults: Vec::new() }
    }

    /// Adds the hidden option `--inject-fault NAME`, `NAME` one of `names` (for checking the
    /// suite itself against a deliberately broken backend; never for real use). The chosen
    /// name reaches the factory as [`Target::fault`], in child processes too.
    pub fn faults(mut self, names: &[&'static str]) -> Self {
        self.faults = names.to_vec();
        self
    }

    /// Parses the command line, runs, and returns the exit status. In a child process of a
    /// multi-process case (env `CHOKAQ_CONFORMANCE_CHILD`), does the child's work instead.
    pub fn main(self) -> ExitCode {
        let rt = build_runtime();
        if std::env::var_os(ENV_CHILD_ROLE).is_some() {
            return self.child(&rt);
        }
        let mut cmd = Args::command();
        if !self.faults.is_empty() {
            cmd = cmd.arg(
                Arg::new("inject_fault")
                    .long("inject-fault")
                    .value_name("NAME")
                    .hide(true)
                    .value_parser(self.faults.clone())
                    .help("Runs with one deliberately broken statement, so some cases must FAIL"),
            );
        }
        let matches = cmd.get_matches();
        let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        if args.list {
            for c in all_cases() {
                println!("{}", c.name);
            }
            return ExitCode::SUCCESS;
        }
        let fault = matches.try_get_one::<String>("inject_fault").ok().flatten().cloned();
        let target = Target { url: args.url.clone().unwrap_or_default(), schema: args.schema.clone(), fault };
        if let Some(schema) = &target.schema {
            if let Err(e) = chokaq_core::validate::schema_name(schema) {
                eprintln!("error: {}", redact(&error_chain(&e), &target.url));
                return ExitCode::from(2);
            }
        }
        match (self.make)(&target) {
            Ok(harness) => self.run(&rt, harness, &args, &target),
            Err(e) => {
                eprintln!("error: {}", redact(&e, &target.url));
                ExitCode::from(2)
            }
        }
    }

    /// A child worker: reopen the parent's store and do the work.
    fn child(&self, rt: &tokio::runtime::Runtime) -> ExitCode {
        let fault =
            if self.faults.is_empty() { None } else { std::env::var(ENV_CHILD_FAULT).ok().filter(|s| !s.is_empty()) };
        let target = Target { url: std::env::var(ENV_CHILD_URL).unwrap_or_default(), schema: None, fault };
        match (self.make)(&target) {
            Ok(h) => maybe_run_child(rt, &h).unwrap_or(ExitCode::from(2)),
            Err(e) => {
                eprintln!("error: {}", redact(&e, &target.url));
                ExitCode::from(2)
            }
        }
    }

    fn run(&self, rt: &tokio::runtime::Runtime, harness: H, args: &Args, target: &Target) -> ExitCode {
        let url = &target.url;
        let backend = match rt.block_on(harness.open()) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: cannot use the {} database: {}", harness.name(), redact(&error_chain(&e), url));
                return ExitCode::from(2);
            }
        };
        let store = harness.store().map(|s| format!(", {s}")).unwrap_or_default();
        println!("chokaq conformance: backend {}{store}, capabilities {:?}", backend.name(), backend.capabilities());
        if let Some(fault) = &target.fault {
            println!("fault injected: {fault} (a deliberately broken statement: cases are expected to FAIL)");
        }
        let stress = StressSettings::from_env();
        println!(
            "stress: {} claimers, {} processes, {} jobs, {} s, {} cap rounds",
            stress.claimers, stress.processes, stress.jobs, stress.seconds, stress.rounds
        );
        let children = ChildLauncher::current_exe(self.child_env(&harness, target)).ok();
        let started = Instant::now();
        let summary = rt.block_on(run_suite(backend, args.filter.as_deref(), children, args.parallel));
        eprintln!("finished in {:.1} s", started.elapsed().as_secs_f64());
        if let Err(e) = rt.block_on(harness.finish()) {
            eprintln!("warning: cleanup failed{store}: {}", redact(&error_chain(&e), url));
        }
        if summary.failed > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    }

    /// What a child process gets: the harness's env, the URL (unless the harness passes it
    /// already) and, with fault names, the parent's fault (an empty value clears one
    /// inherited from outside).
    fn child_env(&self, harness: &H, target: &Target) -> Vec<(String, String)> {
        let mut env = harness.child_env();
        if !env.iter().any(|(k, _)| k == ENV_CHILD_URL) {
            env.push((ENV_CHILD_URL.to_string(), target.url.clone()));
        }
        if !self.faults.is_empty() {
            env.push((ENV_CHILD_FAULT.to_string(), target.fault.clone().unwrap_or_default()));
        }
        env
    }
}

/// An error and every error in its `source()` chain, `outer: inner: ...` (a source whose text
/// the message already holds is not repeated).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let text = s.to_string();
        if !text.is_empty() && !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        src = s.source();
    }
    msg
}

/// Removes `url` and its password from a message, whatever a driver put in it.
pub(crate) fn redact(msg: &str, url: &str) -> String {
    let mut out = msg.to_string();
    if !url.is_empty() {
        out = out.replace(url, "<url>");
    }
    for pw in passwords_of(url) {
        out = out.replace(&pw, "<redacted>");
    }
    out
}

/// The password of `scheme://user:password@host...` (as written and percent-decoded), or of
/// an ADO connection string's `password=...` / `pwd=...`.
fn passwords_of(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            if let Some((_, pw)) = userinfo.split_once(':') {
                out.push(pw.to_string());
                out.push(percent_decode(pw));
            }
        }
    } else {
        out.extend(ado_passwords(url));
    }
    out.retain(|p| !p.is_empty());
    // Longest first, so a password that contains another is replaced whole.
    out.sort_by_key(|p| std::cmp::Reverse(p.len()));
    out.dedup();
    out
}

/// The values of the `password` / `pwd` keys of an ADO connection string, as written and
/// unquoted (`{...}` with `}}` for `}`, `"..."`, `'...'`).
fn ado_passwords(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else { break };
        let key = key.rsplit(';').next().unwrap_or(key).trim().to_ascii_lowercase();
        let after_trim = after.trim_start();
        let (raw, value, next) = match after_trim.chars().next() {
            Some(q @ ('{' | '"' | '\'')) => {
                let close = if q == '{' { '}' } else { q };
                let body = &after_trim[1..];
                let mut value = String::new();
                let mut end = body.len();
                let mut chars = body.char_indices().peekable();
                while let Some((i, c)) = chars.next() {
                    if c == close {
                        if chars.peek().is_some_and(|&(_, n)| n == close) {
                            value.push(c);
                            chars.next();
                            continue;
                        }
                        end = i + c.len_utf8();
                        break;
                    }
                    value.push(c);
                }
                let raw = &after_trim[..(1 + end).min(after_trim.len())];
                (raw.to_string(), value, &after_trim[raw.len()..])
            }
            _ => {
                let v = after.split(';').next().unwrap_or(after);
                (v.trim().to_string(), v.trim().to_string(), &after[v.len()..])
            }
        };
        if key == "password" || key == "pwd" {
            out.push(raw);
            out.push(value);
        }
        rest = next.strip_prefix(';').unwrap_or(next);
        if rest.len() == next.len() && !next.is_empty() {
            // No `;` after a quoted value: skip to the next one.
            rest = next.split_once(';').map_or("", |(_, r)| r);
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password_and_url() {
        let url = "postgres://bob:s3cr3t@db.example:5432/x";
        assert_eq!(passwords_of(url), vec!["s3cr3t".to_string()]);
        assert_eq!(redact("failed for bob:s3cr3t at host", url), "failed for bob:<redacted> at host");
        assert_eq!(redact(&format!("bad url {url}"), url), "bad url <url>");
        assert!(passwords_of("postgres://bob@host/db").is_empty());
        assert!(passwords_of("postgres://host/db?user=a@b").is_empty());
    }

    #[test]
    fn redacts_encoded_and_ado_passwords() {
        let url = "postgres://bob:p%40ss@db/x";
        assert_eq!(redact("login p@ss / p%40ss", url), "login <redacted> / <redacted>");
        let ado = "server=tcp:h,1433;user=sa;Password={p;w}}x};Encrypt=false";
        assert_eq!(redact("pw {p;w}}x} is p;w}x", ado), "pw <redacted> is <redacted>");
        assert_eq!(redact("pwd hunter2", "server=h;PWD=hunter2"), "pwd <redacted>");
    }

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn error_chain_shows_every_cause_once() {
        let e = E(
            "unavailable: database unavailable",
            Some(Box::new(E("pool: timed out", Some(Box::new(E("tls: bad cert", None)))))),
        );
        assert_eq!(error_chain(&e), "unavailable: database unavailable: pool: timed out: tls: bad cert");
        let e = E("cannot connect: refused", Some(Box::new(E("refused", None))));
        assert_eq!(error_chain(&e), "cannot connect: refused");
    }
}
