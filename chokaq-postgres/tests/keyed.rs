//! Issue 25 on PostgreSQL: Blocked rows (status 4, migration 13) keep a key's backlog beyond
//! its parking depth (`key_depth(cap)`, the cap plus 128) out of the claim index (no
//! head-of-line walk), read as Pending everywhere, and come back through the moves, a raised or
//! cleared cap and rescue's sweep.

mod common;

use std::time::Instant;

use chokaq_core::{
    Backend, CancelOutcome, ClaimMode, ClaimParams, JobLocation, JobStatus, JobTable, LeaseRef, ListJobsParams, NewJob,
    QueueControl, RescueParams, WorkerId,
};
use common::{job, q};

fn keyed(queue: &str, key: &str, priority: i32) -> NewJob {
    job(queue).priority(priority).concurrency_key(key)
}

async fn statuses(db: &chokaq_postgres::PgBackend, queue: &str) -> Vec<(i16, i64)> {
    let sql = format!(
        "SELECT status, count(*) FROM \"{}\".jobs_hot WHERE queue = $1 GROUP BY status ORDER BY status",
        db.schema()
    );
    sqlx::query_as(&sql).bind(queue).fetch_all(db.pool()).await.unwrap()
}

/// The parking depth of a key at `cap` (functions.sql's `key_depth`).
async fn depth(db: &chokaq_postgres::PgBackend, cap: i32) -> i64 {
    let sql = format!("SELECT \"{}\".key_depth($1)::int8", db.schema());
    sqlx::query_scalar(&sql).bind(cap).fetch_one(db.pool()).await.unwrap()
}

async fn key_cap(db: &chokaq_postgres::PgBackend, queue: &str, cap: Option<u32>) {
    db.control_queue(&q(queue), QueueControl::SetKeyMaxWorkers(cap)).await.unwrap();
}

/// One key with 50,000 jobs at cap 1, enqueued ahead (higher priority) of 1,000 one-job keys:
/// all but `key_depth(1)` (129) of the hot key's rows are Blocked, so a claim that finds the key
/// at its cap reads at most those 129 of its rows (the EXPLAIN ANALYZE of the walk's next
/// round, which skips the key, shows the rows it read), and the 1,000 keys drain in claims of
/// 10 beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_key_at_its_cap_is_walked_at_most_to_its_depth() {
    let f = fixture!();
    let db = &f.db;
    let queue = "hot";
    key_cap(db, queue, Some(1)).await;
    let d = depth(db, 1).await;
    assert_eq!(d, 129, "key_depth(1)");
    for _ in 0..50 {
        db.enqueue_many((0..1000).map(|_| keyed(queue, "hot", 10)).collect()).await.unwrap();
    }
    db.enqueue_many((0..1000).map(|k| keyed(queue, &format!("k{k}"), 0)).collect()).await.unwrap();
    assert_eq!(statuses(db, queue).await, vec![(0, 1000 + d), (4, 50_000 - d)], "(status, rows) after the enqueue");
    let s = db.stats().await.unwrap();
    let qs = s.queues.iter().find(|x| x.queue == queue).unwrap();
    assert_eq!(qs.pending, 51_000, "Blocked reads as Pending in the stats");

    sqlx::query(&format!("ANALYZE \"{}\".jobs_hot", db.schema())).execute(db.pool()).await.unwrap();
    // The walk of key_candidates (functions.sql) in a claim of 10 after its first round found
    // the hot key full: the key's Pending rows are filtered out, 28 others read.
    let walk = format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT x.id, x.concurrency_key FROM \"{}\".jobs_hot x \
          WHERE x.queue = $1 AND x.status = 0 AND x.due_at <= now() \
            AND (x.concurrency_key IS NULL OR NOT (($1 || chr(31) || x.concurrency_key) = ANY ($2))) \
          ORDER BY x.priority DESC, x.due_at, x.id LIMIT 28",
        db.schema()
    );
    let full = vec![format!("{queue}\u{1f}hot")];
    let plan: serde_json::Value = sqlx::query_scalar(&walk).bind(queue).bind(&full).fetch_one(db.pool()).await.unwrap();
    let top = &plan[0]["Plan"];
    let scan = &top["Plans"][0];
    let rows = scan["Actual Rows"].as_f64().unwrap();
    let skipped = scan["Rows Removed by Filter"].as_f64().unwrap_or(0.0);
    let buffers = scan["Shared Hit Blocks"].as_i64().unwrap_or(0) + scan["Shared Read Blocks"].as_i64().unwrap_or(0);
    eprintln!(
        "walk: {} on {:?}, {rows} rows read, {skipped} of the full key skipped, {buffers} buffers",
        scan["Node Type"], scan["Index Name"]
    );
    assert_eq!((rows, skipped), (28.0, d as f64), "(rows, rows of the full key) the walk read");

    let w = WorkerId::random();
    let started = Instant::now();
    let mut claims = 0;
    let mut done = 0;
    let mut longest = 0u128;
    while done < 1001 {
        let t = Instant::now();
        let got = db.claim(&ClaimParams::new(w, vec![q(queue)], 10, ClaimMode::Start)).await.unwrap();
        longest = longest.max(t.elapsed().as_micros());
        claims += 1;
        assert!(!got.is_empty(), "a claim found nothing with {} of 1,001 done", done);
        let hot = got.iter().filter(|j| j.concurrency_key.as_deref() == Some("hot")).count();
        assert!(hot <= 1, "a claim took {hot} jobs of the hot key (cap 1)");
        let leases: Vec<LeaseRef> =
            got.iter().filter(|j| j.concurrency_key.as_deref() != Some("hot")).map(|j| j.lease_ref()).collect();
        done += db.complete(w, &leases).await.unwrap().done.len();
        if hot == 1 {
            done += 1; // the hot key's job stays running: its key is at the cap throughout
        }
    }
    eprintln!(
        "1,000 keys beside the hot key: {claims} claims of 10 in {:?}, the longest {longest} us",
        started.elapsed()
    );
    assert_eq!(statuses(db, queue).await, vec![(0, d - 1), (2, 1), (4, 50_000 - d)], "(status, rows) after the drain");
    f.drop().await;
}

