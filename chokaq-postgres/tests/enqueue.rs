//! Enqueue: batches, idempotency (also under concurrent enqueuers), transactional enqueue,
//! NOTIFY wake-ups, and rejected input.

mod common;

use chokaq_core::BackendExt;
use std::collections::HashSet;
use std::time::Duration;

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ClaimMode, ErrorKind, JobId, NewJob, Wake, WorkerId};
use chokaq_postgres::{Faults, PgBackend, PgConfig};
use common::{claim, claim_one, job};
use rstest::rstest;
use serde_json::json;

#[tokio::test]
async fn idempotency_key_returns_the_live_job() {
    let f = fixture!();
    let db = &f.db;
    let a = db.enqueue(job("idem").idempotency_key("k")).await.unwrap();
    let b = db.enqueue(job("idem").idempotency_key("k").priority(9)).await.unwrap();
    assert_eq!((a.duplicate, b.duplicate, b.id), (false, true, a.id));
    assert_eq!(db.presence(a.id).await.unwrap().total(), 1);
    // Once it is finished the key is free again.
    let w = WorkerId::random();
    let j = claim_one(db, w, "idem", ClaimMode::Start).await;
    db.complete(w, &[j.lease_ref()]).await.unwrap();
    let c = db.enqueue(job("idem").idempotency_key("k")).await.unwrap();
    assert!(!c.duplicate && c.id != a.id);
    f.drop().await;
}

#[tokio::test]
async fn enqueue_many_keeps_input_order_and_resolves_keys() {
    let f = fixture!();
    let db = &f.db;
    let live = db.enqueue(job("many").idempotency_key("live")).await.unwrap();
    let jobs = vec![
        job("many"),
        job("many").idempotency_key("live"),
        job("many").idempotency_key("new"),
        job("many").idempotency_key("new"),
        job("many").delay(Duration::from_secs(60)),
    ];
    let out = db.enqueue_many(jobs).await.unwrap();
    assert_eq!(out.len(), 5);
    assert_eq!(out.iter().map(|e| e.duplicate).collect::<Vec<_>>(), vec![false, true, false, true, false]);
    assert_eq!(out[1].id, live.id);
    assert_eq!(out[3].id, out[2].id, "a key repeated in the batch resolves to its first occurrence");
    assert_eq!(db.stats().await.unwrap().pending, 4);
    assert!(db.enqueue_many(vec![]).await.unwrap().is_empty());
    f.drop().await;
}

#[tokio::test]
async fn enqueue_many_ten_thousand_in_one_call() {
    let f = fixture!();
    let db = &f.db;
    let jobs: Vec<NewJob> = (0..10_000).map(|i| job("bulk").json(json!({ "i": i }))).collect();
    let t = std::time::Instant::now();
    let out = db.enqueue_many(jobs).await.unwrap();
    eprintln!("enqueue_many(10000): {:?}", t.elapsed());
    assert_eq!(out.len(), 10_000);
    assert_eq!(out.iter().map(|e| e.id).collect::<HashSet<_>>().len(), 10_000);
    // Input order = id order = claim order.
    assert!(out.windows(2).all(|w| w[0].id < w[1].id));
    let first = claim(db, WorkerId::random(), "bulk", 3, ClaimMode::Reserve).await;
    assert_eq!(first.iter().map(|j| j.payload["i"].as_i64().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2]);
    let too_many: Vec<NewJob> = (0..10_001).map(|_| job("bulk")).collect();
    assert_eq!(db.enqueue_many(too_many).await.unwrap_err().kind(), ErrorKind::InvalidInput);
    f.drop().await;
}

