//! The rescue: expired reservations and holds back to Pending, zombies retried or
//! dead-lettered, the starts log pruned to what a rate window can still see.

use std::collections::HashMap;
use std::time::Duration;

use crate::{DeadReason, JobId, JobStatus, QueueName, RescueParams, RescueReport, ZombiePolicy};

use super::{minus, status_of, MemoryBackend};

impl MemoryBackend {
    /// The rescue itself (timeouts from each queue's settings), under the store's lock.
    pub(super) fn rescue_now(&self, params: &RescueParams) -> RescueReport {
        let mut s = self.lock();
        let at = self.now();
        let mut report = RescueReport { ran: true, ..Default::default() };
        let mut todo: Vec<(JobId, bool)> = Vec::new(); // (id, is_zombie)
        let mut held_expired: Vec<JobId> = Vec::new();
        for r in s.hot.values() {
            if (todo.len() + held_expired.len()) as u32 >= params.limit {
                break;
            }
            match status_of(r) {
                // Held (the claim set its heartbeat): its handler may be running, so the zombie
                // timeout applies, from its last heartbeat.
                Some(JobStatus::Fetched) if r.heartbeat_at.is_some() => {
                    let timeout = Self::settings(&s, &r.queue).effective_zombie_timeout();
                    if r.heartbeat_at.unwrap_or(r.updated_at) < minus(at, timeout) {
                        held_expired.push(r.id);
                    }
                }
                Some(JobStatus::Fetched) => {
                    let timeout = Self::settings(&s, &r.queue).effective_fetched_timeout();
                    if r.updated_at < minus(at, timeout) {
                        todo.push((r.id, false));
                    }
                }
                Some(JobStatus::Processing) => {
                    let timeout = Self::settings(&s, &r.queue).effective_zombie_timeout();
                    if r.heartbeat_at.unwrap_or(r.updated_at) < minus(at, timeout) {
                        todo.push((r.id, true));
                    }
                }
                _ => {}
            }
        }
        for id in held_expired {
            let cancelled = s.hot.get(&id).is_some_and(|r| r.cancel_requested);
            let expired = s.expired_holds.get(&id).copied().unwrap_or(0) + 1;
            if cancelled {
                Self::to_dead(&mut s, id, DeadReason::Cancelled, None, at);
                report.zombies_dead += 1;
            } else {
                // Never dead-lettered for its expiries (issue 36): the job may never have run
                // (it waited in a crashed worker's look-ahead, or the claim's reply was lost).
                // The count goes out with its next claim, and the runtime records its start
                // before its handler begins, so a job that kills its worker counts attempts.
                s.expired_holds.insert(id, expired);
                let r = s.hot.get_mut(&id).expect("listed above");
                Self::to_pending(r, at);
                r.lease = None;
                r.heartbeat_at = None;
                report.fetched_released += 1;
            }
        }
        for (id, zombie) in todo {
            let r = s.hot.get(&id).expect("listed above");
            if !zombie {
                let r = s.hot.get_mut(&id).expect("listed above");
                Self::to_pending(r, at);
                r.lease = None;
                report.fetched_released += 1;
                continue;
            }
            let policy = Self::settings(&s, &r.queue).zombie_policy;
            if r.cancel_requested {
                // An accepted cancel is final: the zombie is not retried.
                Self::to_dead(&mut s, id, DeadReason::Cancelled, None, at);
                report.zombies_dead += 1;
            } else if policy == ZombiePolicy::Retry && r.attempt < r.max_attempts {
                let r = s.hot.get_mut(&id).expect("listed above");
                Self::to_pending(r, at);
                r.lease = None;
                report.zombies_retried += 1;
            } else {
                Self::to_dead(&mut s, id, DeadReason::Zombie, None, at);
                report.zombies_dead += 1;
            }
        }
        // The starts log keeps only what a rate window can still see.
        let windows: HashMap<QueueName, Duration> =
            s.queues.iter().filter_map(|(q, st)| st.rate_limit.map(|l| (q.clone(), l.per))).collect();
        s.starts.retain(|(q, _, t)| windows.get(q).is_some_and(|per| *t > minus(at, *per)));
        report
    }
}
