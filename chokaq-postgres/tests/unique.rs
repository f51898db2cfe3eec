//! Unique jobs inside a caller's transaction (`enqueue_in_tx`, `docs/unique.md`): the key row
//! is written in the caller's transaction, so a racing enqueuer on the pool waits for its
//! commit (then gets a duplicate) or its rollback (then inserts); a take-over holds the key
//! row's lock until the caller's commit.

mod common;

use std::time::Duration;

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, ClaimMode, UniqueOpts, WorkerId};
use common::{claim_one, job};
use serde_json::json;

fn unique(queue: &str, n: i32) -> chokaq_core::NewJob {
    job(queue).json(json!({ "n": n })).unique(UniqueOpts::new().by_args().by_queue())
}

#[tokio::test]
async fn a_pool_enqueuer_waits_for_the_callers_commit_and_gets_its_job() {
    let f = fixture!();
    let db = f.db.clone();
    let mut tx = db.pool().begin().await.unwrap();
    let mine = db.enqueue_in_tx(&mut tx, unique("utx", 1)).await.unwrap();
    assert!(!mine.duplicate);
    let racer = {
        let db = db.clone();
        tokio::spawn(async move { db.enqueue(unique("utx", 1)).await.unwrap() })
    };
    // Absence over a window: the racer waits on the uncommitted key row.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!racer.is_finished(), "the pool's enqueue did not wait for the caller's key row");
    tx.commit().await.unwrap();
    let theirs = tokio::time::timeout(Duration::from_secs(10), racer).await.unwrap().unwrap();
    assert_eq!((theirs.duplicate, theirs.id), (true, mine.id));
    assert_eq!(db.presence(mine.id).await.unwrap().hot, 1);
    f.drop().await;
}

#[tokio::test]
async fn a_rolled_back_key_is_free_for_the_waiting_enqueuer() {
    let f = fixture!();
    let db = f.db.clone();
    let mut tx = db.pool().begin().await.unwrap();
    let rolled = db.enqueue_in_tx(&mut tx, unique("urb", 1)).await.unwrap();
    let racer = {
        let db = db.clone();
        tokio::spawn(async move { db.enqueue(unique("urb", 1)).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!racer.is_finished(), "the pool's enqueue did not wait for the caller's key row");
    tx.rollback().await.unwrap();
    let theirs = tokio::time::timeout(Duration::from_secs(10), racer).await.unwrap().unwrap();
    assert!(!theirs.duplicate && theirs.id != rolled.id, "{theirs:?}");
    assert_eq!(db.presence(rolled.id).await.unwrap().total(), 0);
    assert_eq!(db.unique_of(theirs.id).await.unwrap().map(|h| h.job_id), Some(theirs.id));
    f.drop().await;
}

#[tokio::test]
async fn a_batch_in_a_transaction_resolves_repeats_and_existing_keys() {
    let f = fixture!();
    let db = &f.db;
    let existing = db.enqueue(unique("ubatch", 0)).await.unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    let out = db
        .enqueue_many_in_tx(&mut tx, vec![unique("ubatch", 1), unique("ubatch", 1), unique("ubatch", 0)])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(!out[0].duplicate);
    assert_eq!((out[1].duplicate, out[1].id), (true, out[0].id));
    assert_eq!((out[2].duplicate, out[2].id), (true, existing.id));
    assert_eq!(db.stats().await.unwrap().queue("ubatch").map(|q| q.pending), Some(2));
    f.drop().await;
}

#[tokio::test]
async fn a_take_over_in_a_transaction_holds_the_key_until_the_commit() {
    let f = fixture!();
    let db = f.db.clone();
    let first = db.enqueue(unique("utake", 1)).await.unwrap();
    let w = WorkerId::random();
    let j = claim_one(&db, w, "utake", ClaimMode::Start).await;
    db.complete(w, &[j.lease_ref()]).await.unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    let second = db.enqueue_in_tx(&mut tx, unique("utake", 1)).await.unwrap();
    assert!(!second.duplicate && second.id != first.id, "{second:?}");
    let racer = {
        let db = db.clone();
        tokio::spawn(async move { db.enqueue(unique("utake", 1)).await.unwrap() })
    };
    tx.commit().await.unwrap();
    let theirs = tokio::time::timeout(Duration::from_secs(10), racer).await.unwrap().unwrap();
    assert_eq!((theirs.duplicate, theirs.id), (true, second.id));
    assert_eq!(db.stats().await.unwrap().queue("utake").map(|q| (q.pending, q.archived)), Some((1, 1)));
    f.drop().await;
}

/// The same with a key in the uniques table (the waiting-only set, whose holder stops counting
/// once it runs): the take-over holds the key row's lock until the caller's commit.
#[tokio::test]
async fn a_take_over_of_a_key_row_in_a_transaction_holds_it_until_the_commit() {
    use chokaq_core::UniqueStates;
    let f = fixture!();
    let db = f.db.clone();
    let waiting =
        || job("urow").json(json!({ "n": 1 })).unique(UniqueOpts::new().by_args().states(UniqueStates::WAITING));
    let first = db.enqueue(waiting()).await.unwrap();
    let w = WorkerId::random();
    let j = claim_one(&db, w, "urow", ClaimMode::Start).await;
    assert_eq!(j.id, first.id);
    let mut tx = db.pool().begin().await.unwrap();
    let second = db.enqueue_in_tx(&mut tx, waiting()).await.unwrap();
    assert!(!second.duplicate && second.id != first.id, "the running holder does not count: {second:?}");
    let racer = {
        let db = db.clone();
        tokio::spawn(async move { db.enqueue(waiting()).await.unwrap() })
    };
    tx.commit().await.unwrap();
    let theirs = tokio::time::timeout(Duration::from_secs(10), racer).await.unwrap().unwrap();
    assert_eq!((theirs.duplicate, theirs.id), (true, second.id));
    assert_eq!(db.unique_of(second.id).await.unwrap().map(|h| h.job_id), Some(second.id));
    assert_eq!(db.stats().await.unwrap().queue("urow").map(|q| (q.pending, q.processing)), Some((1, 1)));
    f.drop().await;
}
