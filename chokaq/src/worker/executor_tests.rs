//! The verdict on one attempt, alone: every handler result and stop reason maps to the
//! outcome the runtime writes, and to the counters it bumps.

use std::time::Duration;

use chokaq_core::{DeadReason, FailAction, RetryPolicy};

use super::{decide, panic_message, CaughtOutcome, Verdict};
use crate::job::{JobError, StopReason};
use crate::registry::HandlerOutcome;
use crate::worker::{Counters, SHUTDOWN_ERROR};

/// No jitter: `delay(attempt)` is exact (100 ms x 2^(attempt - 1)).
fn policy() -> RetryPolicy {
    RetryPolicy::fixed_exponential(Duration::from_millis(100), 2.0, Duration::from_secs(60))
}

const TIMEOUT: Duration = Duration::from_secs(3);

fn returned(r: Result<(), JobError>) -> Option<CaughtOutcome> {
    Some(Ok(HandlerOutcome::Returned(r)))
}

fn verdict(reason: Option<StopReason>, res: Option<CaughtOutcome>) -> (Verdict, crate::WorkerReport) {
    let c = Counters::default();
    let v = decide(&c, reason, res, (2, 25), &policy(), TIMEOUT);
    (v, c.report())
}

fn retry(delay: Duration, error: &str) -> Verdict {
    Verdict::Fail(FailAction::Retry { delay, error: error.to_string() })
}

#[test]
fn handler_results() {
    let p = policy();
    let (v, r) = verdict(None, returned(Ok(())));
    assert_eq!((v, r.failed), (Verdict::Complete, 0));

    let (v, r) = verdict(None, returned(Err(JobError::Retry("busy".into()))));
    assert_eq!((v, r.failed), (retry(p.delay(2), "busy"), 1));

    let (v, r) = verdict(None, returned(Err(JobError::RetryAfter(Duration::from_secs(7), "later".into()))));
    assert_eq!((v, r.failed), (retry(Duration::from_secs(7), "later"), 1));

    let (v, r) = verdict(None, returned(Err(JobError::Fatal("bad".into()))));
    let dead = Verdict::Fail(FailAction::DeadLetter { reason: DeadReason::Failed, error: "bad".into() });
    assert_eq!((v, r.failed), (dead, 1));

    let (v, r) = verdict(None, returned(Err(JobError::Snooze(Duration::from_secs(1)))));
    assert_eq!((v, r.failed), (Verdict::Fail(FailAction::Snooze { delay: Duration::from_secs(1) }), 0));

    let (v, r) = verdict(None, returned(Err(JobError::Cancel(Some("no".into())))));
    assert_eq!((v, r.failed), (Verdict::Fail(FailAction::Cancelled { error: Some("no".into()) }), 0));

    let (v, r) = verdict(None, Some(Ok(HandlerOutcome::Undecodable("garbled".into()))));
    let dead = Verdict::Fail(FailAction::DeadLetter { reason: DeadReason::Failed, error: "garbled".into() });
    assert_eq!((v, r.failed), (dead, 1));
}

#[test]
fn panics_are_retryable_failures() {
    let (v, r) = verdict(None, Some(Err(Box::new("boom"))));
    assert_eq!(v, retry(policy().delay(2), "handler panicked: boom"));
    assert_eq!((r.panicked, r.failed), (1, 1));
    let (v, _) = verdict(None, Some(Err(Box::new(String::from("owned")))));
    assert_eq!(v, retry(policy().delay(2), "handler panicked: owned"));
    assert_eq!(panic_message(&42u8), "non-string panic payload");
}

#[test]
fn stopped_from_outside() {
    let p = policy();
    // Lease lost: nothing is written, whatever the handler returned.
    let (v, r) = verdict(Some(StopReason::LeaseLost), returned(Ok(())));
    assert_eq!((v, r.failed), (Verdict::Discard, 0));
    // Operator cancel: cancelled, whatever the handler returned.
    let (v, _) = verdict(Some(StopReason::CancelRequested), returned(Ok(())));
    let cancelled = Verdict::Fail(FailAction::Cancelled { error: Some("cancelled by operator request".into()) });
    assert_eq!(v, cancelled);
    // Timed out, no result in time: a retryable failure.
    let (v, r) = verdict(Some(StopReason::Timeout), None);
    assert_eq!(v, retry(p.delay(2), "job timed out after 3s"));
    assert_eq!((r.timed_out, r.failed), (1, 1));
    // Shutdown, no result in time: handed back at once, attempt counted, not a failure.
    let (v, r) = verdict(Some(StopReason::Shutdown), None);
    assert_eq!(v, retry(Duration::ZERO, SHUTDOWN_ERROR));
    assert_eq!((r.handed_back, r.failed), (1, 0));
    // Shutdown on the last attempt: a snooze (attempt not counted), never a dead letter.
    let c = Counters::default();
    let v = decide(&c, Some(StopReason::Shutdown), None, (3, 3), &p, TIMEOUT);
    assert_eq!(v, Verdict::Fail(FailAction::Snooze { delay: Duration::ZERO }));
    assert_eq!((c.report().handed_back, c.report().failed), (1, 0));
    // Timed out or shut down but the handler returned Ok in the window: the work is kept.
    for reason in [StopReason::Timeout, StopReason::Shutdown] {
        let (v, r) = verdict(Some(reason), returned(Ok(())));
        assert_eq!((v, r.failed, r.timed_out, r.handed_back), (Verdict::Complete, 0, 0, 0));
    }
    // Not stopped, but no result (the handler future was dropped).
    let (v, r) = verdict(None, None);
    assert_eq!((v, r.failed), (retry(p.delay(2), "handler stopped"), 1));
}
