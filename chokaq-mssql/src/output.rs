//! Job outputs (`docs/outputs.md`): [`chokaq_core::Backend::record_output`] and `get_output`.

use chokaq_core::{validate, Error, ErrorKind, Fenced, JobId, LeaseRef, Result, WorkerId};

use crate::backend::MssqlBackend;
use crate::rows::{col, id_bytes, last_set};

/// [`chokaq_core::Backend::record_output`]: checked before any round trip, then one guarded
/// `UPDATE` of the hot row.
pub(crate) async fn record_output(
    b: &MssqlBackend,
    worker: WorkerId,
    lease: LeaseRef,
    value: &serde_json::Value,
) -> Result<Fenced> {
    let op = "record_output";
    validate::output(value, b.config().max_output_bytes)?;
    let text = serde_json::to_string(value)?;
    let id = id_bytes(lease.id);
    let rows = last_set(b.run(op, &b.sql().record_output, &[&id, &lease.lease.0, &worker.0, &text]).await?);
    Ok(if rows.is_empty() { Fenced::LeaseLost } else { Fenced::Done(()) })
}

/// [`chokaq_core::Backend::get_output`]: one consistent read of the three tables.
pub(crate) async fn get_output(b: &MssqlBackend, id: JobId) -> Result<Option<serde_json::Value>> {
    let op = "get_output";
    let bytes = id_bytes(id);
    let rows = last_set(b.read(op, &b.sql().get_output, &[&bytes]).await?);
    let Some(row) = rows.first() else { return Ok(None) };
    if rows.len() > 1 {
        return Err(Error::new(ErrorKind::Other, format!("get_output: job {id} is in {} tables at once", rows.len())));
    }
    let text: Option<&str> = col(op, row, "Output")?;
    text.map(|t| {
        serde_json::from_str(t)
            .map_err(|e| Error::with_source(ErrorKind::Other, format!("job {id}: the stored output is not JSON"), e))
    })
    .transpose()
}
