//! Enqueue and the claim: every field round-trips, the claim modes, order, queues, limits, due
//! times, stopped queues, queue settings, the cap, and what a claim locks and costs.

use super::*;

#[tokio::test]
async fn enqueue_round_trips_every_field() {
    let f = fixture!();
    let db = &f.db;
    let e = db
        .enqueue(
            job("fields")
                .json(json!({"to": "a@b.c", "n": [1, 2, 3]}))
                .priority(7)
                .idempotency_key("k-1")
                .tags(["red", "blue"])
                .max_attempts(4)
                .created_by("tester"),
        )
        .await
        .unwrap();
    let r = db.get_job(e.id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(r.payload, json!({"to": "a@b.c", "n": [1, 2, 3]}));
    assert_eq!(r.priority, 7);
    assert_eq!(r.idempotency_key.as_deref(), Some("k-1"));
    assert_eq!(r.tags, vec!["red", "blue"]);
    assert_eq!((r.attempt, r.max_attempts), (0, 4));
    assert_eq!(r.created_by.as_deref(), Some("tester"));
    assert_eq!(r.lease, None);
    assert!(db.get_job(JobId::new()).await.unwrap().is_none());
    f.drop().await;
}

#[rstest]
#[case::reserve(ClaimMode::Reserve)]
#[case::hold(ClaimMode::Hold)]
#[case::start(ClaimMode::Start)]
#[tokio::test]
async fn claim_modes(#[case] mode: ClaimMode) {
    let f = fixture!();
    let db = &f.db;
    for _ in 0..3 {
        db.enqueue(job("modes")).await.unwrap();
    }
    let w = WorkerId::random();
    let jobs = claim(db, w, "modes", 2, mode).await;
    assert_eq!(jobs.len(), 2);
    assert!(jobs[0].lease != jobs[1].lease);
    for j in &jobs {
        assert_eq!(j.worker_id, w);
        match mode {
            ClaimMode::Reserve => {
                assert_eq!((j.status, j.attempt), (JobStatus::Fetched, 0));
                assert!(j.started_at.is_none() && j.heartbeat_at.is_none());
            }
            ClaimMode::Hold => {
                assert_eq!((j.status, j.attempt), (JobStatus::Fetched, 0));
                assert!(j.started_at.is_none() && j.heartbeat_at.is_some());
            }
            ClaimMode::Start => {
                assert_eq!((j.status, j.attempt), (JobStatus::Processing, 1));
                assert!(j.started_at.is_some() && j.heartbeat_at.is_some());
            }
        }
    }
    // Claimed jobs are not claimed again; the third one is.
    let rest = claim(db, WorkerId::random(), "modes", 10, mode).await;
    assert_eq!(rest.len(), 1);
    assert!(rest[0].lease.0 > jobs[1].lease.0.max(jobs[0].lease.0), "leases grow");
    f.drop().await;
}

/// A Reserve claim writes `heartbeat_at = NULL` (a re-claimed row may carry the heartbeat of
/// its previous run, which would make it held); Hold writes now().
#[tokio::test]
async fn reserve_clears_an_old_heartbeat_and_hold_sets_one() {
    let f = fixture!();
    let db = &f.db;
    let id = db.enqueue(job("rehb")).await.unwrap().id;
    let w = WorkerId::random();
    let first = claim_one(db, w, "rehb", ClaimMode::Start).await;
    let retry = FailAction::Retry { delay: Duration::ZERO, error: "again".into() };
    assert!(db.fail(w, first.lease_ref(), retry).await.unwrap().done().is_some());
    let r = db.get_job(id).await.unwrap().unwrap();
    assert!(r.heartbeat_at.is_some(), "the retried row keeps its last heartbeat");
    let again = claim_one(db, w, "rehb", ClaimMode::Reserve).await;
    assert_eq!((again.status, again.heartbeat_at), (JobStatus::Fetched, None));
    assert!(db.release_one(w, again.lease_ref()).await.unwrap().done().is_some());
    let held = claim_one(db, w, "rehb", ClaimMode::Hold).await;
    let now = db.db_now().await.unwrap();
    assert!(held.heartbeat_at.is_some_and(|t| (now - t).num_seconds().abs() < 5), "{:?}", held.heartbeat_at);
    f.drop().await;
}

#[tokio::test]
async fn claim_order_is_priority_then_due_then_id() {
    let f = fixture!();
    let db = &f.db;
    let now = db.db_now().await.unwrap();
    let low = db.enqueue(job("order").priority(0)).await.unwrap().id;
    let high = db.enqueue(job("order").priority(9)).await.unwrap().id;
    let old_due = db.enqueue(job("order").run_at(now - chrono_secs(60))).await.unwrap().id;
    let low2 = db.enqueue(job("order").priority(0)).await.unwrap().id;
    let got: Vec<JobId> =
        claim(db, WorkerId::random(), "order", 10, ClaimMode::Reserve).await.iter().map(|j| j.id).collect();
    assert_eq!(got, vec![high, old_due, low, low2]);
    f.drop().await;
}

#[tokio::test]
async fn claim_takes_only_the_named_queues_and_respects_the_limit() {
    let f = fixture!();
    let db = &f.db;
    for i in 0..10 {
        db.enqueue(job(if i % 2 == 0 { "a" } else { "b" })).await.unwrap();
    }
    db.enqueue(job("c")).await.unwrap();
    let w = WorkerId::random();
    let got = db.claim(&ClaimParams::new(w, vec![q("a"), q("b")], 7, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.len(), 7);
    assert!(got.iter().all(|j| j.queue.as_str() != "c"));
    let err = db.claim(&ClaimParams::new(w, vec![q("a")], 0, ClaimMode::Reserve)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = db.claim(&ClaimParams::new(w, vec![], 1, ClaimMode::Reserve)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    f.drop().await;
}

#[tokio::test]
async fn scheduled_jobs_wait_until_due() {
    let f = fixture!();
    let db = &f.db;
    let later = db.enqueue(job("sched").delay(Duration::from_secs(3600))).await.unwrap().id;
    let now = db.db_now().await.unwrap();
    let at = db.enqueue(job("sched").run_at(now + chrono_secs(3600))).await.unwrap().id;
    assert!(claim(db, WorkerId::random(), "sched", 10, ClaimMode::Reserve).await.is_empty());
    let r = db.get_job(later).await.unwrap().unwrap();
    assert!(r.scheduled_at.unwrap() > now + chrono_secs(3500));
    // Due now: claimable.
    assert!(db.force(at, &JobPatch { scheduled_at: Some(Some(ago(1))), ..Default::default() }).await.unwrap());
    let got = claim(db, WorkerId::random(), "sched", 10, ClaimMode::Reserve).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![at]);
    f.drop().await;
}

#[rstest]
#[case::paused(QueueControl::Pause, QueueControl::Resume)]
#[case::inactive(QueueControl::Deactivate, QueueControl::Activate)]
#[tokio::test]
async fn stopped_queues_are_not_claimed(#[case] stop: QueueControl, #[case] go: QueueControl) {
    let f = fixture!();
    let db = &f.db;
    db.enqueue(job("ctl")).await.unwrap();
    let s = db.control_queue(&q("ctl"), stop).await.unwrap();
    assert!(s.is_paused || !s.is_active);
    assert!(claim(db, WorkerId::random(), "ctl", 10, ClaimMode::Start).await.is_empty());
    // Also when capped (the capped path reads the row under its lock).
    db.set_max_workers(&q("ctl"), Some(5)).await.unwrap();
    assert!(claim(db, WorkerId::random(), "ctl", 10, ClaimMode::Start).await.is_empty());
    let s = db.control_queue(&q("ctl"), go).await.unwrap();
    assert!(!s.is_paused && s.is_active && s.max_workers == Some(5));
    assert_eq!(claim(db, WorkerId::random(), "ctl", 10, ClaimMode::Start).await.len(), 1);
    f.drop().await;
}

#[tokio::test]
async fn queue_settings_round_trip() {
    let f = fixture!();
    let db = &f.db;
    let s = db.queue_settings(&q("none")).await.unwrap();
    assert_eq!(s, chokaq_core::QueueSettings::default_for(q("none")));
    db.control_queue(&q("set"), QueueControl::SetZombieTimeout(Some(Duration::from_secs(30)))).await.unwrap();
    db.control_queue(&q("set"), QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await.unwrap();
    db.set_max_workers(&q("set"), Some(3)).await.unwrap();
    let s = db.queue_settings(&q("set")).await.unwrap();
    assert_eq!(s.max_workers, Some(3));
    assert_eq!(s.zombie_timeout, Some(Duration::from_secs(30)));
    assert_eq!(s.zombie_policy, ZombiePolicy::DeadLetter);
    assert!(s.updated_at.is_some());
    db.set_max_workers(&q("set"), None).await.unwrap();
    assert_eq!(db.queue_settings(&q("set")).await.unwrap().max_workers, None);
    f.drop().await;
}

#[tokio::test]
async fn cap_holds_inside_one_batch_and_across_claims() {
    let f = fixture!();
    let db = &f.db;
    for _ in 0..10 {
        db.enqueue(job("capped")).await.unwrap();
        db.enqueue(job("free")).await.unwrap();
    }
    db.set_max_workers(&q("capped"), Some(2)).await.unwrap();
    let w = WorkerId::random();
    let got = db.claim(&ClaimParams::new(w, vec![q("capped"), q("free")], 20, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.iter().filter(|j| j.queue.as_str() == "capped").count(), 2);
    assert_eq!(got.iter().filter(|j| j.queue.as_str() == "free").count(), 10);
    assert!(claim(db, w, "capped", 10, ClaimMode::Start).await.is_empty());
    // Fetched counts too: start one, complete it, and exactly one slot opens.
    let one = got.iter().find(|j| j.queue.as_str() == "capped").unwrap().lease_ref();
    db.start_one(w, one).await.unwrap().done().unwrap();
    assert!(claim(db, w, "capped", 10, ClaimMode::Start).await.is_empty());
    db.complete_one(w, one).await.unwrap().done().unwrap();
    assert_eq!(claim(db, w, "capped", 10, ClaimMode::Start).await.len(), 1);
    // A cap of zero stops the queue.
    db.set_max_workers(&q("free"), Some(0)).await.unwrap();
    db.enqueue(job("free")).await.unwrap();
    assert!(claim(db, w, "free", 10, ClaimMode::Start).await.is_empty());
    f.drop().await;
}

/// Issue 12, item 4: a claim naming five queues locks the ten rows it returns, not ten per
/// queue. Version 8 of the schema locked all fifty until its commit: a second claimer running
/// meanwhile found every row of the five queues locked and came back empty.
#[tokio::test]
async fn a_claim_over_many_queues_locks_only_what_it_returns() {
    let f = fixture!();
    let db = &f.db;
    let names = ["lk1", "lk2", "lk3", "lk4", "lk5"];
    for n in names {
        db.enqueue_many((0..10).map(|_| job(n)).collect()).await.unwrap();
        // The queue's control row, made before: a claim creates a missing one, and the
        // concurrent claimer below would wait for the held claim's uncommitted insert of it
        // (once per queue; claims commit at once, this test holds one open).
        db.resume(&q(n)).await.unwrap();
    }
    let queues: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let s = db.schema();
    // The first claim, in a transaction held open.
    let mut holder = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    let first: Vec<uuid::Uuid> = sqlx::query_scalar(&format!("SELECT id FROM \"{s}\".claim($1, $2, 10, 0::int2)"))
        .bind(uuid::Uuid::new_v4())
        .bind(&queues)
        .fetch_all(&mut holder)
        .await
        .unwrap();
    assert_eq!(first.len(), 10, "the first claim's rows");
    // What another session can still lock: the forty rows the first claim did not return.
    let mut probe = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut probe).await.unwrap();
    let free: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM (SELECT id FROM \"{s}\".jobs_hot WHERE status = 0 FOR UPDATE SKIP LOCKED) f"
    ))
    .fetch_one(&mut probe)
    .await
    .unwrap();
    sqlx::query("ROLLBACK").execute(&mut probe).await.unwrap();
    assert_eq!(free, 40, "rows left lockable while the first claim is open (50 enqueued, 10 claimed)");
    // A concurrent claimer gets every one of them.
    let all: Vec<QueueName> = names.iter().map(|n| q(n)).collect();
    let second = db.claim(&ClaimParams::new(WorkerId::random(), all, 100, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(second.len(), 40, "the concurrent claimer's rows");
    assert!(second.iter().all(|j| !first.contains(&j.id.0)));
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    assert_eq!(db.stats().await.unwrap().fetched, 50);
    f.drop().await;
}

/// Issue 12, item 4, the top-up: when the rows a multi-queue claim chose are taken before it
/// locks them, it takes the next free rows instead of coming back short.
#[tokio::test]
async fn a_multi_queue_claim_tops_up_when_its_rows_are_taken() {
    let f = fixture!();
    let db = &f.db;
    db.enqueue_many((0..3).map(|_| job("tu1").priority(5)).collect()).await.unwrap();
    db.enqueue_many((0..10).map(|_| job("tu2")).collect()).await.unwrap();
    let s = db.schema();
    // Another session holds two of tu1's three rows (the best by priority).
    let mut holder = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    let held: Vec<uuid::Uuid> = sqlx::query_scalar(&format!(
        "SELECT id FROM \"{s}\".jobs_hot WHERE queue = 'tu1' ORDER BY id LIMIT 2 FOR UPDATE"
    ))
    .fetch_all(&mut holder)
    .await
    .unwrap();
    let got =
        db.claim(&ClaimParams::new(WorkerId::random(), vec![q("tu1"), q("tu2")], 5, ClaimMode::Reserve)).await.unwrap();
    assert_eq!(got.len(), 5, "a full batch despite two chosen rows being held");
    assert!(got.iter().all(|j| !held.contains(&j.id.0)));
    assert_eq!(got.iter().filter(|j| j.queue.as_str() == "tu1").count(), 1);
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    f.drop().await;
}

/// Issue 12, item 1: jobs scheduled for later cost the claim nothing. With 20,000 jobs due
/// tomorrow and five due now, the claim reads a handful of index pages (version 8 walked
/// every not-yet-due entry of the claim index), and the delayed jobs are claimed once due,
/// through their promotion.
#[tokio::test]
async fn a_scheduled_backlog_costs_the_claim_nothing() {
    let f = fixture!();
    let db = &f.db;
    let tomorrow = db.db_now().await.unwrap() + chrono_secs(86_400);
    for _ in 0..4 {
        db.enqueue_many((0..5_000).map(|_| job("later").run_at(tomorrow)).collect()).await.unwrap();
    }
    db.enqueue_many((0..5).map(|_| job("later")).collect()).await.unwrap();
    let s = db.schema();
    let mut conn = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    let got: Vec<uuid::Uuid> = sqlx::query_scalar(&format!("SELECT id FROM \"{s}\".claim($1, $2, 10, 0::int2)"))
        .bind(uuid::Uuid::new_v4())
        .bind(vec!["later".to_string()])
        .fetch_all(&mut conn)
        .await
        .unwrap();
    // This transaction's own index page reads (hits and misses) in the two indexes a claim
    // seeks, not yet flushed to the cumulative statistics.
    let read: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::int8
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relname IN ('jobs_hot_claim_idx', 'jobs_hot_scheduled_idx')",
    )
    .bind(s)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    assert_eq!(got.len(), 5, "the due jobs");
    assert!(read <= 10, "index pages the claim read with 20,000 scheduled jobs: {read}");
    // Once due, a delayed job is claimed like any other.
    let one = db.enqueue(job("later2").run_at(tomorrow)).await.unwrap().id;
    assert!(claim(db, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await.is_empty());
    assert_eq!(db.get_job(one).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Pending));
    assert!(db.force(one, &JobPatch { scheduled_at: Some(Some(ago(1))), ..Default::default() }).await.unwrap());
    let got = claim(db, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![one]);
    f.drop().await;
}
