//! Held jobs (`ClaimMode::Hold`) on PostgreSQL beyond the conformance group `hold_*`.

mod common;

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, JobLocation, WorkerId};
use common::{claim_one, job, q};

/// Issue 36 hole 8: a held job finished without a `start` records its own run's start, not the
/// `started_at` an earlier attempt left on its row, through each completing statement: the
/// complete, the handoff's completion (`complete_and_claim`) and `fail`.
#[tokio::test]
async fn a_held_outcome_records_its_own_start_on_every_path() {
    let f = fixture!();
    let db = &f.db;
    let s = db.schema().to_string();
    for path in ["complete", "handoff", "fail"] {
        let queue = format!("held_start_{path}");
        let id = db.enqueue(job(&queue)).await.unwrap().id;
        // An earlier attempt's start, an hour back, left on the Pending row.
        let sql = format!("UPDATE \"{s}\".jobs_hot SET started_at = now() - interval '1 hour' WHERE id = $1");
        assert_eq!(sqlx::query(&sql).bind(id.0).execute(db.pool()).await.unwrap().rows_affected(), 1);
        let before = db.db_now().await.unwrap();
        let w = WorkerId::random();
        let held = claim_one(db, w, &queue, ClaimMode::Hold).await;
        assert_eq!(held.id, id);
        match path {
            "complete" => db.complete_one(w, held.lease_ref()).await.unwrap().done().unwrap(),
            "handoff" => {
                let req = ClaimParams::new(w, vec![q(&queue)], 1, ClaimMode::Hold);
                let (done, next) = db.complete_and_claim(w, &[held.lease_ref()], &req).await.unwrap();
                assert_eq!((done.done, next.len()), (vec![id], 0));
            }
            _ => {
                let action =
                    chokaq_core::FailAction::DeadLetter { reason: chokaq_core::DeadReason::Failed, error: "x".into() };
                db.fail(w, held.lease_ref(), action).await.unwrap().done().unwrap();
            }
        }
        let r = db.get_job(id).await.unwrap().unwrap();
        assert_ne!(r.location, JobLocation::Hot(chokaq_core::JobStatus::Pending), "{path}");
        assert_eq!(r.attempt, 1, "{path}");
        assert!(
            r.started_at.is_some_and(|t| t >= before),
            "{path}: the held run kept started_at {:?}; its hold was claimed after {before}",
            r.started_at
        );
    }
    f.drop().await;
}
