//! Reads: [`crate::Backend::queue_settings`], `stats` and `get_job` (`list_jobs` is in `list.rs`).

use std::collections::BTreeMap;

use crate::{
    DeadReason, JobId, JobLocation, JobRecord, JobStatus, QueueName, QueueSettings, QueueStats, Result, StatsSnapshot,
};

use super::{due_at, status_of, MemoryBackend};

/// [`crate::Backend::queue_settings`].
pub(crate) async fn queue_settings(b: &MemoryBackend, queue: &QueueName) -> Result<QueueSettings> {
    let s = b.lock();
    Ok(MemoryBackend::settings(&s, queue))
}

/// [`crate::Backend::stats`].
pub(crate) async fn stats(b: &MemoryBackend) -> Result<StatsSnapshot> {
    let s = b.lock();
    let at = b.now();
    let mut snap = StatsSnapshot { taken_at: Some(at), ..Default::default() };
    let mut per: BTreeMap<String, QueueStats> = BTreeMap::new();
    for r in s.hot.values().chain(s.archive.values()).chain(s.dead.values()) {
        let qs = per
            .entry(r.queue.to_string())
            .or_insert_with(|| QueueStats { queue: r.queue.to_string(), ..Default::default() });
        match r.location {
            JobLocation::Hot(JobStatus::Pending) => {
                qs.pending += 1;
                snap.pending += 1;
                let due = due_at(r);
                if due <= at && qs.oldest_due_at.is_none_or(|o| due < o) {
                    qs.oldest_due_at = Some(due);
                }
            }
            JobLocation::Hot(JobStatus::Fetched) => {
                qs.fetched += 1;
                snap.fetched += 1;
            }
            JobLocation::Hot(JobStatus::Processing) => {
                qs.processing += 1;
                snap.processing += 1;
            }
            JobLocation::Archived => {
                qs.archived += 1;
                snap.archived += 1;
            }
            JobLocation::Dead(reason) => {
                qs.dead += 1;
                snap.dead += 1;
                if reason == DeadReason::Cancelled {
                    qs.cancelled += 1;
                    snap.cancelled += 1;
                }
            }
        }
    }
    let mut keys: BTreeMap<(String, String), u64> = BTreeMap::new();
    for r in s.hot.values() {
        if let (Some(k), Some(JobStatus::Fetched | JobStatus::Processing)) = (&r.concurrency_key, status_of(r)) {
            *keys.entry((r.queue.to_string(), k.clone())).or_default() += 1;
        }
    }
    for ((queue, key), running) in keys {
        if let Some(qs) = per.get_mut(&queue) {
            qs.busiest_keys.push(crate::KeyCount { key, running });
        }
    }
    for qs in per.values_mut() {
        qs.busiest_keys.sort_by(|a, b| b.running.cmp(&a.running).then_with(|| a.key.cmp(&b.key)));
        qs.busiest_keys.truncate(crate::MAX_BUSIEST_KEYS);
    }
    for (name, st) in &s.queues {
        per.entry(name.to_string())
            .or_insert_with(|| QueueStats { queue: name.to_string(), ..Default::default() })
            .settings = Some(st.clone());
    }
    snap.queues = per.into_values().collect();
    Ok(snap)
}

/// [`crate::Backend::get_job`].
pub(crate) async fn get_job(b: &MemoryBackend, id: JobId) -> Result<Option<JobRecord>> {
    let s = b.lock();
    Ok(s.hot.get(&id).or_else(|| s.archive.get(&id)).or_else(|| s.dead.get(&id)).cloned())
}
