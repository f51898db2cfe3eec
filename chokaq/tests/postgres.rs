//! Acceptance tests of the worker runtime on PostgreSQL.
//!
//! A custom harness (libtest-mimic): each case is a named, filterable trial with its own fresh
//! schema `chokaq_t_<hex>`, so cases run in parallel. The URL comes from
//! `CHOKAQ_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`). When the
//! database is unreachable every case is ignored, unless `CHOKAQ_TEST_REQUIRE` names
//! `postgres`: then every case fails.
//!
//! The multi-process cases re-execute this test binary as worker processes (env
//! `CHOKAQ_RT_CHILD` set): each handler run appends `<job id>\n` to the process's own file,
//! outside the queue tables, so handler runs are counted independently of the database.
//! `handler_aborting_the_process_is_dead_lettered` uses the same children with a handler that
//! aborts its process as soon as it begins.

#[macro_use]
mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq::core::{DeadReason, JobLocation, JobTable, ListJobsParams, RescueParams};
use chokaq::{Backend, CancellationToken, Client, JobBuilder, JobContext, JobId, MaintenanceConfig, Worker};
use chokaq_core::testing::TestSupport;
use chokaq_postgres::{PgBackend, PgConfig};
use common::{err, Count, TestResult};
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const CHILD_ENV: &str = "CHOKAQ_RT_CHILD";
/// Set in a child whose handler aborts the process as soon as it begins.
const ABORT_ENV: &str = "CHOKAQ_RT_ABORT";

fn url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

fn required() -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").map(|v| v.split(',').any(|s| s.trim() == "postgres")).unwrap_or(false)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn fresh_schema_name() -> String {
    format!("chokaq_t_{:016x}", rand::random::<u64>())
}

async fn connect(schema: &str, pool: u32) -> chokaq::Result<PgBackend> {
    PgBackend::connect(PgConfig::new(url()).schema(schema).max_connections(pool)).await
}

async fn fresh(pool: u32) -> Result<Arc<PgBackend>, String> {
    let b = connect(&fresh_schema_name(), pool).await.map_err(err)?;
    b.migrate().await.map_err(err)?;
    Ok(Arc::new(b))
}

/// Runs a scenario on a fresh schema and drops the schema afterwards (also on failure).
fn on_fresh<F, Fut>(f: F) -> Result<(), Failed>
where
    F: FnOnce(Arc<PgBackend>) -> Fut,
    Fut: std::future::Future<Output = TestResult>,
{
    runtime().block_on(async {
        let b = fresh(8).await?;
        let out = f(b.clone()).await;
        if let Err(e) = b.drop_schema().await {
            eprintln!("could not drop schema {}: {e}", b.schema());
        }
        out
    })?;
    Ok(())
}

