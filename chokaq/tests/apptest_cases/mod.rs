//! The cases of `chokaq::apptest`'s own tests, run on every backend by `apptest_memory.rs`,
//! `apptest_sqlite.rs` and `apptest_postgres.rs`, each case on a fresh backend (a new memory
//! backend, a new SQLite file, a new PostgreSQL schema).

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chokaq::apptest::{assert_enqueued_exactly, Expect, Harness, Outcome};
use chokaq::{Backend, Client, DeadReason, ErrorKind, Job, JobBuilder, JobError};
use futures::future::BoxFuture;
use futures::FutureExt;
use libtest_mimic::{Arguments, Failed, Trial};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Signup {
    pub user: u64,
    pub email: String,
}

impl Job for Signup {
    const KIND: &'static str = "apptest.signup.v1";
    fn queue() -> &'static str {
        "signups"
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Welcome {
    pub to: String,
}

impl Job for Welcome {
    const KIND: &'static str = "apptest.welcome.v1";
    fn queue() -> &'static str {
        "email"
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Slow;

impl Job for Slow {
    const KIND: &'static str = "apptest.slow.v1";
    fn timeout() -> Option<Duration> {
        Some(Duration::from_millis(100))
    }
}

/// What a case gets: a migrated backend of its own.
pub type Case = fn(Arc<dyn Backend>) -> BoxFuture<'static, ()>;

pub const CASES: &[(&str, Case)] = &[
    ("assertions_match_type_payload_and_options", |b| assertions(b).boxed()),
    ("failing_assertion_shows_the_closest_jobs", |b| failing_message(b).boxed()),
    ("perform_runs_one_handler_with_a_real_context", |b| perform(b).boxed()),
    ("drain_runs_what_was_due_and_recursive_what_it_enqueued", |b| drain(b).boxed()),
    ("inline_client_runs_each_job_as_it_is_enqueued", |b| inline(b).boxed()),
];

/// A case on one backend type (for backend-specific cases).
pub type CaseOn<B> = fn(Arc<B>) -> BoxFuture<'static, ()>;

type CaseOf<B> = Box<dyn Fn(Arc<B>) -> BoxFuture<'static, ()> + Send + Sync>;

/// Runs every case through libtest-mimic on backends from `make`, after `cleanup`.
pub fn main_with<B, M, MF, C, CF>(
    reachable: Result<(), String>,
    extra: Vec<(&'static str, CaseOn<B>)>,
    make: M,
    cleanup: C,
) -> std::process::ExitCode
where
    B: Backend,
    M: Fn() -> MF + Send + Sync + Clone + 'static,
    MF: Future<Output = chokaq::Result<Arc<B>>>,
    C: Fn(Arc<B>) -> CF + Send + Sync + Clone + 'static,
    CF: Future<Output = ()>,
{
    let args = Arguments::from_args();
    let shared =
        CASES.iter().map(|&(name, case)| (name, Box::new(move |b: Arc<B>| case(b as Arc<dyn Backend>)) as CaseOf<B>));
    let extra = extra.into_iter().map(|(name, case)| (name, Box::new(case) as CaseOf<B>));
    let trials = shared
        .chain(extra)
        .map(|(name, case)| {
            let (make, cleanup) = (make.clone(), cleanup.clone());
            Trial::test(name, move || {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
                rt.block_on(async {
                    let b = make().await.map_err(|e| Failed::from(format!("backend: {e}")))?;
                    let out = std::panic::AssertUnwindSafe(case(b.clone())).catch_unwind().await;
                    cleanup(b).await;
                    out.map_err(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
                            .unwrap_or_default();
                        Failed::from(msg)
                    })
                })
            })
        })
        .collect::<Vec<_>>();
    let trials = match reachable {
        Ok(()) => trials,
        Err(why) => {
            eprintln!("{why}: every case is ignored");
            trials.into_iter().map(|t| t.with_ignored_flag(true)).collect()
        }
    };
    libtest_mimic::run(&args, trials).exit_code()
}

fn signup(user: u64) -> Signup {
    Signup { user, email: format!("u{user}@example.com") }
}

/// The typed assertions: type, payload predicate, queue, priority, key, tags, schedule; the
/// counted and the many-jobs forms; finished jobs only when asked.
async fn assertions(b: Arc<dyn Backend>) {
    let client = Client::new(b.clone());
    client.enqueue(&signup(1)).await.unwrap();
    client
        .enqueue(JobBuilder::new(&signup(2)).priority(7).tag("vip").tag("eu").idempotency_key("signup-2"))
        .await
        .unwrap();
    client.enqueue(JobBuilder::new(&signup(3)).queue("slow").delay(Duration::from_secs(3600))).await.unwrap();
    client.enqueue(&Welcome { to: "u1@example.com".into() }).await.unwrap();

    let two = Expect::<Signup>::matching(|s| s.user == 2)
        .queue("signups")
        .priority(7)
        .tag("vip")
        .tag("eu")
        .idempotency_key("signup-2")
        .due_now()
        .assert_enqueued(&*b)
        .await;
    assert_eq!(two.job, signup(2));
    Expect::<Signup>::matching(|s| s.user == 3)
        .queue("slow")
        .delayed_by(Duration::from_secs(3600))
        .assert_enqueued(&*b)
        .await;
    Expect::<Signup>::matching(|s| s.user == 1).no_idempotency_key().due_now().assert_enqueued(&*b).await;
    Expect::<Signup>::matching(|s| s.user == 2).priority(0).refute_enqueued(&*b).await;
    Expect::<Signup>::matching(|s| s.user == 3).due_now().refute_enqueued(&*b).await;
    Expect::<Signup>::matching(|s| s.user == 4).refute_enqueued(&*b).await;
    assert_eq!(Expect::<Signup>::any().assert_enqueued_times(&*b, 3).await.len(), 3);
    assert_eq!(Expect::<Welcome>::any().assert_enqueued_times(&*b, 1).await.len(), 1);
    assert_enqueued_exactly(
        &*b,
        &[
            &Expect::<Welcome>::any(),
            &Expect::<Signup>::matching(|s| s.user == 3),
            &Expect::<Signup>::any().tag("vip"),
            &Expect::<Signup>::any(),
        ],
    )
    .await;

    // A finished job no longer counts, unless asked.
    let h = Harness::new(b.clone());
    h.register(|_w: Welcome, _ctx| async { Ok(()) });
    assert_eq!(h.drain("email").await.unwrap().completed(), 1);
    Expect::<Welcome>::any().refute_enqueued(&*b).await;
    Expect::<Welcome>::any().including_finished().assert_enqueued_times(&*b, 1).await;
}

/// A failing assertion names what it wanted and prints the closest jobs and how they differ.
async fn failing_message(b: Arc<dyn Backend>) {
    let client = Client::new(b.clone());
    client.enqueue(JobBuilder::new(&signup(1)).priority(1)).await.unwrap();
    client.enqueue(JobBuilder::new(&signup(2)).priority(5)).await.unwrap();
    let wanted = Expect::<Signup>::matching(|s| s.user == 2).priority(6);
    let panic = std::panic::AssertUnwindSafe(wanted.assert_enqueued(&*b)).catch_unwind().await.unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("expected a job like") && msg.contains("priority 6"), "{msg}");
    assert!(msg.contains("The closest of the 2 jobs of kind \"apptest.signup.v1\""), "{msg}");
    let first = msg.lines().find(|l| l.contains("differs:")).unwrap_or_default();
    assert_eq!(first.trim(), "differs: priority is 5, not 6", "the closest job comes first:\n{msg}");
    assert!(msg.contains("payload does not satisfy the predicate; priority is 1, not 6"), "{msg}");

