//! Runtime scenarios shared by the in-memory and the PostgreSQL test files. Each one takes a
//! fresh backend (its own store or schema) and asserts exact outcomes. No sleeps as
//! synchronisation: every wait polls a condition with a deadline.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq::core::{JobLocation, JobStatus, Timestamp};
use chokaq::{
    Backend, CancellationToken, Client, DeadReason, Job, JobBuilder, JobContext, JobError, JobId, MaintenanceConfig,
    RetryPolicy, Worker, WorkerReport,
};
use chokaq_core::testing::TestSupport;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

pub type TestResult = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

pub fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Polls `cond` every 10 ms until it is true or `limit` passes.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut cond: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn spawn_worker(w: Worker) -> (CancellationToken, JoinHandle<chokaq::Result<WorkerReport>>) {
    let token = CancellationToken::new();
    let h = tokio::spawn(w.run(token.clone()));
    (token, h)
}

pub async fn stop(
    token: CancellationToken,
    h: JoinHandle<chokaq::Result<WorkerReport>>,
) -> Result<WorkerReport, String> {
    token.cancel();
    tokio::time::timeout(Duration::from_secs(30), h)
        .await
        .map_err(|_| "worker did not stop within 30 s".to_string())?
        .map_err(err)?
        .map_err(err)
}

/// Maintenance off (the tests that need rescue turn it on themselves).
pub fn no_maintenance() -> MaintenanceConfig {
    MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() }
}

async fn location<B: TestSupport>(b: &B, id: JobId) -> Result<Option<JobLocation>, String> {
    Ok(b.get_job(id).await.map_err(err)?.map(|r| r.location))
}

/// Keeps the deliberate panic of `poison_and_panic` out of the test output (other panics are
/// reported as usual).
fn quiet_intended_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info.payload().downcast_ref::<&str>().copied().unwrap_or_default();
            if !msg.contains("panic on purpose") {
                previous(info);
            }
        }));
    });
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Count {
    pub n: u32,
}

impl Job for Count {
    const KIND: &'static str = "test.count.v1";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flaky {
    pub mode: String,
}