/// Blocked rows read as Pending (get_job, list_jobs' Pending filter, stats, cancel), a
/// completion promotes the next one, raising the cap promotes up to the new depth, and rescue's
/// sweep promotes a key whose promotion was lost (forced here), without going over the cap.
/// The key gets `key_depth(1)` + 4 jobs in priority order: the last 4 are Blocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_rows_read_as_pending_and_come_back() {
    let f = fixture!();
    let db = &f.db;
    let queue = "blocked";
    key_cap(db, queue, Some(1)).await;
    let d = depth(db, 1).await;
    assert_eq!(depth(db, 2).await, d + 1, "key_depth(2)");
    let n = d + 4;
    let ids: Vec<_> = db
        .enqueue_many((0..n).map(|i| keyed(queue, "a", (n - i) as i32)).collect())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    let last = ids.len() - 1;
    assert_eq!(statuses(db, queue).await, vec![(0, d), (4, 4)]);
    let rec = db.get_job(ids[last]).await.unwrap().unwrap();
    assert_eq!(rec.location, JobLocation::Hot(JobStatus::Pending), "a Blocked job reads as Pending");
    let mut params = ListJobsParams::new(JobTable::Hot);
    params.queue = Some(q(queue));
    params.status = Some(JobStatus::Pending);
    params.limit = 500;
    assert_eq!(db.list_jobs(&params).await.unwrap().jobs.len() as i64, n, "Pending listing");
    assert_eq!(db.cancel(ids[last]).await.unwrap(), CancelOutcome::Cancelled, "cancel of a Blocked job");
    assert_eq!(statuses(db, queue).await, vec![(0, d), (4, 3)]);

    let w = WorkerId::random();
    let first = db.claim(&ClaimParams::new(w, vec![q(queue)], 5, ClaimMode::Start)).await.unwrap();
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[0]]);
    db.complete(w, &[first[0].lease_ref()]).await.unwrap();
    assert_eq!(statuses(db, queue).await, vec![(0, d), (4, 2)], "the completion promoted one");
    key_cap(db, queue, Some(2)).await;
    assert_eq!(statuses(db, queue).await, vec![(0, d + 1), (4, 1)], "raising the cap to 2 promoted one more");
    let two = db.claim(&ClaimParams::new(w, vec![q(queue)], 5, ClaimMode::Start)).await.unwrap();
    assert_eq!(two.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[1], ids[2]], "claim order");
    let leases: Vec<LeaseRef> = two.iter().map(|j| j.lease_ref()).collect();
    // A lost promotion: the moves' promotion undone by hand, the key then has no live row.
    db.complete(w, &leases).await.unwrap();
    assert_eq!(statuses(db, queue).await, vec![(0, d)], "the completions promoted the last Blocked row");
    sqlx::query(&format!("UPDATE \"{}\".jobs_hot SET status = 4 WHERE queue = $1 AND status = 0", db.schema()))
        .bind(queue)
        .execute(db.pool())
        .await
        .unwrap();
    assert!(db.claim(&ClaimParams::new(w, vec![q(queue)], 5, ClaimMode::Start)).await.unwrap().is_empty());
    let report = db.rescue(&RescueParams::default()).await.unwrap();
    assert!(report.ran, "rescue ran");
    assert_eq!(statuses(db, queue).await, vec![(0, d)], "rescue's sweep promoted the key up to its depth");
    let after = db.claim(&ClaimParams::new(w, vec![q(queue)], 5, ClaimMode::Start)).await.unwrap();
    assert_eq!(after.iter().map(|j| j.id).collect::<Vec<_>>(), vec![ids[3], ids[4]], "after rescue's sweep (cap 2)");
    key_cap(db, queue, None).await;
    assert_eq!(statuses(db, queue).await, vec![(0, d - 2), (2, 2)]);
    f.drop().await;
}

