//! Quickstart: enqueue a few thousand typed jobs of three types, process them with one worker
//! while a progress bar runs, then print the queues' final counts and what was done.
//!
//! ```text
//! cargo run --release -p chokaq --features sqlite,postgres --example quickstart
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/test cargo run --release -p chokaq --features sqlite,postgres --example quickstart
//! ```
//!
//! With no `$DATABASE_URL` (and no `--database-url`) it needs no server: the jobs live in a
//! SQLite file in a fresh temporary directory, removed at the end (`--keep` leaves it, and
//! prints the `chokaq` commands that open it). Any URL [`chokaq::connect`] understands works
//! (`postgres://…`, `sqlite:…`, a `*.db` path); the tables go to schema `chokaq_quickstart`
//! (`--schema`; a SQLite file has no schemas). It works in its own queues (`quickstart.*`)
//! and never deletes anything from a database it is pointed at: the counts of earlier runs
//! stay, and what this run did is printed apart. Prefer `DATABASE_URL` to `--database-url`:
//! `cargo run` echoes its command line, password included. Ctrl-C stops it cleanly at any
//! point: while enqueueing it stops there, while processing running jobs finish (or are
//! handed back); nothing is lost, and the temporary directory is removed either way (unless
//! `--keep`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::{Backend, CancellationToken, Client, Job, JobContext, JobError, RetryPolicy, Worker, WorkerReport};
use clap::Parser;
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use serde::{Deserialize, Serialize};

/// Enqueue and process a few thousand jobs, then print what happened.
#[derive(Parser)]
#[command(name = "quickstart")]
struct Args {
    /// Database URL: postgres://…, sqlite:…, or a *.db path. Default: a SQLite file in a fresh
    /// temporary directory (no server needed).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// How many jobs to enqueue.
    #[arg(long, default_value_t = 3000)]
    jobs: u32,
    /// Handlers running at once.
    #[arg(long, default_value_t = 16)]
    concurrency: u32,
    /// Schema of the tables (PostgreSQL).
    #[arg(long, default_value = "chokaq_quickstart")]
    schema: String,
    /// Keep the temporary SQLite database (no URL given) and print the commands that open it
    /// with the `chokaq` command line and dashboard.
    #[arg(long)]
    keep: bool,
}

/// A typed job: the kind is stored with the job, the struct is its JSON payload.
#[derive(Serialize, Deserialize)]
struct SendEmail {
    to: String,
    subject: String,
}

impl Job for SendEmail {
    const KIND: &'static str = "email.send.v1";
    fn queue() -> &'static str {
        "quickstart.email"
    }
}

/// One image in six (`n % 20 == 5`) "times out" on its first attempt, to show a retry.
#[derive(Serialize, Deserialize)]
struct ResizeImage {
    n: u32,
    path: String,
    width: u32,
}

impl Job for ResizeImage {
    const KIND: &'static str = "image.resize.v1";
    fn queue() -> &'static str {
        "quickstart.images"
    }
    fn max_attempts() -> i32 {
        3
    }
}

#[derive(Serialize, Deserialize)]
struct BuildReport {
    customer: u32,
    rows: u32,
}

impl Job for BuildReport {
    const KIND: &'static str = "report.build.v1";
    fn queue() -> &'static str {
        "quickstart.reports"
    }
}

