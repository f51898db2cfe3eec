//! Job outputs (`docs/outputs.md`): [`chokaq_core::Backend::record_output`] and `get_output`.

use chokaq_core::{validate, Error, ErrorKind, Fenced, JobId, LeaseRef, Result, WorkerId};

use crate::backend::{commit, SqliteBackend};
use crate::bounded::ReadConn;
use crate::error::map_err;

/// [`chokaq_core::Backend::record_output`]: checked before the write lock is taken, then one
/// guarded `UPDATE` of the hot row.
pub(crate) async fn record_output(
    b: &SqliteBackend,
    worker: WorkerId,
    lease: LeaseRef,
    value: &serde_json::Value,
) -> Result<Fenced> {
    validate::output(value, b.max_output_bytes)?;
    let text = serde_json::to_string(value)?;
    let mut tx = b.begin_write().await?;
    let row: Option<Vec<u8>> = sqlx::query_scalar(&b.sql.record_output)
        .bind(&text)
        .bind(lease.id.0)
        .bind(lease.lease.0)
        .bind(worker.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
    commit(tx).await?;
    Ok(if row.is_some() { Fenced::Done(()) } else { Fenced::LeaseLost })
}

/// [`chokaq_core::Backend::get_output`]: one statement over the three tables.
pub(crate) async fn get_output(b: &SqliteBackend, id: JobId) -> Result<Option<serde_json::Value>> {
    let mut r = ReadConn::open(b).await?;
    let out: Result<Option<Option<String>>> =
        sqlx::query_scalar(&b.sql.get_output).bind(id.0).fetch_optional(r.conn()).await.map_err(map_err);
    let text = r.finish(out).await?.flatten();
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| Error::with_source(ErrorKind::Other, format!("job {id}: the stored output is not JSON"), e))
    })
    .transpose()
}