/// Index entries read from `index` of `schema` so far (`idx_tup_read`, `idx_scan`), after this
/// session's pending statistics are flushed (`pg_stat_force_next_flush`, PostgreSQL 15: the
/// flush happens when the session goes idle after it).
async fn index_reads(c: &mut sqlx::PgConnection, schema: &str, index: &str) -> (i64, i64) {
    sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut *c).await.unwrap();
    sqlx::query_as(
        "SELECT idx_tup_read, idx_scan FROM pg_stat_user_indexes WHERE schemaname = $1 AND indexrelname = $2",
    )
    .bind(schema)
    .bind(index)
    .fetch_one(&mut *c)
    .await
    .unwrap()
}

/// The claim counts a key's running rows in that key's own entries of `jobs_hot_active_idx`
/// (migration 14), whatever else runs in the queue: with 1,000 jobs of 1,000 keys running
/// (Fetched) and one Pending job for each of 10 of those keys (key cap 2), a claim of 10 reads
/// exactly 10 entries of the index in 10 scans, one per key. (Until migration 14 the generic
/// plan counted through the queue's entries of `jobs_hot_active_idx (queue)`, every running row
/// of the queue for each key: 10,000 here.) Everything runs on one session, so the index
/// statistics hold this claim's reads and no other session's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_counts_a_key_in_its_own_entries() {
    let f = fixture!();
    let db = &f.db;
    let s = db.schema().to_string();
    let queue = "busy";
    key_cap(db, queue, Some(2)).await;
    let mut c = db.pool().acquire().await.unwrap();
    let running = format!(
        "INSERT INTO \"{s}\".jobs_hot (id, queue, kind, payload, max_attempts, concurrency_key, status, lease, \
                                       worker_id, heartbeat_at)
         SELECT gen_random_uuid(), $1, 'test.job.v1', '{{}}', 3, 'k' || i, 1, i, gen_random_uuid(), now()
           FROM generate_series(0, 999) i"
    );
    sqlx::query(&running).bind(queue).execute(&mut *c).await.unwrap();
    let pending = format!(
        "INSERT INTO \"{s}\".jobs_hot (id, queue, kind, payload, max_attempts, concurrency_key)
         SELECT gen_random_uuid(), $1, 'test.job.v1', '{{}}', 3, 'k' || i FROM generate_series(0, 9) i"
    );
    sqlx::query(&pending).bind(queue).execute(&mut *c).await.unwrap();
    sqlx::query(&format!("ANALYZE \"{s}\".jobs_hot")).execute(&mut *c).await.unwrap();
    assert_eq!(statuses(db, queue).await, vec![(0, 10), (1, 1000)]);

    let (read0, scans0) = index_reads(&mut c, &s, "jobs_hot_active_idx").await;
    let claim = format!("SELECT count(*) FROM \"{s}\".claim($1, $2, 10, 2::int2)");
    let got: i64 = sqlx::query_scalar(&claim)
        .bind(uuid::Uuid::new_v4())
        .bind(vec![queue.to_string()])
        .fetch_one(&mut *c)
        .await
        .unwrap();
    assert_eq!(got, 10, "jobs claimed (each key has room for one more)");
    let (read1, scans1) = index_reads(&mut c, &s, "jobs_hot_active_idx").await;
    eprintln!("the claim's counts: {} entries of jobs_hot_active_idx in {} scans", read1 - read0, scans1 - scans0);
    assert_eq!((read1 - read0, scans1 - scans0), (10, 10), "(entries, scans) of jobs_hot_active_idx the claim read");
    drop(c);
    f.drop().await;
}
