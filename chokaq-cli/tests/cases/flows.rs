//! Issue 41: `chokaq workflows show|cancel` and `chokaq batches show` on a stored workflow and
//! batch (table and `--json`); on a backend that stores neither, a clear refusal.

use chokaq::core::{Batch, Workflow};

use super::*;

pub async fn workflows_and_batches(db: Arc<Db>) -> TestResult {
    let q = db.q("flows");
    let job = || NewJob::build(q.as_str(), "step").unwrap();
    let wf = Workflow::new("nightly").add("fetch", job(), [] as [&str; 0]).add("load", job(), ["fetch"]);
    if !db.backend.capabilities().workflows {
        let e = db.backend.enqueue_workflow(&wf).await.err().ok_or("enqueue_workflow did not refuse")?;
        ensure_eq!(e.kind(), chokaq::ErrorKind::Unsupported, "enqueue_workflow on {}", db.backend.name());
        let out = db.run(&["workflows", "show", "0190b1c2-0000-7000-8000-000000000000"])?;
        ensure!(out.code != 0 && out.stderr.contains("workflows"), "show on a backend without workflows: {out:?}");
        return Ok(());
    }
    let e = db.backend.enqueue_workflow(&wf).await.map_err(err)?;
    let id = e.id.to_string();
    let v = db.ok_json(&["workflows", "show", &id])?;
    ensure_eq!(v["name"], "nightly", "name");
    ensure_eq!((v["counts"]["pending"].as_u64(), v["counts"]["waiting"].as_u64()), (Some(1), Some(1)), "counts: {v}");
    ensure_eq!(v["tasks"][1]["deps"], serde_json::json!(["fetch"]), "load's dependencies");
    ensure_eq!(v["tasks"][1]["state"], "waiting", "load");
    let t = rows(&db.ok_table(&["workflows", "show", &id])?);
    ensure_eq!(t[1], ["TASK", "STATE", "JOB", "AFTER"], "header: {t:?}");
    ensure_eq!(t[3], ["load", "waiting", e.job("load").unwrap().to_string().as_str(), "fetch"], "load's row");
    let v = db.ok_json(&["workflows", "cancel", &id])?;
    ensure_eq!(v["reached"].as_u64(), Some(2), "cancel reached");
    let v = db.ok_json(&["workflows", "show", &id])?;
    ensure_eq!(v["counts"]["dead"].as_u64(), Some(2), "after the cancel: {v}");
    ensure!(v["final"].as_bool() == Some(true), "final after the cancel: {v}");
    let (code, _) = db.json(&["workflows", "show", "0190b1c2-0000-7000-8000-000000000000"])?;
    ensure_eq!(code, 3, "an unknown workflow's exit code");
    let (code, _) = db.json(&["workflows", "show", "not-a-uuid"])?;
    ensure_eq!(code, 2, "a bad id's exit code");

    let b = Batch::new("mails").jobs([job(), job()]).on_finished(NewJob::build(q.as_str(), "report").unwrap());
    let eb = db.backend.enqueue_batch(&b).await.map_err(err)?;
    let bid = eb.id.to_string();
    let v = db.ok_json(&["batches", "show", &bid])?;
    ensure_eq!(
        (v["total"].as_u64(), v["succeeded"].as_u64(), v["final"].as_bool()),
        (Some(2), Some(0), Some(false)),
        "{v}"
    );
    let w = WorkerId::random();
    for j in db.start(w, &q, 2).await? {
        let done = db.backend.complete_one(w, j.lease_ref()).await.map_err(err)?;
        ensure_eq!(done, chokaq::core::Fenced::Done(()), "complete");
    }
    let v = db.ok_json(&["batches", "show", &bid])?;
    ensure_eq!((v["succeeded"].as_u64(), v["final"].as_bool()), (Some(2), Some(true)), "{v}");
    ensure_eq!(v["fired"][0]["event"], "finished", "fired: {v}");
    let t = db.ok_table(&["batches", "show", &bid])?;
    ensure!(t.contains("callback finished") && t.contains("mails"), "{t}");
    Ok(())
}