    let welcome = Expect::<Welcome>::any();
    let none = welcome.assert_enqueued(&*b);
    let panic = std::panic::AssertUnwindSafe(none).catch_unwind().await.unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("No live job of kind \"apptest.welcome.v1\" is enqueued."), "{msg}");

    let any = Expect::<Signup>::any();
    let list: [&dyn chokaq::apptest::Expectation; 1] = [&any];
    let many = assert_enqueued_exactly(&*b, &list);
    let panic = std::panic::AssertUnwindSafe(many).catch_unwind().await.unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("expected exactly 1 live jobs, found 2.") && msg.contains("not expected:"), "{msg}");
}

/// `perform`: one attempt, a real context (id, attempt, heartbeat holds the lease), and each
/// way a handler ends written as a worker writes it.
async fn perform(b: Arc<dyn Backend>) {
    let h = Harness::new(b.clone());
    h.register(|s: Signup, ctx| async move {
        assert_eq!(ctx.attempt(), 1);
        assert_eq!(ctx.kind().as_str(), Signup::KIND);
        assert!(ctx.heartbeat().await?, "the lease is held while the handler runs");
        match s.user {
            1 => Ok(()),
            2 => Err(JobError::retry("later")),
            3 => Err(JobError::fatal("never")),
            4 => Err(JobError::Snooze(Duration::from_secs(60))),
            5 => Err(JobError::Cancel(Some("not wanted".into()))),
            _ => panic!("boom {}", s.user),
        }
    });
    let run = |n| {
        let h = h.clone();
        async move { h.perform(&signup(n)).await.unwrap() }
    };
    assert_eq!(run(1).await.outcome, Outcome::Completed);
    assert!(matches!(run(2).await.outcome, Outcome::Retried { ref error, .. } if error == "later"));
    let dead = run(3).await;
    assert_eq!(dead.outcome, Outcome::DeadLettered { reason: DeadReason::Failed, error: Some("never".into()) });
    assert!(matches!(run(4).await.outcome, Outcome::Snoozed { .. }));
    assert!(matches!(run(5).await.outcome, Outcome::DeadLettered { reason: DeadReason::Cancelled, .. }));
    assert!(matches!(run(6).await.outcome, Outcome::Retried { ref error, .. } if error == "handler panicked: boom 6"));

    let stats = b.stats().await.unwrap();
    assert_eq!((stats.archived, stats.dead, stats.pending, stats.processing, stats.fetched), (1, 2, 3, 0, 0));
    assert_eq!(b.get_job(dead.id).await.unwrap().unwrap().attempt, 1);
    assert_eq!(h.history().len(), 6);

    // No handler for the kind: a typed error, and the job stays pending.
    let err = h.perform(&Welcome { to: "x@example.com".into() }).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.message().contains("no handler is registered"), "{err}");
    Expect::<Welcome>::any().due_now().assert_enqueued_times(&*b, 1).await;
    // The type's timeout applies: the handler is stopped and the attempt retried.
    h.register(|_s: Slow, ctx| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(ctx.is_cancelled());
        Ok(())
    });
    let slow = h.perform(&Slow).await.unwrap();
    assert!(
        matches!(slow.outcome, Outcome::Retried { ref error, .. } if error == "job timed out after 100ms"),
        "{slow:?}"
    );
    // A job scheduled for later is not run.
    let later = JobBuilder::new(&signup(1)).delay(Duration::from_secs(3600));
    assert_eq!(h.perform(later).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    let stats = b.stats().await.unwrap();
    assert_eq!((stats.archived, stats.pending, stats.processing), (1, 3 + 1 + 1 + 1, 0), "{stats:?}");
}

