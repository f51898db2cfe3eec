//! `chokaq jobs enqueue` (issue 40, item 5): an operator enqueues one job from the command line,
//! every option read back through the backend; an idempotency key a live job holds gives that
//! job's id and `duplicate`; a payload that is not JSON, and a bad queue name, exit 2 and
//! enqueue nothing.

use super::*;

pub async fn jobs_enqueue(db: Arc<Db>) -> TestResult {
    let q = db.q("enq");
    let qs = q.as_str();
    let (code, v) = db.json(&[
        "jobs",
        "enqueue",
        qs,
        "email.send.v1",
        "--payload",
        r#"{"to": "a@example.com", "n": 3}"#,
        "--priority",
        "-2",
        "--delay",
        "1h",
        "--idempotency-key",
        "op-1",
        "--tag",
        "ops",
        "--tag",
        "replay",
        "--concurrency-key",
        "tenant-9",
        "--max-attempts",
        "4",
    ])?;
    ensure_eq!(code, 0, "jobs enqueue --json: {v}");
    ensure_eq!(v["duplicate"].as_bool(), Some(false), "a new job: {v}");
    let id: JobId = v["id"].as_str().ok_or("no id")?.parse().map_err(err)?;
    let r = db.backend.get_job(id).await.map_err(err)?.ok_or("the job is not in the database")?;
    ensure_eq!((r.queue.as_str(), r.kind.as_str()), (qs, "email.send.v1"), "queue and kind");
    ensure_eq!(r.payload, serde_json::json!({"to": "a@example.com", "n": 3}), "payload");
    ensure_eq!((r.priority, r.max_attempts), (-2, 4), "priority and max attempts");
    ensure_eq!(r.tags, vec!["ops".to_string(), "replay".to_string()], "tags");
    ensure_eq!(r.idempotency_key.as_deref(), Some("op-1"), "idempotency key");
    ensure_eq!(r.concurrency_key.as_deref(), Some("tenant-9"), "concurrency key");
    ensure_eq!(r.created_by.as_deref(), Some("chokaq-cli"), "created_by");
    let due = r.scheduled_at.ok_or("no due time for a delayed job")?;
    ensure!(due > r.created_at, "due {due:?} not after created {:?}", r.created_at);

    // The same key while that job is live: its id, duplicate, no second row.
    let (code, v) = db.json(&["jobs", "enqueue", qs, "email.send.v1", "--idempotency-key", "op-1"])?;
    ensure_eq!((code, v["duplicate"].as_bool()), (0, Some(true)), "duplicate: {v}");
    ensure_eq!(v["id"].as_str(), Some(id.to_string().as_str()), "the live job's id");

    // Table output, the default payload ({}).
    let t = db.ok_table(&["jobs", "enqueue", qs, "plain.v1"])?;
    ensure!(t.starts_with("enqueued job ") && t.contains(&format!("on queue {qs} (kind plain.v1)")), "{t}");

    // Refused: exit 2, nothing enqueued.
    for (args, needle) in [
        (vec!["jobs", "enqueue", qs, "bad.v1", "--payload", "{bad"], "--payload is not JSON"),
        (vec!["jobs", "enqueue", "bad queue!", "bad.v1"], "invalid queue name"),
    ] {
        let out = db.run(&args)?;
        ensure_eq!(out.code, 2, "{args:?} (stderr {})", out.stderr);
        ensure!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    let mut p = chokaq::core::ListJobsParams::new(chokaq::core::JobTable::Hot);
    p.queue = Some(q.clone());
    let jobs = db.backend.list_jobs(&p).await.map_err(err)?.jobs;
    ensure_eq!(jobs.len(), 2, "jobs of {qs} after two enqueues, one duplicate and two refusals");
    Ok(())
}