/// The quickstart's own queues: on a database it is pointed at, it claims from these only.
const QUEUES: [&str; 3] = ["quickstart.email", "quickstart.images", "quickstart.reports"];

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt().with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())).init();
    let args = Args::parse();
    // Listen for Ctrl-C / SIGTERM from the start, so that an interrupt at any point ends the
    // run cleanly (and the temporary directory is removed) instead of killing the process.
    let shutdown = chokaq::shutdown_token();
    let (url, temp_dir) = match args.database_url.clone().filter(|u| !u.trim().is_empty()) {
        Some(url) => (url, None),
        None => {
            let dir = std::env::temp_dir().join(format!("chokaq-quickstart-{:08x}", rand::random::<u32>()));
            // Owner-only (0700 on Unix): the job database holds payloads; other users of the
            // machine must not read it (docs/security.md).
            let mut builder = std::fs::DirBuilder::new();
            builder.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            if let Err(e) = builder.create(&dir) {
                eprintln!("error: cannot create a temporary directory: {e}");
                return ExitCode::FAILURE;
            }
            let url = format!("sqlite://{}", dir.join("jobs.db").display());
            (url, Some(dir))
        }
    };
    let result = run(&args, &url, temp_dir.as_ref(), shutdown).await;
    if let Some(dir) = temp_dir {
        if args.keep {
            println!();
            println!("kept the database: {}", dir.join("jobs.db").display());
            print_look_commands(&format!("DATABASE_URL={url} "), "");
            println!("remove it with: rm -r {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    } else if result.is_ok() {
        // The user's database: the next `chokaq stats` needs this run's schema (PostgreSQL,
        // SQL Server; SQLite has none) and the same URL, which is never printed.
        println!();
        let how = if args.database_url_from_env() {
            "with the same DATABASE_URL"
        } else {
            "with DATABASE_URL set to the URL given"
        };
        println!("look at it {how}:");
        let schema = match chokaq::backend_kind(&url) {
            Ok(chokaq::BackendKind::Sqlite) => String::new(),
            _ => format!("--schema {} ", args.schema),
        };
        print_look_commands("", &schema);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // chokaq errors never contain the URL or its password.
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The two commands that open the database: the command line and the dashboard.
fn print_look_commands(env: &str, schema: &str) {
    println!("  {env}chokaq {schema}stats");
    println!("  {env}chokaq {schema}web --no-auth --listen 127.0.0.1:8080");
    println!("  (the chokaq binary: cargo install --locked --path chokaq-cli)");
}

impl Args {
    /// Whether the URL came from `$DATABASE_URL` rather than `--database-url`.
    fn database_url_from_env(&self) -> bool {
        !std::env::args().any(|a| a == "--database-url" || a.starts_with("--database-url="))
    }
}

async fn run(args: &Args, url: &str, temp_dir: Option<&PathBuf>, shutdown: CancellationToken) -> chokaq::Result<()> {
    // 1-2. Connect and enqueue, unless interrupted first.
    let prepared = tokio::select! {
        r = prepare(args, url, temp_dir) => r?,
        _ = shutdown.cancelled() => {
            let fate = if temp_dir.is_some() && !args.keep {
                "the temporary database is removed"
            } else {
                "jobs enqueued so far stay queued; the next run or any worker runs them"
            };
            println!("interrupted before processing started ({fate})");
            return Ok(());
        }
    };
    let Prepared { backend, leftover } = prepared;
    let n = args.jobs;

    // 3. One worker, a handler per job type.
    let worker = Worker::builder(backend.clone())
        .queues(QUEUES)
        .concurrency(args.concurrency)
        .retry_policy(RetryPolicy::fixed_exponential(Duration::from_millis(100), 2.0, Duration::from_secs(2)))
        .register(|job: SendEmail, _ctx: JobContext| async move {
            // Stand-in for an SMTP call.
            tokio::task::yield_now().await;
            let _message = format!("To: {}\nSubject: {}\n", job.to, job.subject);
            Ok(())
        })
        .register(|job: ResizeImage, ctx: JobContext| async move {
            if job.n % 20 == 5 && ctx.attempt() == 1 {
                return Err(JobError::Retry(format!("image store timed out on {}", job.path)));
            }
            let _ = job.width;
            Ok(())
        })
        .register(|job: BuildReport, _ctx: JobContext| async move {
            let checksum =
                (0..job.rows).fold(u64::from(job.customer), |acc, r| acc.wrapping_mul(31).wrapping_add(u64::from(r)));
            std::hint::black_box(checksum);
            Ok(())
        })
        .build()?;

    // 4. Run until every job is finished, or until Ctrl-C / SIGTERM.
    let started = Instant::now();
    let (stats, run) = worker.run_with_handle(shutdown.clone());
    let run = tokio::spawn(run);
    let total = u64::from(n) + leftover;
    let progress = Progress::new(total);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut ticks = 0u64;
    let interrupted = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break true,
            _ = tick.tick() => {}
        }
        ticks += 1;
        let r = stats.report();
        let done = r.completed + r.dead_lettered;
        progress.set(done);
        // The worker's counters say when to look; the database says when it is really over.
        if done >= total || ticks % 10 == 0 {
            let s = backend.stats().await?;
            if queues_hot(&s) == 0 {
                shutdown.cancel();
                break false;
            }
        }
    };
    let report: WorkerReport = run.await.map_err(|e| chokaq::Error::new(chokaq::ErrorKind::Other, e.to_string()))??;
    let elapsed = started.elapsed();
    progress.finish(report.completed + report.dead_lettered, interrupted);

    // 5. What the database holds now (earlier runs' jobs included), and what this run did.
    let s = backend.stats().await?;
    println!();
    println!("{:<18} {:>9} {:>11} {:>9} {:>6}", "queue", "pending", "processing", "archived", "dead");
    for q in QUEUES {
        let (p, r, a, d) =
            s.queue(q).map_or((0, 0, 0, 0), |q| (q.pending + q.fetched, q.processing, q.archived, q.dead));
        println!("{q:<18} {p:>9} {r:>11} {a:>9} {d:>6}");
    }
    println!();
    println!("enqueued      {n}");
    println!(
        "processed     {} (archived {}, dead-lettered {})",
        report.completed + report.dead_lettered,
        report.completed,
        report.dead_lettered
    );
    println!("retried       {} (failed attempts put back to pending)", report.retried);
    println!("handler runs  {}", report.started);
    println!(
        "time          {:.2} s, {:.0} jobs/s ({} claim and {} completion round trips)",
        elapsed.as_secs_f64(),
        (report.completed + report.dead_lettered) as f64 / elapsed.as_secs_f64().max(1e-9),
        report.claim_calls,
        report.complete_calls
    );
    if interrupted {
        let fate = if temp_dir.is_some() && !args.keep {
            "the temporary database is removed with them"
        } else {
            "they stay queued; the next run or any worker runs them"
        };
        println!("interrupted: {} jobs not finished ({fate})", queues_hot(&s));
    }
    Ok(())
}

/// What steps 1 and 2 leave for the worker.
struct Prepared {
    backend: Arc<dyn Backend>,
    /// Live jobs of an earlier, interrupted run.
    leftover: u64,
}

/// Steps 1 and 2: connect, clean up, enqueue `args.jobs` jobs.
async fn prepare(args: &Args, url: &str, temp_dir: Option<&PathBuf>) -> chokaq::Result<Prepared> {
    // 1. Connect to whatever the URL names, and create the tables (safe to repeat).
    let kind = chokaq::backend_kind(url)?;
    match temp_dir {
        Some(dir) => {
            println!("no --database-url: using a SQLite file in a fresh temporary directory, {}", dir.display())
        }
        None => println!("database: {kind}, schema {}", args.schema),
    }
    let backend = chokaq::connect_and_migrate(url, &args.schema).await?;
    // Nothing is purged: earlier runs' finished jobs stay where they are.
    let leftover = queues_hot(&backend.stats().await?);
    if leftover > 0 {
        println!("{leftover} live jobs left by an earlier, interrupted run will be processed too");
    }

    // 2. Enqueue: half emails, 30 % image resizes (one in six fails once), 20 % reports.
    let client = Client::new(backend.clone()).with_created_by("quickstart");
    let n = args.jobs;
    let (mut emails, mut images, mut reports) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        match i % 10 {
            0..=4 => emails.push(SendEmail { to: format!("user{i}@example.com"), subject: "Welcome".into() }),
            5..=7 => images.push(ResizeImage { n: i, path: format!("img/{i}.png"), width: 256 }),
            _ => reports.push(BuildReport { customer: i, rows: 1000 + i % 500 }),
        }
    }
    let t0 = Instant::now();
    client.enqueue_many(&emails).await?;
    client.enqueue_many(&images).await?;
    client.enqueue_many(&reports).await?;
    let flaky = images.iter().filter(|j| j.n % 20 == 5).count();
    println!(
        "enqueued {n} jobs in {:.2} s: {} {}, {} {} ({flaky} of them fail once), {} {}",
        t0.elapsed().as_secs_f64(),
        emails.len(),
        SendEmail::KIND,
        images.len(),
        ResizeImage::KIND,
        reports.len(),
        BuildReport::KIND
    );

    Ok(Prepared { backend, leftover })
}

