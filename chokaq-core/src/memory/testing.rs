//! [`TestSupport`] for the memory backend (feature `testing`).

use async_trait::async_trait;

use super::{MemoryBackend, Store};
use crate::testing::{JobPatch, Presence, TestSupport};
use crate::{JobId, JobLocation, Result, Timestamp, WorkerId};

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

    async fn drop_schema(&self) -> Result<()> {
        *self.lock() = Store::default();
        Ok(())
    }
}
