//! The memory backend's own unit tests (the conformance suite is its main test).

use super::*;
#[cfg(feature = "testing")]
use crate::testing::{JobPatch, Presence, TestSupport};
use crate::{Backend, BackendExt, CancelOutcome, ClaimMode, ClaimParams, ErrorKind, QueueControl, RequeueOutcome};

fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

fn job(queue: &str) -> NewJob {
    NewJob::build(queue, "test.v1").unwrap()
}

#[tokio::test]
async fn claim_start_complete_archives() {
    let b = MemoryBackend::new();
    let id = b.enqueue(job("a")).await.unwrap().id;
    let w = WorkerId::random();
    let got = b.claim(&ClaimParams::new(w, vec![q("a")], 5, ClaimMode::Start)).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].attempt, 1);
    assert_eq!(b.complete_one(w, got[0].lease_ref()).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.presence(id).await.unwrap(), Presence { hot: 0, archive: 1, dead: 0 });
    // A repeat of the same complete reports the outcome that stands, writing nothing.
    assert_eq!(b.complete_one(w, got[0].lease_ref()).await.unwrap(), Fenced::Done(()));
    assert_eq!(b.presence(id).await.unwrap(), Presence { hot: 0, archive: 1, dead: 0 });
}

#[tokio::test]
async fn cap_is_strict_inside_one_batch() {
    let b = MemoryBackend::new();
    for _ in 0..5 {
        b.enqueue(job("c")).await.unwrap();
    }
    b.set_max_workers(&q("c"), Some(2)).await.unwrap();
    let w = WorkerId::random();
    let got = b.claim(&ClaimParams::new(w, vec![q("c")], 10, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.len(), 2);
    let more = b.claim(&ClaimParams::new(w, vec![q("c")], 10, ClaimMode::Reserve)).await.unwrap();
    assert!(more.is_empty());
}

#[tokio::test]
async fn idempotency_key_dedupes_live_jobs_only() {
    let b = MemoryBackend::new();
    let a = b.enqueue(job("k").idempotency_key("x")).await.unwrap();
    let dup = b.enqueue(job("k").idempotency_key("x")).await.unwrap();
    assert!(!a.duplicate);
    assert!(dup.duplicate);
    assert_eq!(a.id, dup.id);
    assert_eq!(b.cancel(a.id).await.unwrap(), CancelOutcome::Cancelled);
    let again = b.enqueue(job("k").idempotency_key("x")).await.unwrap();
    assert!(!again.duplicate);
    assert_ne!(again.id, a.id);
}

#[tokio::test]
async fn retry_then_dead_letter() {
    let b = MemoryBackend::new();
    let id = b.enqueue(job("r").max_attempts(2)).await.unwrap().id;
    let w = WorkerId::random();
    for attempt in 1..=2 {
        b.force(id, &JobPatch { scheduled_at: Some(None), ..Default::default() }).await.unwrap();
        let got = b.claim(&ClaimParams::new(w, vec![q("r")], 1, ClaimMode::Start)).await.unwrap();
        assert_eq!(got.len(), 1, "attempt {attempt}");
        let out = b
            .fail(w, got[0].lease_ref(), FailAction::Retry { delay: Duration::ZERO, error: format!("e{attempt}") })
            .await
            .unwrap();
        if attempt == 2 {
            assert_eq!(out, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)));
        }
    }
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Dead(DeadReason::Failed));
    assert_eq!(r.last_error.as_deref(), Some("e2"));
}

