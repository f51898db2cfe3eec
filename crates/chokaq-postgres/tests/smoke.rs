mod common;

use chokaq_core::{Backend, BackendExt, ClaimMode, FailOutcome, FailResult, JobLocation, JobStatus, WorkerId};
use std::time::Duration;

#[tokio::test]
async fn lifecycle() {
    let f = fixture!();
    let db = &f.db;
    let a = db.enqueue(common::job("q1").priority(5)).await.unwrap();
    let b = db.enqueue(common::job("q1")).await.unwrap();
    assert!(!a.duplicate);
    let w = WorkerId::random();
    let jobs = common::claim(db, w, "q1", 10, ClaimMode::Reserve).await;
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a.id, b.id]);
    assert!(jobs.iter().all(|j| j.status == JobStatus::Fetched));
    let out = db.start(w, &[jobs[0].lease_ref(), jobs[1].lease_ref()]).await.unwrap();
    assert_eq!(out.done.len(), 2);
    let out = db.complete(w, &[jobs[0].lease_ref()]).await.unwrap();
    assert_eq!(out.done, vec![a.id]);
    let r = db
        .fail(w, jobs[1].lease_ref(), FailOutcome::Retry { delay: Duration::from_secs(60), error: "boom".into() })
        .await
        .unwrap();
    assert!(matches!(r.done(), Some(FailResult::Retried { .. })));
    let rec = db.get_job(a.id).await.unwrap().unwrap();
    assert_eq!(rec.location, JobLocation::Archived);
    let rec = db.get_job(b.id).await.unwrap().unwrap();
    assert_eq!(rec.location, JobLocation::Hot(JobStatus::Pending));
    assert_eq!(rec.last_error.as_deref(), Some("boom"));
    let s = db.stats().await.unwrap();
    assert_eq!((s.pending, s.archived), (1, 1));
    assert!(db.complete_one(w, jobs[0].lease_ref()).await.unwrap().is_lost());
    f.drop().await;
}