fn main() -> ExitCode {
    if std::env::var_os(CHILD_ENV).is_some() {
        return child_main();
    }
    let args = Arguments::from_args();
    let reachable = runtime().block_on(async { connect("chokaq_probe", 1).await.is_ok() });
    let require = required();
    let mut trials = vec![
        Trial::test("typed_roundtrip", || on_fresh(common::typed_roundtrip)),
        Trial::test("retry_backoff_and_fatal", || on_fresh(common::retry_and_fatal)),
        Trial::test("poison_and_panic", || on_fresh(common::poison_and_panic)),
        Trial::test("timeout_retries", || on_fresh(common::timeout_retries)),
        Trial::test("operator_cancel_from_another_process", || {
            on_fresh(|b| async move {
                // The operator uses its own pool on the same schema, as another process would.
                let operator = Arc::new(connect(b.schema(), 2).await.map_err(err)?);
                common::operator_cancel(b, operator).await
            })
        }),
        Trial::test("shutdown_releases_prefetch_and_hands_back", || on_fresh(common::shutdown_releases_prefetch)),
        Trial::test("pause_releases_prefetch", || on_fresh(common::pause_releases_prefetch)),
        Trial::test("pause_keeps_lookahead_running", || on_fresh(common::pause_keeps_lookahead_running)),
        Trial::test("lease_lost_discards_outcome", || on_fresh(common::lease_lost_discards_outcome)),
        Trial::test("snooze_does_not_count", || on_fresh(common::snooze_does_not_count)),
        Trial::test("dropped_worker_hands_back", || on_fresh(common::dropped_worker_hands_back)),
        Trial::test("wakeup_beats_polling", || on_fresh(common::wakeup_beats_polling)),
        Trial::test("keyed_cap_under_the_runtime", || on_fresh(common::keyed_cap_under_the_runtime)),
        Trial::test("twenty_workers_share_one_listener", || {
            runtime().block_on(async { twenty_workers_share_one_listener().await.map_err(Failed::from) })
        }),
        Trial::test("ten_thousand_jobs_four_processes", || on_fresh(|b| multi_process(b, false))),
        Trial::test("ten_thousand_jobs_one_process_sigkilled", || on_fresh(|b| multi_process(b, true))),
        Trial::test("handler_aborting_the_process_is_dead_lettered", || on_fresh(aborting_handler)),
    ];
    if !reachable {
        if require {
            trials = trials
                .into_iter()
                .map(|t| {
                    let name = t.name().to_string();
                    Trial::test(name, || Err("PostgreSQL is unreachable and CHOKAQ_TEST_REQUIRE names postgres".into()))
                })
                .collect();
        } else {
            eprintln!("PostgreSQL unreachable at the configured URL: every case is ignored");
            trials = trials.into_iter().map(|t| t.with_ignored_flag(true)).collect();
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}

// ---------------------------------------------------------------------------------------------
// One LISTEN connection per backend

/// Twenty workers on one backend whose pool has ten connections drain a backlog woken by
/// NOTIFY (their poll interval is a minute), and the backend holds ONE listening session for
/// all of them, not one per worker.
async fn twenty_workers_share_one_listener() -> TestResult {
    let b = Arc::new(connect(&fresh_schema_name(), 10).await.map_err(err)?);
    b.migrate().await.map_err(err)?;
    let out = twenty_workers(&b).await;
    if let Err(e) = b.drop_schema().await {
        eprintln!("could not drop schema {}: {e}", b.schema());
    }
    out
}

async fn twenty_workers(b: &Arc<PgBackend>) -> TestResult {
    use chokaq::core::{JobKind, NewJob, QueueName};
    let dynb: Arc<dyn Backend> = b.clone();
    let poll = Duration::from_secs(60);
    let mut running = Vec::new();
    let mut stats = Vec::new();
    for _ in 0..20 {
        let w = Worker::builder(dynb.clone())
            .queue("fan")
            .concurrency(2)
            .poll_interval(poll)
            .min_poll_interval(poll)
            .maintenance(MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() })
            .register_raw("fan.v1", |_p, _c| async { Ok(()) })
            .build()
            .map_err(err)?;
        let token = CancellationToken::new();
        let (handle, fut) = w.run_with_handle(token.clone());
        stats.push(handle);
        running.push((token, tokio::spawn(fut)));
    }
    // Every worker has made its first (empty) claim, so each has subscribed to wake-ups.
    common::wait_for("every worker's first claim", Duration::from_secs(30), || async {
        Ok(stats.iter().all(|s| s.report().claim_calls >= 1))
    })
    .await?;
    let queue = QueueName::new("fan").map_err(err)?;
    let kind = JobKind::new("fan.v1").map_err(err)?;
    for _ in 0..4 {
        let jobs = (0..100).map(|_| NewJob::new(queue.clone(), kind.clone())).collect();
        b.enqueue_many(jobs).await.map_err(err)?;
    }
    common::wait_for("400 jobs archived by wake-ups alone", Duration::from_secs(30), || async {
        Ok(b.stats().await.map_err(err)?.archived == 400)
    })
    .await?;
    let listeners: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE 'LISTEN%'",
    )
    .bind(format!("chokaq:{}", b.schema()))
    .fetch_one(b.pool())
    .await
    .map_err(err)?;
    for (token, h) in running {
        token.cancel();
        h.await.map_err(err)?.map_err(err)?;
    }
    ensure!(listeners == 1, "listening sessions for 20 workers on one backend: expected 1, got {listeners}");
    println!("    20 workers, pool of 10: 400 jobs drained by wake-ups, {listeners} listening session");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Worker processes

const JOBS: usize = 10_000;
const PROCESSES: usize = 4;
const CONCURRENCY: u32 = 8;
/// The SIGKILL victim stalls every handler after this many runs of its own (each stalled
/// handler writes its run line first, then waits forever), so the kill lands at a known point
/// instead of a timed one.
const STALL_AFTER: usize = 300;

/// A worker process: runs `Count` jobs until its stdin closes, appending each run's job id to
/// its own file. Prints `WORKER <id>` first and `REPORT ...` last. With `CHOKAQ_RT_STALL_AFTER`
/// set to `n`, every run after the `n`-th writes its line and then never returns. With
/// `CHOKAQ_RT_ABORT` set, every run writes its line and then aborts the process at once
/// (`std::process::abort()`), and the worker runs no maintenance (the parent rescues).
fn child_main() -> ExitCode {
    let schema = std::env::var("CHOKAQ_RT_SCHEMA").expect("schema");
    let runs_file = PathBuf::from(std::env::var("CHOKAQ_RT_RUNS").expect("runs file"));
    let stall_after: Option<usize> = std::env::var("CHOKAQ_RT_STALL_AFTER").ok().map(|v| v.parse().expect("a count"));
    let abort = std::env::var_os(ABORT_ENV).is_some();
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let rt = runtime();
    let out = rt.block_on(async move {
        let backend: Arc<dyn Backend> = Arc::new(connect(&schema, 4).await.map_err(err)?);
        let file =
            Arc::new(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(&runs_file).map_err(err)?));
        let maintenance = MaintenanceConfig {
            enabled: true,
            interval: Duration::from_millis(500),
            // The 3 s timeouts are the queue's settings (set by the parent).
            rescue: RescueParams { limit: 1000, purge: Vec::new() },
            archive_retention: None,
            dead_letter_retention: None,
            worker_stale_after: None,
        };
        let maintenance = if abort { common::no_maintenance() } else { maintenance };
        // The aborting worker has one slot, so the innocent job waits in its look-ahead.
        let worker = Worker::builder(backend)
            .concurrency(if abort { 1 } else { CONCURRENCY })
            .heartbeat_interval(Duration::from_millis(300))
            .poll_interval(Duration::from_millis(200))
            .maintenance(maintenance)
            .register(move |job: Count, ctx: JobContext| {
                let (file, ran) = (file.clone(), ran.clone());
                async move {
                    // One write(2) per run, straight to the file: survives SIGKILL.
                    let line = format!("{}\n", ctx.id());
                    file.lock().unwrap().write_all(line.as_bytes()).map_err(chokaq::JobError::retry)?;
                    if abort && job.n == 0 {
                        // The poison job's handler kills its process as soon as it begins.
                        std::process::abort();
                    }
                    let n = ran.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1;
                    if stall_after.is_some_and(|limit| n > limit) {
                        // Stalled until the process is killed.
                        futures::future::pending::<()>().await;
                    }
                    // A little simulated work so a kill lands mid-run.
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    Ok(())
                }
            })
            .build()
            .map_err(err)?;
        println!("WORKER {}", worker.id());
        let token = CancellationToken::new();
        let t2 = token.clone();
        tokio::spawn(async move {
            // Shut down gracefully when the parent closes our stdin.
            let _ = tokio::task::spawn_blocking(|| {
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            })
            .await;
            t2.cancel();
        });
        let report = worker.run(token).await.map_err(err)?;
        println!("REPORT {report:?}");
        Ok::<(), String>(())
    });
    match out {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker process failed: {e}");
            ExitCode::FAILURE
        }
    }
}

