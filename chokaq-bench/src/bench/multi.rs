//! The multi-process drain: `chokaq/examples/multi_process.rs` as a user runs it, with
//! --mp-processes worker processes of --mp-concurrency slots on a schema of its own
//! (`<bench schema>_mp`, dropped afterwards); its figures come from its last line.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use chokaq::core::testing::TestSupport;
use chokaq::core::validate;
use chokaq::Result;
use chokaq_postgres::{PgBackend, PgConfig};
use serde_json::Value;

use super::{Bench, WAIT_LIMIT};
use crate::figures::{MultiFigures, Rate};
use crate::other;

const BUILD: [&str; 8] = ["build", "--release", "-p", "chokaq", "--features", "postgres", "--example", "multi_process"];

impl Bench {
    /// The example's binary: --mp-exe, else built (or found up to date) by cargo in this
    /// workspace.
    pub(super) async fn multi_process_exe(&self) -> Result<PathBuf> {
        if let Some(p) = &self.args.mp_exe {
            if !p.is_file() {
                return Err(other(format!("--mp-exe {} is not a file", p.display())));
            }
            return Ok(p.clone());
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new("."));
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        eprintln!("chokaq-bench: cargo {} (for the multi-process drain)", BUILD.join(" "));
        let out = tokio::process::Command::new(cargo)
            .current_dir(root)
            .args(BUILD)
            .arg("--message-format=json-render-diagnostics")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .await
            .map_err(|e| other(format!("could not run cargo: {e}")))?;
        if !out.status.success() {
            return Err(other(format!("building the multi_process example failed ({})", out.status)));
        }
        built_example(&String::from_utf8_lossy(&out.stdout))
            .ok_or_else(|| other("cargo built no multi_process executable"))
    }

    /// Runs the example (it enqueues the jobs itself, after its workers are up, and times
    /// from its first enqueue until it counts them all archived) and checks its counts.
    pub(super) async fn multi_process(&self, exe: &Path, processes: u32) -> Result<MultiFigures> {
        let (concurrency, jobs) = (self.args.mp_concurrency, self.args.mp_jobs());
        let schema = format!("{}_mp{processes}", self.schema);
        validate::schema_name(&schema)?;
        let pb = self.bar(&format!("multi-process {processes}x{concurrency}"), u64::from(jobs));
        let run = tokio::process::Command::new(exe)
            .args(["--processes", &processes.to_string(), "--concurrency", &concurrency.to_string()])
            .args(["--jobs", &jobs.to_string(), "--schema", &schema])
            // The URL goes through the environment, not the command line.
            .env("DATABASE_URL", &self.url)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .output();
        let mx0 = self.next_multixact().await;
        let cpu0 = self.server_cpu_us();
        let out = tokio::time::timeout(WAIT_LIMIT, run).await;
        let server_cpu_us = self.server_cpu_us().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
        let multixacts = self.next_multixact().await.zip(mx0).map(|(b, a)| b - a);
        let dropped = self.drop_mp_schema(&schema).await;
        let out = out
            .map_err(|_| other("the multi_process example did not finish in time"))?
            .map_err(|e| other(format!("could not run {}: {e}", exe.display())))?;
        dropped?;
        if !out.status.success() {
            return Err(other(format!("the multi_process example failed ({})", out.status)));
        }
        let mut fig = parse_multi(&String::from_utf8_lossy(&out.stdout), jobs)?;
        fig.server_cpu_us = server_cpu_us;
        fig.multixacts = multixacts;
        pb.set_position(fig.rate.jobs);
        pb.finish_with_message(format!("{:.0} jobs/s", fig.rate.per_s()));
        Ok(fig)
    }

    /// The next MultiXact id as of a fresh checkpoint (None without the rights to checkpoint).
    async fn next_multixact(&self) -> Option<i64> {
        sqlx::raw_sql("CHECKPOINT").execute(self.pg.pool()).await.ok()?;
        let next: Option<String> = sqlx::query_scalar("SELECT next_multixact_id::text FROM pg_control_checkpoint()")
            .fetch_one(self.pg.pool())
            .await
            .ok()?;
        next?.parse().ok()
    }

    async fn drop_mp_schema(&self, schema: &str) -> Result<()> {
        let be = PgBackend::connect(PgConfig::new(self.url.clone()).schema(schema).max_connections(2)).await?;
        let r = be.drop_schema().await;
        be.pool().close().await;
        r
    }
}

