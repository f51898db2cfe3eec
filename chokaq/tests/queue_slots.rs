//! A queue's own slots inside one worker (issue 40, item 5): `WorkerBuilder::queue_concurrency`.
//!
//! A libtest-mimic harness: each scenario runs on the in-memory backend, on SQLite (a new file
//! in a temporary directory of this run), on PostgreSQL (a fresh schema `chokaq_t_<hex>`,
//! dropped afterwards) and, with feature `mysql`, on MariaDB / MySQL (a fresh database, dropped
//! afterwards; `CHOKAQ_TEST_MYSQL_URL`). A database that is unreachable has its cases ignored,
//! unless `CHOKAQ_TEST_REQUIRE` names it. Handlers are held on a gate the test opens; no sleeps
//! as synchronisation: every wait polls a condition with a deadline.
//!
//! `cargo test -p chokaq --features sqlite,postgres,mysql --test queue_slots`

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq::postgres::{PgBackend, PgConfig};
use chokaq::sqlite::{SqliteBackend, SqliteConfig};
use chokaq::{
    Backend, CancellationToken, Client, JobBuilder, JobContext, MaintenanceConfig, Worker, WorkerBuilder, WorkerReport,
};
use chokaq_core::memory::MemoryBackend;
use chokaq_core::testing::TestSupport;
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::sync::watch;