#[tokio::test]
async fn concurrent_enqueuers_of_one_key_make_one_row() {
    let f = fixture!();
    let db = &f.db;
    for round in 0..5 {
        let key = format!("race-{round}");
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let db = db.clone();
                let key = key.clone();
                tokio::spawn(async move { db.enqueue(job("race").idempotency_key(key)).await.unwrap() })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        let ids: HashSet<JobId> = results.iter().map(|e| e.id).collect();
        assert_eq!(ids.len(), 1, "one id for one key");
        assert_eq!(results.iter().filter(|e| !e.duplicate).count(), 1, "exactly one insert");
        assert_eq!(db.presence(*ids.iter().next().unwrap()).await.unwrap().hot, 1);
    }
    assert_eq!(db.stats().await.unwrap().pending, 5);
    f.drop().await;
}

#[tokio::test]
async fn transactional_enqueue_commits_and_rolls_back_with_the_caller() {
    let f = fixture!();
    let db = &f.db;
    let mut wake = db.wakeups().await.unwrap().unwrap();

    let mut tx = db.pool().begin().await.unwrap();
    let rolled = db.enqueue_in_tx(&mut tx, job("outbox")).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.presence(rolled.id).await.unwrap().total(), 0);

    let mut tx = db.pool().begin().await.unwrap();
    let kept = db.enqueue_many_in_tx(&mut tx, vec![job("outbox"), job("outbox")]).await.unwrap();
    // Not visible, and no wake-up, before the commit.
    assert_eq!(db.presence(kept[0].id).await.unwrap().total(), 0);
    assert!(tokio::time::timeout(Duration::from_millis(300), wake.recv()).await.is_err(), "no NOTIFY before commit");
    tx.commit().await.unwrap();
    assert_eq!(db.presence(kept[0].id).await.unwrap().hot, 1);
    let w = tokio::time::timeout(Duration::from_secs(5), wake.recv()).await.unwrap();
    assert_eq!(w, Some(Wake::Queue("outbox".into())));
    f.drop().await;
}

/// Issue 41: a workflow and a batch enqueued in the caller's transaction exist only if it
/// commits (a rollback leaves no job, no task, no batch).
#[tokio::test]
async fn workflows_and_batches_in_the_callers_transaction() {
    use chokaq_core::{Batch, Workflow};
    let f = fixture!();
    let db = &f.db;
    let wf = || Workflow::new("tx").add("a", job("flowtx"), [] as [&str; 0]).add("b", job("flowtx"), ["a"]);
    let mut tx = db.pool().begin().await.unwrap();
    let rolled = db.enqueue_workflow_in_tx(&mut tx, &wf()).await.unwrap();
    let rolled_batch = db.enqueue_batch_in_tx(&mut tx, &Batch::new("txb").job(job("flowtx"))).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(db.get_workflow(rolled.id).await.unwrap().is_none());
    assert!(db.get_batch(rolled_batch.id).await.unwrap().is_none());
    assert_eq!(db.presence(rolled.job("a").unwrap()).await.unwrap().total(), 0);
    assert_eq!(db.presence(rolled_batch.jobs[0]).await.unwrap().total(), 0);

    let mut tx = db.pool().begin().await.unwrap();
    let kept = db.enqueue_workflow_in_tx(&mut tx, &wf()).await.unwrap();
    let batch = db.enqueue_batch_in_tx(&mut tx, &Batch::new("txb").job(job("flowtx"))).await.unwrap();
    assert!(db.get_workflow(kept.id).await.unwrap().is_none(), "not visible before the commit");
    tx.commit().await.unwrap();
    let st = db.get_workflow(kept.id).await.unwrap().unwrap();
    let counts: Vec<(&str, usize)> = st.counts().into_iter().collect();
    assert_eq!(counts, [("pending", 1), ("waiting", 1)]);
    assert_eq!(db.get_batch(batch.id).await.unwrap().unwrap().total, 1);
    f.drop().await;
}