impl Job for Flaky {
    const KIND: &'static str = "test.flaky.v1";
    fn max_attempts() -> i32 {
        3
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Block {
    pub n: u32,
}

impl Job for Block {
    const KIND: &'static str = "test.block.v1";
}

/// Typed jobs go through, each handler runs once, each job is archived once.
pub async fn typed_roundtrip<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let runs: Arc<Mutex<HashMap<JobId, u32>>> = Arc::default();
    let r2 = runs.clone();
    let w = Worker::builder(dynb)
        .concurrency(4)
        .maintenance(no_maintenance())
        .register(move |job: Count, ctx: JobContext| {
            let runs = r2.clone();
            async move {
                assert_eq!(ctx.attempt(), 1);
                assert!(job.n < 1000);
                *runs.lock().unwrap().entry(ctx.id()).or_default() += 1;
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Count> = (0..50).map(|n| Count { n }).collect();
    let ids: Vec<JobId> = client.enqueue_many(&jobs).await.map_err(err)?.into_iter().map(|e| e.id).collect();
    let one = client.enqueue(JobBuilder::new(&Count { n: 999 }).priority(5).tag("single")).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    wait_for("51 archived", Duration::from_secs(20), || async { Ok(b.stats().await.map_err(err)?.archived == 51) })
        .await?;
    let report = stop(token, h).await?;
    ensure!(report.completed == 51, "completed {} != 51", report.completed);
    ensure!(report.claimed == 51, "claimed {} != 51", report.claimed);
    let runs = runs.lock().unwrap().clone();
    ensure!(runs.len() == 51 && runs.values().all(|&n| n == 1), "handler runs: {runs:?}");
    let mut all = ids;
    all.push(one.id);
    for (id, p) in b.presence_many(&all).await.map_err(err)? {
        ensure!(p.archive == 1 && p.hot == 0 && p.dead == 0, "job {id}: {p:?}");
    }
    Ok(())
}

/// A retryable failure is retried with the policy's back-off (scheduled times checked), the
/// last one dead-letters with its error; a fatal error dead-letters at once.
pub async fn retry_and_fatal<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let policy = RetryPolicy::fixed_exponential(Duration::from_millis(300), 2.0, Duration::from_secs(10));
    // (attempt, db time when the handler started)
    let starts: Arc<Mutex<Vec<(i32, Timestamp)>>> = Arc::default();
    let s2 = starts.clone();
    let b2 = b.clone();
    let w = Worker::builder(dynb)
        .concurrency(2)
        .retry_policy(policy)
        .poll_interval(Duration::from_millis(50))
        .min_poll_interval(Duration::from_millis(10))
        .maintenance(no_maintenance())
        .register(move |job: Flaky, ctx: JobContext| {
            let starts = s2.clone();
            let b = b2.clone();
            async move {
                if job.mode == "fatal" {
                    return Err(JobError::Fatal("bad input: cannot ever work".into()));
                }
                let now = b.db_now().await?;
                starts.lock().unwrap().push((ctx.attempt(), now));
                Err(JobError::Retry(format!("boom on attempt {}", ctx.attempt())))
            }
        })
        .build()
        .map_err(err)?;
    let retry = client.enqueue(&Flaky { mode: "retry".into() }).await.map_err(err)?.id;
    let fatal = client.enqueue(&Flaky { mode: "fatal".into() }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);

    // Observe each Pending-between-attempts state and check its schedule.
    for attempt in 1..=2 {
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = loop {
            if let Some(r) = b.get_job(retry).await.map_err(err)? {
                if r.location == JobLocation::Hot(JobStatus::Pending) && r.attempt == attempt {
                    break r;
                }
            }
            ensure!(Instant::now() < deadline, "timed out waiting for the retry after attempt {attempt}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let expect = policy.nominal_delay(attempt);
        let scheduled = r.scheduled_at.ok_or("no scheduled_at on a retried job")?;
        let gap = (scheduled - r.updated_at).to_std().map_err(err)?;
        let diff = gap.abs_diff(expect);
        ensure!(
            diff <= Duration::from_millis(5),
            "attempt {attempt}: retry scheduled {gap:?} after the failure, policy says {expect:?}"
        );
        let want_err = format!("boom on attempt {attempt}");
        ensure!(r.last_error.as_deref() == Some(want_err.as_str()), "last_error {:?}", r.last_error);
        println!("    retry after attempt {attempt}: scheduled +{gap:?} (policy {expect:?})");
    }
    wait_for("retry job dead-lettered", Duration::from_secs(10), || async {
        Ok(location(&*b, retry).await? == Some(JobLocation::Dead(DeadReason::Failed)))
    })
    .await?;
    let r = b.get_job(retry).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 3, "attempts {}", r.attempt);
    ensure!(r.last_error.as_deref() == Some("boom on attempt 3"), "last error {:?}", r.last_error);
    // No attempt started before its schedule: the gaps between starts cover the back-off.
    let starts = starts.lock().unwrap().clone();
    ensure!(starts.len() == 3, "starts {starts:?}");
    for i in 1..3 {
        let gap = (starts[i].1 - starts[i - 1].1).to_std().map_err(err)?;
        ensure!(gap >= policy.nominal_delay(i as i32), "attempt {} started {gap:?} after the previous one", i + 1);
    }

    wait_for("fatal job dead-lettered", Duration::from_secs(10), || async {
        Ok(location(&*b, fatal).await? == Some(JobLocation::Dead(DeadReason::Failed)))
    })
    .await?;
    let f = b.get_job(fatal).await.map_err(err)?.unwrap();
    ensure!(f.attempt == 1, "fatal job ran {} attempts", f.attempt);
    ensure!(f.last_error.as_deref() == Some("bad input: cannot ever work"), "fatal error {:?}", f.last_error);
    let report = stop(token, h).await?;
    ensure!(report.failed == 4 && report.retried == 2 && report.dead_lettered == 2, "{report:?}");
    Ok(())
}

/// Unknown kinds and undecodable payloads are dead-lettered with a clear reason; a panic is
/// a retryable failure; the worker keeps going.
pub async fn poison_and_panic<B: TestSupport>(b: Arc<B>) -> TestResult {
    quiet_intended_panics();
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let w = Worker::builder(dynb)
        .concurrency(2)
        .retry_policy(RetryPolicy::fixed_exponential(Duration::from_millis(10), 1.0, Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(|job: Count, ctx: JobContext| async move {
            if job.n == 7 && ctx.attempt() == 1 {
                panic!("panic on purpose in attempt 1");
            }
            Ok(())
        })
        .build()
        .map_err(err)?;
    let unknown = client
        .enqueue(JobBuilder::raw("default", "nobody.handles.this.v1", serde_json::json!({})))
        .await
        .map_err(err)?
        .id;
    let bad = client
        .enqueue(JobBuilder::raw("default", Count::KIND, serde_json::json!({"n": "not a number"})))
        .await
        .map_err(err)?
        .id;
    let panicky = client.enqueue(&Count { n: 7 }).await.map_err(err)?.id;
    let fine = client.enqueue(&Count { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    wait_for("all four finished", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.archived == 2 && s.dead == 2)
    })
    .await?;
    let report = stop(token, h).await?;
    let u = b.get_job(unknown).await.map_err(err)?.unwrap();
    ensure!(u.location == JobLocation::Dead(DeadReason::Failed), "unknown kind: {:?}", u.location);
    let ue = u.last_error.unwrap_or_default();
    ensure!(ue.starts_with("unknown job kind"), "unknown kind error {ue:?}");
    let bd = b.get_job(bad).await.map_err(err)?.unwrap();
    ensure!(bd.location == JobLocation::Dead(DeadReason::Failed), "bad payload: {:?}", bd.location);
    let be = bd.last_error.unwrap_or_default();
    ensure!(be.starts_with("payload does not deserialize"), "bad payload error {be:?}");
    let p = b.get_job(panicky).await.map_err(err)?.unwrap();
    ensure!(
        p.location == JobLocation::Archived && p.attempt == 2,
        "panicky job: {:?} attempt {}",
        p.location,
        p.attempt
    );
    ensure!(location(&*b, fine).await? == Some(JobLocation::Archived), "fine job not archived");
    ensure!(report.panicked == 1 && report.completed == 2 && report.dead_lettered == 2, "{report:?}");
    println!("    unknown kind -> {ue:?}; bad payload -> {be:?}");
    Ok(())
}

/// A handler over its timeout is cancelled and retried; the retry then succeeds.
pub async fn timeout_retries<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let w = Worker::builder(dynb)
        .concurrency(1)
        .job_timeout(Duration::from_millis(300))
        .cancel_wait(Duration::from_millis(100))
        .retry_policy(RetryPolicy::fixed_exponential(Duration::from_millis(10), 1.0, Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(|_: Block, ctx: JobContext| async move {
            if ctx.attempt() == 1 {
                // Ignores its token: the runtime must drop it.
                futures::future::pending::<()>().await;
            }
            Ok(())
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    wait_for("archived after a timeout", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let report = stop(token, h).await?;
    let r = b.get_job(id).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 2, "attempts {}", r.attempt);
    ensure!(report.timed_out == 1 && report.completed == 1, "{report:?}");
    Ok(())
}

/// An operator cancel from another backend handle fires the running handler's token within
/// two heartbeat intervals; the job ends dead-lettered as cancelled.
pub async fn operator_cancel<B: TestSupport>(b: Arc<B>, operator: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let hb = Duration::from_millis(300);
    let started = Arc::new(tokio::sync::Notify::new());
    let fired: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (s2, f2) = (started.clone(), fired.clone());
    let w = Worker::builder(dynb)
        .concurrency(2)
        .heartbeat_interval(hb)
        .maintenance(no_maintenance())
        .register(move |_: Block, ctx: JobContext| {
            let (started, fired) = (s2.clone(), f2.clone());
            async move {
                started.notify_one();
                ctx.cancelled().await;
                *fired.lock().unwrap() = Some(Instant::now());
                // Returning success must not matter: the operator's cancel wins.
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await.map_err(|_| "handler never started")?;
    // The handler runs as soon as its slot takes the job; its start (Processing, the attempt
    // counted) lands a round trip later. A cancel before that finds the job Fetched and
    // cancels it at once (docs/runtime.md): this case is about a Processing job.
    wait_for("the job started (Processing)", Duration::from_secs(5), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Hot(JobStatus::Processing)))
    })
    .await?;
    let asked = Instant::now();
    let out = operator.cancel(id).await.map_err(err)?;
    ensure!(out == chokaq::core::CancelOutcome::Requested, "cancel outcome {out:?}");
    wait_for("token fired", 2 * hb + Duration::from_millis(500), || async { Ok(fired.lock().unwrap().is_some()) })
        .await?;
    let took = fired.lock().unwrap().unwrap() - asked;
    ensure!(took <= 2 * hb, "token fired {took:?} after the cancel, more than two heartbeat intervals ({:?})", 2 * hb);
    wait_for("dead-lettered as cancelled", Duration::from_secs(5), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Dead(DeadReason::Cancelled)))
    })
    .await?;
    let report = stop(token, h).await?;
    ensure!(report.cancelled == 1 && report.completed == 0, "{report:?}");
    println!("    operator cancel: token fired {took:?} after the request (heartbeat {hb:?})");
    Ok(())
}

/// Shutdown with a full prefetch buffer: buffered jobs are Pending again at once; a handler
/// that ignores its token is handed back after the grace period.
pub async fn shutdown_releases_prefetch<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let grace = Duration::from_millis(700);
    let w = Worker::builder(dynb)
        .concurrency(1)
        .prefetch(4)
        .shutdown_grace(grace)
        .cancel_wait(Duration::from_millis(200))
        .maintenance(no_maintenance())
        .register(|_: Block, _ctx: JobContext| async move {
            // Ignores cancellation entirely.
            futures::future::pending::<()>().await;
            Ok(())
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Block> = (0..5).map(|n| Block { n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    wait_for("1 processing + 4 fetched", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.processing == 1 && s.fetched == 4)
    })
    .await?;
    let t0 = Instant::now();
    token.cancel();
    wait_for("4 pending again", Duration::from_secs(1), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.pending == 4 && s.fetched == 0)
    })
    .await?;
    let released_after = t0.elapsed();
    let report = tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .map_err(|_| "worker did not stop")?
        .map_err(err)?
        .map_err(err)?;
    let stopped_after = t0.elapsed();
    ensure!(stopped_after >= grace, "stopped after {stopped_after:?}, before the grace period");
    let s = b.stats().await.map_err(err)?;
    ensure!(s.pending == 5 && s.processing == 0 && s.fetched == 0, "after shutdown: {s:?}");
    let page = b.list_jobs(&chokaq::core::ListJobsParams::new(chokaq::core::JobTable::Hot)).await.map_err(err)?;
    let handed: Vec<_> = page.jobs.iter().filter(|j| j.last_error.as_deref() == Some(chokaq::SHUTDOWN_ERROR)).collect();
    ensure!(handed.len() == 1 && handed[0].attempt == 1, "handed back: {handed:?}");
    ensure!(report.released == 4 && report.handed_back == 1, "{report:?}");
    println!(
        "    prefetched jobs pending again {released_after:?} after shutdown; worker stopped after {stopped_after:?}"
    );
    Ok(())
}

/// Prefetched (Fetched, not started) jobs of a queue that gets paused are released by their
/// worker, not run; the running job finishes.
pub async fn pause_releases_prefetch<B: TestSupport>(b: Arc<B>) -> TestResult {
    use chokaq::BackendExt;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let go = Arc::new(tokio::sync::Notify::new());
    let ran: Arc<Mutex<Vec<u32>>> = Arc::default();
    let (g2, r2) = (go.clone(), ran.clone());
    let hb = Duration::from_millis(200);
    let w = Worker::builder(dynb)
        .concurrency(1)
        .prefetch(3)
        .heartbeat_interval(hb)
        .maintenance(no_maintenance())
        .register(move |job: Block, _ctx: JobContext| {
            let (go, ran) = (g2.clone(), r2.clone());
            async move {
                ran.lock().unwrap().push(job.n);
                go.notified().await;
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Block> = (0..4).map(|n| Block { n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    wait_for("1 processing + 3 fetched", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.processing == 1 && s.fetched == 3)
    })
    .await?;
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.pause(&queue).await.map_err(err)?;
    let t0 = Instant::now();
    wait_for("3 pending again", 3 * hb + Duration::from_secs(1), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.pending == 3 && s.fetched == 0)
    })
    .await?;
    let took = t0.elapsed();
    go.notify_one();
    wait_for("running job archived", Duration::from_secs(5), || async {
        Ok(b.stats().await.map_err(err)?.archived == 1)
    })
    .await?;
    let report = stop(token, h).await?;
    ensure!(ran.lock().unwrap().len() == 1, "handlers ran: {:?}", ran.lock().unwrap());
    ensure!(report.released == 3 && report.completed == 1, "{report:?}");
    println!("    paused queue: prefetched jobs released {took:?} after the pause");
    Ok(())
}

/// Pausing a queue stops claims only: the look-ahead jobs a worker already holds (reserved,
/// Fetched, started when a slot takes them) keep their leases and run to completion, once
/// each with attempt 1; nothing else is claimed until the queue is resumed
/// (`docs/contract.md`, "Operations and guards", pause).
pub async fn pause_keeps_lookahead_running<B: TestSupport>(b: Arc<B>) -> TestResult {
    use chokaq::BackendExt;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let ran: Arc<Mutex<Vec<u32>>> = Arc::default();
    let (g2, r2) = (gate.clone(), ran.clone());
    let hb = Duration::from_millis(100);
    let w = Worker::builder(dynb)
        .concurrency(1)
        .prefetch(0)
        .lookahead(3)
        // The held jobs wait behind a blocked one on purpose: not released for waiting.
        .lookahead_wait(Duration::from_secs(3600))
        .heartbeat_interval(hb)
        .maintenance(no_maintenance())
        .register(move |job: Block, _ctx: JobContext| {
            let (gate, ran) = (g2.clone(), r2.clone());
            async move {
                ran.lock().unwrap().push(job.n);
                gate.acquire().await.map_err(|e| JobError::Fatal(e.to_string()))?.forget();
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Block> = (0..8).map(|n| Block { n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    // One running, at least one held in the look-ahead buffer.
    wait_for("a running job and look-ahead jobs", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.processing + s.fetched >= 2 && ran.lock().unwrap().len() == 1)
    })
    .await?;
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.pause(&queue).await.map_err(err)?;
    let s = b.stats().await.map_err(err)?;
    let held = s.processing + s.fetched;
    // Over three heartbeat intervals nothing goes back to Pending and nothing new is claimed.
    let window = Instant::now() + 3 * hb;
    while Instant::now() < window {
        let s = b.stats().await.map_err(err)?;
        ensure!(s.processing + s.fetched == held && s.pending == 8 - held, "after the pause: {s:?} (held {held})");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gate.add_permits(100);
    wait_for("the held jobs archived", Duration::from_secs(10), || async {
        Ok(b.stats().await.map_err(err)?.archived == held)
    })
    .await?;
    let s = b.stats().await.map_err(err)?;
    ensure!(s.pending == 8 - held && s.processing == 0, "while paused, after the held jobs: {s:?}");
    let mut f = chokaq::core::ListJobsParams::new(chokaq::core::JobTable::Archive);
    f.queue = Some(queue.clone());
    for r in b.list_jobs(&f).await.map_err(err)?.jobs {
        ensure!(r.attempt == 1, "job {} archived with attempt {}", r.id, r.attempt);
    }
    ensure!(ran.lock().unwrap().len() as u64 == held, "handler runs while paused: {:?}", ran.lock().unwrap());
    b.resume(&queue).await.map_err(err)?;
    wait_for("every job archived after the resume", Duration::from_secs(10), || async {
        Ok(b.stats().await.map_err(err)?.archived == 8)
    })
    .await?;
    let report = stop(token, h).await?;
    ensure!(ran.lock().unwrap().len() == 8, "handler runs: {:?}", ran.lock().unwrap());
    ensure!(report.released == 0 && report.completed == 8, "{report:?}");
    println!("    paused queue: {held} look-ahead jobs ran to completion while paused");
    Ok(())
}

/// A job whose lease is lost while it runs (rescued as a zombie behind its worker's back) has
/// its token fired and its outcome discarded; the job then runs again and completes once.
pub async fn lease_lost_discards_outcome<B: TestSupport>(b: Arc<B>) -> TestResult {
    use chokaq::core::RescueParams;
    use chokaq_core::testing::JobPatch;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let fired: Arc<Mutex<Vec<i32>>> = Arc::default();
    let f2 = fired.clone();
    let started = Arc::new(tokio::sync::Notify::new());
    let s2 = started.clone();
    let w = Worker::builder(dynb)
        .concurrency(1)
        .heartbeat_interval(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(move |_: Block, ctx: JobContext| {
            let (fired, started) = (f2.clone(), s2.clone());
            async move {
                if ctx.attempt() == 1 {
                    started.notify_one();
                    ctx.cancelled().await;
                    fired.lock().unwrap().push(ctx.attempt());
                    // This success must be discarded: the lease is gone.
                    return Ok(());
                }
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await.map_err(|_| "handler never started")?;
    // The job is held until its deferred start is written (20 ms into the run): wait for it
    // to be Processing, its attempt counted.
    wait_for("the run's start recorded", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Hot(chokaq::core::JobStatus::Processing)))
    })
    .await?;
    // Make it look like a zombie and rescue it (retry until the rescue lands between two
    // heartbeats).
    wait_for("zombie rescued", Duration::from_secs(10), || async {
        let now = b.db_now().await.map_err(err)?;
        let old = now - chrono::Duration::hours(1);
        let patch = JobPatch { heartbeat_at: Some(Some(old)), ..JobPatch::default() };
        if !b.force(id, &patch).await.map_err(err)? {
            return Ok(false);
        }
        // An hour-old heartbeat is past the default zombie timeout (300 s).
        let params = RescueParams { limit: 10, ..RescueParams::default() };
        Ok(b.rescue(&params).await.map_err(err)?.zombies_retried == 1)
    })
    .await?;
    wait_for("archived after the second attempt", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let report = stop(token, h).await?;
    let r = b.get_job(id).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 2, "attempt {}", r.attempt);
    ensure!(*fired.lock().unwrap() == vec![1], "token fired for attempts {:?}", fired.lock().unwrap());
    ensure!(report.lease_lost == 1 && report.completed == 1 && report.started == 2, "{report:?}");
    Ok(())
}

/// A snooze puts the job back without counting the attempt.
pub async fn snooze_does_not_count<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let calls = Arc::new(Mutex::new(0u32));
    let c2 = calls.clone();
    let w = Worker::builder(dynb)
        .concurrency(1)
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(move |_: Block, _ctx: JobContext| {
            let calls = c2.clone();
            async move {
                let n = {
                    let mut c = calls.lock().unwrap();
                    *c += 1;
                    *c
                };
                if n == 1 {
                    return Err(JobError::Snooze(Duration::from_millis(100)));
                }
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    wait_for("archived", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let report = stop(token, h).await?;
    let r = b.get_job(id).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 1, "attempt {} (a snooze must not count)", r.attempt);
    ensure!(*calls.lock().unwrap() == 2, "handler calls {}", calls.lock().unwrap());
    ensure!(report.snoozed == 1 && report.completed == 1 && report.failed == 0, "{report:?}");
    Ok(())
}

/// With wake-ups (LISTEN/NOTIFY), an idle worker whose next poll is far away still picks up
/// a new job at once.
pub async fn wakeup_beats_polling<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let poll = Duration::from_secs(60);
    let w = Worker::builder(dynb)
        .concurrency(2)
        .poll_interval(poll)
        .min_poll_interval(poll)
        .maintenance(no_maintenance())
        .register(|_: Block, _ctx: JobContext| async move { Ok(()) })
        .build()
        .map_err(err)?;
    let token = CancellationToken::new();
    let (stats, fut) = w.run_with_handle(token.clone());
    let h = tokio::spawn(fut);
    // The first (empty) claim has happened; the next poll is a minute away.
    wait_for("first claim", Duration::from_secs(10), || async { Ok(stats.report().claim_calls >= 1) }).await?;
    // The worker subscribed before its first claim; a missed notification would leave the
    // job waiting for the next poll, a minute away, and fail the test.
    let t0 = Instant::now();
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    wait_for("archived long before the next poll", Duration::from_secs(5), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let took = t0.elapsed();
    let report = stop(token, h).await?;
    ensure!(report.completed == 1, "{report:?}");
    println!("    woken by NOTIFY: job archived {took:?} after enqueue (poll interval {poll:?})");
    Ok(())
}

/// Dropping the worker's future (instead of cancelling its token) does not leak: running
/// handlers are cancelled and their jobs handed back.
pub async fn dropped_worker_hands_back<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let started = Arc::new(tokio::sync::Notify::new());
    let cancelled = Arc::new(tokio::sync::Notify::new());
    let (s2, c2) = (started.clone(), cancelled.clone());
    let w = Worker::builder(dynb)
        .concurrency(1)
        .maintenance(no_maintenance())
        .register(move |_: Block, ctx: JobContext| {
            let (started, cancelled) = (s2.clone(), c2.clone());
            async move {
                started.notify_one();
                ctx.cancelled().await;
                cancelled.notify_one();
                Err(JobError::Retry("stopped".into()))
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (_token, h) = spawn_worker(w);
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await.map_err(|_| "handler never started")?;
    h.abort();
    let _ = h.await;
    tokio::time::timeout(Duration::from_secs(5), cancelled.notified()).await.map_err(|_| "token never fired")?;
    wait_for("handed back", Duration::from_secs(5), || async {
        let r = b.get_job(id).await.map_err(err)?.ok_or("job vanished")?;
        Ok(r.location == JobLocation::Hot(JobStatus::Pending)
            && r.last_error.as_deref() == Some(chokaq::SHUTDOWN_ERROR))
    })
    .await
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tenant {
    pub tenant: String,
    pub n: u32,
}

impl Job for Tenant {
    const KIND: &'static str = "test.tenant.v1";
    fn queue() -> &'static str {
        "tenants"
    }
    fn concurrency_key(&self) -> Option<String> {
        Some(self.tenant.clone())
    }
}

/// Keyed caps under the runtime (issue 25): three workers of 6 slots each drain 10 tenants'
/// jobs (the key derived from the payload by `Job::concurrency_key`) under a per-key cap of 2.
/// The handlers' own log (a running count per tenant, raised when a handler begins and lowered
/// when it ends) never shows a tenant above 2, every job runs once and is archived once, and
/// the busiest tenants really reached the cap (the cap, not a lack of work, bounded them).
pub async fn keyed_cap_under_the_runtime<B: TestSupport>(b: Arc<B>) -> TestResult {
    const CAP: u32 = 2;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let queue = chokaq::QueueName::new("tenants").map_err(err)?;
    let st = dynb.control_queue(&queue, chokaq::core::QueueControl::SetKeyMaxWorkers(Some(CAP))).await.map_err(err)?;
    ensure!(st.key_max_workers == Some(CAP), "key cap not set: {st:?}");
    let jobs: Vec<Tenant> = (0..120).map(|n| Tenant { tenant: format!("t{}", n % 10), n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let running: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let max_seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let runs: Arc<Mutex<HashMap<JobId, u32>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (running, max_seen, runs) = (running.clone(), max_seen.clone(), runs.clone());
        let w = Worker::builder(dynb.clone())
            .queue("tenants")
            .concurrency(6)
            .maintenance(no_maintenance())
            .register(move |job: Tenant, ctx: JobContext| {
                let (running, max_seen, runs) = (running.clone(), max_seen.clone(), runs.clone());
                async move {
                    {
                        let mut r = running.lock().unwrap();
                        let n = r.entry(job.tenant.clone()).or_default();
                        *n += 1;
                        let mut m = max_seen.lock().unwrap();
                        let top = m.entry(job.tenant.clone()).or_default();
                        *top = (*top).max(*n);
                    }
                    *runs.lock().unwrap().entry(ctx.id()).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    *running.lock().unwrap().get_mut(&job.tenant).expect("raised above") -= 1;
                    Ok(())
                }
            })
            .build()
            .map_err(err)?;
        workers.push(spawn_worker(w));
    }
    wait_for("120 archived", Duration::from_secs(60), || async { Ok(b.stats().await.map_err(err)?.archived == 120) })
        .await?;
    let mut completed = 0;
    for (token, h) in workers {
        completed += stop(token, h).await?.completed;
    }
    ensure!(completed == 120, "completed {completed} != 120");
    let max_seen = max_seen.lock().unwrap().clone();
    ensure!(max_seen.len() == 10, "tenants seen: {max_seen:?}");
    ensure!(max_seen.values().all(|&n| n <= CAP), "a tenant ran more than {CAP} jobs at once: {max_seen:?}");
    ensure!(
        max_seen.values().any(|&n| n == CAP),
        "no tenant ever reached the cap (18 slots, 10 tenants): {max_seen:?}"
    );
    let runs = runs.lock().unwrap().clone();
    ensure!(
        runs.len() == 120 && runs.values().all(|&n| n == 1),
        "handler runs: {} jobs, max {:?}",
        runs.len(),
        runs.values().max()
    );
    Ok(())
}
