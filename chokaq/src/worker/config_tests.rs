//! Unit tests of the worker builder's settings and checks (`config.rs`).

use std::sync::Arc;
use std::time::Duration;

use chokaq_core::memory::MemoryBackend;
use chokaq_core::{Backend, ErrorKind};

use super::WorkerBuilder;
use crate::worker::Worker;

fn builder() -> WorkerBuilder {
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    Worker::builder(b).register_raw("t", |_p, _c| async { Ok(()) })
}

#[test]
fn lookahead_out_of_range_is_invalid_input() {
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let e = Worker::builder(b).lookahead(1001).register_raw("t", |_p, _c| async { Ok(()) }).build().unwrap_err();
    assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput);
}

/// The unwritten-outcome bound: `concurrency` to 100,000, 2 x `concurrency` by default, and
/// the default look-ahead follows it (2 x the bound, at most 1000).
#[test]
fn unwritten_outcomes_range_and_default() {
    for (c, n) in [(4, 3), (4, 100_001), (10, 0)] {
        let e = builder().concurrency(c).unwritten_outcomes(n).build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "concurrency {c}, unwritten {n}");
        assert!(e.to_string().contains("unwritten outcomes must be"), "{e}");
    }
    assert_eq!(builder().concurrency(4).build().unwrap().config().unwritten_cap(), 8);
    let w = builder().concurrency(4).unwritten_outcomes(4).build().unwrap();
    assert_eq!(w.config().unwritten_cap(), 4);
    let w = builder().concurrency(8).unwritten_outcomes(100_000).build().unwrap();
    assert_eq!(w.config().unwritten_cap(), 100_000);
}

/// Queues: `"default"` when none is given, duplicates dropped, order kept; queue timeouts
/// land in the config by queue.
#[test]
fn queues_and_queue_timeouts() {
    let w = builder().build().unwrap();
    assert_eq!(w.config().queues.iter().map(|q| q.as_str()).collect::<Vec<_>>(), ["default"]);
    let w = builder().queue("b").queues(["a", "b"]).queue_timeout("a", Duration::from_secs(3)).build().unwrap();
    assert_eq!(w.config().queues.iter().map(|q| q.as_str()).collect::<Vec<_>>(), ["b", "a"]);
    let a = chokaq_core::QueueName::new("a").unwrap();
    assert_eq!(w.config().queue_timeouts.get(&a), Some(&Duration::from_secs(3)));
}

/// Every numeric range and consistency check is an `InvalidInput` error.
#[test]
fn out_of_range_settings_are_invalid_input() {
    let bad = [
        builder().prefetch(1001),
        builder().poll_interval(Duration::ZERO),
        builder().min_poll_interval(Duration::from_secs(2)),
        builder().job_timeout(Duration::ZERO),
        builder().queue_timeout("q", Duration::ZERO),
        builder().completion_batching(0, Duration::from_millis(2)),
        builder().completion_batching(10_001, Duration::from_millis(2)),
        builder().completion_batching(10, Duration::ZERO),
        builder().retry_policy(chokaq_core::RetryPolicy { factor: f64::NAN, ..Default::default() }),
    ];
    for (i, b) in bad.into_iter().enumerate() {
        assert_eq!(b.build().map(|_| ()).unwrap_err().kind(), ErrorKind::InvalidInput, "case {i}");
    }
    assert!(builder()
        .prefetch(1000)
        .lookahead(0)
        .completion_batching(10_000, Duration::from_millis(1))
        .build()
        .is_ok());
}