#[tokio::test]
async fn notify_wakes_listeners_per_queue_and_after_reconnect() {
    let f = fixture!();
    let db = &f.db;
    let mut wake = db.wakeups().await.unwrap().unwrap();
    db.enqueue(job("wake-a")).await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(5), wake.recv()).await.unwrap();
    assert_eq!(w, Some(Wake::Queue("wake-a".into())));
    // One notification per distinct queue of a batch.
    db.enqueue_many(vec![job("wake-b"), job("wake-b"), job("wake-c")]).await.unwrap();
    let mut got = HashSet::new();
    for _ in 0..2 {
        match tokio::time::timeout(Duration::from_secs(5), wake.recv()).await.unwrap() {
            Some(Wake::Queue(q)) => {
                got.insert(q);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, HashSet::from(["wake-b".to_string(), "wake-c".to_string()]));
    // Kill every session of the backend (the listener's too): the listener says Any, then
    // works again.
    assert!(db.kill_connections().await.unwrap() >= 1);
    let w = tokio::time::timeout(Duration::from_secs(10), wake.recv()).await.unwrap();
    assert_eq!(w, Some(Wake::Any));
    let mut ok = false;
    for _ in 0..50 {
        match db.enqueue(job("wake-d")).await {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                continue;
            }
        }
        if let Ok(Some(Wake::Queue(q))) = tokio::time::timeout(Duration::from_millis(200), wake.recv()).await {
            if q == "wake-d" {
                ok = true;
                break;
            }
        }
    }
    assert!(ok, "the listener reconnected");
    f.drop().await;
}