/// `drain` runs the jobs due in one queue when called, once each, and not what they enqueue;
/// `drain_recursive` goes on with those (in any queue) up to its bound, leaving other queues'
/// older jobs alone.
async fn drain(b: Arc<dyn Backend>) {
    let h = Harness::new(b.clone());
    let client = h.client();
    let c = client.clone();
    h.register(move |s: Signup, _ctx| {
        let c = c.clone();
        async move {
            if s.user == 13 {
                return Err(JobError::fatal("unlucky"));
            }
            c.enqueue(&Welcome { to: s.email }).await?;
            Ok(())
        }
    });
    h.register(|_w: Welcome, _ctx| async { Ok(()) });
    client.enqueue_many((10..15).map(signup).collect::<Vec<_>>().iter()).await.unwrap();
    client.enqueue(JobBuilder::new(&signup(99)).delay(Duration::from_secs(3600))).await.unwrap();
    client.enqueue(&Welcome { to: "old@example.com".into() }).await.unwrap();

    let drained = h.drain("signups").await.unwrap();
    assert_eq!((drained.ran.len(), drained.completed(), drained.failed(), drained.hit_bound), (5, 4, 1, false));
    assert_eq!(drained.of_kind(Signup::KIND).count(), 5);
    // Four welcomes enqueued by the handlers plus the old one wait; the delayed signup too.
    Expect::<Welcome>::any().assert_enqueued_times(&*b, 5).await;
    Expect::<Signup>::matching(|s| s.user == 99).assert_enqueued(&*b).await;
    assert_eq!(h.drain("signups").await.unwrap().ran.len(), 0, "nothing due is left in the queue");

    // Recursive: two more signups, their welcomes; the five welcomes already waiting are
    // another queue's older jobs and stay.
    client.enqueue_many([&signup(20), &signup(21)]).await.unwrap();
    let drained = h.drain_recursive("signups", 100).await.unwrap();
    let kinds: Vec<&str> = drained.ran.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == Signup::KIND).count(), 2, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == Welcome::KIND).count(), 2, "{kinds:?}");
    assert!(!drained.hit_bound);
    Expect::<Welcome>::any().assert_enqueued_times(&*b, 5).await;
    Expect::<Welcome>::matching(|w| w.to == "u20@example.com").including_finished().assert_enqueued(&*b).await;

    // The bound: three signups would make six runs; three run, the rest stay pending.
    client.enqueue_many([&signup(30), &signup(31), &signup(32)]).await.unwrap();
    let drained = h.drain_recursive("signups", 3).await.unwrap();
    assert_eq!((drained.ran.len(), drained.hit_bound), (3, true));
    let stats = b.stats().await.unwrap();
    assert_eq!((stats.fetched, stats.processing), (0, 0), "nothing is left claimed");
    assert_eq!(stats.archived, 4 + 4 + 3);
}