fn queues_hot(s: &chokaq::core::StatsSnapshot) -> u64 {
    s.queues.iter().filter(|q| QUEUES.contains(&q.queue.as_str())).map(|q| q.pending + q.fetched + q.processing).sum()
}

/// A progress bar on a terminal; on anything else (CI, a pipe) a plain line every 10 %.
struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    printed: std::cell::Cell<u64>,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40.cyan/blue} {pos}/{len} jobs ({rate}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} jobs/s", state.per_sec());
            });
            bar.set_style(style);
            bar
        });
        Progress { bar, total, printed: std::cell::Cell::new(0) }
    }

    fn set(&self, done: u64) {
        match &self.bar {
            Some(bar) => bar.set_position(done),
            None => {
                let step = (self.total / 10).max(1);
                let tenth = done / step;
                if tenth > self.printed.get() && done < self.total {
                    self.printed.set(tenth);
                    println!("processed {done}/{} jobs", self.total);
                }
            }
        }
    }

    fn finish(&self, done: u64, interrupted: bool) {
        match &self.bar {
            Some(bar) if interrupted => bar.abandon(),
            Some(bar) => {
                bar.set_position(done);
                bar.finish();
            }
            None => println!("processed {done}/{} jobs{}", self.total, if interrupted { " (interrupted)" } else { "" }),
        }
    }
}