/// Durations near `Duration::MAX` would overflow `Instant` arithmetic in the worker's
/// loops, and settings that contradict each other would lose leases: each is an
/// `InvalidInput` naming the setting and its limit (issue 16 finding 2, issue 11 item 10).
#[test]
fn extreme_and_inconsistent_settings_are_invalid_input() {
    use crate::worker::MaintenanceConfig;
    use chokaq_core::RetryPolicy;
    let max = Duration::MAX;
    let bad = [
        ("heartbeat", builder().heartbeat_interval(max)),
        ("claim batch window", builder().claim_batch_window(max)),
        ("completion flush", builder().completion_batching(10, max)),
        ("poll", builder().poll_interval(max)),
        ("poll", builder().poll_interval(max).min_poll_interval(max)),
        ("job timeout", builder().job_timeout(max)),
        ("queue", builder().queue_timeout("q", max)),
        ("cancel wait", builder().cancel_wait(max)),
        ("shutdown grace", builder().shutdown_grace(max)),
        ("maintenance interval", builder().maintenance(MaintenanceConfig { interval: max, ..Default::default() })),
        ("retention", builder().maintenance(MaintenanceConfig { archive_retention: Some(max), ..Default::default() })),
        ("retry policy", builder().retry_policy(RetryPolicy { max, ..RetryPolicy::default() })),
        ("retry policy", builder().retry_policy(RetryPolicy { base: max, ..RetryPolicy::default() })),
    ];
    for (i, (name, b)) in bad.into_iter().enumerate() {
        let e = b.build().map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "case {i} ({name}): {e}");
        assert!(e.message().contains(name), "case {i}: {e} does not name {name:?}");
    }
    // A job type's own policy and timeout are checked too.
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Odd;
    impl crate::Job for Odd {
        const KIND: &'static str = "odd.v1";
        fn retry_policy() -> Option<RetryPolicy> {
            Some(RetryPolicy { max: Duration::MAX, ..RetryPolicy::default() })
        }
    }
    let e = builder().register(|_: Odd, _| async { Ok(()) }).build().map(|_| ()).unwrap_err();
    assert!(e.message().contains("retry policy max of job kind \"odd.v1\""), "{e}");
    // At the limits: accepted.
    let year = Duration::from_secs(365 * 24 * 3600);
    assert!(builder().heartbeat_interval(Duration::from_secs(150)).build().is_ok());
    assert!(builder().job_timeout(year).shutdown_grace(year).cancel_wait(year).build().is_ok());
    assert!(builder().prefetch(4).build().is_ok(), "the defaults fit a prefetch");
}

/// Issue 11 item 10: the queues' timeouts live in the database, so the checks of a worker's
/// heartbeat and prefetch against them run when it starts: a heartbeat too close to a queue's
/// zombie timeout, or a prefetch its fetched timeout would put back before it can start, is an
/// `InvalidInput` naming the queue and the setting.
#[test]
fn settings_inconsistent_with_a_queue_are_invalid_input() {
    use chokaq_core::{QueueName, QueueSettings};
    let q = |zombie: Option<u64>, fetched: Option<u64>| {
        let mut s = QueueSettings::default_for(QueueName::new("q").unwrap());
        s.zombie_timeout = zombie.map(Duration::from_secs);
        s.fetched_timeout = fetched.map(Duration::from_secs);
        s
    };
    let cfg = |b: WorkerBuilder| b.build().unwrap().config().clone();
    let check = super::check_against_settings;
    // The defaults (300 s, 60 s) fit the default heartbeat (5 s), with or without a prefetch.
    check(&cfg(builder()), &[q(None, None)]).unwrap();
    check(&cfg(builder().prefetch(4)), &[q(None, None)]).unwrap();
    check(&cfg(builder().heartbeat_interval(Duration::from_secs(150))), &[q(None, None)]).unwrap();
    let e = check(&cfg(builder().heartbeat_interval(Duration::from_secs(200))), &[q(None, None)]).unwrap_err();
    assert!(e.kind() == ErrorKind::InvalidInput && e.message().contains("zombie timeout"), "{e}");
    let e = check(&cfg(builder()), &[q(Some(8), None)]).unwrap_err();
    assert!(e.message().contains("queue q") && e.message().contains("8s"), "{e}");
    let e =
        check(&cfg(builder().prefetch(4).heartbeat_interval(Duration::from_secs(2))), &[q(None, Some(3))]).unwrap_err();
    assert!(e.message().contains("fetched timeout"), "{e}");
    // Without a prefetch the fetched timeout binds nothing.
    check(&cfg(builder().heartbeat_interval(Duration::from_secs(2))), &[q(None, Some(3))]).unwrap();
}

/// The same check at `Worker::run`, against the settings in the database.
#[tokio::test]
async fn run_refuses_a_heartbeat_slower_than_a_queue_allows() {
    use chokaq_core::{QueueControl, QueueName};
    let b = Arc::new(chokaq_core::memory::MemoryBackend::new());
    let q = QueueName::new("q").unwrap();
    b.control_queue(&q, QueueControl::SetZombieTimeout(Some(Duration::from_secs(4)))).await.unwrap();
    let w = Worker::builder(b.clone() as Arc<dyn chokaq_core::Backend>)
        .queue("q")
        .register_raw("t", |_p, _c| async { Ok(()) })
        .build()
        .unwrap();
    let e = w.run(tokio_util::sync::CancellationToken::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.message().contains("zombie timeout (4s)"), "{e}");
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Email {
    to: String,
}

impl crate::job::Job for Email {
    const KIND: &'static str = "test.email.v1";
    fn queue() -> &'static str {
        "emails"
    }
}

