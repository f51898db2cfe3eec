//! [`crate::Backend::enqueue_many`]: every job checked before any is inserted.

use crate::{validate, Enqueued, NewJob, Result, RunAt};

use super::{plus, MemoryBackend};

/// [`crate::Backend::enqueue_many`].
pub(crate) async fn enqueue_many(b: &MemoryBackend, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
    validate::enqueue_batch(&jobs, b.max_payload_bytes)?;
    let mut s = b.lock();
    let at = b.now();
    // Validate the schedule of every job before inserting any.
    for j in &jobs {
        if let RunAt::After(d) = j.run_at {
            plus(at, d)?;
        }
    }
    jobs.into_iter().map(|j| MemoryBackend::insert(&mut s, j, at)).collect::<Result<Vec<_>>>()
}
