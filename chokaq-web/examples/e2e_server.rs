//! The server of the browser end-to-end test (`chokaq-web/e2e/dashboard.test.mjs`).
//!
//! ```text
//! cargo run -p chokaq-web --example e2e_server
//! ```
//!
//! Opens a fresh SQLite database in a temporary directory, serves on 127.0.0.1 (a free port)
//! two dashboards over it: `/ops/jobs` (read-write, basic auth `ops` / `e2e-pass`) and `/ro`
//! (read-only, bearer token `ro-token`), prints `URL http://127.0.0.1:<port>`, then reads
//! commands on standard input, one a line, answering `ok …` or `error …`:
//!
//! - `enqueue <queue> <kind> <n>`: n jobs (kind `e2e.ok.v1` succeeds, `e2e.fail.v1` fails
//!   fatally), each payload holding a `<script>` string to show it is rendered escaped;
//! - `pause <queue>`: pauses a queue through the backend (it need hold no job);
//! - `work <queue>[,<queue>…]`: starts a worker on those queues (30 ms a job, 2 at a time);
//! - `stop`: stops it (`ok <jobs completed>`);
//! - `quit`: stops everything and removes the database.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use chokaq::{Backend, BackendExt, CancellationToken, JobError, Worker, WorkerReport};
use chokaq_core::{JobKind, NewJob, QueueName};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;

type Running = Option<(CancellationToken, JoinHandle<chokaq::Result<WorkerReport>>)>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("chokaq-web-e2e-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir)?;
    let out = run(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    out
}

async fn run(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let sqlite = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string())).await?;
    sqlite.migrate().await?;
    let backend: Arc<dyn Backend> = Arc::new(sqlite);

    let app = Router::new()
        .nest("/ops/jobs", chokaq_web::router(backend.clone(), WebOptions::new(Auth::basic("ops", "e2e-pass"))))
        .nest("/ro", chokaq_web::router(backend.clone(), WebOptions::new(Auth::bearer("ro-token")).read_only(true)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let stop_server = CancellationToken::new();
    let stopped = stop_server.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, app).with_graceful_shutdown(async move { stopped.cancelled().await }).await
    });
    let mut stdout = tokio::io::stdout();
    stdout.write_all(format!("URL http://{addr}\n").as_bytes()).await?;
    stdout.flush().await?;

    let mut running: Running = None;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["enqueue", queue, kind, n] => enqueue(&*backend, queue, kind, n).await,
            ["pause", queue] => match QueueName::new(*queue) {
                Ok(q) => backend.pause(&q).await.map(|_| "ok".to_string()).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
            ["work", queues] => match running {
                Some(_) => Err("a worker is running already".into()),
                None => start_worker(backend.clone(), queues).map(|r| {
                    running = Some(r);
                    "ok".to_string()
                }),
            },
            ["stop"] => match running.take() {
                None => Err("no worker is running".into()),
                Some((token, handle)) => {
                    token.cancel();
                    match handle.await {
                        Ok(Ok(report)) => Ok(format!("ok {}", report.completed)),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            },
            ["quit"] => break,
            _ => Err(format!("unknown command {line:?}")),
        };
        let text = match answer {
            Ok(s) => format!("{s}\n"),
            Err(e) => format!("error {e}\n"),
        };
        stdout.write_all(text.as_bytes()).await?;
        stdout.flush().await?;
    }
    if let Some((token, handle)) = running.take() {
        token.cancel();
        let _ = handle.await;
    }
    stop_server.cancel();
    server.await??;
    Ok(())
}

async fn enqueue(backend: &dyn Backend, queue: &str, kind: &str, n: &str) -> Result<String, String> {
    let n: u32 = n.parse().map_err(|_| format!("not a count: {n}"))?;
    let queue = QueueName::new(queue).map_err(|e| e.to_string())?;
    let kind = JobKind::new(kind).map_err(|e| e.to_string())?;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            NewJob::new(queue.clone(), kind.clone())
                .json(serde_json::json!({ "n": i, "note": "<script>alert('xss')</script>", "nested": { "ok": true } }))
                .max_attempts(if kind.as_str() == "e2e.fail.v1" { 1 } else { 3 })
                .tag("e2e")
        })
        .collect();
    let mut first = None;
    for chunk in jobs.chunks(500) {
        let done = backend.enqueue_many(chunk.to_vec()).await.map_err(|e| e.to_string())?;
        first = first.or(done.first().map(|e| e.id));
    }
    Ok(format!("ok {}", first.map(|id| id.to_string()).unwrap_or_default()))
}

fn start_worker(
    backend: Arc<dyn Backend>,
    queues: &str,
) -> Result<(CancellationToken, JoinHandle<chokaq::Result<WorkerReport>>), String> {
    let worker = Worker::builder(backend)
        .queues(queues.split(',').map(str::to_string))
        .concurrency(2)
        .poll_interval(Duration::from_millis(100))
        .register_raw("e2e.ok.v1", |_payload, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(())
        })
        .register_raw("e2e.fail.v1", |_payload, _ctx| async move {
            Err(JobError::Fatal("e2e: this job fails on purpose <b>not bold</b>".into()))
        })
        .build()
        .map_err(|e| e.to_string())?;
    let token = CancellationToken::new();
    let handle = tokio::spawn(worker.run(token.clone()));
    Ok((token, handle))
}
