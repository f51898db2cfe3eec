//! Issue 24: the execution path's rules, each scenario the review saw, on the memory backend
//! with injected faults (`test_support::Faulty`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::{
    Backend, BackendExt, CancelOutcome, DeadReason, JobId, JobLocation, NewJob, QueueControl, QueueName, RescueParams,
    WorkerId,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::test_support::{jobs, no_maintenance, Faulty};
use super::{Worker, WorkerBuilder, WorkerReport};
use crate::job::JobContext;

/// Look-ahead jobs here wait behind a blocked job on purpose: never released for waiting.
const HELD: std::time::Duration = std::time::Duration::from_secs(3600);

type Res = Result<(), String>;
type Runs = Arc<Mutex<HashMap<JobId, Vec<(i64, bool)>>>>;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

async fn wait_until<F, Fut>(what: &str, limit: Duration, mut cond: F) -> Res
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !cond().await {
        ensure!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Rule 1, a held job whose lease was last confirmed long ago: heartbeats fail for longer than
/// the zombie timeout while the buffered job waits behind a long one; the rescue takes it and
/// another worker claims it. When the slot frees, the worker must confirm before it runs the
/// job (a `start`, which finds the lease lost), never run it on the stale lease.
pub(super) async fn a_stale_held_job_is_confirmed_before_it_runs(worker: WorkerId) -> Res {
    // Self-fencing (rule 9, the simulator's `hole2_…`) would stop the long job once its own
    // lease went unconfirmed and free the slot early; switched off here, so that the slot frees
    // only after the buffered job's lease is gone, which is the case this rule is about.
    super::BROKEN.lock().unwrap().push((worker, super::Broken::NoSelfFence));
    let b = Arc::new(Faulty::default());
    let q = QueueName::new("default").unwrap();
    b.control_queue(&q, QueueControl::SetZombieTimeout(Some(Duration::from_millis(600)))).await.unwrap();
    let runs: Runs = Arc::default();
    let w =
        recording(&b, runs.clone()).worker_id(worker).concurrency(1).lookahead(1).lookahead_wait(HELD).build().unwrap();
    let long = b.enqueue(job_ms(1500)).await.unwrap().id;
    let buffered = b.enqueue(job_ms(0)).await.unwrap().id;
    let other = WorkerId::random();
    run_until(w, || async {
        wait_until("both held", Duration::from_secs(5), || async {
            let s = b.inner.stats().await.unwrap();
            s.fetched + s.processing == 2
        })
        .await?;
        b.heartbeats_fail.store(true, Ordering::Release);
        // The buffered job's heartbeat goes stale; the rescue puts it back; another worker
        // takes it.
        wait_until("the buffered job rescued", Duration::from_secs(5), || async {
            b.inner.rescue(&RescueParams::default()).await.unwrap();
            b.inner.get_job(buffered).await.unwrap().unwrap().location
                == JobLocation::Hot(chokaq_core::JobStatus::Pending)
        })
        .await?;
        let got = b
            .inner
            .claim(&chokaq_core::ClaimParams::new(other, vec![q.clone()], 1, chokaq_core::ClaimMode::Start))
            .await
            .unwrap();
        ensure!(got.len() == 1 && got[0].id == buffered, "the other worker's claim: {got:?}");
        // The long job's slot frees while the heartbeats still fail (no reply has told the
        // worker of the loss): the buffered job's lease was last confirmed 1.5 s ago.
        wait_until("the long job's handler done", Duration::from_secs(10), || async {
            runs.lock().unwrap().contains_key(&long)
        })
        .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.heartbeats_fail.store(false, Ordering::Release);
        Ok(())
    })
    .await?;
    let ran = runs.lock().unwrap().get(&buffered).cloned();
    ensure!(ran.is_none(), "the buffered job ran on a lease the database no longer held: {ran:?}");
    let r = b.inner.get_job(buffered).await.unwrap().unwrap();
    ensure!(r.worker_id == Some(other), "the other worker's claim stands: {r:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_held_job_is_confirmed_before_it_runs_test() {
    a_stale_held_job_is_confirmed_before_it_runs(WorkerId::random()).await.unwrap();
}

/// A worker whose handler records (lease, token fired at the end) per run and sleeps the
/// payload's `ms` (or until its token fires).
fn recording(b: &Arc<Faulty>, runs: Runs) -> WorkerBuilder {
    let dynb: Arc<dyn Backend> = b.clone();
    Worker::builder(dynb)
        .worker_id(WorkerId::random())
        .maintenance(no_maintenance())
        .poll_interval(Duration::from_millis(20))
        .min_poll_interval(Duration::from_millis(5))
        .heartbeat_interval(Duration::from_millis(100))
        .register_raw("t", move |p, ctx: JobContext| {
            let runs = runs.clone();
            async move {
                let ms = p.get("ms").and_then(|v| v.as_u64()).unwrap_or(0);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = ctx.cancelled() => {}
                }
                runs.lock().unwrap().entry(ctx.id()).or_default().push((ctx.lease().lease.0, ctx.is_cancelled()));
                Ok(())
            }
        })
}

fn job_ms(ms: u64) -> NewJob {
    NewJob::build("default", "t").unwrap().json(serde_json::json!({ "ms": ms }))
}

async fn run_until<F, Fut>(w: Worker, f: F) -> Result<WorkerReport, String>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Res>,
{
    let token = CancellationToken::new();
    let task = tokio::spawn(w.run(token.clone()));
    let out = f().await;
    token.cancel();
    let report = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .map_err(|_| "worker did not stop".to_string())?
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    out.map(|()| report)
}

async fn archived(b: &Faulty, id: JobId) -> bool {
    b.inner.get_job(id).await.unwrap().is_some_and(|r| r.location == JobLocation::Archived)
}

/// Rule 2, scenario 1: a start that commits and then errors (the reply lost) is repeated, the
/// repeat is done, and the job that ran is archived after one run with attempt 1 (it was
/// dead-lettered as a zombie, its outcome dropped, before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_whose_reply_is_lost_runs_once() {
    let b = Arc::new(Faulty::default());
    let runs: Runs = Arc::default();
    let w = recording(&b, runs.clone()).concurrency(1).build().unwrap();
    b.start_replies_lost.store(1, Ordering::Release);
    let id = b.enqueue(job_ms(300)).await.unwrap().id;
    let report = run_until(w, || async {
        wait_until("archived", Duration::from_secs(10), || async { archived(&b, id).await }).await
    })
    .await
    .unwrap();
    let r = b.inner.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.attempt, 1, "{r:?}");
    assert_eq!(runs.lock().unwrap().get(&id).map(Vec::len), Some(1));
    assert!(b.start_calls.load(Ordering::Acquire) >= 2, "the start was repeated");
    assert_eq!((report.completed, report.lease_lost), (1, 0), "{report:?}");
}