/// The executable of the example from cargo's JSON messages.
fn built_example(messages: &str) -> Option<PathBuf> {
    messages.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|m| {
        let artifact = m["reason"] == "compiler-artifact" && m["target"]["name"] == "multi_process";
        artifact.then(|| m["executable"].as_str().map(PathBuf::from)).flatten()
    })
}

/// The example's output: its `result {...}` line, each worker process's `completed N jobs`
/// and the `totals` line, checked against `jobs` (every job archived, none dead or left).
fn parse_multi(out: &str, jobs: u32) -> Result<MultiFigures> {
    let bad = |m: String| other(format!("multi_process example: {m}"));
    let result: Value = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("result "))
        .and_then(|j| serde_json::from_str(j).ok())
        .ok_or_else(|| bad("no result line".into()))?;
    let per_process: Vec<u64> = out
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(" completed ")?;
            rest.split_once(" jobs")?.0.parse().ok()
        })
        .collect();
    // `(claimed N, C claim calls, W complete calls, R released)` of each process.
    let count = |what: &str| -> u64 {
        out.lines()
            .filter(|l| l.contains(" completed "))
            .filter_map(|l| {
                let (before, _) = l.split_once(what)?;
                before.rsplit([' ', '(']).next()?.parse::<u64>().ok()
            })
            .sum()
    };
    let (claim_calls, complete_calls, released) = (count(" claim calls"), count(" complete calls"), count(" released"));
    let totals: Vec<u64> = out
        .lines()
        .find_map(|l| l.strip_prefix("totals in ").and_then(|t| t.split_once(": ")).map(|(_, t)| t.to_string()))
        .map(|t| t.split(", ").filter_map(|p| p.split_once(' ')?.0.parse().ok()).collect())
        .unwrap_or_default();
    let done = result["jobs"].as_u64().unwrap_or(0);
    let secs = result["seconds"].as_f64().unwrap_or(0.0);
    let n = u64::from(jobs);
    if done != n || secs <= 0.0 {
        return Err(bad(format!("{done} of {n} jobs archived in {secs} s")));
    }
    if per_process.iter().sum::<u64>() != n {
        return Err(bad(format!("the worker processes completed {per_process:?}, not {n} in all")));
    }
    if totals != [n, 0, 0] {
        return Err(bad(format!("totals (archived, dead, live) {totals:?}, expected [{n}, 0, 0]")));
    }
    Ok(MultiFigures {
        processes: result["processes"].as_u64().unwrap_or(0) as u32,
        concurrency: result["concurrency"].as_u64().unwrap_or(0) as u32,
        rate: Rate { jobs: n, secs, wal_bytes: 0 },
        per_process,
        server_cpu_us: None,
        claim_calls,
        complete_calls,
        released,
        multixacts: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "worker process 11: ready 0191
worker process 12: ready 0192
enqueued 1000 jobs
1000 jobs archived in 1.25s
  pid 11 completed 600 jobs (claimed 600, 70 claim calls, 40 complete calls, 3 released)
  pid 12 completed 400 jobs (claimed 400, 50 claim calls, 30 complete calls, 0 released)
totals in chokaq_bench_ab_mp: 1000 archived, 0 dead, 0 live
result {\"concurrency\":8,\"jobs\":1000,\"jobs_per_s\":800.0,\"processes\":2,\"seconds\":1.25}
";

    #[test]
    fn reads_the_examples_figures() {
        let f = parse_multi(OUT, 1000).unwrap();
        assert_eq!((f.processes, f.concurrency, f.rate.jobs, f.per_process.clone()), (2, 8, 1000, vec![600, 400]));
        assert_eq!(f.rate.per_s(), 800.0);
        assert_eq!((f.claim_calls, f.complete_calls, f.released), (120, 70, 3));
        assert!(parse_multi(OUT, 999).is_err());
        assert!(parse_multi(&OUT.replace("0 dead", "1 dead"), 1000).is_err());
        assert!(parse_multi(&OUT.replace("completed 400", "completed 399"), 1000).is_err());
        assert!(parse_multi("enqueued 1000 jobs\n", 1000).is_err());
    }

    #[test]
    fn finds_the_built_executable() {
        let msgs = r#"{"reason":"compiler-artifact","target":{"name":"chokaq"},"executable":null}
{"reason":"compiler-artifact","target":{"name":"multi_process"},"executable":"/t/release/examples/multi_process"}
{"reason":"build-finished","success":true}"#;
        assert_eq!(built_example(msgs), Some(PathBuf::from("/t/release/examples/multi_process")));
        assert_eq!(built_example("{\"reason\":\"build-finished\"}"), None);
    }
}
