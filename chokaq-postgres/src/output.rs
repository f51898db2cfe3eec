//! Job outputs (`docs/outputs.md`): [`chokaq_core::Backend::record_output`] and `get_output`.

use chokaq_core::{validate, Fenced, JobId, LeaseRef, Result, WorkerId};
use sqlx::Row;

use crate::backend::PgBackend;
use crate::bounded::Session;
use crate::error::with_retry;

/// [`chokaq_core::Backend::record_output`]: checked before any round trip, then one guarded
/// `UPDATE` of the hot row (the claim, complete and fail statements are untouched).
pub(crate) async fn record_output(
    b: &PgBackend,
    worker: WorkerId,
    lease: LeaseRef,
    value: &serde_json::Value,
) -> Result<Fenced> {
    validate::output(value, b.shared.max_output_bytes)?;
    let row = with_retry(|| {
        sqlx::query(&b.sql().record_output)
            .bind(worker.0)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(value)
            .fetch_optional(&b.kept)
    })
    .await?;
    Ok(if row.is_some() { Fenced::Done(()) } else { Fenced::LeaseLost })
}

/// [`chokaq_core::Backend::get_output`]: one statement over the three tables.
pub(crate) async fn get_output(b: &PgBackend, id: JobId) -> Result<Option<serde_json::Value>> {
    let q = || sqlx::query(&b.sql().get_output).bind(id.0);
    let row = match b.read_deadline {
        Some(d) => {
            let mut s = Session::open(b, d).await?;
            let r = q().fetch_optional(s.conn()).await;
            s.finish(r).await?
        }
        None => with_retry(|| q().fetch_optional(&b.kept)).await?,
    };
    let Some(row) = row else { return Ok(None) };
    row.try_get::<Option<serde_json::Value>, _>("output")
        .map_err(|e| chokaq_core::Error::with_source(chokaq_core::ErrorKind::Other, "decoding column output", e))
}
