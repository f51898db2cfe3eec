//! Unique jobs (`docs/unique.md`, schema version 10): the enqueue of one unique job (the key
//! row locked `UPDLOCK, HOLDLOCK` in the job's own transaction, `sql/unique.rs`),
//! [`chokaq_core::Backend::unique_of`] and [`chokaq_core::Backend::prune_uniques`].

use chokaq_core::{prune_limit, Enqueued, ErrorKind, JobId, NewJob, Result, UniqueHold, UniqueKey, UniqueOpts};

use crate::backend::MssqlBackend;
use crate::rows::{col, decode_enqueued, first_row, id_bytes, job_json, last_set, req, ts, unique_json};

/// Enqueues one unique job: one batch, one transaction (the plain enqueue with the key block).
pub(crate) async fn enqueue_one(b: &MssqlBackend, job: &NewJob, key: &UniqueKey) -> Result<Enqueued> {
    let op = "enqueue";
    let doc = serde_json::Value::Array(vec![job_json(0, JobId::new(), job)?]).to_string();
    let u = unique_json(key)?;
    let mut attempt = 0;
    let rows = loop {
        match b.run(op, &b.sql().enqueue_unique, &[&doc, &u]).await {
            // A key inserted by a racing enqueuer the range lock did not cover (2627 on the
            // primary key): it has committed, so a retry finds it and decides.
            Err(e) if e.kind() == ErrorKind::Conflict && attempt < 3 => attempt += 1,
            other => break last_set(other?),
        }
    };
    let mut out = decode_enqueued(op, &rows, 1)?;
    out.pop().ok_or_else(|| chokaq_core::Error::new(ErrorKind::Other, "enqueue returned no row"))
}

/// [`chokaq_core::Backend::unique_of`].
pub(crate) async fn unique_of(b: &MssqlBackend, id: JobId) -> Result<Option<UniqueHold>> {
    let op = "unique_of";
    let bytes = id_bytes(id);
    let rows = last_set(b.run(op, &b.sql().unique_of, &[&bytes]).await?);
    let Some(row) = rows.first() else { return Ok(None) };
    let key: &str = req(op, row, "UniqueKey")?;
    let settings: &str = req(op, row, "Settings")?;
    Ok(Some(UniqueHold {
        key: key.to_string(),
        job_id: id,
        opts: UniqueOpts::from_json(settings)?,
        expires_at: ts(op, row, "ExpiresAtUtc")?,
    }))
}

/// [`chokaq_core::Backend::prune_uniques`]: at most `limit` key rows from a random point of
/// the key space on, skipping those an enqueue holds.
pub(crate) async fn prune_uniques(b: &MssqlBackend, limit: u32) -> Result<u64> {
    prune_limit(limit)?;
    let op = "prune_uniques";
    let from = chokaq_core::prune_from();
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    let row = first_row(op, vec![last_set(b.run(op, &b.sql().prune_uniques, &[&limit, &from]).await?)])?;
    Ok(col::<i64>(op, &row, "Pruned")?.unwrap_or(0).max(0) as u64)
}