/// Issue 40, the first hour: a typed handler whose job type's queue the worker does not claim
/// is warned of when the worker is built (before, its jobs piled up with no word at any level);
/// a worker that claims the queue, and a raw handler, give no warning.
#[test]
fn a_handler_whose_queue_is_not_claimed_is_warned_of() {
    use std::sync::Mutex;
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let logged = |queues: &[&str]| -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt().with_writer(move || out.clone()).with_ansi(false).finish();
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let builder = Worker::builder(b)
            .queues(queues.iter().copied())
            .register(|_job: Email, _c| async { Ok(()) })
            .register_raw("t", |_p, _c| async { Ok(()) });
        tracing::subscriber::with_default(sub, || builder.build().unwrap());
        let s = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        s
    };
    let warned = logged(&["default"]);
    assert_eq!(warned.lines().filter(|l| l.contains("WARN")).count(), 1, "{warned}");
    assert!(
        warned.contains("kind test.email.v1, which go to queue emails by default") && warned.contains("claims=default"),
        "{warned}"
    );
    assert_eq!(logged(&["default", "emails"]), "", "the queue is claimed: no warning");
}

/// Issue 40, item 5: a queue's own slot count. A queue the worker does not claim, a bad queue
/// name, a count of 0 or over 1000, counts that leave the other queues no slot, or counts of
/// every queue that differ from a concurrency given, are `InvalidInput` errors naming what is
/// wrong. Left unset, the concurrency is the counts' sum, plus 10 for the other queues.
#[test]
fn queue_concurrency_is_checked_at_build() {
    let two = || builder().queues(["fast", "slow"]);
    let bad = [
        (
            builder().queue("a").queue_concurrency("b", 2),
            "names queue \"b\", which this worker does not claim (its queues: a)",
        ),
        (
            builder().queue_concurrency("fast", 2),
            "names queue \"fast\", which this worker does not claim (its queues: default)",
        ),
        (two().queue_concurrency("no spaces", 2), "queue name"),
        (
            two().queue_concurrency("slow", 0),
            "the slot count of queue \"slow\" (queue_concurrency) must be 1 to 1000, got 0",
        ),
        (two().queue_concurrency("slow", 1001), "must be 1 to 1000, got 1001"),
        (
            two().concurrency(4).queue_concurrency("slow", 4),
            "the queues' own slot counts add up to 4, which leaves none of the worker's concurrency 4 for its other \
             queues (fast): raise concurrency to at least 5",
        ),
        (
            two().concurrency(6).queue_concurrency("slow", 2).queue_concurrency("fast", 2),
            "every queue of the worker has its own slot count, and they add up to 4, not the worker's concurrency 6",
        ),
        (two().queue_concurrency("slow", 995), "add up to 995, plus 10 for the others: over the most a worker runs"),
        (two().concurrency(0).queue_concurrency("slow", 1), "concurrency must be 1 to 1000, got 0"),
    ];
    for (i, (b, text)) in bad.into_iter().enumerate() {
        let e = b.build().map(|_| ()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "case {i}: {e}");
        assert!(e.message().contains(text), "case {i}: {e:?} does not say {text:?}");
    }
    let counts = |w: Worker| {
        let c = w.config().clone();
        let mut own: Vec<(String, u32)> = c.queue_concurrency.iter().map(|(q, n)| (q.to_string(), *n)).collect();
        own.sort();
        (c.concurrency, own)
    };
    let own = |v: &[(&str, u32)]| v.iter().map(|(q, n)| (q.to_string(), *n)).collect::<Vec<_>>();
    // Every queue its own: the concurrency is their sum (River's and Oban's model).
    let w = two().queue_concurrency("fast", 20).queue_concurrency("slow", 5).build().unwrap();
    assert_eq!(counts(w), (25, own(&[("fast", 20), ("slow", 5)])));
    // Some queues share: the default 10 for them on top, or what a given concurrency leaves.
    assert_eq!(counts(two().queue_concurrency("slow", 2).build().unwrap()), (12, own(&[("slow", 2)])));
    assert_eq!(counts(two().concurrency(4).queue_concurrency("slow", 3).build().unwrap()), (4, own(&[("slow", 3)])));
    // The last count given for a queue wins; a concurrency equal to the sum is accepted.
    let w = two().concurrency(3).queue_concurrency("slow", 5).queue_concurrency("slow", 1).queue_concurrency("fast", 2);
    assert_eq!(counts(w.build().unwrap()), (3, own(&[("fast", 2), ("slow", 1)])));
    // No counts: as before.
    assert_eq!(counts(two().build().unwrap()), (10, own(&[])));
}
