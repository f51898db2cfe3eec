//! [`chokaq_core::Backend::enqueue_many`]: the batch as one JSON document, one statement; a
//! unique job (`docs/unique.md`) as a statement of its own, in input order (`unique.rs`).

use chokaq_core::{unique_keys, validate, Enqueued, Error, ErrorKind, JobId, NewJob, Result};

use crate::rows::{decode_enqueued, job_json, last_set};

use crate::backend::MssqlBackend;

/// The largest JSON document one `enqueue_many` sends (an `NVARCHAR(MAX)` parameter holds
/// 2 GB; tiberius sends at most 1 GiB of text as `nvarchar(max)`).
const MAX_BATCH_DOCUMENT_BYTES: usize = 512 * 1024 * 1024;

/// [`chokaq_core::Backend::enqueue_many`]. Plain jobs go in one statement per run of them;
/// each unique job in one statement of its own, in input order (so a unique job sees the
/// plain jobs before it, and they see it).
pub(crate) async fn enqueue_many(b: &MssqlBackend, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // The job count, every job's own checks, and the batch's total bytes.
    validate::enqueue_batch(&jobs, b.config().max_payload_bytes)?;
    let keys = unique_keys(&jobs, chokaq_core::chrono::Utc::now())?;
    if keys.iter().all(Option::is_none) {
        return enqueue_plain(b, &jobs).await;
    }
    let mut out = Vec::with_capacity(jobs.len());
    let mut start = 0;
    for (i, key) in keys.iter().enumerate() {
        if let Some(key) = key {
            if start < i {
                out.extend(enqueue_plain(b, &jobs[start..i]).await?);
            }
            out.push(crate::unique::enqueue_one(b, &jobs[i], key).await?);
            start = i + 1;
        }
    }
    if start < jobs.len() {
        out.extend(enqueue_plain(b, &jobs[start..]).await?);
    }
    Ok(out)
}

/// Jobs without unique settings, validated: one JSON document, one statement.
async fn enqueue_plain(b: &MssqlBackend, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    let mut items = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        items.push(job_json(i, JobId::new(), job)?);
    }
    let payload = serde_json::Value::Array(items).to_string();
    if payload.len() > MAX_BATCH_DOCUMENT_BYTES {
        return Err(Error::invalid(format!(
            "enqueue_many batch is {} bytes as one document, over {MAX_BATCH_DOCUMENT_BYTES}: split it",
            payload.len()
        )));
    }
    let op = "enqueue";
    let mut attempt = 0;
    let rows = loop {
        match b.run(op, &b.sql().enqueue, &[&payload]).await {
            // A unique-index race the key-range lock did not cover: the other insert has
            // committed, so a retry finds it and returns its id.
            Err(e) if e.kind() == ErrorKind::Conflict && attempt < 3 => attempt += 1,
            other => break last_set(other?),
        }
    };
    decode_enqueued(op, &rows, jobs.len())
}
