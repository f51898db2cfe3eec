//! `chokaq-conformance`: runs the whole conformance suite against your own database.
//!
//! ```text
//! cargo run -p chokaq-conformance --features postgres -- --url postgres://user:pw@host/db
//! ```
//!
//! Runs every case (or those whose name contains `--filter`) in a fresh schema
//! `chokaq_t_<hex>` that it drops afterwards (or in `--schema NAME`, which it keeps), prints
//! one line per case and a closing line `N passed, N failed`, and exits 0 when nothing
//! failed, 1 when a case failed, 2 when the database cannot be used (bad or unreachable URL).
//! The URL (and its password) is never printed.

mod backends;

use std::process::ExitCode;
use std::time::Instant;

use chokaq_conformance::{
    all_cases, maybe_run_child, run_suite, ChildLauncher, Harness, StressSettings, UrlHarness, ENV_CHILD_URL,
};
use clap::Parser;

/// Runs the chokaq conformance suite against a database.
#[derive(Parser)]
#[command(name = "chokaq-conformance", version)]
struct Args {
    /// Database URL, e.g. postgres://user:password@host:5432/db (or env CHOKAQ_CONFORMANCE_URL).
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
    /// Checks the suite itself: runs PostgreSQL with one deliberately broken statement
    /// (a `chokaq_postgres::Faults` switch), so some cases must FAIL. Never for real use.
    #[cfg(feature = "fault-injection")]
    #[arg(long, hide = true, value_name = "NAME", value_parser = backends::FAULT_NAMES)]
    inject_fault: Option<String>,
}

impl Args {
    /// The `--inject-fault` switch, if given (always `None` without the feature).
    fn fault(&self) -> Option<&str> {
        #[cfg(feature = "fault-injection")]
        let fault = self.inject_fault.as_deref();
        #[cfg(not(feature = "fault-injection"))]
        let fault = None;
        fault
    }
}

impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Args")
            .field("url", &"<redacted>")
            .field("schema", &self.schema)
            .field("filter", &self.filter)
            .field("parallel", &self.parallel)
            .field("inject_fault", &self.fault())
            .finish()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("a tokio runtime")
}

fn main() -> ExitCode {
    let rt = runtime();
    // A child worker of a multi-process case: reopen the parent's store and do the work.
    if std::env::var_os(chokaq_conformance::ENV_CHILD_ROLE).is_some() {
        let url = std::env::var(ENV_CHILD_URL).unwrap_or_default();
        return match backends::harness_for(&url, child_fault().as_deref()) {
            Ok(h) => maybe_run_child(&rt, &h).unwrap_or(ExitCode::from(2)),
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    let args = Args::parse();
    if args.list {
        for c in all_cases() {
            println!("{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    let url = args.url.clone().unwrap_or_default();
    let mut harness = match backends::harness_for(&url, args.fault()) {
        Ok(h) => h,
        Err(e) => {
            // Names the scheme only, never the URL.
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(schema) = &args.schema {
        if let Err(e) = chokaq_core::validate::schema_name(schema) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        harness = harness.schema(schema.clone());
    }
    run(&rt, harness, &args, &url)
}

fn run(rt: &tokio::runtime::Runtime, harness: UrlHarness, args: &Args, url: &str) -> ExitCode {
    let backend = match rt.block_on(harness.open()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: cannot use the {} database: {}", harness.name(), redact(&e.to_string(), url));
            return ExitCode::from(2);
        }
    };
    let stress = StressSettings::from_env();
    println!(
        "chokaq conformance: backend {}, schema {}, capabilities {:?}",
        backend.name(),
        harness.schema_name(),
        backend.capabilities()
    );
    if let Some(fault) = args.fault() {
        println!("fault injected: {fault} (a deliberately broken statement: cases are expected to FAIL)");
    }
    println!(
        "stress: {} claimers, {} processes, {} jobs, {} s, {} cap rounds",
        stress.claimers, stress.processes, stress.jobs, stress.seconds, stress.rounds
    );
    let children = ChildLauncher::current_exe(child_env(&harness, args)).ok();
    let started = Instant::now();
    let summary = rt.block_on(run_suite(backend, args.filter.as_deref(), children, args.parallel));
    eprintln!("finished in {:.1} s", started.elapsed().as_secs_f64());
    if let Err(e) = rt.block_on(harness.finish()) {
        eprintln!("warning: could not drop schema {}: {}", harness.schema_name(), redact(&e.to_string(), url));
    }
    if summary.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// What a child process gets: the harness's env, plus the parent's fault (an empty value
/// clears one inherited from outside).
fn child_env(harness: &UrlHarness, args: &Args) -> Vec<(String, String)> {
    let env = harness.child_env();
    #[cfg(feature = "fault-injection")]
    let env = {
        let mut env = env;
        env.push((backends::ENV_FAULT.to_string(), args.fault().unwrap_or_default().to_string()));
        env
    };
    #[cfg(not(feature = "fault-injection"))]
    let _ = args;
    env
}

/// The fault a child process runs with (env set by its parent; `None` without the feature).
fn child_fault() -> Option<String> {
    #[cfg(feature = "fault-injection")]
    let fault = std::env::var(backends::ENV_FAULT).ok().filter(|s| !s.is_empty());
    #[cfg(not(feature = "fault-injection"))]
    let fault = None;
    fault
}

/// Removes the URL and its password from a message, whatever the driver put in it.
fn redact(msg: &str, url: &str) -> String {
    let mut out = msg.to_string();
    if !url.is_empty() {
        out = out.replace(url, "<url>");
    }
    if let Some(pw) = password_of(url) {
        if !pw.is_empty() {
            out = out.replace(pw, "<redacted>");
        }
    }
    out
}

/// The password part of `scheme://user:password@host...`, if any.
fn password_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.rsplit_once('@')?.0;
    Some(userinfo.split_once(':')?.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password_and_url() {
        let url = "postgres://bob:s3cr3t@db.example:5432/x";
        assert_eq!(password_of(url), Some("s3cr3t"));
        assert_eq!(redact("failed for bob:s3cr3t at host", url), "failed for bob:<redacted> at host");
        assert_eq!(redact(&format!("bad url {url}"), url), "bad url <url>");
        assert_eq!(password_of("postgres://bob@host/db"), None);
    }

    #[test]
    fn a_fault_needs_a_postgres_url() {
        for url in ["sqlite:///tmp/x.db", "server=tcp:h,1433;user=u", "mysql://u:pw@h/db", ""] {
            let e = backends::harness_for(url, Some("cap_plain_count")).expect_err(url);
            assert!(!e.contains("pw@"), "{e}");
        }
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn every_fault_name_opens_a_harness() {
        for name in backends::FAULT_NAMES {
            assert!(backends::harness_for("postgres://u@h/db", Some(name)).is_ok(), "{name}");
        }
        assert!(backends::harness_for("postgres://u@h/db", Some("nope")).is_err());
    }
}
