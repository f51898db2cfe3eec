//! A workflow (docs/workflows.md): `fetch` makes a list of numbers, `--tasks` tasks `square-i`
//! each square one of them (fan-out, after `fetch`), and `sum` adds their results (fan-in, after
//! every `square-i`). Each task hands its result on as its output; the next reads it by task
//! name (`JobContext::dependency_output`). One worker runs them; the example waits until the
//! workflow is final, then checks the sum and prints the counts.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run -p chokaq --features postgres --example workflow
//! cargo run -p chokaq --features postgres --example workflow   # no URL: the in-memory backend
//! ```
//!
//! The tables go to schema `chokaq_workflow` (`--schema`), the jobs to queue `pipeline`. A
//! backend that stores no workflows (SQLite, MariaDB / MySQL and SQL Server, for now) refuses
//! the enqueue with an error that says so.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::memory::MemoryBackend;
use chokaq::core::Workflow;
use chokaq::{Backend, CancellationToken, Client, JobContext, JobError, NewJob, Worker};
use clap::Parser;
use serde_json::{json, Value};

/// Run a fan-out / fan-in workflow that hands outputs on.
#[derive(Parser)]
#[command(name = "workflow")]
struct Args {
    /// Database URL (postgres://…). Default: the in-memory backend.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Tasks of the fan-out.
    #[arg(long, default_value_t = 20)]
    tasks: u32,
    /// Schema of the tables (PostgreSQL).
    #[arg(long, default_value = "chokaq_workflow")]
    schema: String,
}

const QUEUE: &str = "pipeline";

fn job(kind: &str, payload: Value) -> chokaq::Result<NewJob> {
    Ok(NewJob::build(QUEUE, kind)?.json(payload))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("workflow: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> chokaq::Result<()> {
    let backend: Arc<dyn Backend> = match &args.database_url {
        Some(url) => chokaq::connect_and_migrate(url, &args.schema).await?,
        None => Arc::new(MemoryBackend::new()),
    };
    let n = args.tasks.max(1);
    let worker = Worker::builder(backend.clone())
        .queue(QUEUE)
        .concurrency(8)
        // fetch: the numbers 1..=n.
        .register_raw("pipeline.fetch", move |_payload: Value, ctx: JobContext| async move {
            ctx.record_output(&(1..=n).collect::<Vec<u32>>()).await?;
            Ok(())
        })
        // square-i: the i-th number of fetch's list, squared.
        .register_raw("pipeline.square", |payload: Value, ctx: JobContext| async move {
            let i = payload["i"].as_u64().ok_or_else(|| JobError::fatal("no i in the payload"))? as usize;
            let list: Vec<u32> = ctx.dependency_output("fetch").await?.unwrap_or_default();
            let x = u64::from(*list.get(i).ok_or_else(|| JobError::fatal(format!("fetch made no number {i}")))?);
            ctx.record_output(&(x * x)).await?;
            Ok(())
        })
        // sum: every square-i's output, by task name.
        .register_raw("pipeline.sum", move |_payload: Value, ctx: JobContext| async move {
            let mut sum = 0u64;
            for i in 0..n {
                sum += ctx.dependency_output::<u64>(&format!("square-{i}")).await?.unwrap_or(0);
            }
            ctx.record_output(&sum).await?;
            Ok(())
        })
        .build()?;

    let mut wf = Workflow::new("squares").add("fetch", job("pipeline.fetch", json!({}))?, [] as [&str; 0]);
    for i in 0..n {
        wf = wf.add(format!("square-{i}"), job("pipeline.square", json!({ "i": i }))?, ["fetch"]);
    }
    wf = wf.add("sum", job("pipeline.sum", json!({}))?, (0..n).map(|i| format!("square-{i}")));
    let client = Client::new(backend.clone());
    let e = client.enqueue_workflow(&wf).await?;
    println!("workflow {} enqueued: {} tasks on {}", e.id, e.tasks.len(), backend.name());

    let token = CancellationToken::new();
    let (_stats, fut) = worker.run_with_handle(token.clone());
    let running = tokio::spawn(fut);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let st = client.workflow(e.id).await?.ok_or_else(|| chokaq::Error::not_found("the workflow is gone"))?;
        if st.is_final() || Instant::now() > deadline {
            break st;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    token.cancel();
    let report = running.await.map_err(|e| chokaq::Error::new(chokaq::ErrorKind::Other, e.to_string()))??;
    println!("tasks by state: {:?}", status.counts());
    println!("worker: {} completed, {} failed", report.completed, report.failed);
    let sum: Option<u64> = client.output(e.job("sum").expect("the sum task")).await?;
    let want: u64 = (1..=u64::from(n)).map(|x| x * x).sum();
    println!("sum of the squares of 1..={n}: {sum:?} (expected {want})");
    if !status.is_final() || sum != Some(want) {
        return Err(chokaq::Error::new(chokaq::ErrorKind::Other, "the workflow did not end as expected"));
    }
    Ok(())
}