/// Rule 1 and 5, scenario 4: starts that fail far past every retry budget (50 in a row,
/// against 4 retries before) never lead to a second run: the handler runs once and its
/// completion counts the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_failures_past_every_budget_never_rerun() {
    let b = Arc::new(Faulty::default());
    let runs: Runs = Arc::default();
    let w = recording(&b, runs.clone()).concurrency(2).lookahead_wait(HELD).build().unwrap();
    b.start_failures.store(50, Ordering::Release);
    let ids: Vec<JobId> =
        b.enqueue_many((0..4).map(|_| job_ms(400)).collect()).await.unwrap().into_iter().map(|e| e.id).collect();
    let report = run_until(w, || async {
        wait_until("all archived", Duration::from_secs(15), || async {
            for id in &ids {
                if !archived(&b, *id).await {
                    return false;
                }
            }
            true
        })
        .await
    })
    .await
    .unwrap();
    for id in &ids {
        assert_eq!(runs.lock().unwrap().get(id).map(Vec::len), Some(1), "runs of {id}");
        assert_eq!(b.inner.get_job(*id).await.unwrap().unwrap().attempt, 1);
    }
    assert_eq!((report.completed, report.lease_lost, report.released), (4, 0, 0), "{report:?}");
}

/// Rule 1, scenario 2: a buffered job that waits longer than its queue's fetched timeout is not
/// rescued while its worker lives (it is held and heart-beaten), and it runs once, on the lease
/// it was claimed with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_job_outwaiting_the_fetched_timeout_runs_once() {
    let b = Arc::new(Faulty::default());
    let q = QueueName::new("default").unwrap();
    // The buffered job waits 5 fetched timeouts; the zombie timeout is 6 heartbeat intervals.
    let short = Duration::from_millis(300);
    b.control_queue(&q, QueueControl::SetFetchedTimeout(Some(short))).await.unwrap();
    b.control_queue(&q, QueueControl::SetZombieTimeout(Some(Duration::from_millis(600)))).await.unwrap();
    let runs: Runs = Arc::default();
    let w = recording(&b, runs.clone()).concurrency(1).lookahead(1).lookahead_wait(HELD).build().unwrap();
    let long = b.enqueue(job_ms((short * 5).as_millis() as u64)).await.unwrap().id;
    let buffered = b.enqueue(job_ms(0)).await.unwrap().id;
    let mut rescued = 0;
    let report = run_until(w, || async {
        wait_until("both held", Duration::from_secs(5), || async {
            let s = b.inner.stats().await.unwrap();
            s.fetched + s.processing == 2
        })
        .await?;
        let lease = b.inner.get_job(buffered).await.unwrap().unwrap().lease;
        let deadline = Instant::now() + Duration::from_secs(15);
        while !archived(&b, long).await {
            ensure!(Instant::now() < deadline, "the long job was not archived in 15 s");
            let r = b.inner.rescue(&RescueParams::default()).await.unwrap();
            rescued += r.fetched_released + r.zombies_retried + r.zombies_dead;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_until("the buffered job archived", Duration::from_secs(10), || async { archived(&b, buffered).await })
            .await?;
        let r = b.inner.get_job(buffered).await.unwrap().unwrap();
        ensure!(r.lease == lease, "the buffered job ran on another lease: {:?} then {:?}", lease, r.lease);
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(rescued, 0, "a live worker's job was rescued");
    assert_eq!(runs.lock().unwrap().get(&buffered).map(Vec::len), Some(1));
    assert_eq!((report.completed, report.lease_lost), (2, 0), "{report:?}");
}

/// Rule 1, scenario 3: a cancel of a buffered job is a request, never final behind the
/// worker's back; once the worker has heard of it the handler never starts, and the job is
/// dead-lettered `cancelled` after no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_buffered_job_never_starts() {
    let b = Arc::new(Faulty::default());
    let runs: Runs = Arc::default();
    let w = recording(&b, runs.clone()).concurrency(1).lookahead(1).lookahead_wait(HELD).build().unwrap();
    let first = b.enqueue(job_ms(800)).await.unwrap().id;
    let buffered = b.enqueue(job_ms(0)).await.unwrap().id;
    let report = run_until(w, || async {
        wait_until("both held", Duration::from_secs(5), || async {
            let s = b.inner.stats().await.unwrap();
            s.fetched + s.processing == 2
        })
        .await?;
        let out = b.cancel(buffered).await.unwrap();
        ensure!(out == CancelOutcome::Requested, "cancel of a buffered (held) job: {out:?}");
        wait_until("dead-lettered cancelled", Duration::from_secs(10), || async {
            b.inner.get_job(buffered).await.unwrap().unwrap().location == JobLocation::Dead(DeadReason::Cancelled)
        })
        .await?;
        wait_until("the first archived", Duration::from_secs(10), || async { archived(&b, first).await }).await
    })
    .await
    .unwrap();
    assert_eq!(runs.lock().unwrap().get(&buffered), None, "the cancelled job's handler ran");
    assert_eq!(b.inner.get_job(buffered).await.unwrap().unwrap().attempt, 0);
    assert_eq!(report.cancelled, 1, "{report:?}");
}

/// Rule 4, scenario 6: a registration that never answers holds back no heartbeat: a job
/// running for three zombie timeouts is never rescued, and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_registration_holds_back_no_heartbeat() {
    let b = Arc::new(Faulty::default());
    let q = QueueName::new("default").unwrap();
    let zombie = Duration::from_millis(600);
    b.control_queue(&q, QueueControl::SetZombieTimeout(Some(zombie))).await.unwrap();
    b.registration_hangs.store(true, Ordering::Release);
    let runs: Runs = Arc::default();
    let w = recording(&b, runs.clone()).concurrency(1).build().unwrap();
    let id = b.enqueue(job_ms((zombie * 3).as_millis() as u64)).await.unwrap().id;
    let mut rescued = 0;
    let report = run_until(w, || async {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !archived(&b, id).await {
            ensure!(Instant::now() < deadline, "not archived in 15 s");
            let r = b.inner.rescue(&RescueParams::default()).await.unwrap();
            rescued += r.fetched_released + r.zombies_retried + r.zombies_dead;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(rescued, 0);
    assert_eq!(runs.lock().unwrap().get(&id).map(Vec::len), Some(1));
    assert!(report.heartbeat_calls >= 3, "{report:?}");
}

/// Rule 7, scenario 9: with outcome writes stalled, finished and unwritten outcomes stay at
/// or below 2 x concurrency, whatever the look-ahead (default, and a large one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritten_outcomes_stay_within_twice_the_slots() {
    for lookahead in [None, Some(200)] {
        let b = Arc::new(Faulty::default());
        let finished = Arc::new(AtomicUsize::new(0));
        let f2 = finished.clone();
        let dynb: Arc<dyn Backend> = b.clone();
        let concurrency = 4usize;
        let mut builder = Worker::builder(dynb)
            .concurrency(concurrency as u32)
            .maintenance(no_maintenance())
            .poll_interval(Duration::from_millis(20))
            .min_poll_interval(Duration::from_millis(5))
            .register_raw("t", move |_p, _ctx: JobContext| {
                let f = f2.clone();
                async move {
                    f.fetch_add(1, Ordering::AcqRel);
                    Ok(())
                }
            });
        if let Some(n) = lookahead {
            builder = builder.lookahead(n);
        }
        let w = builder.build().unwrap();
        b.stall(true);
        b.enqueue_many(jobs("default", 300)).await.unwrap();
        let bound = 2 * concurrency;
        let report = run_until(w, || async {
            let out = async {
                let t0 = Instant::now();
                let mut most = 0;
                while t0.elapsed() < Duration::from_millis(1000) {
                    most = most.max(finished.load(Ordering::Acquire));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                ensure!(most <= bound, "{most} finished, unwritten outcomes with writes stalled; the bound is {bound}");
                ensure!(most > 0, "nothing ran");
                Ok(())
            }
            .await;
            b.stall(false);
            out?;
            wait_until("300 archived", Duration::from_secs(20), || async { b.stats().await.unwrap().archived == 300 })
                .await
        })
        .await
        .unwrap();
        assert_eq!(report.completed, 300, "lookahead {lookahead:?}: {report:?}");
    }
}

/// Rule 7 at a non-default bound (`unwritten_outcomes(40)`, 4 slots, default look-ahead 80):
/// with outcome writes stalled, exactly 40 jobs finish and stay unwritten (not the default 8,
/// and never more), then every job is archived once writes resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritten_outcomes_stay_within_a_set_bound() {
    let b = Arc::new(Faulty::default());
    let finished = Arc::new(AtomicUsize::new(0));
    let f2 = finished.clone();
    let dynb: Arc<dyn Backend> = b.clone();
    let bound = 40usize;
    let w = Worker::builder(dynb)
        .concurrency(4)
        .unwritten_outcomes(bound as u32)
        .maintenance(no_maintenance())
        .poll_interval(Duration::from_millis(20))
        .min_poll_interval(Duration::from_millis(5))
        .register_raw("t", move |_p, _ctx: JobContext| {
            let f = f2.clone();
            async move {
                f.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
        })
        .build()
        .unwrap();
    b.stall(true);
    b.enqueue_many(jobs("default", 300)).await.unwrap();
    let report = run_until(w, || async {
        let out = async {
            wait_until("40 finished", Duration::from_secs(10), || async { finished.load(Ordering::Acquire) >= bound })
                .await?;
            // Held there: nothing more begins while 40 outcomes wait.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(300) {
                let n = finished.load(Ordering::Acquire);
                ensure!(n == bound, "{n} finished, unwritten outcomes with writes stalled; the bound is {bound}");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok(())
        }
        .await;
        b.stall(false);
        out?;
        wait_until("300 archived", Duration::from_secs(20), || async { b.stats().await.unwrap().archived == 300 }).await
    })
    .await
    .unwrap();
    assert_eq!((report.completed, finished.load(Ordering::Acquire)), (300, 300), "{report:?}");
}
