//! Issue 42: `jobs show` names a unique job's key and settings (table and `--json`), and says
//! nothing of uniqueness for a plain job.

use std::time::Duration;

use chokaq::core::{UniqueOpts, UniqueState, UniqueStates};

use super::*;

pub async fn unique_show(db: Arc<Db>) -> TestResult {
    let q = db.q("uniq");
    let qs = q.as_str();
    let opts = UniqueOpts::new()
        .by_fields(["account"])
        .by_period(Duration::from_secs(3600))
        .by_queue()
        .states(UniqueStates::DEFAULT.with(UniqueState::Succeeded));
    let job = || NewJob::build(qs, "refresh").unwrap().json(serde_json::json!({"account": 42})).unique(opts.clone());
    let id = db.enqueue(job()).await?;
    let again = db.backend.enqueue(job()).await.map_err(err)?;
    ensure_eq!((again.duplicate, again.id), (true, id), "a duplicate");
    let hold = db.backend.unique_of(id).await.map_err(err)?.ok_or("no unique key")?;

    let v = db.ok_json(&["jobs", "show", &id.to_string()])?;
    let u = &v["unique"];
    ensure_eq!(u["key"].as_str(), Some(hold.key.as_str()), "key in --json");
    ensure_eq!(u["fields"], serde_json::json!(["account"]), "fields");
    ensure_eq!(u["args"].as_str(), Some("fields"), "args");
    ensure_eq!(u["period_seconds"].as_u64(), Some(3600), "period");
    ensure_eq!(u["by_queue"].as_bool(), Some(true), "by queue");
    ensure_eq!(
        u["states"],
        serde_json::json!(["pending", "scheduled", "fetched", "processing", "retrying", "succeeded"]),
        "states"
    );
    ensure!(u["period_ends_at"].is_string(), "period end: {u}");

    let t = db.ok_table(&["jobs", "show", &id.to_string()])?;
    ensure!(t.contains(&hold.key), "the key in the table: {t}");
    ensure!(
        t.contains(
            "args: account; period: 3600s; queue: yes; states: pending,scheduled,fetched,processing,retrying,succeeded"
        ),
        "the settings in the table: {t}"
    );

    let plain = db.enqueue(NewJob::build(qs, "plain").unwrap()).await?;
    let v = db.ok_json(&["jobs", "show", &plain.to_string()])?;
    ensure!(v.get("unique").is_none(), "a plain job has no unique field: {v}");
    let t = db.ok_table(&["jobs", "show", &plain.to_string()])?;
    ensure!(!t.contains("unique key"), "a plain job shows no unique rows: {t}");
    Ok(())
}
