//! Rescue of the PostgreSQL backend against the real server: expired Fetched rows, zombies,
//! held jobs' expiries, the rescue lock and the purges under it (moved out of ops.rs).

mod common;

use std::time::Duration;

use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::{
    Backend, BackendExt, CancelOutcome, ClaimMode, ClaimParams, DeadReason, JobId, JobLocation, JobStatus, PurgeParams,
    PurgeTarget, QueueControl, QueueName, RequeueOutcome, RescueParams, WorkerId, ZombiePolicy,
};
use common::{claim_one, job, q};
use sqlx::Connection;

fn ago(secs: i64) -> chokaq_core::Timestamp {
    chokaq_core::chrono::Utc::now() - chokaq_core::chrono::Duration::seconds(secs)
}

#[tokio::test]
async fn complete_after_rescue_is_rejected_and_rescue_stands() {
    let f = fixture!();
    let db = &f.db;
    let id = db.enqueue(job("zombie")).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim_one(db, w, "zombie", ClaimMode::Start).await;
    db.force(id, &JobPatch { heartbeat_at: Some(Some(ago(3600))), ..Default::default() }).await.unwrap();
    let r = db.rescue(&RescueParams::default()).await.unwrap();
    assert!(r.ran);
    assert_eq!((r.zombies_retried, r.zombies_dead), (1, 0));
    assert!(db.complete_one(w, j.lease_ref()).await.unwrap().is_lost());
    let hb = db.heartbeat(w, &[j.lease_ref()]).await.unwrap();
    assert_eq!(hb.lost, vec![id]);
    let rec = db.get_job(id).await.unwrap().unwrap();
    assert_eq!(rec.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(rec.worker_id, None);
    // Another worker finishes it; it is archived exactly once.
    let w2 = WorkerId::random();
    let j2 = claim_one(db, w2, "zombie", ClaimMode::Start).await;
    assert_eq!(j2.attempt, 2);
    db.complete_one(w2, j2.lease_ref()).await.unwrap().done().unwrap();
    let p = db.presence(id).await.unwrap();
    assert_eq!((p.hot, p.archive, p.dead), (0, 1, 0));
    f.drop().await;
}

#[tokio::test]
async fn rescue_releases_old_fetched_and_dead_letters_spent_zombies() {
    let f = fixture!();
    let db = &f.db;
    let fetched = db.enqueue(job("r1")).await.unwrap().id;
    let spent = db.enqueue(job("r2").max_attempts(1)).await.unwrap().id;
    let policy = db.enqueue(job("r3")).await.unwrap().id;
    let fresh = db.enqueue(job("r4")).await.unwrap().id;
    db.control_queue(&q("r3"), QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await.unwrap();
    let w = WorkerId::random();
    claim_one(db, w, "r1", ClaimMode::Reserve).await;
    claim_one(db, w, "r2", ClaimMode::Start).await;
    claim_one(db, w, "r3", ClaimMode::Start).await;
    claim_one(db, w, "r4", ClaimMode::Start).await;
    db.force(fetched, &JobPatch { updated_at: Some(ago(3600)), ..Default::default() }).await.unwrap();
    for id in [spent, policy] {
        db.force(id, &JobPatch { heartbeat_at: Some(Some(ago(3600))), ..Default::default() }).await.unwrap();
    }
    let r = db.rescue(&RescueParams::default()).await.unwrap();
    assert_eq!((r.ran, r.fetched_released, r.zombies_retried, r.zombies_dead), (true, 1, 0, 2));
    assert_eq!(db.get_job(fetched).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Pending));
    for id in [spent, policy] {
        assert_eq!(db.get_job(id).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Zombie));
    }
    assert_eq!(db.get_job(fresh).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Processing));
    // A per-queue zombie timeout overrides the default.
    db.control_queue(&q("r4"), QueueControl::SetZombieTimeout(Some(Duration::from_millis(1)))).await.unwrap();
    // Poll until the database clock has moved past the 1 ms timeout (no fixed sleep).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = db.rescue(&RescueParams::default()).await.unwrap();
        if r.zombies_retried > 0 || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(r.zombies_retried, 1);
    f.drop().await;
}

