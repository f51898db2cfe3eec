//! The code example of README.md ("Use it"), runnable: `cargo run -p chokaq --features
//! postgres --example readme` (runs until Ctrl-C). `cargo test --doc` compiles the README's
//! copy too (`chokaq/src/lib.rs`, feature `postgres`).

use chokaq::postgres::{PgBackend, PgConfig};
use chokaq::{Backend, Client, Job, JobBuilder, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

#[derive(Serialize, Deserialize)]
struct SendEmail {
    to: String,
}

impl Job for SendEmail {
    const KIND: &'static str = "email.send.v1"; // stable: version it, never rename it
    fn queue() -> &'static str {
        "email"
    }
}

#[tokio::main]
async fn main() -> chokaq::Result<()> {
    // Logs on stderr: chokaq's warnings and errors (failed jobs, dead letters), RUST_LOG to change.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let backend = PgBackend::connect(PgConfig::new("postgres://postgres@127.0.0.1:5432/test")).await?;
    backend.migrate().await?;
    let backend: Arc<dyn Backend> = Arc::new(backend);

    let client = Client::new(backend.clone());
    client.enqueue(&SendEmail { to: "a@example.com".into() }).await?;
    // With options (priority, delay, idempotency key, tags, queue, max attempts):
    let later = JobBuilder::new(&SendEmail { to: "b@example.com".into() }).delay(Duration::from_secs(60));
    client.enqueue(later).await?;

    Worker::builder(backend)
        .queue("email")
        .concurrency(8)
        .register(|job: SendEmail, _ctx: JobContext| async move {
            println!("sending to {}", job.to); // handlers must be idempotent: at-least-once delivery
            Ok::<(), JobError>(())
        })
        .build()?
        .run(chokaq::shutdown_token()) // until Ctrl-C / SIGTERM
        .await?;
    Ok(())
}