struct ChildProc {
    child: tokio::process::Child,
    worker_id: String,
    runs_file: PathBuf,
    stdout: BufReader<tokio::process::ChildStdout>,
}

async fn spawn_child(schema: &str, runs_file: &Path, stall_after: Option<usize>) -> Result<ChildProc, String> {
    let extra: Vec<(&str, String)> =
        stall_after.map(|n| ("CHOKAQ_RT_STALL_AFTER", n.to_string())).into_iter().collect();
    spawn_child_env(schema, runs_file, &extra).await
}

/// [`spawn_child`] with more environment variables for the child.
async fn spawn_child_env(schema: &str, runs_file: &Path, extra: &[(&str, String)]) -> Result<ChildProc, String> {
    let exe = std::env::current_exe().map_err(err)?;
    let mut command = tokio::process::Command::new(exe);
    for (k, v) in extra {
        command.env(k, v);
    }
    let mut child = command
        .env(CHILD_ENV, "1")
        .env("CHOKAQ_RT_SCHEMA", schema)
        .env("CHOKAQ_RT_RUNS", runs_file)
        .env("CHOKAQ_TEST_POSTGRES_URL", url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(err)?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut line))
        .await
        .map_err(|_| "worker process did not start within 30 s")?
        .map_err(err)?;
    let worker_id = line.trim().strip_prefix("WORKER ").ok_or_else(|| format!("unexpected first line {line:?}"))?;
    Ok(ChildProc { worker_id: worker_id.to_string(), child, runs_file: runs_file.to_path_buf(), stdout })
}