/// The inline client: each job (and the jobs its handler enqueues through the same client)
/// runs before `enqueue` returns; delayed jobs wait; a job enqueuing itself stops at the
/// depth bound with a typed error.
async fn inline(b: Arc<dyn Backend>) {
    let h = Harness::new(b.clone());
    let client = h.inline_client();
    let c = client.clone();
    h.register(move |s: Signup, _ctx| {
        let c = c.clone();
        async move {
            if s.user == 0 {
                c.enqueue(&signup(0)).await?; // forever
                return Ok(());
            }
            c.enqueue(&Welcome { to: s.email }).await?;
            Ok(())
        }
    });
    h.register(|_w: Welcome, _ctx| async { Ok(()) });

    client.enqueue(&signup(1)).await.unwrap();
    let history = h.history();
    let order: Vec<&str> = history.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(order, [Welcome::KIND, Signup::KIND], "the welcome ran inside the signup's handler");
    assert!(history.iter().all(|r| r.outcome == Outcome::Completed));
    Expect::<Welcome>::matching(|w| w.to == "u1@example.com").including_finished().assert_enqueued(&*b).await;
    assert_eq!(b.stats().await.unwrap().archived, 2);

    client.enqueue_many([&signup(2), &signup(3)]).await.unwrap();
    assert_eq!(b.stats().await.unwrap().archived, 6);

    client.enqueue(JobBuilder::new(&signup(4)).delay(Duration::from_secs(60))).await.unwrap();
    Expect::<Signup>::matching(|s| s.user == 4).delayed_by(Duration::from_secs(60)).assert_enqueued(&*b).await;
    assert_eq!(h.history().len(), 6, "a delayed job is not run");

    // A job enqueuing itself: 16 levels run; the 17th enqueue fails inside the 16th handler,
    // whose attempt fails (a retry); the 17th job is inserted and left pending.
    client.enqueue(&signup(0)).await.unwrap();
    let runs = h.history().split_off(6);
    assert_eq!(runs.len(), 16);
    let failed: Vec<_> = runs.iter().filter(|r| !r.outcome.is_completed()).collect();
    assert_eq!(failed.len(), 1, "{runs:?}");
    assert!(
        matches!(&failed[0].outcome, Outcome::Retried { error, .. } if error.contains("levels deep")),
        "{failed:?}"
    );
    let stats = b.stats().await.unwrap();
    assert_eq!((stats.fetched, stats.processing), (0, 0), "nothing is left claimed: {stats:?}");
    assert_eq!((stats.pending, stats.archived), (3, 6 + 15), "the delayed signup, the retry, the 17th: {stats:?}");
}
