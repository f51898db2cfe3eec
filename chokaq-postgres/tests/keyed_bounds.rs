//! Issue 36 hole 7: a keyed claim's work, locks and time are bounded by its limit, never by the
//! number of keys. Before, a keyed claim took one advisory lock per key it met and walked on
//! until it had met every key or filled its limit, in rounds that doubled without bound, each
//! candidate tested against the growing list of full keys: with many full keys it exhausted the
//! server's shared lock table (53200, "out of shared memory") or took seconds to return nothing.
//! Figures are printed (performance is shown, not asserted); locks and results are asserted
//! exactly. The server's settings are left as they are (the default lock table).

mod common;

use std::time::{Duration, Instant};

use chokaq_core::{Backend, ClaimMode, ClaimParams, QueueControl, WorkerId};
use chokaq_postgres::PgBackend;
use common::q;
use sqlx::Connection;

/// Most advisory locks one keyed claim may hold (`functions.sql`, `key_lock`: the key stripes).
const MAX_KEY_LOCKS: i64 = 64;

/// Inserts, for each of `keys` keys `k0…` of `queue`, `running` Processing and `pending` Pending
/// rows (SQL, for speed: the states a long run leaves, not a path under test), priority
/// `priority`, then ANALYZE.
async fn fill(db: &PgBackend, queue: &str, keys: i32, running: i32, pending: i32, priority: i32) {
    let s = db.schema();
    let sql = format!(
        "INSERT INTO \"{s}\".jobs_hot (id, queue, kind, payload, concurrency_key, priority, max_attempts, status,
                                        attempt, lease, worker_id, started_at, heartbeat_at)
         SELECT gen_random_uuid(), $1, 'test.job.v1', '{{}}', 'k' || k, $5, 3, CASE WHEN n <= $3 THEN 2 ELSE 0 END,
                CASE WHEN n <= $3 THEN 1 ELSE 0 END,
                CASE WHEN n <= $3 THEN nextval('\"{s}\".lease_seq') END,
                CASE WHEN n <= $3 THEN gen_random_uuid() END,
                CASE WHEN n <= $3 THEN now() END, CASE WHEN n <= $3 THEN now() END
           FROM generate_series(0, $2 - 1) AS k, generate_series(1, $3 + $4) AS n"
    );
    sqlx::query(&sql)
        .bind(queue)
        .bind(keys)
        .bind(running)
        .bind(pending)
        .bind(priority)
        .execute(db.pool())
        .await
        .unwrap();
    sqlx::query(&format!("ANALYZE \"{s}\".jobs_hot")).execute(db.pool()).await.unwrap();
}