#[rstest]
#[case::empty("")]
#[case::dash("a-b")]
#[case::digit_first("1abc")]
#[case::injection("x; DROP TABLE t")]
#[case::quote("a\"b")]
#[case::too_long("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")]
#[tokio::test]
async fn invalid_schema_is_rejected_before_connecting(#[case] schema: &str) {
    // Port 1: nothing listens. A validation error (not Unavailable) proves no connection was tried.
    let err = PgBackend::connect(PgConfig::new("postgres://u:secret@127.0.0.1:1/db").schema(schema)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(!err.to_string().contains("secret"));
}

#[tokio::test]
async fn unreachable_server_is_unavailable_without_the_url() {
    let cfg = PgConfig::new("postgres://u:secret@127.0.0.1:1/db").connect_timeout(Duration::from_secs(2));
    let err = PgBackend::connect(cfg).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(!format!("{err} {err:?}").contains("secret"));
    let err = PgBackend::connect(PgConfig::new("not a url")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn debug_never_shows_the_url() {
    let f = fixture!();
    let shown = format!("{:?}", f.db);
    assert!(!shown.contains("postgres://"), "{shown}");
    f.drop().await;
}

#[rstest]
#[case::too_big(job("bad").json(json!({"s": "x".repeat(200)})))]
#[case::nul(job("bad").json(json!({"s": "a\u{0}b"})))]
#[case::nul_key(job("bad").json(json!({"a\u{0}": 1})))]
#[case::zero_attempts(job("bad").max_attempts(0))]
#[case::key_with_nul(job("bad").idempotency_key("a\u{0}"))]
#[tokio::test]
async fn bad_jobs_are_rejected_and_nothing_is_inserted(#[case] bad: NewJob) {
    let f = fixture!(|c: PgConfig| c.max_payload_bytes(100));
    let db = &f.db;
    let err = db.enqueue(bad.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    // One bad job rejects the whole batch.
    let err = db.enqueue_many(vec![job("bad"), bad]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(db.stats().await.unwrap().total(), 0);
    f.drop().await;
}

#[tokio::test]
async fn unmigrated_schema_says_so() {
    let Some(f) = common::Fixture::new().await else { return };
    let cfg = PgConfig::new(common::url()).schema(format!("nope_{}", uuid::Uuid::new_v4().simple()));
    let db = PgBackend::connect(cfg).await.unwrap();
    let err = db.enqueue(job("x")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotMigrated);
    assert!(err.to_string().contains("migrate"), "{err}");
    f.drop().await;
}

#[tokio::test]
async fn migrate_is_idempotent_and_safe_in_parallel() {
    let Some(f) = common::Fixture::new().await else { return };
    let schema = format!("m_{}", uuid::Uuid::new_v4().simple());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let cfg = PgConfig::new(common::url()).schema(schema.clone()).max_connections(2);
        tasks.push(tokio::spawn(async move {
            let db = PgBackend::connect(cfg).await.unwrap();
            db.migrate().await.unwrap();
            db
        }));
    }
    let mut dbs = Vec::new();
    for t in tasks {
        dbs.push(t.await.unwrap());
    }
    dbs[0].migrate().await.unwrap();
    let versions: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{schema}\".versions"))
        .fetch_one(dbs[0].pool())
        .await
        .unwrap();
    assert_eq!(versions, chokaq_postgres::MIGRATIONS.len() as i64);
    dbs[0].enqueue(job("m")).await.unwrap();
    dbs[0].drop_schema().await.unwrap();
    f.drop().await;
}

/// A schema at version 10 (migrated by an earlier build, with a job in flight) upgrades to 11:
/// the old claim functions are dropped, the functions script creates the new ones, the job keeps
/// its state and gets `expired_holds` 0. The script is applied again only when its checksum
/// differs from the recorded one, and never by a build older than the schema.
#[tokio::test]
async fn migrate_upgrades_version_10_and_applies_the_functions_on_a_changed_checksum() {
    let Some(f) = common::Fixture::new().await else { return };
    let schema = format!("up_{}", uuid::Uuid::new_v4().simple());
    let quoted = format!("\"{schema}\"");
    let pool = f.db.pool().clone();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&format!("CREATE SCHEMA {quoted}")).execute(&mut *tx).await.unwrap();
    sqlx::query(&format!(
        "CREATE TABLE {quoted}.versions (version integer PRIMARY KEY, name text NOT NULL, \
         applied_at timestamptz NOT NULL DEFAULT now())"
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    for m in chokaq_postgres::MIGRATIONS.iter().filter(|m| m.version <= 10) {
        sqlx::raw_sql(&m.sql.replace("{schema}", &quoted)).execute(&mut *tx).await.unwrap();
        let insert = format!("INSERT INTO {quoted}.versions (version, name) VALUES ($1, $2)");
        sqlx::query(&insert).bind(m.version).bind(m.name).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    // A job claimed (reserve) by the version-10 function. It is inserted as a version-10 build
    // inserted it: this build's enqueue names columns of later versions (13's key cap).
    let old = PgBackend::connect(PgConfig::new(common::url()).schema(schema.clone()).max_connections(2)).await.unwrap();
    let id = chokaq_core::JobId::new();
    let insert_v10 = format!(
        "INSERT INTO {quoted}.jobs_hot (id, queue, kind, payload, max_attempts) VALUES ($1, 'up', 'test.job.v1', 'null', 25)"
    );
    sqlx::query(&insert_v10).bind(id.0).execute(&pool).await.unwrap();
    let old_claim = format!("SELECT id FROM {quoted}.claim($1, ARRAY['up'], 1, false)");
    let got: Vec<uuid::Uuid> =
        sqlx::query_scalar(&old_claim).bind(uuid::Uuid::new_v4()).fetch_all(&pool).await.unwrap();
    assert_eq!(got, vec![id.0]);

    old.migrate().await.unwrap();
    let versions: Vec<i32> = sqlx::query_scalar(&format!("SELECT version FROM {quoted}.versions ORDER BY version"))
        .fetch_all(&pool)
        .await
        .unwrap();
    // 11, and every later version of this build (12: the listing's kind indexes).
    assert!(versions.contains(&11), "{versions:?}");
    assert_eq!(versions.last(), chokaq_postgres::MIGRATIONS.iter().map(|m| m.version).max().as_ref());
    let holds: i32 = sqlx::query_scalar(&format!("SELECT expired_holds FROM {quoted}.jobs_hot WHERE id = $1"))
        .bind(id.0)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(holds, 0);
    let err = sqlx::query(&old_claim).bind(uuid::Uuid::new_v4()).fetch_all(&pool).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "the boolean claim is gone: {err}");
    let r = old.get_job(id).await.unwrap().unwrap();
    assert_eq!(r.location, chokaq_core::JobLocation::Hot(chokaq_core::JobStatus::Fetched));
    old.enqueue(job("up")).await.unwrap();
    assert_eq!(claim(&old, WorkerId::random(), "up", 5, ClaimMode::Hold).await.len(), 1, "the new claim");

    // The recorded checksum decides: a matching one leaves the functions alone (a dropped
    // function stays dropped), a changed one applies the script again.
    let count_fns = format!(
        "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
          WHERE n.nspname = '{schema}' AND p.proname IN ('claim', 'complete_and_claim')"
    );
    let drop_cc =
        format!("DROP FUNCTION {quoted}.complete_and_claim(uuid, uuid[], bigint[], text[], integer, smallint)");
    sqlx::query(&drop_cc).execute(&pool).await.unwrap();
    old.migrate().await.unwrap();
    let n: i64 = sqlx::query_scalar(&count_fns).fetch_one(&pool).await.unwrap();
    assert_eq!(n, 1, "same checksum: not applied again");
    let stale = format!("UPDATE {quoted}.repeatables SET checksum = 'stale' WHERE name = 'functions'");
    sqlx::query(&stale).execute(&pool).await.unwrap();
    old.migrate().await.unwrap();
    let n: i64 = sqlx::query_scalar(&count_fns).fetch_one(&pool).await.unwrap();
    assert_eq!(n, 2, "changed checksum: applied again");
    // A schema a newer build migrated (a version this build does not know): left alone.
    sqlx::query(&drop_cc).execute(&pool).await.unwrap();
    sqlx::query(&stale).execute(&pool).await.unwrap();
    sqlx::query(&format!("INSERT INTO {quoted}.versions (version, name) VALUES (9999, 'future')"))
        .execute(&pool)
        .await
        .unwrap();
    old.migrate().await.unwrap();
    let n: i64 = sqlx::query_scalar(&count_fns).fetch_one(&pool).await.unwrap();
    assert_eq!(n, 1, "an older build does not put its functions back");
    old.drop_schema().await.unwrap();
    f.drop().await;
}

/// Rule 8 of issue 24: the listener takes no connection of the pool. With a pool of one and a
/// wake-up stream open, enqueue and a worker's claim still get the pool's connection (before,
/// the listener held it and the claim timed out waiting), and the wake-up arrives.
#[tokio::test]
async fn a_pool_of_one_serves_the_claims_beside_the_listener() {
    let f = fixture!(|c: PgConfig| c.max_connections(1).connect_timeout(Duration::from_secs(2)));
    let db = &f.db;
    let mut wake = db.wakeups().await.unwrap().expect("PostgreSQL pushes wake-ups");
    let id = tokio::time::timeout(Duration::from_secs(10), db.enqueue(job("one")))
        .await
        .expect("enqueue waited 10 s")
        .expect("enqueue beside the listener")
        .id;
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        db.claim(&chokaq_core::ClaimParams::new(WorkerId::random(), vec![common::q("one")], 1, ClaimMode::Start)).await
    })
    .await
    .expect("claim waited 10 s")
    .expect("a claim beside the listener");
    assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
    let woke = tokio::time::timeout(Duration::from_secs(5), wake.recv()).await;
    assert!(woke.is_ok(), "no wake-up within 5 s");
    f.drop().await;
}

/// Issue 11 item 8 / issue 16 finding 5: with the longest schema name accepted, the NOTIFY
/// channel `<schema>_jobs` stays within 63 bytes, so enqueue (which notifies) works and a
/// wake-up arrives.
#[tokio::test]
async fn longest_schema_name_enqueues_and_notifies() {
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let name = format!("{name}{}", "x".repeat(chokaq_core::validate::MAX_SCHEMA_NAME_LEN - name.len()));
    let f = fixture!(|c| c.schema(name));
    let db = &f.db;
    let mut wake = db.wakeups().await.unwrap().expect("PostgreSQL pushes wake-ups");
    db.enqueue(job("long")).await.unwrap();
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), wake.recv()).await;
    assert!(got.is_ok(), "no wake-up within 5 s");
    f.drop().await;
}

