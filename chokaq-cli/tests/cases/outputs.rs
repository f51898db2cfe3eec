//! Issue 41: `jobs show` prints the output a job recorded (table and `--json`), and no output
//! for a job that recorded none.

use chokaq::core::Fenced;

use super::*;

pub async fn output_show(db: Arc<Db>) -> TestResult {
    let q = db.q("outputs");
    let id = db.enqueue(NewJob::build(q.as_str(), "report").unwrap()).await?;
    let plain = db.enqueue(NewJob::build(q.as_str(), "report").unwrap()).await?;
    let w = WorkerId::random();
    let got = db.backend.claim(&ClaimParams::new(w, vec![q.clone()], 1, ClaimMode::Start)).await.map_err(err)?;
    ensure_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id], "claimed");
    let out = serde_json::json!({"rows": 3, "file": "r<1>.csv"});
    let f = db.backend.record_output(w, got[0].lease_ref(), &out).await.map_err(err)?;
    ensure_eq!(f, Fenced::Done(()), "record_output");
    let f = db.backend.complete_one(w, got[0].lease_ref()).await.map_err(err)?;
    ensure_eq!(f, Fenced::Done(()), "complete");

    let v = db.ok_json(&["jobs", "show", &id.to_string()])?;
    ensure_eq!(v["output"], out, "output in --json");
    let t = db.ok_table(&["jobs", "show", &id.to_string()])?;
    ensure!(t.contains(r#""rows":3"#) && t.contains(r#""file":"r<1>.csv""#), "the output in the table: {t}");

    let v = db.ok_json(&["jobs", "show", &plain.to_string()])?;
    ensure!(v.get("output").is_none(), "a job with no output has no output field: {v}");
    Ok(())
}