#[tokio::test]
async fn idempotency_keys_are_scoped_per_queue() {
    let b = MemoryBackend::new();
    let on_a = b.enqueue(job("qa").idempotency_key("K")).await.unwrap();
    let on_b = b.enqueue(job("qb").idempotency_key("K")).await.unwrap();
    assert!(!on_a.duplicate);
    assert!(!on_b.duplicate, "K on queue qa blocked K on queue qb: {on_b:?}");
    assert_ne!(on_a.id, on_b.id);
    assert_eq!(b.get_job(on_b.id).await.unwrap().unwrap().queue, q("qb"));
    let again = b.enqueue(job("qa").idempotency_key("K")).await.unwrap();
    assert!(again.duplicate && again.id == on_a.id, "K twice on qa: {again:?}");
    // Inside one batch too, per queue.
    let out = b
        .enqueue_many(vec![
            job("qc").idempotency_key("B"),
            job("qd").idempotency_key("B"),
            job("qc").idempotency_key("B"),
        ])
        .await
        .unwrap();
    assert!(!out[0].duplicate && !out[1].duplicate && out[0].id != out[1].id, "{out:?}");
    assert!(out[2].duplicate && out[2].id == out[0].id, "{out:?}");
    // requeue_dead conflicts only with a live job of the same queue.
    assert_eq!(b.cancel(on_a.id).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(b.requeue_dead(on_a.id).await.unwrap(), RequeueOutcome::Requeued, "K live on qb only");
}

#[tokio::test]
async fn queue_controls_out_of_range_are_rejected_and_write_nothing() {
    let b = MemoryBackend::new();
    for control in [
        QueueControl::SetZombieTimeout(Some(Duration::MAX)),
        QueueControl::SetZombieTimeout(Some(Duration::from_secs(u64::MAX))),
        QueueControl::SetZombieTimeout(Some(Duration::from_secs(400 * 24 * 3600))),
        QueueControl::SetZombieTimeout(Some(Duration::ZERO)),
        QueueControl::SetMaxWorkers(Some(u32::MAX)),
    ] {
        let err = b.control_queue(&q("ctl"), control).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{control:?}");
        assert_eq!(b.queue_settings(&q("ctl")).await.unwrap().updated_at, None, "{control:?} wrote a row");
    }
    for control in [
        QueueControl::SetZombieTimeout(Some(Duration::from_secs(1))),
        QueueControl::SetZombieTimeout(None),
        QueueControl::SetMaxWorkers(Some(0)),
        QueueControl::SetMaxWorkers(Some(10_000)),
        QueueControl::SetMaxWorkers(None),
    ] {
        b.control_queue(&q("ctl"), control).await.unwrap();
    }
}

#[tokio::test]
async fn lease_lists_over_the_cap_are_rejected() {
    let b = MemoryBackend::new();
    let w = WorkerId::random();
    let too_many: Vec<LeaseRef> = (0..10_001).map(|i| LeaseRef { id: JobId::new(), lease: Lease(i) }).collect();
    let invalid = Some(ErrorKind::InvalidInput);
    assert_eq!(b.complete(w, &too_many).await.err().map(|e| e.kind()), invalid, "complete");
    assert_eq!(b.heartbeat(w, &too_many).await.err().map(|e| e.kind()), invalid, "heartbeat");
    assert_eq!(b.start(w, &too_many).await.err().map(|e| e.kind()), invalid, "start");
    assert_eq!(b.release(w, &too_many).await.err().map(|e| e.kind()), invalid, "release");
    let req = ClaimParams::new(w, vec![q("a")], 1, ClaimMode::Start);
    let out = b.complete_and_claim(w, &too_many, &req).await;
    assert_eq!(out.err().map(|e| e.kind()), invalid, "complete_and_claim");
    let ok = &too_many[..10_000];
    assert_eq!(b.complete(w, ok).await.unwrap().lost.len(), 10_000);
}

#[tokio::test]
async fn enqueue_batch_over_the_total_bytes_cap_is_rejected() {
    let b = MemoryBackend::new();
    let big = serde_json::Value::String("x".repeat(1_000_000));
    let jobs: Vec<NewJob> = (0..40).map(|_| job("big").json(big.clone())).collect();
    let out = b.enqueue_many(jobs).await;
    assert_eq!(out.map(|o| o.len()).map_err(|e| e.kind()), Err(ErrorKind::InvalidInput), "40 MB in one batch");
    assert_eq!(b.stats().await.unwrap().total(), 0, "nothing written");
    let jobs: Vec<NewJob> = (0..20).map(|_| job("big").json(big.clone())).collect();
    assert_eq!(b.enqueue_many(jobs).await.unwrap().len(), 20);
}

#[tokio::test]
async fn error_texts_are_truncated_not_rejected() {
    let b = MemoryBackend::new();
    let id = b.enqueue(job("e")).await.unwrap().id;
    let w = WorkerId::random();
    let got = b.claim(&ClaimParams::new(w, vec![q("e")], 1, ClaimMode::Start)).await.unwrap();
    let huge = format!("\0\n{}", "é".repeat(validate::MAX_ERROR_LEN));
    let out = b.fail(w, got[0].lease_ref(), FailAction::DeadLetter { reason: DeadReason::Failed, error: huge });
    assert!(out.await.unwrap().done().is_some());
    let stored = b.get_job(id).await.unwrap().unwrap().last_error.unwrap();
    assert!(stored.len() <= validate::MAX_ERROR_LEN, "{}", stored.len());
    assert!(stored.starts_with("\u{FFFD}\né"), "NUL replaced, newline kept: {:?}", &stored[..8]);
}

#[tokio::test]
async fn fail_delays_over_the_limit_are_rejected_and_write_nothing() {
    let b = MemoryBackend::new();
    let id = b.enqueue(job("d")).await.unwrap().id;
    let w = WorkerId::random();
    let got = b.claim(&ClaimParams::new(w, vec![q("d")], 1, ClaimMode::Start)).await.unwrap();
    let too_long = validate::MAX_DELAY + Duration::from_secs(1);
    for action in
        [FailAction::Retry { delay: too_long, error: "e".into() }, FailAction::Snooze { delay: Duration::MAX }]
    {
        let err = b.fail(w, got[0].lease_ref(), action).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }
    assert_eq!(b.get_job(id).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Processing));
    let ok = FailAction::Retry { delay: validate::MAX_DELAY, error: "e".into() };
    assert!(b.fail(w, got[0].lease_ref(), ok).await.unwrap().done().is_some());
}