/// Whether `enqueue_many([b, a])` (keys in that order, queue `order`) inserted "a" before it
/// waited on "b": a session holds "b" (an uncommitted insert), the batch is started and waits
/// for it, and a third session's insert of "a" then either waits for the batch (it holds "a":
/// the insert times out) or goes through at once (the batch has not reached "a"). The batch
/// then finishes, both keys new.
async fn batch_takes_a_before_waiting_on_b(db: &PgBackend) -> bool {
    let insert = format!(
        "INSERT INTO \"{}\".jobs_hot (id, queue, kind, payload, idempotency_key, max_attempts) \
         VALUES ($1, 'order', 'k', 'null', $2, 1) ON CONFLICT (queue, idempotency_key) \
         WHERE idempotency_key IS NOT NULL DO NOTHING",
        db.schema()
    );
    let mut holder = db.pool().begin().await.unwrap();
    sqlx::query(&insert).bind(JobId::new().0).bind("b").execute(&mut *holder).await.unwrap();
    let xid: String =
        sqlx::query_scalar("SELECT pg_current_xact_id()::xid::text").fetch_one(&mut *holder).await.unwrap();
    let batch = {
        let db = db.clone();
        tokio::spawn(async move {
            db.enqueue_many(vec![job("order").idempotency_key("b"), job("order").idempotency_key("a")]).await
        })
    };
    // Poll the server's lock table until the batch waits on the holder's transaction.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let waits = "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid' \
                 AND transactionid::text = $1";
    while sqlx::query_scalar::<_, i64>(waits).bind(&xid).fetch_one(db.pool()).await.unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "the batch never waited on the held key");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut probe = db.pool().begin().await.unwrap();
    sqlx::query("SET LOCAL lock_timeout = '500ms'").execute(&mut *probe).await.unwrap();
    let took_a = match sqlx::query(&insert).bind(JobId::new().0).bind("a").execute(&mut *probe).await {
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => true,
        Err(e) => panic!("probe insert: {e}"),
        Ok(_) => false,
    };
    probe.rollback().await.unwrap();
    holder.rollback().await.unwrap();
    let out = batch.await.unwrap().unwrap();
    assert_eq!(out.iter().map(|e| e.duplicate).collect::<Vec<_>>(), vec![false, false]);
    took_a
}

/// Two batches whose keys overlap in different orders must not deadlock: every batch inserts
/// its keyed rows in (queue, key) order (40P01 was seen once in
/// `idempotency_concurrent_overlapping_batches` when they went in the batch's order). Checked
/// deterministically by [`batch_takes_a_before_waiting_on_b`]; the broken variant
/// (`Faults::enqueue_in_batch_order`) must be caught by the same check.
#[tokio::test]
async fn enqueue_inserts_keyed_rows_in_key_order() {
    let f = fixture!();
    assert!(batch_takes_a_before_waiting_on_b(&f.db).await, "the batch waited on b before inserting a");
    f.drop().await;

    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let config = PgConfig::new(common::url()).schema(schema).max_connections(5);
    let broken = PgBackend::connect_with_faults(config, Faults { enqueue_in_batch_order: true, ..Faults::default() })
        .await
        .unwrap();
    broken.migrate().await.unwrap();
    let caught = !batch_takes_a_before_waiting_on_b(&broken).await;
    broken.drop_schema().await.unwrap();
    assert!(caught, "tooth: an enqueue in the batch's order was not caught");
}
