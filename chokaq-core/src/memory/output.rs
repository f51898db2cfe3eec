//! Job outputs (`docs/outputs.md`): [`crate::Backend::record_output`] and `get_output`.

use crate::{validate, Fenced, JobId, LeaseRef, Result, WorkerId};

use super::MemoryBackend;

/// [`crate::Backend::record_output`]: checked first, then written only while the lease holds
/// the job (Fetched or Processing, as `heartbeat`); a later record replaces an earlier one.
pub(crate) async fn record_output(
    b: &MemoryBackend,
    worker: WorkerId,
    lease: LeaseRef,
    value: &serde_json::Value,
) -> Result<Fenced> {
    validate::output(value, validate::DEFAULT_MAX_OUTPUT_BYTES)?;
    let mut s = b.lock();
    if MemoryBackend::held_any(&mut s, worker, lease).is_none() {
        return Ok(Fenced::LeaseLost);
    }
    s.outputs.insert(lease.id, value.clone());
    Ok(Fenced::Done(()))
}

/// [`crate::Backend::get_output`]: the job's output wherever the job is.
pub(crate) async fn get_output(b: &MemoryBackend, id: JobId) -> Result<Option<serde_json::Value>> {
    let s = b.lock();
    let exists = s.hot.contains_key(&id) || s.archive.contains_key(&id) || s.dead.contains_key(&id);
    Ok(if exists { s.outputs.get(&id).cloned() } else { None })
}