#[tokio::test]
async fn bad_input_changes_nothing() {
    let b = MemoryBackend::new();
    let bad = job("b").max_attempts(0);
    let err = b.enqueue_many(vec![job("b"), bad]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(b.stats().await.unwrap().total(), 0);
}

/// A view with a read deadline shares the store; its reads fail as Unavailable once the
/// deadline passed, and its writes are the backend's own.
#[tokio::test]
async fn a_read_deadline_view_shares_the_store_and_bounds_its_reads() {
    let b = MemoryBackend::new();
    assert_eq!(b.capabilities().read_deadline, crate::ReadDeadline::Server);
    let later = b.with_read_deadline(std::time::Instant::now() + Duration::from_secs(60)).expect("a view");
    let id = later.enqueue(job("a")).await.unwrap().id;
    assert_eq!(b.get_job(id).await.unwrap().map(|j| j.id), Some(id), "the view's write is in the store");
    assert_eq!(later.stats().await.unwrap().pending, 1);
    let passed = b.with_read_deadline(std::time::Instant::now()).expect("a view");
    for e in [
        passed.stats().await.unwrap_err(),
        passed.get_job(id).await.unwrap_err(),
        passed.list_jobs(&crate::ListJobsParams::new(crate::JobTable::Hot)).await.unwrap_err(),
        passed.queue_settings(&q("a")).await.unwrap_err(),
        passed.list_workers().await.unwrap_err(),
        passed.list_schedules().await.unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(e.to_string().contains("deadline passed"), "{e}");
    }
    assert_eq!(passed.cancel(id).await.unwrap(), CancelOutcome::Cancelled, "writes are not bounded");
}