fn read_runs(path: &Path) -> Result<Vec<JobId>, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| l.parse::<JobId>().map_err(err)).collect()
}

/// 10,000 jobs through four worker processes (concurrency 8 each). With `kill`, one process
/// is SIGKILLed mid-run and the others (rescue included) finish its jobs.
async fn multi_process(b: Arc<PgBackend>, kill: bool) -> TestResult {
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetZombieTimeout(Some(Duration::from_secs(3))))
        .await
        .map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetFetchedTimeout(Some(Duration::from_secs(3))))
        .await
        .map_err(err)?;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb);
    let jobs: Vec<Count> = (0..JOBS as u32).map(|n| Count { n }).collect();
    let ids: Vec<JobId> = client.enqueue_many(&jobs).await.map_err(err)?.into_iter().map(|e| e.id).collect();
    ensure!(ids.len() == JOBS, "enqueued {}", ids.len());

    let dir = std::env::temp_dir().join(format!("chokaq_rt_{}", b.schema()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    let t0 = Instant::now();
    let mut children = Vec::new();
    for i in 0..PROCESSES {
        // With `kill`, process 0 is the victim: it stalls after `STALL_AFTER` runs.
        let stall = (kill && i == 0).then_some(STALL_AFTER);
        children.push(spawn_child(b.schema(), &dir.join(format!("runs-{i}.txt")), stall).await?);
    }

    let mut victim: Option<ChildProc> = None;
    if kill {
        // Kill process 0 at a known point, not a timed one: every one of its slots holds a
        // stalled handler (it has written `STALL_AFTER + CONCURRENCY` run lines), and every
        // other run of it has its outcome written (exactly `CONCURRENCY` of its runs are
        // still in the hot table).
        let mut v = children.remove(0);
        let stalled = STALL_AFTER + CONCURRENCY as usize;
        common::wait_for("the victim's slots all stalled", Duration::from_secs(60), || async {
            Ok(read_runs(&v.runs_file)?.len() >= stalled)
        })
        .await?;
        common::wait_for("the victim's finished runs all written", Duration::from_secs(30), || async {
            let mine = read_runs(&v.runs_file)?;
            let hot = b.presence_many(&mine).await.map_err(err)?.iter().filter(|(_, p)| p.hot == 1).count();
            Ok(hot == CONCURRENCY as usize)
        })
        .await?;
        let n = read_runs(&v.runs_file)?.len();
        ensure!(n == stalled, "the victim ran {n} handlers, {stalled} expected (its slots are stalled)");
        v.child.start_kill().map_err(err)?; // SIGKILL: no cleanup at all
        v.child.wait().await.map_err(err)?;
        println!("    SIGKILLed worker process {} after {:?}", v.worker_id, t0.elapsed());
        victim = Some(v);
    }

    common::wait_for("all 10,000 archived", Duration::from_secs(90), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.archived == JOBS as u64 && s.hot() == 0)
    })
    .await?;
    let elapsed = t0.elapsed();

    // Graceful stop of the survivors: close stdin, collect reports.
    for c in &mut children {
        drop(c.child.stdin.take());
    }
    for c in &mut children {
        let status = tokio::time::timeout(Duration::from_secs(30), c.child.wait())
            .await
            .map_err(|_| "worker process did not exit")?
            .map_err(err)?;
        let mut rest = String::new();
        c.stdout.read_to_string(&mut rest).await.map_err(err)?;
        ensure!(status.success(), "worker process exited with {status}");
        println!("    worker {}: {}", c.worker_id, rest.trim());
    }

    // Exactly once in the tables: archived, nowhere else.
    for chunk in ids.chunks(1000) {
        for (id, p) in b.presence_many(chunk).await.map_err(err)? {
            ensure!(p.archive == 1 && p.hot == 0 && p.dead == 0, "job {id}: {p:?}");
        }
    }

    // Handler runs, counted outside the tables.
    let mut runs: HashMap<JobId, u32> = HashMap::new();
    let mut total_runs = 0usize;
    for i in 0..PROCESSES {
        for id in read_runs(&dir.join(format!("runs-{i}.txt")))? {
            *runs.entry(id).or_default() += 1;
            total_runs += 1;
        }
    }
    let known: HashSet<JobId> = ids.iter().copied().collect();
    ensure!(runs.keys().all(|id| known.contains(id)), "a handler ran for an unknown id");
    let never: Vec<_> = ids.iter().filter(|id| !runs.contains_key(id)).collect();
    ensure!(never.is_empty(), "{} jobs archived without a handler run", never.len());
    let twice: HashSet<JobId> = runs.iter().filter(|(_, &n)| n > 1).map(|(id, _)| *id).collect();
    let max_runs = runs.values().copied().max().unwrap_or(0);

    if let Some(v) = victim {
        // Which of the victim's runs were cut off: it wrote the line but its job was archived
        // by someone else.
        let victim_runs: HashSet<JobId> = read_runs(&v.runs_file)?.into_iter().collect();
        let mut archived_by: HashMap<JobId, Option<String>> = HashMap::new();
        let mut attempts: HashMap<JobId, i32> = HashMap::new();
        let mut filter = ListJobsParams::new(JobTable::Archive);
        filter.limit = 1000;
        loop {
            let page = b.list_jobs(&filter).await.map_err(err)?;
            for j in &page.jobs {
                archived_by.insert(j.id, j.worker_id.map(|w| w.to_string()));
                attempts.insert(j.id, j.attempt);
            }
            match page.next {
                Some(n) => filter.after = Some(n),
                None => break,
            }
        }
        let cut_off: HashSet<JobId> = victim_runs
            .iter()
            .filter(|id| archived_by.get(id).and_then(|w| w.as_deref()) != Some(v.worker_id.as_str()))
            .copied()
            .collect();
        println!(
            "    kill: victim ran {} jobs, {} of them cut off; {} jobs ran twice (max runs per job {max_runs}); \
             {total_runs} handler runs for {JOBS} jobs; {elapsed:?}",
            victim_runs.len(),
            cut_off.len(),
            twice.len()
        );
        ensure!(max_runs <= 2, "a job ran {max_runs} times");
        ensure!(
            twice == cut_off,
            "jobs run twice ({}) must be exactly the victim's cut-off runs ({}); extra: {:?}",
            twice.len(),
            cut_off.len(),
            twice.symmetric_difference(&cut_off).take(5).collect::<Vec<_>>()
        );
        // The kill landed at a known point: exactly the stalled handlers were cut off.
        ensure!(
            cut_off.len() == CONCURRENCY as usize,
            "{} cut-off runs; the victim had exactly {CONCURRENCY} stalled handlers and every other outcome written",
            cut_off.len()
        );
        // Attempts spent without a run: none. The victim's look-ahead jobs were Fetched (a job
        // is started only when a slot takes it), so the rescuer put them back uncounted.
        let burned = attempts.iter().filter(|(id, a)| **a as u32 > runs.get(id).copied().unwrap_or(0)).count();
        println!("    kill: {burned} jobs archived with more attempts than handler runs");
        ensure!(burned == 0, "{burned} jobs lost an attempt without a run (look-ahead claimed started?)");
    } else {
        println!(
            "    {JOBS} jobs, {PROCESSES} processes x {CONCURRENCY}: {total_runs} handler runs in {elapsed:?} \
             ({:.0} jobs/s)",
            JOBS as f64 / elapsed.as_secs_f64()
        );
        ensure!(twice.is_empty() && total_runs == JOBS, "{} jobs ran more than once", twice.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A handler that kills its process

/// Attempts of the job whose handler aborts its process.
const ABORT_MAX_ATTEMPTS: i32 = 2;
/// The zombie timeout of its queue: a held job expires after this long without a heartbeat.
const ABORT_ZOMBIE_TIMEOUT: Duration = Duration::from_secs(1);
/// The signal `std::process::abort()` ends a process with (6 on Linux), without a libc
/// dependency.
const SIGABRT: i32 = 6;

/// Issue 24, rule 9, and issue 36, hole 1: a poison job (`max_attempts` 2) whose handler
/// appends its id to a run file (one `write`) and then calls `std::process::abort()` at once,
/// and an innocent job enqueued after it, waiting in the same one-slot worker's look-ahead. The
/// queue's zombie timeout is 1 s, the parent calls `rescue` every 100 ms and starts a fresh
/// worker process whenever the previous one died, until the poison job is in the dead-letter
/// table and the innocent one archived (at most 60 s).
///
/// The bound: the poison job runs at most `max_attempts + 1` (3) times. Its first run is not
/// counted (the process dies before the deferred start, 20 ms into the run), so its hold
/// expires and the rescue puts it back with `expired_holds` 1; from then on a worker records
/// its start before its handler begins, so each later run counts an attempt, and after
/// `max_attempts` the rescue of the Processing zombie dead-letters it. The innocent job's holds
/// expire with it, but an expiry never dead-letters: it runs once, and is archived with
/// attempt 1 (on 8fb8e0f it was dead-lettered `zombie` with 0 runs). Asserted: poison
/// dead-lettered `zombie`, its runs (lines in the run file) at most that bound, its stored
/// attempt at most `max_attempts`; the innocent job archived after exactly one run; every
/// worker process but the last ended by SIGABRT.
async fn aborting_handler(b: Arc<PgBackend>) -> TestResult {
    use std::os::unix::process::ExitStatusExt;
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetZombieTimeout(Some(ABORT_ZOMBIE_TIMEOUT)))
        .await
        .map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetFetchedTimeout(Some(ABORT_ZOMBIE_TIMEOUT)))
        .await
        .map_err(err)?;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb);
    let id = client.enqueue(JobBuilder::new(&Count { n: 0 }).max_attempts(ABORT_MAX_ATTEMPTS)).await.map_err(err)?.id;
    let innocent =
        client.enqueue(JobBuilder::new(&Count { n: 1 }).max_attempts(ABORT_MAX_ATTEMPTS)).await.map_err(err)?.id;
    let dir = std::env::temp_dir().join(format!("chokaq_rt_{}", b.schema()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    let runs_file = dir.join("runs.txt");
    let extra = [(ABORT_ENV, "1".to_string())];

    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(60);
    let params = RescueParams { limit: 100, purge: Vec::new() };
    let (mut started, mut aborted) = (0u32, 0u32);
    let (mut rescued_held, mut rescued_dead, mut rescued_zombies) = (0u64, 0u64, 0u64);
    let mut child: Option<ChildProc> = None;
    let record = loop {
        let record = b.get_job(id).await.map_err(err)?.ok_or("the job is gone")?;
        let other = b.get_job(innocent).await.map_err(err)?.ok_or("the innocent job is gone")?;
        let other_final = matches!(other.location, JobLocation::Dead(_) | JobLocation::Archived);
        if matches!(record.location, JobLocation::Dead(_)) && other_final {
            break record;
        }
        ensure!(
            Instant::now() < deadline,
            "the job is not dead-lettered after 60 s: {:?}, attempt {}, {} worker processes started, {} runs",
            record.location,
            record.attempt,
            started,
            read_runs(&runs_file)?.len()
        );
        // A fresh worker process whenever the previous one died.
        if let Some(c) = &mut child {
            if let Some(status) = c.child.try_wait().map_err(err)? {
                ensure!(status.signal() == Some(SIGABRT), "a worker process ended with {status}, not SIGABRT");
                aborted += 1;
                child = None;
            }
        }
        if child.is_none() {
            child = Some(spawn_child_env(b.schema(), &runs_file, &extra).await?);
            started += 1;
        }
        let r = b.rescue(&params).await.map_err(err)?;
        rescued_held += r.fetched_released;
        rescued_dead += r.zombies_dead;
        rescued_zombies += r.zombies_retried;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let elapsed = t0.elapsed();
    // The last worker process: started after the last death, or dead itself.
    if let Some(mut c) = child.take() {
        drop(c.child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), c.child.wait())
            .await
            .map_err(|_| "the last worker process did not exit")?
            .map_err(err)?;
        if status.signal() == Some(SIGABRT) {
            aborted += 1;
        } else {
            ensure!(status.success(), "the last worker process exited with {status}");
        }
    }
    let all_runs = read_runs(&runs_file)?;
    let runs: Vec<_> = all_runs.iter().filter(|r| **r == id).collect();
    let innocent_runs = all_runs.iter().filter(|r| **r == innocent).count();
    let other = b.get_job(innocent).await.map_err(err)?.ok_or("the innocent job is gone")?;
    let bound = ABORT_MAX_ATTEMPTS + 1;
    println!(
        "    aborting handler: {} runs (bound max_attempts {ABORT_MAX_ATTEMPTS} + 1 = {bound}), {started} worker \
         processes started, {aborted} aborted; dead-lettered {:?} after {elapsed:.2?} with attempt {} (last error \
         {:?}); the innocent job: {:?}, attempt {}, {innocent_runs} runs; the rescue calls put {rescued_held} held \
         jobs back, dead-lettered {rescued_dead}, retried {rescued_zombies} zombies",
        runs.len(),
        record.location,
        record.attempt,
        record.last_error.as_deref().unwrap_or(""),
        other.location,
        other.attempt
    );
    ensure!(all_runs.iter().all(|r| *r == id || *r == innocent), "a run for another job id");
    ensure!(
        (other.location, other.attempt, innocent_runs) == (JobLocation::Archived, 1, 1),
        "the innocent job ended {:?} with attempt {} after {innocent_runs} runs, not archived after one run",
        other.location,
        other.attempt
    );
    ensure!(
        record.location == JobLocation::Dead(DeadReason::Zombie),
        "the job ended {:?}, not dead-lettered zombie",
        record.location
    );
    ensure!(runs.len() as i32 <= bound, "the job ran {} times: more than max_attempts + 1 = {bound}", runs.len());
    ensure!(!runs.is_empty(), "the job never ran");
    ensure!(
        record.attempt <= ABORT_MAX_ATTEMPTS,
        "the job's stored attempt is {}, over max_attempts {ABORT_MAX_ATTEMPTS}",
        record.attempt
    );
    ensure!(aborted as usize == runs.len(), "{aborted} worker processes aborted for {} poison runs", runs.len());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
