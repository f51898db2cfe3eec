//! [`chokaq_core::Backend::enqueue_many`]: the batch as one JSON document, one statement.

use chokaq_core::{validate, Enqueued, Error, ErrorKind, JobId, NewJob, Result};

use crate::rows::{decode_enqueued, job_json, last_set};

use crate::backend::MssqlBackend;

/// The largest JSON document one `enqueue_many` sends (an `NVARCHAR(MAX)` parameter holds
/// 2 GB; tiberius sends at most 1 GiB of text as `nvarchar(max)`).
const MAX_BATCH_DOCUMENT_BYTES: usize = 512 * 1024 * 1024;

/// [`chokaq_core::Backend::enqueue_many`].
pub(crate) async fn enqueue_many(b: &MssqlBackend, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    // The job count, every job's own checks, and the batch's total bytes.
    validate::enqueue_batch(&jobs, b.config().max_payload_bytes)?;
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
