//! Quickstart: enqueue typed jobs, process them, print what happened, stop on Ctrl-C or when
//! everything is done.
//!
//! ```text
//! cargo run -p chokaq --features postgres --example quickstart -- --database-url postgres://postgres@127.0.0.1:5432/test
//! ```
//!
//! The URL defaults to `$DATABASE_URL`, then `postgres://postgres@127.0.0.1:5432/test`. The
//! tables live in schema `chokaq_quickstart`.

use std::sync::Arc;
use std::time::Duration;

use chokaq::postgres::{PgBackend, PgConfig};
use chokaq::{Backend, Client, Job, JobContext, JobError, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

/// A typed job: the kind is stored with the job, the struct is its JSON payload.
#[derive(Debug, Serialize, Deserialize)]
struct SendEmail {
    to: String,
    subject: String,
}

impl Job for SendEmail {
    const KIND: &'static str = "email.send.v1";
    fn queue() -> &'static str {
        "email"
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct ResizeImage {
    path: String,
    width: u32,
}

impl Job for ResizeImage {
    const KIND: &'static str = "image.resize.v1";
    fn queue() -> &'static str {
        "images"
    }
    fn max_attempts() -> i32 {
        3
    }
}

fn database_url() -> String {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--database-url") {
        if let Some(u) = args.get(i + 1) {
            return u.clone();
        }
    }
    if let Some(u) = args.iter().find_map(|a| a.strip_prefix("--database-url=")) {
        return u.to_string();
    }
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

#[tokio::main]
async fn main() -> chokaq::Result<()> {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())).init();

    // 1. Connect and create the tables (safe to run again).
    let backend = PgBackend::connect(PgConfig::new(database_url()).schema("chokaq_quickstart")).await?;
    backend.migrate().await?;
    let backend: Arc<dyn Backend> = Arc::new(backend);

    // 2. Enqueue: by type, with the builder, and by kind + raw JSON.
    let client = Client::new(backend.clone()).with_created_by("quickstart");
    for i in 0..5 {
        let e = client.enqueue(&SendEmail { to: format!("user{i}@example.com"), subject: "Welcome".into() }).await?;
        println!("enqueued email {i} as job {}", e.id);
    }
    let urgent = client
        .job(&SendEmail { to: "ops@example.com".into(), subject: "Urgent".into() })
        .priority(10)
        .idempotency_key("ops-urgent-1")
        .tag("ops")
        .enqueue()
        .await?;
    println!("enqueued urgent email {} (duplicate key: {})", urgent.id, urgent.duplicate);
    let later =
        client.job(&ResizeImage { path: "cat.png".into(), width: 256 }).delay(Duration::from_secs(1)).enqueue().await?;
    println!("enqueued a resize due in 1 s: {}", later.id);
    client.enqueue(&ResizeImage { path: "flaky.png".into(), width: 128 }).await?;
    client
        .enqueue_raw("email", SendEmail::KIND, serde_json::json!({"to": "raw@example.com", "subject": "Raw JSON"}))
        .await?;

    // 3. A worker with a handler per job type.
    let worker = Worker::builder(backend.clone())
        .queues(["email", "images"])
        .concurrency(4)
        .retry_policy(RetryPolicy::fixed_exponential(Duration::from_millis(200), 2.0, Duration::from_secs(5)))
        .register(|job: SendEmail, ctx: JobContext| async move {
            println!("  [{}] sending {:?} to {} (attempt {})", ctx.id(), job.subject, job.to, ctx.attempt());
            Ok(())
        })
        .register(|job: ResizeImage, ctx: JobContext| async move {
            if job.path == "flaky.png" && ctx.attempt() == 1 {
                println!("  [{}] resizing {} failed on attempt 1; it will be retried", ctx.id(), job.path);
                return Err(JobError::Retry("image store timed out".into()));
            }
            println!("  [{}] resized {} to {} px (attempt {})", ctx.id(), job.path, job.width, ctx.attempt());
            Ok(())
        })
        .build()?;

    // 4. Stop on Ctrl-C / SIGTERM, or once no live jobs are left.
    let shutdown = chokaq::shutdown_token();
    let watcher = {
        let (backend, shutdown) = (backend.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                match backend.stats().await {
                    Ok(s) if s.hot() == 0 => {
                        println!("all jobs done; shutting down");
                        shutdown.cancel();
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("stats failed: {e}"),
                }
            }
        })
    };
    let report = worker.run(shutdown).await?;
    let _ = watcher.await;
    println!(
        "worker done: {} completed, {} retried, {} dead-lettered",
        report.completed, report.retried, report.dead_lettered
    );
    let s = backend.stats().await?;
    println!("schema chokaq_quickstart now holds {} archived and {} dead-lettered jobs in all", s.archived, s.dead);
    Ok(())
}
