//! tests/api.rs, issue 42: the job page names a unique job's key and settings (escaped), and
//! shows no unique rows for a plain job.

use super::*;

pub(crate) async fn unique_job_page(b: Arc<dyn Backend>) -> TestResult {
    let opts = chokaq_core::UniqueOpts::new().by_fields(["<b>account</b>"]).by_queue();
    let job = NewJob::build("web-u", "web.ok.v1").unwrap().json(serde_json::json!({"<b>account</b>": 1})).unique(opts);
    let id = b.enqueue_many(vec![job]).await.map_err(err)?[0].id;
    let plain = b.enqueue_many(vec![NewJob::build("web-u", "web.ok.v1").unwrap()]).await.map_err(err)?[0].id;
    let hold = b.unique_of(id).await.map_err(err)?.ok_or("no unique key")?;
    let s = session(&b).await?;
    let page = s.get(&format!("/jobs/{id}")).await?.body;
    let key = format!("<td class=\"mono\" id=\"job-unique-key\">{}</td>", hold.key);
    ensure!(page.contains(&key), "the key: {page}");
    ensure!(
        page.contains(
            "<td id=\"job-unique\">args: &lt;b&gt;account&lt;/b&gt;; period: no; queue: yes; \
             states: pending,scheduled,fetched,processing,retrying</td>"
        ),
        "the settings, escaped: {page}"
    );
    ensure!(!page.contains("<b>account</b>"), "unescaped field name");
    let page = s.get(&format!("/jobs/{plain}")).await?.body;
    ensure!(!page.contains("job-unique"), "a plain job shows no unique rows");
    Ok(())
}
