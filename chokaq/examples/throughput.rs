//! A quick comparison of the worker runtime against a raw claim+complete loop on the same
//! database: `cargo run -p chokaq --features postgres --release --example throughput --
//! [--database-url URL] [--jobs N] [--concurrency C]`. Uses (and drops) its own schema.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::testing::TestSupport;
use chokaq::core::{ClaimMode, ClaimParams};
use chokaq::postgres::{PgBackend, PgConfig};
use chokaq::{Backend, CancellationToken, Client, Job, JobContext, MaintenanceConfig, Worker, WorkerId};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Noop {
    n: u32,
}

impl Job for Noop {
    const KIND: &'static str = "bench.noop.v1";
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> chokaq::Result<()> {
    let url = arg("--database-url")
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let jobs: u32 = arg("--jobs").and_then(|s| s.parse().ok()).unwrap_or(5000);
    let conc: u32 = arg("--concurrency").and_then(|s| s.parse().ok()).unwrap_or(8);
    let schema = format!("chokaq_throughput_{:08x}", rand::random::<u32>());
    let b = Arc::new(PgBackend::connect(PgConfig::new(url).schema(&schema)).await?);
    b.migrate().await?;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let payloads: Vec<Noop> = (0..jobs).map(|n| Noop { n }).collect();

    // Raw loop: claim `conc` straight to Processing, complete them in one call, repeat.
    client.enqueue_many(&payloads).await?;
    let worker = WorkerId::random();
    let queues = vec![chokaq::QueueName::new("default")?];
    let t0 = Instant::now();
    loop {
        let claimed = b.claim(&ClaimParams::new(worker, queues.clone(), conc, ClaimMode::Start)).await?;
        if claimed.is_empty() {
            break;
        }
        let leases: Vec<_> = claimed.iter().map(|j| j.lease_ref()).collect();
        b.complete(worker, &leases).await?;
    }
    let raw = t0.elapsed();

    // The runtime, same concurrency, a handler that does nothing.
    client.enqueue_many(&payloads).await?;
    let w = Worker::builder(dynb)
        .concurrency(conc)
        .maintenance(MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() })
        .register(|_: Noop, _: JobContext| async { Ok(()) })
        .build()?;
    let token = CancellationToken::new();
    let t0 = Instant::now();
    let (stats, fut) = w.run_with_handle(token.clone());
    let run = tokio::spawn(fut);
    // Watch the worker's own counter: polling the database would slow it down.
    while stats.report().completed < u64::from(jobs) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rt = t0.elapsed();
    token.cancel();
    let report = run.await.map_err(|e| chokaq::Error::new(chokaq::ErrorKind::Other, e.to_string()))??;

    let raw_rate = f64::from(jobs) / raw.as_secs_f64();
    let rt_rate = f64::from(jobs) / rt.as_secs_f64();
    println!("jobs {jobs}, concurrency {conc}");
    println!("raw claim+complete loop: {raw:?} ({raw_rate:.0} jobs/s)");
    println!("runtime:                 {rt:?} ({rt_rate:.0} jobs/s)  {report:?}");
    println!("ratio runtime/raw: {:.2}", rt_rate / raw_rate);
    b.drop_schema().await?;
    Ok(())
}
