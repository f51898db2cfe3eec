//! tests/api.rs, issue 41: the job page shows the output a job recorded (escaped) and the
//! JSON API returns it as `output`; a job with none says so (`null` in the API).

use chokaq_core::{BackendExt, ClaimMode, ClaimParams, Fenced, QueueName, WorkerId};

use super::*;

pub(crate) async fn output_job_page(b: Arc<dyn Backend>) -> TestResult {
    let id = b.enqueue_many(vec![NewJob::build("web-o", "web.ok.v1").unwrap()]).await.map_err(err)?[0].id;
    let plain = b.enqueue_many(vec![NewJob::build("web-o", "web.ok.v1").unwrap()]).await.map_err(err)?[0].id;
    let w = WorkerId::random();
    let q = QueueName::new("web-o").unwrap();
    let got = b.claim(&ClaimParams::new(w, vec![q], 1, ClaimMode::Start)).await.map_err(err)?;
    ensure!(got.len() == 1 && got[0].id == id, "claimed {got:?}");
    let out = serde_json::json!({"note": "<b>done</b>"});
    ensure!(b.record_output(w, got[0].lease_ref(), &out).await.map_err(err)? == Fenced::Done(()), "record");
    ensure!(b.complete_one(w, got[0].lease_ref()).await.map_err(err)? == Fenced::Done(()), "complete");
    let s = session(&b).await?;
    let page = s.get(&format!("/jobs/{id}")).await?.body;
    ensure!(page.contains("id=\"output\""), "the output section: {page}");
    ensure!(page.contains("&lt;b&gt;done&lt;/b&gt;") && !page.contains("<b>done</b>"), "escaped: {page}");
    let api = s.get(&format!("/api/jobs/{id}")).await?.json()?;
    ensure!(api["output"] == out, "the API's output: {api}");
    let page = s.get(&format!("/jobs/{plain}")).await?.body;
    ensure!(page.contains("No output was recorded."), "a job with none says so");
    let api = s.get(&format!("/api/jobs/{plain}")).await?.json()?;
    ensure!(api["output"].is_null(), "no output: null in the API: {api}");
    Ok(())
}
