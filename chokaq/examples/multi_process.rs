//! Several worker processes on one queue: the parent spawns N copies of itself as workers,
//! enqueues jobs, waits until they are all archived, stops the workers and prints who did
//! what.
//!
//! ```text
//! cargo run -p chokaq --features postgres --example multi_process -- --processes 4 --jobs 2000
//! ```
//!
//! `--database-url` defaults to `$DATABASE_URL`, then `postgres://postgres@127.0.0.1:5432/test`.
//! The tables live in schema `chokaq_multi_process` (`--schema` to choose another). Each
//! worker process has 8 slots (`--concurrency`). The last line, `result {...}`, holds the
//! figures as JSON (the benchmark, `chokaq-bench`, reads it).

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::postgres::{PgBackend, PgConfig};
use chokaq::{Backend, Client, Job, JobContext, Worker};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

const SCHEMA: &str = "chokaq_multi_process";

#[derive(Serialize, Deserialize)]
struct Work {
    n: u32,
}

impl Job for Work {
    const KIND: &'static str = "example.work.v1";
    fn queue() -> &'static str {
        "multi_process"
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn database_url() -> String {
    arg("--database-url")
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn schema() -> String {
    arg("--schema").unwrap_or_else(|| SCHEMA.to_string())
}

fn concurrency() -> u32 {
    arg("--concurrency").and_then(|s| s.parse().ok()).unwrap_or(8)
}

async fn backend() -> chokaq::Result<Arc<dyn Backend>> {
    Ok(Arc::new(PgBackend::connect(PgConfig::new(database_url()).schema(schema()).max_connections(4)).await?))
}

/// A worker process: runs until its stdin closes (or Ctrl-C), then prints its counts.
async fn worker_process() -> chokaq::Result<()> {
    let worker = Worker::builder(backend().await?)
        .queue(Work::queue())
        .concurrency(concurrency())
        .register(|job: Work, _ctx: JobContext| async move {
            std::hint::black_box(job.n);
            Ok(())
        })
        .build()?;
    let token = chokaq::shutdown_token();
    let t2 = token.clone();
    tokio::task::spawn_blocking(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf);
        t2.cancel();
    });
    println!("ready {}", worker.id());
    let report = worker.run(token).await?;
    println!(
        "pid {} completed {} jobs (claimed {}, {} claim calls, {} complete calls, {} released)",
        std::process::id(),
        report.completed,
        report.claimed,
        report.claim_calls,
        report.complete_calls,
        report.released
    );
    Ok(())
}

#[tokio::main]
async fn main() -> chokaq::Result<()> {
    if std::env::args().any(|a| a == "--worker") {
        return worker_process().await;
    }
    let processes: usize = arg("--processes").and_then(|s| s.parse().ok()).unwrap_or(4);
    let jobs: u32 = arg("--jobs").and_then(|s| s.parse().ok()).unwrap_or(2000);
    let b = backend().await?;
    b.migrate().await?;
    let before = b.stats().await?.archived;

    let exe = std::env::current_exe().map_err(|e| chokaq::Error::new(chokaq::ErrorKind::Other, e.to_string()))?;
    let mut children = Vec::new();
    for _ in 0..processes {
        let mut child = tokio::process::Command::new(&exe)
            .arg("--worker")
            .arg("--database-url")
            .arg(database_url())
            .arg("--schema")
            .arg(schema())
            .arg("--concurrency")
            .arg(concurrency().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| chokaq::Error::new(chokaq::ErrorKind::Other, e.to_string()))?;
        let mut out = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let ready = out.next_line().await.ok().flatten().unwrap_or_default();
        println!("worker process {}: {ready}", child.id().unwrap_or(0));
        children.push((child, out));
    }

    let t0 = Instant::now();
    let client = Client::new(b.clone());
    let payloads: Vec<Work> = (0..jobs).map(|n| Work { n }).collect();
    client.enqueue_many(&payloads).await?;
    println!("enqueued {jobs} jobs");
    let ctrl_c = chokaq::shutdown_token();
    let (done, elapsed) = loop {
        let done = b.stats().await?.archived - before;
        if done >= u64::from(jobs) || ctrl_c.is_cancelled() {
            let elapsed = t0.elapsed();
            let secs = elapsed.as_secs_f64();
            println!("{done} jobs archived in {secs:.2} s ({:.0} jobs/s)", done as f64 / secs.max(1e-9));
            break (done, elapsed);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (child, _) in &mut children {
        drop(child.stdin.take());
    }
    for (mut child, mut out) in children {
        while let Ok(Some(line)) = out.next_line().await {
            println!("  {line}");
        }
        let _ = child.wait().await;
    }
    let s = b.stats().await?;
    println!("totals in {}: {} archived, {} dead, {} live", schema(), s.archived, s.dead, s.hot());
    let secs = elapsed.as_secs_f64();
    let result = serde_json::json!({ "processes": processes, "concurrency": concurrency(), "jobs": done,
                                     "seconds": secs, "jobs_per_s": done as f64 / secs });
    println!("result {result}");
    Ok(())
}