/// A held job (ClaimMode::Hold) expires by the zombie timeout from its last heartbeat, never
/// by the fetched timeout; each expiry counts in `expired_holds`, which every claim returns
/// (`claim`, and the handoff of `complete_and_claim`), and no number of expiries dead-letters it
/// (issue 36); a held job whose cancel was requested is dead-lettered `cancelled`;
/// requeue_dead resets the count.
#[tokio::test]
async fn held_jobs_expire_by_the_zombie_timeout_and_never_die_of_expiries() {
    const ROUNDS: i32 = 5;
    let f = fixture!();
    let db = &f.db;
    let s = db.schema().to_string();
    let id = db.enqueue(job("held")).await.unwrap().id;
    let holds = |id: JobId| {
        let sql = format!("SELECT expired_holds FROM \"{s}\".jobs_hot WHERE id = $1");
        let pool = db.pool().clone();
        async move { sqlx::query_scalar::<_, i32>(&sql).bind(id.0).fetch_optional(&pool).await.unwrap() }
    };
    for round in 1..=ROUNDS {
        let j = claim_one(db, WorkerId::random(), "held", ClaimMode::Hold).await;
        assert_eq!((j.id, j.expired_holds), (id, round - 1), "held claim {round}");
        // Past the fetched timeout (60 s), within the zombie timeout (300 s): held on.
        let patch = JobPatch { heartbeat_at: Some(Some(ago(120))), updated_at: Some(ago(120)), ..Default::default() };
        db.force(id, &patch).await.unwrap();
        let r = db.rescue(&RescueParams::default()).await.unwrap();
        assert_eq!((r.fetched_released, r.zombies_dead), (0, 0), "round {round}: {r:?}");
        db.force(id, &JobPatch { heartbeat_at: Some(Some(ago(3600))), ..Default::default() }).await.unwrap();
        let r = db.rescue(&RescueParams::default()).await.unwrap();
        let rec = db.get_job(id).await.unwrap().unwrap();
        assert_eq!((r.fetched_released, r.zombies_dead), (1, 0), "round {round}: {r:?}");
        assert_eq!(
            (rec.location, rec.attempt, rec.lease, rec.heartbeat_at),
            (JobLocation::Hot(JobStatus::Pending), 0, None, None),
            "after expiry {round}"
        );
        assert_eq!(holds(id).await, Some(round), "expired_holds after expiry {round}");
    }
    // The handoff returns the count too: a second job completed, this one claimed.
    let w = WorkerId::random();
    let other = db.enqueue(job("held").priority(9)).await.unwrap().id;
    let first = claim_one(db, w, "held", ClaimMode::Start).await;
    assert_eq!((first.id, first.expired_holds), (other, 0));
    let req = ClaimParams::new(w, vec![q("held")], 1, ClaimMode::Hold);
    let (done, next) = db.complete_and_claim(w, &[first.lease_ref()], &req).await.unwrap();
    assert_eq!(done.done, vec![other]);
    assert_eq!(next.iter().map(|j| (j.id, j.expired_holds)).collect::<Vec<_>>(), vec![(id, ROUNDS)]);
    assert_eq!(db.release(w, &[next[0].lease_ref()]).await.unwrap().done, vec![id]);
    // Dead-lettered by a cancel, requeued: a fresh row.
    assert_eq!(db.cancel(id).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(db.requeue_dead(id).await.unwrap(), RequeueOutcome::Requeued);
    assert_eq!(holds(id).await, Some(0), "requeue resets expired_holds");

    // A cancel of a held job is a request; the expiry then dead-letters it `cancelled`.
    let j = claim_one(db, WorkerId::random(), "held", ClaimMode::Hold).await;
    assert_eq!(db.cancel(j.id).await.unwrap(), CancelOutcome::Requested);
    db.force(id, &JobPatch { heartbeat_at: Some(Some(ago(3600))), ..Default::default() }).await.unwrap();
    let r = db.rescue(&RescueParams::default()).await.unwrap();
    assert_eq!((r.fetched_released, r.zombies_dead), (0, 1), "{r:?}");
    assert_eq!(db.get_job(id).await.unwrap().unwrap().location, JobLocation::Dead(DeadReason::Cancelled));
    f.drop().await;
}

#[tokio::test]
async fn rescue_runs_on_one_instance_at_a_time() {
    let f = fixture!();
    let db = &f.db;
    // Another instance's rescue holds the schema's `rescue` lock row.
    let mut tx = db.pool().begin().await.unwrap();
    let q = format!("SELECT name FROM \"{}\".locks WHERE name = 'rescue' FOR UPDATE", db.schema());
    sqlx::query(&q).execute(&mut *tx).await.unwrap();
    let r = db.rescue(&RescueParams::default()).await.unwrap();
    assert!(!r.ran);
    tx.rollback().await.unwrap();
    assert!(db.rescue(&RescueParams::default()).await.unwrap().ran);
    f.drop().await;
}

/// Issue 11 item 10: the retention purges of `RescueParams::purge` run under the maintenance
/// lock: while another instance holds it, nothing is purged; once it is free, everything due.
#[tokio::test]
async fn maintenance_purges_only_under_the_lock() {
    let f = fixture!();
    let db = &f.db;
    let w = WorkerId::random();
    for _ in 0..3 {
        db.enqueue(job("purge_lock")).await.unwrap();
    }
    let got =
        db.claim(&ClaimParams::new(w, vec![QueueName::new("purge_lock").unwrap()], 3, ClaimMode::Start)).await.unwrap();
    let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
    assert_eq!(db.complete(w, &leases).await.unwrap().done.len(), 3);
    let mut req = PurgeParams::new(PurgeTarget::Archive, Duration::ZERO);
    req.queue = Some(QueueName::new("purge_lock").unwrap());
    let params = RescueParams { limit: 10, purge: vec![req] };
    let mut tx = db.pool().begin().await.unwrap();
    let q = format!("SELECT name FROM \"{}\".locks WHERE name = 'rescue' FOR UPDATE", db.schema());
    sqlx::query(&q).execute(&mut *tx).await.unwrap();
    let r = db.rescue(&params).await.unwrap();
    assert_eq!((r.ran, r.purged), (false, 0), "{r:?}");
    assert_eq!(db.stats().await.unwrap().archived, 3, "nothing purged while another instance holds the lock");
    tx.rollback().await.unwrap();
    let r = db.rescue(&params).await.unwrap();
    assert_eq!((r.ran, r.purged), (true, 3), "{r:?}");
    assert_eq!(db.stats().await.unwrap().archived, 0);
    f.drop().await;
}

/// Issue 16, finding 4: any login could hold the old advisory key and silently stop rescue.
/// The lock is now a row of the schema's `locks` table: the advisory key stops nothing.
#[tokio::test]
async fn a_session_holding_the_old_advisory_key_does_not_stop_rescue() {
    let f = fixture!();
    let db = &f.db;
    let mut other = sqlx::PgConnection::connect(&common::url()).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(hashtextextended($1, 0))")
        .bind(format!("chokaq:rescue:{}", db.schema()))
        .execute(&mut other)
        .await
        .unwrap();
    let r = db.rescue(&RescueParams::default()).await.unwrap();
    assert!(r.ran, "rescue did not run while another session held the advisory key chokaq:rescue:<schema>");
    // Nor does it stop a migration (which waits for its lock).
    tokio::time::timeout(Duration::from_secs(5), db.migrate()).await.expect("migrate waited").unwrap();
    sqlx::Connection::close(other).await.unwrap();
    f.drop().await;
}
