//! Batches in the reference backend (`docs/workflows.md`, "Batches"): each batch's counts and
//! callbacks beside the rows; every move to the archive or the dead letters calls the hook,
//! which counts the job's first end and enqueues each callback once, in the same step.

use std::collections::{HashMap, HashSet};

use crate::batch::{callback_job, check_jobs, BatchEvent, BatchInfo};
use crate::{Batch, BatchId, BatchStatus, EnqueuedBatch, Error, ErrorKind, JobId, NewJob, Result, RunAt, Timestamp};

use super::{plus, MemoryBackend, Store};

#[derive(Debug)]
struct Stored {
    name: String,
    total: u64,
    succeeded: u64,
    dead: u64,
    callbacks: Vec<(BatchEvent, NewJob)>,
    fired: Vec<(BatchEvent, JobId)>,
}

/// The batches of a store.
#[derive(Debug, Default)]
pub(super) struct Batches {
    batches: HashMap<BatchId, Stored>,
    batch_of: HashMap<JobId, BatchId>,
    /// Jobs whose end was counted (once: a dead letter requeued and archived later counts
    /// nothing again).
    counted: HashSet<JobId>,
}

fn insert_all(b: &MemoryBackend, s: &mut Store, id: BatchId, jobs: Vec<NewJob>, at: Timestamp) -> Result<Vec<JobId>> {
    for j in &jobs {
        j.validate(b.max_payload_bytes)?;
        if let RunAt::After(d) = j.run_at {
            plus(at, d)?;
        }
    }
    let mut ids = Vec::with_capacity(jobs.len());
    for j in jobs {
        // No key and no unique settings (checked): always a new row.
        let job = MemoryBackend::insert(s, j, at)?.id;
        s.batches.batch_of.insert(job, id);
        ids.push(job);
    }
    Ok(ids)
}

/// [`crate::Backend::enqueue_batch`]: the jobs and the batch's row, all or nothing.
pub(super) async fn enqueue(b: &MemoryBackend, batch: &Batch) -> Result<EnqueuedBatch> {
    batch.check()?;
    for (_, cb) in batch.callbacks() {
        cb.validate(b.max_payload_bytes)?;
    }
    let mut s = b.lock();
    let at = b.now();
    let id = BatchId::new();
    let jobs = insert_all(b, &mut s, id, batch.job_list().to_vec(), at)?;
    s.batches.batches.insert(
        id,
        Stored {
            name: batch.name().to_string(),
            total: jobs.len() as u64,
            succeeded: 0,
            dead: 0,
            callbacks: batch.callbacks().to_vec(),
            fired: Vec::new(),
        },
    );
    Ok(EnqueuedBatch { id, jobs })
}

/// [`crate::Backend::add_to_batch`]: refused (`Conflict`) once the batch is final.
pub(super) async fn add(b: &MemoryBackend, id: BatchId, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    let mut s = b.lock();
    let at = b.now();
    let Some(st) = s.batches.batches.get(&id) else {
        return Err(Error::not_found(format!("no batch {id}")));
    };
    if st.succeeded + st.dead == st.total {
        return Err(Error::new(ErrorKind::Conflict, format!("batch {id} is final: no job can be added to it")));
    }
    check_jobs(&st.name, &jobs, st.total as usize)?;
    let ids = insert_all(b, &mut s, id, jobs, at)?;
    if let Some(st) = s.batches.batches.get_mut(&id) {
        st.total += ids.len() as u64;
    }
    Ok(ids)
}

/// [`crate::Backend::get_batch`].
pub(super) async fn get(b: &MemoryBackend, id: BatchId) -> Result<Option<BatchStatus>> {
    b.check_read_deadline()?;
    let s = b.lock();
    Ok(s.batches.batches.get(&id).map(|st| BatchStatus {
        id,
        name: st.name.clone(),
        total: st.total,
        succeeded: st.succeeded,
        dead: st.dead,
        fired: st.fired.clone(),
    }))
}

/// Called by every move to the archive (`ok`) or to the dead letters.
pub(super) fn ended(s: &mut Store, job: JobId, ok: bool, at: Timestamp) {
    let Some(&id) = s.batches.batch_of.get(&job) else { return };
    if !s.batches.counted.insert(job) {
        return;
    }
    let Some(st) = s.batches.batches.get_mut(&id) else { return };
    if ok {
        st.succeeded += 1;
    } else {
        st.dead += 1;
    }
    let mut due: Vec<BatchEvent> = Vec::new();
    if !ok && st.dead == 1 {
        due.push(BatchEvent::FirstDead);
    }
    if st.succeeded + st.dead == st.total {
        due.push(BatchEvent::Finished);
        if st.dead == 0 {
            due.push(BatchEvent::Succeeded);
        }
    }
    let mut jobs: Vec<(BatchEvent, NewJob)> = Vec::new();
    for event in due {
        if st.fired.iter().any(|(e, _)| *e == event) {
            continue;
        }
        if let Some((_, cb)) = st.callbacks.iter().find(|(e, _)| *e == event) {
            let info =
                BatchInfo { id, name: st.name.clone(), event, total: st.total, succeeded: st.succeeded, dead: st.dead };
            jobs.push((event, callback_job(cb.clone(), &info)));
        }
    }
    for (event, job) in jobs {
        // Checked at enqueue (no key, a valid job): a new row.
        if let Ok(e) = MemoryBackend::insert(s, job, at) {
            if let Some(st) = s.batches.batches.get_mut(&id) {
                st.fired.push((event, e.id));
            }
        }
    }
}
