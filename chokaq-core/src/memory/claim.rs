//! The claim: free slots per queue, per key and per rate window, then the picks in claim
//! order, under the store's lock.

use std::collections::HashMap;

use crate::{
    ClaimMode, ClaimParams, ClaimedJob, JobLocation, JobRecord, JobStatus, Lease, QueueName, QueueSettings, Result,
};

use super::{claimed, due_at, minus, status_of, MemoryBackend};

impl MemoryBackend {
    pub(super) async fn claim_now(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        req.validate()?;
        let mut s = self.lock();
        let at = self.now();
        // Free slots per requested queue (None = unlimited); paused/inactive queues get 0.
        let mut free: HashMap<QueueName, Option<u64>> = HashMap::new();
        for q in &req.queues {
            let st = Self::settings(&s, q);
            let slots = if st.is_paused || !st.is_active {
                Some(0)
            } else {
                st.max_workers.map(|max| {
                    let active = s
                        .hot
                        .values()
                        .filter(|r| {
                            &r.queue == q
                                && matches!(status_of(r), Some(JobStatus::Fetched) | Some(JobStatus::Processing))
                        })
                        .count() as u64;
                    u64::from(max).saturating_sub(active)
                })
            };
            free.insert(q.clone(), slots);
        }
        // Per-key allowance (the per-key cap) and the rate windows: (queue, key) -> how
        // many more this claim may take. Key `None` of a queue-wide rate limit is the
        // queue's bucket; a job without a concurrency key is bound by neither per-key one.
        let mut key_free: HashMap<(QueueName, String), u64> = HashMap::new();
        let mut rate_free: HashMap<(QueueName, Option<String>), u64> = HashMap::new();
        let settings: HashMap<QueueName, QueueSettings> =
            req.queues.iter().map(|q| (q.clone(), Self::settings(&s, q))).collect();
        let mut candidates: Vec<&JobRecord> = s
            .hot
            .values()
            .filter(|r| {
                status_of(r) == Some(JobStatus::Pending)
                    && due_at(r) <= at
                    && free.contains_key(&r.queue)
                    && !s.flows.is_waiting(&r.id)
            })
            .collect();
        candidates.sort_by(|a, b| b.priority.cmp(&a.priority).then(due_at(a).cmp(&due_at(b))).then(a.id.cmp(&b.id)));
        let mut picked = Vec::new();
        for r in candidates {
            if picked.len() as u32 >= req.limit {
                break;
            }
            if matches!(free.get(&r.queue), Some(Some(0))) {
                continue;
            }
            let st = &settings[&r.queue];
            let key_slot = match (st.key_max_workers, &r.concurrency_key) {
                (Some(cap), Some(k)) => {
                    let slot = key_free.entry((r.queue.clone(), k.clone())).or_insert_with(|| {
                        let running = s
                            .hot
                            .values()
                            .filter(|x| {
                                x.queue == r.queue
                                    && x.concurrency_key.as_deref() == Some(k.as_str())
                                    && matches!(status_of(x), Some(JobStatus::Fetched | JobStatus::Processing))
                            })
                            .count() as u64;
                        u64::from(cap).saturating_sub(running)
                    });
                    if *slot == 0 {
                        continue;
                    }
                    Some((r.queue.clone(), k.clone()))
                }
                _ => None,
            };
            let rate_slot = match st.rate_limit {
                Some(limit) if !limit.by_key || r.concurrency_key.is_some() => {
                    let bucket = if limit.by_key { r.concurrency_key.clone() } else { None };
                    let since = minus(at, limit.per);
                    let slot = rate_free.entry((r.queue.clone(), bucket.clone())).or_insert_with(|| {
                        let (started, _) = s.starts.count(&r.queue, bucket.as_deref(), since);
                        u64::from(limit.jobs).saturating_sub(started)
                    });
                    if *slot == 0 {
                        continue;
                    }
                    Some((r.queue.clone(), bucket))
                }
                _ => None,
            };
            if let Some(Some(n)) = free.get_mut(&r.queue) {
                *n -= 1;
            }
            if let Some(k) = key_slot {
                *key_free.get_mut(&k).expect("entered above") -= 1;
            }
            if let Some(b) = rate_slot {
                *rate_free.get_mut(&b).expect("entered above") -= 1;
            }
            picked.push((r.id, st.rate_limit.is_some()));
        }
        let mut out = Vec::with_capacity(picked.len());
        for (id, logged) in picked {
            if logged {
                let r = &s.hot[&id];
                let (queue, key) = (r.queue.clone(), r.concurrency_key.clone());
                s.starts.log(&queue, key.as_deref(), at, 1);
            }
            s.last_lease += 1;
            let lease = Lease(s.last_lease);
            let expired_holds = s.expired_holds.get(&id).copied().unwrap_or(0);
            let r = s.hot.get_mut(&id).expect("picked from hot");
            r.lease = Some(lease);
            r.worker_id = Some(req.worker);
            r.updated_at = at;
            match req.mode {
                ClaimMode::Reserve => {
                    r.location = JobLocation::Hot(JobStatus::Fetched);
                    r.heartbeat_at = None;
                }
                ClaimMode::Hold => {
                    r.location = JobLocation::Hot(JobStatus::Fetched);
                    r.heartbeat_at = Some(at);
                }
                ClaimMode::Start => {
                    r.location = JobLocation::Hot(JobStatus::Processing);
                    r.attempt += 1;
                    r.started_at = Some(at);
                    r.heartbeat_at = Some(at);
                }
            }
            out.push(ClaimedJob { expired_holds, ..claimed(r) });
        }
        Ok(out)
    }
}