/// A keyed claim of `limit` held by the test hook at 'take' (after its keyed walk, its locks
/// still held), the advisory locks its session holds counted from another session, then let
/// go. Returns (advisory locks held, jobs claimed, the claim's time less the hold).
async fn claim_counting_locks(db: &PgBackend, queue: &str, limit: i32) -> (i64, usize, Duration) {
    const HOLD_MS: u64 = 300;
    let common::cap_race::Delayed { mut conn, pid } = common::cap_race::Delayed::new(HOLD_MS, "take").await.unwrap();
    let claim_sql = format!("SELECT id FROM \"{}\".claim($1, $2, $3, $4)", db.schema());
    let queue_name = queue.to_string();
    let t0 = Instant::now();
    let held = tokio::spawn(async move {
        let mut tx = conn.begin().await.unwrap();
        let rows: Vec<uuid::Uuid> = sqlx::query_scalar(&claim_sql)
            .bind(WorkerId::random().0)
            .bind(vec![queue_name])
            .bind(limit)
            .bind(2i16)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        rows.len()
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ev: Option<String> = sqlx::query_scalar("SELECT wait_event FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_optional(db.pool())
            .await
            .unwrap()
            .flatten();
        if ev.as_deref() == Some("PgSleep") {
            break;
        }
        if held.is_finished() {
            // Failed before its hold: the error.
            held.await.unwrap();
            panic!("the claim ended before its hold");
        }
        assert!(Instant::now() < deadline, "the claim never reached its hold");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let locks: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory'")
        .bind(pid)
        .fetch_one(db.pool())
        .await
        .unwrap();
    let n = held.await.unwrap();
    (locks, n, t0.elapsed().saturating_sub(Duration::from_millis(HOLD_MS)))
}

/// The claim's result and time through the backend.
async fn timed_claim(db: &PgBackend, queue: &str, limit: u32) -> (usize, Duration) {
    let t0 = Instant::now();
    let got = db.claim(&ClaimParams::new(WorkerId::random(), vec![q(queue)], limit, ClaimMode::Start)).await.unwrap();
    (got.len(), t0.elapsed())
}

/// (a) 50,000 full keys (cap 1, each with one running and one Pending job): a claim of 10 and
/// one of 1,000 each hold at most `MAX_KEY_LOCKS` advisory locks (before: one per key met,
/// 50,000, past the default lock table of 6,400: 53200), return nothing, and take milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_full_keys_bound_a_claims_locks() {
    let f = fixture!();
    let db = &f.db;
    let queue = "full_keys";
    db.control_queue(&q(queue), QueueControl::SetKeyMaxWorkers(Some(1))).await.unwrap();
    fill(db, queue, 50_000, 1, 1, 0).await;
    for limit in [10, 1000] {
        let (locks, n, took) = claim_counting_locks(db, queue, limit).await;
        eprintln!("50,000 full keys, claim of {limit}: {locks} advisory locks, {n} claimed, {took:?}");
        assert!(locks <= MAX_KEY_LOCKS, "a claim of {limit} held {locks} advisory locks");
        assert_eq!(n, 0, "every key is full");
    }
    for limit in [10, 1000] {
        let (n, took) = timed_claim(db, queue, limit).await;
        eprintln!("50,000 full keys, claim of {limit} through the backend: {n} claimed in {took:?}");
        assert_eq!(n, 0);
    }
    f.drop().await;
}

/// (b) 15,000 keys with one Pending job each at a key cap of 0 (before: every claim failed with
/// 53200 after 4-6 s): nothing is claimed, promptly, and without a lock; a keyless job behind
/// them is claimed within the claims the walk's bound needs to pass them (4 x 10 + 64 rows a
/// claim beyond its first part).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_thousand_keys_at_cap_zero_return_promptly() {
    let f = fixture!();
    let db = &f.db;
    let queue = "cap_zero";
    db.control_queue(&q(queue), QueueControl::SetKeyMaxWorkers(Some(0))).await.unwrap();
    fill(db, queue, 15_000, 0, 1, 5).await;
    for limit in [10, 1000] {
        let (locks, n, took) = claim_counting_locks(db, queue, limit).await;
        eprintln!("15,000 keys at cap 0, claim of {limit}: {locks} advisory locks, {n} claimed, {took:?}");
        assert_eq!((locks, n), (0, 0), "a key at cap 0 is full without a lock");
    }
    // A keyless job behind them: reached as the walk position moves on, a budget a claim.
    let kl = db.enqueue_many(vec![common::job(queue).priority(0)]).await.unwrap();
    let (mut got, mut claims, mut slowest) = (Vec::new(), 0, Duration::ZERO);
    while got.is_empty() && claims < 15_000 / 104 + 3 {
        let t0 = Instant::now();
        got = db.claim(&ClaimParams::new(WorkerId::random(), vec![q(queue)], 10, ClaimMode::Start)).await.unwrap();
        slowest = slowest.max(t0.elapsed());
        claims += 1;
    }
    eprintln!("15,000 keys at cap 0 ahead of a keyless job: claimed after {claims} claims of 10, slowest {slowest:?}");
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![kl[0].id], "the keyless job");
    f.drop().await;
}

/// (b) 10,000 tenants at a key cap of 1, each full (one running job, two more Pending), ahead of
/// 5 keys with room (before: each claim took 5.2 s and returned nothing). Each claim returns
/// promptly; the walk is bounded, so a claim may see only full keys, and the next claim
/// continues where it stopped (the queue's walk position, migration 15): the 5 jobs with room
/// are claimed within the claims that the bound needs to pass 20,000 Pending rows, and never a
/// full key's job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_full_tenants_never_hold_back_keys_with_room() {
    let f = fixture!();
    let db = &f.db;
    let queue = "tenants";
    db.control_queue(&q(queue), QueueControl::SetKeyMaxWorkers(Some(1))).await.unwrap();
    fill(db, queue, 10_000, 1, 2, 5).await;
    let free: Vec<_> = db
        .enqueue_many((0..5).map(|i| common::job(queue).concurrency_key(format!("free{i}"))).collect())
        .await
        .unwrap();
    let (locks, n, took) = claim_counting_locks(db, queue, 10).await;
    eprintln!("10,000 full tenants, claim of 10: {locks} advisory locks, {n} claimed, {took:?}");
    assert!(locks <= MAX_KEY_LOCKS, "{locks} advisory locks");
    let mut got = n;
    let mut claims = 1;
    let mut slowest = took;
    // The walk reads at most 4 * limit + 64 rows a claim (104 for 10): 20,000 rows ahead.
    while got < free.len() && claims < 20_000 / 104 + 3 {
        let (n, took) = timed_claim(db, queue, 10).await;
        got += n;
        claims += 1;
        slowest = slowest.max(took);
    }
    eprintln!("10,000 full tenants: the 5 keys with room claimed after {claims} claims of 10, slowest {slowest:?}");
    assert_eq!(got, free.len(), "every key with room was reached");
    let busy_sql = format!("SELECT count(*) FROM \"{}\".jobs_hot WHERE queue = $1 AND status IN (1, 2)", db.schema());
    let busy: i64 = sqlx::query_scalar(&busy_sql).bind(queue).fetch_one(db.pool()).await.unwrap();
    assert_eq!(busy, 10_005, "no full key took another job");
    f.drop().await;
}
