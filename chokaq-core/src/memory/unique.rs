//! Unique jobs (`docs/unique.md`): the key map, the decision at enqueue, [`crate::Backend::unique_of`]
//! and [`crate::Backend::prune_uniques`]. The map is the memory backend's unique index: one
//! entry per key, naming the job that holds it; under the store's one lock, the look-up and
//! the insert are one step.

use crate::{
    prunable, prune_limit, JobId, Result, Timestamp, UniqueHold, UniqueKey, UniqueOpts, UniqueState, UniqueStates,
};

use super::{MemoryBackend, Store};

/// One key row: what the SQL backends keep in their `uniques` table.
#[derive(Debug, Clone)]
pub(super) struct KeyRow {
    job_id: JobId,
    states: UniqueStates,
    settings: String,
    expires_at: Option<Timestamp>,
}

/// Where job `id` stands now, or `None` when it is in no table.
fn state_of(store: &Store, id: JobId, now: Timestamp) -> Option<UniqueState> {
    let r = store.hot.get(&id).or_else(|| store.archive.get(&id)).or_else(|| store.dead.get(&id))?;
    Some(UniqueState::of_record(r, now))
}

/// The holder of `key` when it is in one of `key.states`: the new job is a duplicate of it.
pub(super) fn holder(store: &Store, key: &UniqueKey, now: Timestamp) -> Option<JobId> {
    let row = store.uniques.get(&key.key)?;
    state_of(store, row.job_id, now).filter(|s| key.states.contains(*s)).map(|_| row.job_id)
}

/// Job `id` takes `key` (a new entry, or one whose holder no longer counts).
pub(super) fn take(store: &mut Store, key: UniqueKey, id: JobId) {
    let row = KeyRow { job_id: id, states: key.states, settings: key.settings, expires_at: key.expires_at };
    store.uniques.insert(key.key, row);
}

/// [`crate::Backend::unique_of`].
pub(crate) async fn unique_of(b: &MemoryBackend, id: JobId) -> Result<Option<UniqueHold>> {
    let s = b.lock();
    let Some((key, row)) = s.uniques.iter().find(|(_, r)| r.job_id == id) else { return Ok(None) };
    Ok(Some(UniqueHold {
        key: key.clone(),
        job_id: id,
        opts: UniqueOpts::from_json(&row.settings)?,
        expires_at: row.expires_at,
    }))
}

/// [`crate::Backend::prune_uniques`].
pub(crate) async fn prune_uniques(b: &MemoryBackend, limit: u32) -> Result<u64> {
    prune_limit(limit)?;
    let mut s = b.lock();
    let now = b.now();
    let gone: Vec<String> = s
        .uniques
        .iter()
        .filter(|(_, r)| {
            let live = s.hot.contains_key(&r.job_id);
            let finished = s.archive.contains_key(&r.job_id) || s.dead.contains_key(&r.job_id);
            prunable(r.states, live, finished, r.expires_at, now)
        })
        .map(|(k, _)| k.clone())
        .take(limit as usize)
        .collect();
    for k in &gone {
        s.uniques.remove(k);
    }
    Ok(gone.len() as u64)
}