type TestResult = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Polls `cond` every 10 ms until it is true or `limit` passes.
async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> Result<bool, String>) -> TestResult {
    let deadline = Instant::now() + limit;
    loop {
        if cond()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the handlers saw, per queue: running now, the most at once, finished.
#[derive(Default)]
struct Seen {
    running: HashMap<String, usize>,
    max: HashMap<String, usize>,
    done: HashMap<String, usize>,
}

/// The handlers' shared record and the gate they wait on (closed until the test opens it).
#[derive(Clone)]
struct Probe {
    seen: Arc<Mutex<Seen>>,
    gate: watch::Sender<bool>,
}

impl Probe {
    fn new() -> Self {
        Probe { seen: Arc::default(), gate: watch::channel(false).0 }
    }

    fn get(&self, f: impl Fn(&Seen) -> &HashMap<String, usize>, q: &str) -> usize {
        f(&self.seen.lock().unwrap()).get(q).copied().unwrap_or(0)
    }

    fn running(&self, q: &str) -> usize {
        self.get(|s| &s.running, q)
    }

    fn max(&self, q: &str) -> usize {
        self.get(|s| &s.max, q)
    }

    fn done(&self, q: &str) -> usize {
        self.get(|s| &s.done, q)
    }

    /// Registers kind `<queue>.v1` for each queue: the handler counts itself running, waits for
    /// the gate when `held` names its queue, and counts itself done.
    fn register(&self, mut w: WorkerBuilder, queues: &[&str], held: &[&str]) -> WorkerBuilder {
        for q in queues {
            let (probe, queue, hold) = (self.clone(), q.to_string(), held.contains(q));
            w = w.register_raw(format!("{q}.v1"), move |_payload, _ctx: JobContext| {
                let (probe, queue) = (probe.clone(), queue.clone());
                async move {
                    {
                        let mut s = probe.seen.lock().unwrap();
                        let n = s.running.entry(queue.clone()).or_default();
                        *n += 1;
                        let n = *n;
                        let m = s.max.entry(queue.clone()).or_default();
                        *m = (*m).max(n);
                    }
                    if hold {
                        let mut rx = probe.gate.subscribe();
                        let _ = rx.wait_for(|open| *open).await;
                    }
                    let mut s = probe.seen.lock().unwrap();
                    *s.running.get_mut(&queue).expect("counted when it began") -= 1;
                    *s.done.entry(queue).or_default() += 1;
                    Ok(())
                }
            });
        }
        w
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }
}

async fn enqueue(b: &Arc<dyn Backend>, queue: &str, n: usize) -> TestResult {
    let jobs: Vec<JobBuilder> =
        (0..n).map(|i| JobBuilder::raw(queue, &format!("{queue}.v1"), serde_json::json!({ "n": i }))).collect();
    Client::new(b.clone()).enqueue_many(jobs).await.map_err(err)?;
    Ok(())
}

fn base(b: &Arc<dyn Backend>) -> WorkerBuilder {
    Worker::builder(b.clone())
        .poll_interval(Duration::from_millis(100))
        .maintenance(MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() })
}

/// Runs `w` while `body` runs; then, whatever `body` returned, opens the gate, waits until every
/// job enqueued is archived (60 s at most) and stops the worker, so that no worker outlives its
/// case (the case's store is dropped next). Returns `body`'s result and the worker's report.
async fn with_worker(
    b: &Arc<dyn Backend>,
    probe: &Probe,
    w: Worker,
    body: impl Future<Output = TestResult>,
) -> Result<(TestResult, WorkerReport), String> {
    let token = CancellationToken::new();
    let run = tokio::spawn(w.run(token.clone()));
    let out = body.await;
    probe.open();
    let deadline = Instant::now() + Duration::from_secs(60);
    let drained = loop {
        let st = b.stats().await.map_err(err)?;
        if st.pending + st.fetched + st.processing == 0 {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(format!("timed out waiting for every job to be archived: {st:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    token.cancel();
    let report = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .map_err(|_| "the worker did not stop within 30 s".to_string())?
        .map_err(err)?
        .map_err(err)?;
    drained?;
    Ok((out, report))
}

const FAST: usize = 40;
const SLOW: usize = 8;

/// The finding of issue 40: a fast queue and a slow one on one worker. Every slow handler
/// blocks (on the gate) until the end; the fast queue's 40 jobs must all finish meanwhile.
/// The slow jobs are enqueued first and the fast ones only once `slow_slots` slow handlers
/// run, so the slow queue has taken every slot it can get.
/// `window`: how long the fast jobs get.
async fn fast_beside_slow(
    b: Arc<dyn Backend>,
    configure: fn(WorkerBuilder) -> WorkerBuilder,
    slow_slots: usize,
    window: Duration,
) -> TestResult {
    let probe = Probe::new();
    let w = probe.register(configure(base(&b).queues(["fast", "slow"])), &["fast", "slow"], &["slow"]);
    let w = w.build().map_err(err)?;
    let body = async {
        enqueue(&b, "slow", SLOW).await?;
        wait_for(&format!("{slow_slots} slow handlers running"), Duration::from_secs(20), || {
            Ok(probe.running("slow") == slow_slots)
        })
        .await?;
        enqueue(&b, "fast", FAST).await?;
        let waited = wait_for(
            &format!("all {FAST} fast jobs to finish while the slow queue's handlers are blocked"),
            window,
            || Ok(probe.done("fast") == FAST),
        )
        .await;
        // Read before the gate opens: the slow queue runs exactly its slots, all still blocked.
        let (slow_done, slow_max) = (probe.done("slow"), probe.max("slow"));
        let state = format!(
            "fast: {} done, {} running; slow: {} running (most at once {slow_max}), {slow_done} done",
            probe.done("fast"),
            probe.running("fast"),
            probe.running("slow"),
        );
        waited.map_err(|e| format!("{e} ({state})"))?;
        ensure!(slow_done == 0 && slow_max == slow_slots, "the slow queue: {state}");
        Ok(())
    };
    let (out, report) = with_worker(&b, &probe, w, body).await?;
    out?;
    let total = (FAST + SLOW) as u64;
    ensure!(archived(&b).await? == total, "archived {} of {total}", archived(&b).await?);
    ensure!(report.completed == total, "completed {} of {total}", report.completed);
    ensure!(
        probe.max("slow") == slow_slots,
        "the slow queue ran {} at once (its slots: {slow_slots})",
        probe.max("slow")
    );
    Ok(())
}

async fn archived(b: &Arc<dyn Backend>) -> Result<u64, String> {
    Ok(b.stats().await.map_err(err)?.archived)
}

/// River's `Queues: {fast: {MaxWorkers: 2}, slow: {MaxWorkers: 2}}`: each queue 2 slots of its
/// own, the worker's concurrency their sum.
fn own_slots(w: WorkerBuilder) -> WorkerBuilder {
    w.queue_concurrency("fast", 2).queue_concurrency("slow", 2)
}

/// The slow queue 2 slots of its own out of the worker's 4; the fast queue shares the rest.
fn slow_carved_out(w: WorkerBuilder) -> WorkerBuilder {
    w.concurrency(4).queue_concurrency("slow", 2)
}

/// Before issue 40, item 5 (and still without the setting): the fast and slow queues share
/// the worker's 4 slots.
fn shared(w: WorkerBuilder) -> WorkerBuilder {
    w.concurrency(4)
}

const WINDOW: Duration = Duration::from_secs(20);

/// The scenario's teeth: with every slot shared, the slow queue takes all 4 and no fast job
/// runs in the window (this is how the scenario failed before the setting existed).
async fn shared_slots_starve(b: Arc<dyn Backend>) -> TestResult {
    match fast_beside_slow(b, shared, 4, Duration::from_secs(3)).await {
        Err(e) if e.contains("fast: 0 done, 0 running; slow: 4 running") => Ok(()),
        Err(e) => Err(format!("failed otherwise than by starving the fast queue: {e}")),
        Ok(()) => Err("the fast jobs finished although the slow queue held every shared slot".to_string()),
    }
}

/// No queue runs more handlers at once than its own slots, and the queues without a count share
/// the rest: queues `a` (3 of its own), `b` (2) and `c` (the other 3 of 8), 30 jobs each, every
/// handler held on the gate until each queue runs exactly its slots; then the gate opens and
/// the backlog drains. The most each queue ran at once is exactly its slots.
async fn no_queue_exceeds_its_slots(b: Arc<dyn Backend>) -> TestResult {
    const EACH: usize = 30;
    let slots = [("a", 3), ("b", 2), ("c", 3)];
    let probe = Probe::new();
    let w = base(&b).queues(["a", "b", "c"]).concurrency(8).queue_concurrency("a", 3).queue_concurrency("b", 2);
    let w = probe.register(w, &["a", "b", "c"], &["a", "b", "c"]).build().map_err(err)?;
    let body = async {
        for (q, _) in slots {
            enqueue(&b, q, EACH).await?;
        }
        wait_for("every queue running its slots", Duration::from_secs(20), || {
            Ok(slots.iter().all(|(q, n)| probe.running(q) == *n))
        })
        .await
    };
    let (out, report) = with_worker(&b, &probe, w, body).await?;
    out?;
    let total = (3 * EACH) as u64;
    ensure!(archived(&b).await? == total, "archived {} of {total}", archived(&b).await?);
    ensure!(report.completed == total, "completed {} of {total}", report.completed);
    let most: Vec<(&str, usize)> = slots.iter().map(|(q, _)| (*q, probe.max(q))).collect();
    let done: Vec<(&str, usize)> = slots.iter().map(|(q, _)| (*q, probe.done(q))).collect();
    ensure!(most == slots, "the most each queue ran at once: {most:?}, its slots: {slots:?}");
    ensure!(done.iter().all(|(_, n)| *n == EACH), "done per queue: {done:?}");
    Ok(())
}

type Scenario = fn(Arc<dyn Backend>) -> Pin<Box<dyn Future<Output = TestResult> + Send>>;

fn scenarios() -> Vec<(&'static str, Scenario)> {
    vec![
        ("fast_queue_runs_beside_a_blocked_slow_queue", |b| Box::pin(fast_beside_slow(b, own_slots, 2, WINDOW))),
        ("fast_queue_shares_what_the_slow_queue_leaves", |b| Box::pin(fast_beside_slow(b, slow_carved_out, 2, WINDOW))),
        ("shared_slots_starve_the_fast_queue", |b| Box::pin(shared_slots_starve(b))),
        ("no_queue_exceeds_its_slots", |b| Box::pin(no_queue_exceeds_its_slots(b))),
    ]
}

// ---- backends ----

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn pg_url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn required(name: &str) -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").is_ok_and(|v| v.split(',').any(|s| s.trim() == name))
}

fn sqlite_dir() -> PathBuf {
    std::env::temp_dir().join(format!("chokaq_queue_slots_{}", std::process::id()))
}

async fn on_memory(f: Scenario) -> TestResult {
    f(Arc::new(MemoryBackend::new())).await
}

async fn on_sqlite(f: Scenario) -> TestResult {
    std::fs::create_dir_all(sqlite_dir()).map_err(err)?;
    let file = sqlite_dir().join(format!("{:016x}.db", rand::random::<u64>()));
    let b = SqliteBackend::connect(SqliteConfig::new(file.to_string_lossy())).await.map_err(err)?;
    b.migrate().await.map_err(err)?;
    let out = f(Arc::new(b)).await;
    let _ = std::fs::remove_file(&file);
    out
}

async fn on_postgres(f: Scenario) -> TestResult {
    let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
    let b = Arc::new(PgBackend::connect(PgConfig::new(pg_url()).schema(schema).max_connections(8)).await.map_err(err)?);
    b.migrate().await.map_err(err)?;
    let out = f(b.clone()).await;
    if let Err(e) = b.drop_schema().await {
        eprintln!("could not drop schema {}: {e}", b.schema());
    }
    out
}

#[cfg(feature = "mysql")]
fn mysql_url() -> String {
    std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

#[cfg(feature = "mysql")]
async fn on_mysql(f: Scenario) -> TestResult {
    use chokaq_mysql::{MysqlBackend, MysqlConfig};
    // A name of this test's own making (validated by the backend at connect): the one
    // identifier of the DROP below.
    let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
    let b =
        MysqlBackend::connect(MysqlConfig::new(mysql_url()).schema(&schema).max_connections(8)).await.map_err(err)?;
    b.migrate().await.map_err(err)?;
    let out = f(Arc::new(b)).await;
    let dropped = async {
        let pool = sqlx::MySqlPool::connect(&mysql_url()).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS `{schema}`")).execute(&pool).await.map(drop)
    };
    if let Err(e) = dropped.await {
        eprintln!("could not drop database {schema}: {e}");
    }
    out
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let pg = runtime().block_on(async { PgBackend::connect(PgConfig::new(pg_url()).schema("chokaq_probe")).await });
    let pg_ok = pg.is_ok() || required("postgres");
    let mut trials = Vec::new();
    for (name, f) in scenarios() {
        trials.push(Trial::test(format!("{name}/memory"), move || {
            runtime().block_on(on_memory(f)).map_err(Failed::from)
        }));
        trials.push(Trial::test(format!("{name}/sqlite"), move || {
            runtime().block_on(on_sqlite(f)).map_err(Failed::from)
        }));
        trials.push(
            Trial::test(format!("{name}/postgres"), move || runtime().block_on(on_postgres(f)).map_err(Failed::from))
                .with_ignored_flag(!pg_ok),
        );
    }
    if !pg_ok {
        eprintln!("PostgreSQL unreachable at the configured URL: its cases are ignored");
    }
    #[cfg(feature = "mysql")]
    {
        let my = runtime().block_on(async {
            chokaq_mysql::MysqlBackend::connect(chokaq_mysql::MysqlConfig::new(mysql_url())).await.map(drop)
        });
        let my_ok = my.is_ok() || required("mysql");
        if !my_ok {
            eprintln!("MariaDB / MySQL unreachable at the configured URL: its cases are ignored");
        }
        for (name, f) in scenarios() {
            trials.push(
                Trial::test(format!("{name}/mysql"), move || runtime().block_on(on_mysql(f)).map_err(Failed::from))
                    .with_ignored_flag(!my_ok),
            );
        }
    }
    let code = libtest_mimic::run(&args, trials).exit_code();
    let _ = std::fs::remove_dir_all(sqlite_dir());
    code
}
