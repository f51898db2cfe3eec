//! Rescue, queue controls, requeue, purge, stats, wake-ups and the schema's lifecycle of the SQLite
//! backend, against a real database file per test.

mod common;

use std::time::Duration;

use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::{
    Backend, BackendExt, ClaimMode, DeadReason, ErrorKind, FailAction, FailOutcome, Fenced, JobId, JobLocation,
    JobStatus, JobTable, ListJobsParams, PurgeParams, PurgeTarget, QueueControl, RequeueOutcome, RescueParams, Wake,
    WorkerId, ZombiePolicy,
};
use common::{claim, fresh, fresh_with, job, q};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[tokio::test]
async fn rescue_releases_expired_fetched_and_handles_zombies() {
    let (b, _db) = fresh().await;
    // fetched (expired), fetched (fresh), zombie with attempts left, zombie out of attempts,
    // zombie in a dead-letter-policy queue, zombie in a queue with a long zombie timeout.
    let fe = b.enqueue(job("z1")).await.unwrap().id;
    let ff = b.enqueue(job("z1")).await.unwrap().id;
    let zr = b.enqueue(job("z2").max_attempts(3)).await.unwrap().id;
    let zd = b.enqueue(job("z2").max_attempts(1)).await.unwrap().id;
    let zp = b.enqueue(job("z3")).await.unwrap().id;
    let zl = b.enqueue(job("z4")).await.unwrap().id;
    b.control_queue(&q("z3"), QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await.unwrap();
    b.control_queue(&q("z4"), QueueControl::SetZombieTimeout(Some(secs(86_400)))).await.unwrap();
    let w = WorkerId::random();
    let f = claim(&b, w, "z1", 2, ClaimMode::Reserve).await;
    let z2 = claim(&b, w, "z2", 2, ClaimMode::Start).await;
    let z3 = claim(&b, w, "z3", 1, ClaimMode::Start).await;
    let z4 = claim(&b, w, "z4", 1, ClaimMode::Start).await;
    let old = b.db_now().await.unwrap() - chrono::Duration::seconds(600);
    b.force(fe, &JobPatch { updated_at: Some(old), ..JobPatch::default() }).await.unwrap();
    for id in [zr, zd, zp, zl] {
        b.force(id, &JobPatch { heartbeat_at: Some(Some(old)), ..JobPatch::default() }).await.unwrap();
    }
    let params = RescueParams { limit: 100, purge: Vec::new() };
    let rep = b.rescue(&params).await.unwrap();
    assert!(rep.ran);
    assert_eq!((rep.fetched_released, rep.zombies_retried, rep.zombies_dead), (1, 1, 2));
    let loc = |id| {
        let b = b.clone();
        async move { b.get_job(id).await.unwrap().unwrap().location }
    };
    assert_eq!(loc(fe).await, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(loc(ff).await, JobLocation::Hot(JobStatus::Fetched));
    assert_eq!(loc(zr).await, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(loc(zd).await, JobLocation::Dead(DeadReason::Zombie));
    assert_eq!(loc(zp).await, JobLocation::Dead(DeadReason::Zombie));
    assert_eq!(loc(zl).await, JobLocation::Hot(JobStatus::Processing));
    assert_eq!(b.get_job(zr).await.unwrap().unwrap().attempt, 1);

    // The old owners are fenced out.
    let fe_lease = f.iter().find(|j| j.id == fe).unwrap().lease_ref();
    assert!(b.start_one(w, fe_lease).await.unwrap().is_lost());
    let zr_lease = z2.iter().find(|j| j.id == zr).unwrap().lease_ref();
    assert!(b.complete_one(w, zr_lease).await.unwrap().is_lost());
    assert_eq!(b.heartbeat(w, &[z3[0].lease_ref()]).await.unwrap().lost, vec![zp]);
    assert!(!b.complete_one(w, z4[0].lease_ref()).await.unwrap().is_lost());

    // Nothing left: a second pass does nothing.
    let rep = b.rescue(&params).await.unwrap();
    assert_eq!((rep.fetched_released, rep.zombies_retried, rep.zombies_dead), (0, 0, 0));
}

#[tokio::test]
async fn rescue_respects_its_limit() {
    let (b, _db) = fresh().await;
    b.enqueue_many(vec![job("l"); 5]).await.unwrap();
    let w = WorkerId::random();
    let js = claim(&b, w, "l", 5, ClaimMode::Reserve).await;
    let old = b.db_now().await.unwrap() - chrono::Duration::seconds(600);
    for j in &js {
        b.force(j.id, &JobPatch { updated_at: Some(old), ..JobPatch::default() }).await.unwrap();
    }
    let params = RescueParams { limit: 3, ..RescueParams::default() };
    assert_eq!(b.rescue(&params).await.unwrap().fetched_released, 3);
    assert_eq!(b.rescue(&params).await.unwrap().fetched_released, 2);
    assert_eq!(b.stats().await.unwrap().pending, 5);
}

#[tokio::test]
async fn queue_controls_pause_deactivate_and_cap() {
    let (b, _db) = fresh().await;
    let s = b.queue_settings(&q("qc")).await.unwrap();
    assert_eq!((s.max_workers, s.is_paused, s.is_active, s.updated_at), (None, false, true, None));
    b.enqueue_many(vec![job("qc"); 5]).await.unwrap();
    let w = WorkerId::random();

    let s = b.pause(&q("qc")).await.unwrap();
    assert!(s.is_paused && s.updated_at.is_some());
    assert!(claim(&b, w, "qc", 10, ClaimMode::Reserve).await.is_empty());
    b.resume(&q("qc")).await.unwrap();
    b.control_queue(&q("qc"), QueueControl::Deactivate).await.unwrap();
    assert!(claim(&b, w, "qc", 10, ClaimMode::Reserve).await.is_empty());
    let s = b.control_queue(&q("qc"), QueueControl::Activate).await.unwrap();
    assert!(s.is_active && !s.is_paused);

    let s = b.set_max_workers(&q("qc"), Some(2)).await.unwrap();
    assert_eq!(s.max_workers, Some(2));
    let first = claim(&b, w, "qc", 10, ClaimMode::Reserve).await;
    assert_eq!(first.len(), 2, "cap holds inside one batch");
    assert!(claim(&b, w, "qc", 10, ClaimMode::Start).await.is_empty());
    assert!(!b.release_one(w, first[0].lease_ref()).await.unwrap().is_lost());
    assert_eq!(claim(&b, w, "qc", 10, ClaimMode::Start).await.len(), 1);
    b.set_max_workers(&q("qc"), Some(0)).await.unwrap();
    assert!(claim(&b, w, "qc", 10, ClaimMode::Start).await.is_empty());
    b.set_max_workers(&q("qc"), None).await.unwrap();
    assert_eq!(claim(&b, w, "qc", 10, ClaimMode::Start).await.len(), 3);

    let s = b.control_queue(&q("qc"), QueueControl::SetZombieTimeout(Some(secs(42)))).await.unwrap();
    assert_eq!(s.zombie_timeout, Some(secs(42)));
    let s = b.control_queue(&q("qc"), QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await.unwrap();
    assert_eq!(s.zombie_policy, ZombiePolicy::DeadLetter);
    assert_eq!(s.zombie_timeout, Some(secs(42)));
    assert_eq!(s, b.queue_settings(&q("qc")).await.unwrap());
}

#[tokio::test]
async fn requeue_dead_restores_the_job() {
    let (b, _db) = fresh().await;
    let id = b.enqueue(job("rq").priority(4).idempotency_key("rk").max_attempts(1)).await.unwrap().id;
    let w = WorkerId::random();
    let j = claim(&b, w, "rq", 1, ClaimMode::Start).await.remove(0);
    let f = b.fail(w, j.lease_ref(), FailAction::Retry { delay: secs(1), error: "e".into() }).await.unwrap();
    assert_eq!(f, Fenced::Done(FailOutcome::DeadLettered(DeadReason::Failed)));

    // A live job took the key meanwhile: conflict, nothing moves.
    let other = b.enqueue(job("rq").idempotency_key("rk")).await.unwrap();
    assert!(!other.duplicate);
    assert_eq!(b.requeue_dead(id).await.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(b.presence(id).await.unwrap().dead, 1);
    b.cancel(other.id).await.unwrap();

    assert_eq!(b.requeue_dead(id).await.unwrap(), RequeueOutcome::Requeued);
    let r = b.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!((r.attempt, r.priority), (0, 4));
    assert_eq!(r.idempotency_key.as_deref(), Some("rk"));
    let p = b.presence(id).await.unwrap();
    assert_eq!((p.hot, p.archive, p.dead), (1, 0, 0));
    assert_eq!(b.requeue_dead(id).await.unwrap(), RequeueOutcome::NotFound);
    assert_eq!(
        b.enqueue(job("rq").idempotency_key("rk")).await.unwrap(),
        chokaq_core::Enqueued { id, duplicate: true }
    );
    let j = claim(&b, w, "rq", 1, ClaimMode::Start).await.remove(0);
    assert_eq!((j.id, j.attempt), (id, 1));
}

#[tokio::test]
async fn purge_deletes_old_finished_jobs_in_batches() {
    let (b, _db) = fresh().await;
    b.enqueue_many(vec![job("p"); 7]).await.unwrap();
    b.enqueue_many(vec![job("p2"); 2]).await.unwrap();
    let w = WorkerId::random();
    let js = claim(&b, w, "p", 7, ClaimMode::Start).await;
    let leases: Vec<_> = js.iter().map(|j| j.lease_ref()).collect();
    assert_eq!(b.complete(w, &leases[..5]).await.unwrap().done.len(), 5);
    for l in &leases[5..] {
        let _ = b.fail(w, *l, FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() }).await.unwrap();
    }
    for j in claim(&b, w, "p2", 2, ClaimMode::Start).await {
        let _ = b.fail(w, j.lease_ref(), FailAction::Cancelled { error: None }).await.unwrap();
    }
    // Nothing is older than an hour.
    assert_eq!(b.purge(&PurgeParams::new(PurgeTarget::Archive, secs(3600))).await.unwrap(), 0);
    let now = b.db_now().await.unwrap();
    assert!(common::wait_until(secs(5), || async { b.db_now().await.unwrap() > now }).await);
    let mut req = PurgeParams::new(PurgeTarget::Archive, Duration::ZERO);
    req.batch_size = 2;
    req.max_batches = 2;
    assert_eq!(b.purge(&req).await.unwrap(), 4, "bounded by batches");
    assert_eq!(b.purge(&req).await.unwrap(), 1);
    let mut dl = PurgeParams::new(PurgeTarget::DeadLetter, Duration::ZERO);
    dl.reason = Some(DeadReason::Cancelled);
    assert_eq!(b.purge(&dl).await.unwrap(), 2);
    dl.reason = None;
    dl.queue = Some(q("other"));
    assert_eq!(b.purge(&dl).await.unwrap(), 0);
    dl.queue = Some(q("p"));
    assert_eq!(b.purge(&dl).await.unwrap(), 2);
    assert_eq!(b.stats().await.unwrap().total(), 0);
}

#[tokio::test]
async fn stats_and_listing() {
    let (b, _db) = fresh().await;
    let old = b.db_now().await.unwrap() - chrono::Duration::seconds(50);
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut j = job("s1").tag(format!("t{}", i % 2));
        if i == 0 {
            j = j.run_at(old);
        }
        ids.push(b.enqueue(j).await.unwrap().id);
    }
    ids.push(b.enqueue(job("s2").delay(secs(600))).await.unwrap().id);
    let w = WorkerId::random();
    let c = claim(&b, w, "s1", 2, ClaimMode::Start).await;
    b.complete_one(w, c[0].lease_ref()).await.unwrap().done().unwrap();
    let snap = b.stats().await.unwrap();
    assert_eq!((snap.pending, snap.fetched, snap.processing, snap.archived, snap.dead), (4, 0, 1, 1, 0));
    assert!(snap.taken_at.is_some());
    let s1 = snap.queue("s1").unwrap();
    assert_eq!((s1.pending, s1.processing, s1.archived), (3, 1, 1));
    assert!(s1.oldest_due_at.is_some());
    let s2 = snap.queue("s2").unwrap();
    assert_eq!(s2.pending, 1);
    assert_eq!(s2.oldest_due_at, None, "not due yet");

    let mut f = ListJobsParams::new(JobTable::Hot);
    f.limit = 2;
    let p1 = b.list_jobs(&f).await.unwrap();
    assert_eq!(p1.jobs.len(), 2);
    f.after = p1.next;
    let p2 = b.list_jobs(&f).await.unwrap();
    assert_eq!(p2.jobs.len(), 2);
    f.after = p2.next;
    let p3 = b.list_jobs(&f).await.unwrap();
    assert_eq!(p3.jobs.len(), 1);
    assert_eq!(p3.next, None);
    let all: Vec<JobId> = p1.jobs.iter().chain(&p2.jobs).chain(&p3.jobs).map(|j| j.id).collect();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "id order");

    let mut f = ListJobsParams::new(JobTable::Hot);
    f.queue = Some(q("s1"));
    f.tag = Some("t0".into());
    assert_eq!(b.list_jobs(&f).await.unwrap().jobs.len(), 2, "t0 jobs left in hot");
    f.tag = None;
    f.status = Some(JobStatus::Processing);
    assert_eq!(b.list_jobs(&f).await.unwrap().jobs.len(), 1);
    let mut f = ListJobsParams::new(JobTable::Archive);
    f.kind = Some(chokaq_core::JobKind::new("test.job.v1").unwrap());
    let arch = b.list_jobs(&f).await.unwrap();
    assert_eq!(arch.jobs.len(), 1);
    assert_eq!(arch.jobs[0].location, JobLocation::Archived);
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.created_from = Some(b.db_now().await.unwrap() + chrono::Duration::seconds(10));
    assert!(b.list_jobs(&f).await.unwrap().jobs.is_empty());

    let pm = b.presence_many(&ids).await.unwrap();
    assert_eq!(pm.len(), 6);
    assert!(pm.iter().all(|(_, p)| p.total() == 1));
    assert_eq!(pm.iter().filter(|(_, p)| p.archive == 1).count(), 1);
}

#[tokio::test]
async fn wakeups_hear_this_process_enqueues() {
    let (b, _db) = fresh().await;
    let mut w = b.wakeups().await.unwrap().expect("in-process wakeups");
    b.enqueue(job("wake")).await.unwrap();
    let got = tokio::time::timeout(secs(5), w.recv()).await.unwrap();
    assert_eq!(got, Some(Wake::Queue("wake".into())));
}

#[tokio::test]
async fn drop_schema_removes_the_tables_and_the_empty_file() {
    let (b, db) = fresh().await;
    b.enqueue(job("x")).await.unwrap();
    assert!(db.path.exists());
    b.drop_schema().await.unwrap();
    assert!(!db.path.exists(), "the file was the schema");
    assert_eq!(b.stats().await.unwrap_err().kind(), ErrorKind::Unavailable, "pools are closed");
}

#[tokio::test]
async fn drop_schema_keeps_a_file_with_other_tables() {
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let mut other = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    sqlx::query("CREATE TABLE app_data (x INTEGER)").execute(&mut other).await.unwrap();
    b.enqueue(job("x")).await.unwrap();
    b.drop_schema().await.unwrap();
    assert!(db.path.exists(), "the file holds the application's table");
    assert!(b.stats().await.is_err(), "the job tables are gone");
    b.migrate().await.unwrap();
    assert_eq!(b.stats().await.unwrap().total(), 0);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM app_data").fetch_one(&mut other).await.unwrap();
    assert_eq!(n, 0);
}

/// Another process holding the write lock longer than the busy timeout and every retry:
/// the write fails as Transient (retryable) and changes nothing; once the lock is gone the
/// same call succeeds.
#[tokio::test]
async fn busy_database_is_a_transient_error() {
    use sqlx::Connection;
    let (b, db) = fresh_with(|c| c.busy_timeout(Duration::from_millis(5))).await;
    let mut other = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE").execute(&mut other).await.unwrap();
    let e = b.enqueue(job("busy")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    assert!(e.is_retryable());
    // Reads are not blocked by the writer (WAL).
    assert_eq!(b.stats().await.unwrap().total(), 0);
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    assert!(!b.enqueue(job("busy")).await.unwrap().duplicate);
    assert_eq!(b.stats().await.unwrap().total(), 1);
}

/// Throughput reads a range of the archive's `(finished_at, queue)` index and never the
/// table: every queue, and one queue.
#[tokio::test]
async fn throughput_reads_a_covering_index_range() {
    use sqlx::{ConnectOptions, Row};
    let (b, db) = fresh().await;
    let w = WorkerId::random();
    for queue in ["tp_a", "tp_b"] {
        b.enqueue_many((0..20).map(|_| job(queue)).collect()).await.unwrap();
        for j in claim(&b, w, queue, 20, ClaimMode::Start).await {
            b.complete(w, &[j.lease_ref()]).await.unwrap();
        }
    }
    let mut conn: sqlx::SqliteConnection =
        db.url().parse::<sqlx::sqlite::SqliteConnectOptions>().unwrap().connect().await.unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    let all = chokaq_sqlite::all_statements("main").unwrap();
    for name in ["throughput_all", "throughput_queue"] {
        let sql = &all.iter().find(|(n, _)| *n == name).unwrap().1;
        let text = format!("EXPLAIN QUERY PLAN {sql}");
        let rows = sqlx::query(&text).bind(0i64).bind(60_000_000i64).bind("tp_a").fetch_all(&mut conn).await.unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>("detail")).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("USING COVERING INDEX jobs_archive_finished_queue"), "{name}:\n{plan}");
    }
    let buckets = b.throughput(&chokaq_core::ThroughputParams::last_hour()).await.unwrap();
    let per: Vec<(String, u64)> = buckets.iter().map(|x| (x.queue.clone(), x.finished)).collect();
    let total = |q: &str| per.iter().filter(|(n, _)| n == q).map(|(_, n)| n).sum::<u64>();
    assert_eq!((total("tp_a"), total("tp_b")), (20, 20));
}

/// Issue 12, item 1: jobs scheduled for later are Scheduled, outside the claim's index range
/// (queue, Pending), so 20,000 of them due tomorrow cost the claim of five due jobs nothing
/// (version 5 kept them in that range, and every claim walked past them); once due, the claim
/// promotes them and they run.
#[tokio::test]
async fn a_scheduled_backlog_stays_out_of_the_claim_range() {
    use sqlx::Connection;
    let (b, db) = fresh().await;
    let tomorrow = b.db_now().await.unwrap() + chokaq_core::chrono::Duration::seconds(86_400);
    for _ in 0..4 {
        b.enqueue_many((0..5_000).map(|_| job("later").run_at(tomorrow)).collect()).await.unwrap();
    }
    b.enqueue_many((0..5).map(|_| job("later")).collect()).await.unwrap();
    let mut conn = sqlx::SqliteConnection::connect(&db.url()).await.unwrap();
    let in_range: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs_hot INDEXED BY jobs_hot_claim WHERE queue = 'later' AND status = 0",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(in_range, 5, "entries of the claim's index range with 20,000 jobs due tomorrow and 5 due now");
    assert_eq!(b.stats().await.unwrap().pending, 20_005, "Scheduled counts as Pending");
    assert_eq!(claim(&b, WorkerId::random(), "later", 10, ClaimMode::Reserve).await.len(), 5);
    // Once due, a Scheduled job is promoted by the claim and runs.
    let one = b.enqueue(job("later2").run_at(tomorrow)).await.unwrap().id;
    assert!(claim(&b, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await.is_empty());
    assert_eq!(b.get_job(one).await.unwrap().unwrap().location, JobLocation::Hot(JobStatus::Pending));
    let past = b.db_now().await.unwrap() - chokaq_core::chrono::Duration::seconds(1);
    assert!(b.force(one, &JobPatch { scheduled_at: Some(Some(past)), ..Default::default() }).await.unwrap());
    let got = claim(&b, WorkerId::random(), "later2", 10, ClaimMode::Reserve).await;
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![one]);
    conn.close().await.unwrap();
}
