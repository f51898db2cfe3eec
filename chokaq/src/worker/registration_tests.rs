//! The worker's row in the workers table: written at start with host, pid, queues and
//! concurrency, again with each heartbeat (not with each job), removed at a graceful
//! shutdown; a registration that fails never stops job processing.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{Backend, JobLocation, WorkerId};
use tokio_util::sync::CancellationToken;

use super::heartbeat::host_name;
use super::test_support::{jobs, no_maintenance, wait_for, Faulty};
use super::Worker;
use crate::job::JobContext;

fn worker(b: &Arc<Faulty>, id: WorkerId, heartbeat: Duration) -> Worker {
    let dynb: Arc<dyn Backend> = b.clone();
    Worker::builder(dynb)
        .worker_id(id)
        .queues(["reg-a", "reg-b"])
        .concurrency(3)
        .maintenance(no_maintenance())
        .poll_interval(Duration::from_millis(20))
        .heartbeat_interval(heartbeat)
        .register_raw("t", |_p, _ctx: JobContext| async { Ok(()) })
        .build()
        .unwrap()
}

async fn archived(b: &Faulty, n: u64) -> bool {
    b.inner.stats().await.unwrap().archived == n
}

/// Registered at start (one call, whatever the number of jobs, with a heartbeat interval
/// longer than the test), listed with this process's host and pid, gone after shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_at_start_not_per_job_and_leaves_at_shutdown() {
    let b = Arc::new(Faulty::default());
    let id = WorkerId::random();
    let token = CancellationToken::new();
    let task = tokio::spawn(worker(&b, id, Duration::from_secs(120)).run(token.clone()));
    wait_for("the worker's row", Duration::from_secs(10), || async {
        b.inner.list_workers().await.unwrap().iter().any(|w| w.worker == id)
    })
    .await;
    let row = b.inner.list_workers().await.unwrap().into_iter().find(|w| w.worker == id).unwrap();
    assert_eq!(
        (row.host.as_str(), row.pid, row.queues.clone(), row.concurrency),
        (host_name().as_str(), std::process::id(), vec!["reg-a".to_string(), "reg-b".to_string()], 3)
    );
    b.inner.enqueue_many(jobs("reg-a", 20)).await.unwrap();
    wait_for("20 jobs archived", Duration::from_secs(20), || archived(&b, 20)).await;
    assert_eq!(b.register_calls.load(Ordering::Acquire), 1, "one registration: at start, none per job");
    token.cancel();
    task.await.unwrap().unwrap();
    assert!(b.inner.list_workers().await.unwrap().is_empty(), "the row is removed at a graceful shutdown");
}

/// With a short heartbeat interval the row is written again with every beat: its
/// `last_seen_at` moves while `started_at` stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_keeps_the_row_fresh() {
    let b = Arc::new(Faulty::default());
    let id = WorkerId::random();
    let token = CancellationToken::new();
    let task = tokio::spawn(worker(&b, id, Duration::from_millis(30)).run(token.clone()));
    wait_for("the worker's row", Duration::from_secs(10), || async {
        b.inner.list_workers().await.unwrap().iter().any(|w| w.worker == id)
    })
    .await;
    let first = b.inner.list_workers().await.unwrap().remove(0);
    wait_for("three registrations", Duration::from_secs(10), || async {
        b.register_calls.load(Ordering::Acquire) >= 3
    })
    .await;
    let later = b.inner.list_workers().await.unwrap().remove(0);
    assert_eq!(later.started_at, first.started_at);
    assert!(later.last_seen_at > first.last_seen_at, "{later:?} vs {first:?}");
    token.cancel();
    task.await.unwrap().unwrap();
}

/// Every registration fails (a schema without the workers table): jobs still run to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_registration_never_stops_jobs() {
    let b = Arc::new(Faulty::default());
    b.registration_fails.store(true, Ordering::Release);
    let ids: Vec<_> = b.inner.enqueue_many(jobs("reg-a", 10)).await.unwrap().into_iter().map(|e| e.id).collect();
    let token = CancellationToken::new();
    let task = tokio::spawn(worker(&b, WorkerId::random(), Duration::from_millis(30)).run(token.clone()));
    wait_for("10 jobs archived", Duration::from_secs(20), || archived(&b, 10)).await;
    wait_for("two failed registrations", Duration::from_secs(10), || async {
        b.register_calls.load(Ordering::Acquire) >= 2
    })
    .await;
    token.cancel();
    let report = task.await.unwrap().unwrap();
    assert_eq!(report.completed, 10);
    for id in ids {
        assert_eq!(b.inner.get_job(id).await.unwrap().unwrap().location, JobLocation::Archived);
    }
    assert!(b.inner.list_workers().await.unwrap().is_empty());
}
