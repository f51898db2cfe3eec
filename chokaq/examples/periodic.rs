//! Periodic jobs: a worker with a scheduler inside it fires a 1-second interval schedule on a
//! SQLite file in a fresh temporary directory, runs the job three times, and exits.
//!
//! ```text
//! cargo run -p chokaq --features sqlite --example periodic
//! ```
//!
//! Start it twice at once on one database file (`DATABASE_URL=sqlite:///tmp/p.db`) and each
//! tick is still enqueued once: the database decides which process wins it.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq::core::MissedTickPolicy;
use chokaq::periodic::{Cron, Scheduler};
use chokaq::{Backend, Job, JobContext, Worker};
use serde::{Deserialize, Serialize};

/// The periodic job: the tick it belongs to is in its idempotency key.
#[derive(Serialize, Deserialize)]
struct Heartbeat {
    note: String,
}

impl Job for Heartbeat {
    const KIND: &'static str = "example.heartbeat.v1";
}

#[derive(Serialize, Deserialize)]
struct NightlyReport;

impl Job for NightlyReport {
    const KIND: &'static str = "example.nightly.v1";
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())).init();
    let dir = std::env::temp_dir().join(format!("chokaq-periodic-{:08x}", rand::random::<u32>()));
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => {
            // Owner-only (0700 on Unix), as the quickstart's: the job database holds payloads.
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            if let Err(e) = builder.create(&dir) {
                eprintln!("error: cannot create a temporary directory: {e}");
                return ExitCode::FAILURE;
            }
            format!("sqlite://{}", dir.join("jobs.db").display())
        }
    };
    let result = run(&url).await;
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> chokaq::Result<()> {
    let backend: Arc<dyn Backend> = chokaq::connect_and_migrate(url, "chokaq_periodic").await?;
    let scheduler = Scheduler::builder(backend.clone())
        .every("example.heartbeat", Duration::from_secs(1), || Heartbeat { note: "every second".into() })
        .missed(MissedTickPolicy::RunOnce)
        .every("example.nightly", Cron::parse("0 3 * * *")?.in_tz(chokaq::periodic::tz::Europe::Berlin), || {
            NightlyReport
        })
        .build()?;
    let ran = Arc::new(AtomicU32::new(0));
    let done = chokaq::CancellationToken::new();
    let worker = Worker::builder(backend.clone())
        .register({
            let ran = ran.clone();
            let done = done.clone();
            move |job: Heartbeat, ctx: JobContext| {
                let ran = ran.clone();
                let done = done.clone();
                async move {
                    let n = ran.fetch_add(1, Ordering::SeqCst) + 1;
                    println!("run {n}: {} (job {})", job.note, ctx.id());
                    if n >= 3 {
                        done.cancel();
                    }
                    Ok(())
                }
            }
        })
        .register(|_: NightlyReport, _ctx: JobContext| async { Ok(()) })
        .scheduler(scheduler)
        .build()?;
    let stop = chokaq::shutdown_token();
    let run = tokio::spawn(worker.run(stop.clone()));
    tokio::select! {
        _ = done.cancelled() => {}
        _ = stop.cancelled() => {}
        _ = tokio::time::sleep(Duration::from_secs(30)) => {
            stop.cancel();
            let _ = run.await;
            return Err(chokaq::Error::new(chokaq::ErrorKind::Other, "no periodic job ran within 30 s"));
        }
    }
    stop.cancel();
    run.await.map_err(|e| chokaq::Error::new(chokaq::ErrorKind::Other, format!("worker task: {e}")))??;
    for s in backend.list_schedules().await? {
        println!(
            "schedule {} {} ({}) last tick {} next {}",
            s.name,
            s.spec,
            s.time_zone,
            s.last_enqueued_tick.map_or("-".into(), |t| t.to_string()),
            s.next_tick.map_or("-".into(), |t| t.to_string())
        );
    }
    Ok(())
}
