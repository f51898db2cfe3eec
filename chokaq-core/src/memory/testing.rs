//! [`TestSupport`] for the memory backend (feature `testing`).

use async_trait::async_trait;

use super::{MemoryBackend, Store};
use crate::testing::{JobPatch, Presence, TestSupport};
use crate::{Error, JobId, JobLocation, QueueName, Result, Timestamp, WorkerId};

#[async_trait]
impl TestSupport for MemoryBackend {
    async fn db_now(&self) -> Result<Timestamp> {
        Ok(self.now())
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        if patch.raw_payload.is_some() {
            // Payloads live here as parsed values: every stored one can be read.
            return Err(crate::Error::unsupported("the memory backend cannot store an undecodable payload"));
        }
        let mut s = self.lock();
        let Some(r) = s.hot.get_mut(&id) else {
            return Ok(false);
        };
        if let Some(st) = patch.status {
            r.location = JobLocation::Hot(st);
        }
        if let Some(a) = patch.attempt {
            r.attempt = a;
        }
        if let Some(v) = patch.scheduled_at {
            r.scheduled_at = v;
        }
        if let Some(v) = patch.heartbeat_at {
            r.heartbeat_at = v;
        }
        if let Some(v) = patch.updated_at {
            r.updated_at = v;
        }
        if let Some(v) = patch.created_at {
            r.created_at = v;
        }
        Ok(true)
    }

    async fn force_worker_seen(&self, worker: WorkerId, last_seen_at: Timestamp) -> Result<bool> {
        let mut s = self.lock();
        Ok(s.workers.get_mut(&worker).map(|w| w.last_seen_at = last_seen_at).is_some())
    }

    async fn force_finished_at(&self, id: JobId, finished_at: Timestamp) -> Result<bool> {
        let mut s = self.lock();
        Ok(s.archive.get_mut(&id).map(|r| r.finished_at = Some(finished_at)).is_some())
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        let s = self.lock();
        Ok(Presence {
            hot: u32::from(s.hot.contains_key(&id)),
            archive: u32::from(s.archive.contains_key(&id)),
            dead: u32::from(s.dead.contains_key(&id)),
        })
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let s = self.lock();
        Ok(ids
            .iter()
            .map(|id| {
                (
                    *id,
                    Presence {
                        hot: u32::from(s.hot.contains_key(id)),
                        archive: u32::from(s.archive.contains_key(id)),
                        dead: u32::from(s.dead.contains_key(id)),
                    },
                )
            })
            .collect())
    }

    async fn add_starts(&self, queue: &QueueName, key: Option<&str>, count: u64, at: Timestamp) -> Result<()> {
        let mut s = self.lock();
        let limit = Self::settings(&s, queue)
            .rate_limit
            .ok_or_else(|| Error::invalid(format!("add_starts: queue {queue} has no rate limit")))?;
        let bucket = if limit.by_key { key } else { None };
        if limit.by_key && key.is_none() {
            return Err(Error::invalid("add_starts: a key-less start is in no bucket of a by-key limit"));
        }
        if s.starts.last(queue, bucket).is_some_and(|last| at < last) {
            return Err(Error::invalid("add_starts: a stamp earlier than the bucket's latest entry"));
        }
        let count = usize::try_from(count).map_err(|_| Error::invalid("add_starts: count too large"))?;
        s.starts.log(queue, key, super::micros(at), count);
        Ok(())
    }

    async fn drop_schema(&self) -> Result<()> {
        *self.lock() = Store::default();
        Ok(())
    }
}

/// One job as [`MemoryBackend::view`] shows it: where it is and who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowView {
    pub id: JobId,
    pub location: JobLocation,
    pub lease: Option<crate::Lease>,
    pub worker: Option<WorkerId>,
    pub attempt: i32,
    pub expired_holds: i32,
}

impl MemoryBackend {
    /// Every job of the store (hot, archived, dead) in id order, under one lock, without the
    /// payloads: what the runtime's simulator compares after each call to see which leases the
    /// store granted and ended.
    pub fn view(&self) -> Vec<RowView> {
        let s = self.lock();
        let mut out: Vec<RowView> = s
            .hot
            .values()
            .chain(s.archive.values())
            .chain(s.dead.values())
            .map(|r| RowView {
                id: r.id,
                location: r.location,
                lease: r.lease,
                worker: r.worker_id,
                attempt: r.attempt,
                expired_holds: s.expired_holds.get(&r.id).copied().unwrap_or(0),
            })
            .collect();
        out.sort_by_key(|r| r.id);
        out
    }
}
