//! The leases a worker holds, and the task that extends them: one batched heartbeat per
//! interval for every running and look-ahead job.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::{Backend, ClaimedJob, ErrorKind, JobId, LeaseRef, WorkerId, WorkerRegistration, MAX_HOST_LEN};
use tokio_util::sync::CancellationToken;

use super::{add, Counters};
use crate::job::{JobControl, StopReason};

struct Held {
    lease: LeaseRef,
    control: Arc<JobControl>,
    /// The handler is done; the lease is held until its outcome is written.
    finished: bool,
}

/// The Processing leases this worker holds (running jobs, look-ahead ones, and finished ones
/// whose outcome is not written yet), each with the stop switch of its job. The heartbeat extends them; a lost lease or a cancel request it
/// reports fires the job's switch.
#[derive(Default)]
pub(super) struct Leases {
    held: Mutex<HashMap<JobId, Held>>,
    /// Set by [`Leases::stop_all`]: a job tracked afterwards (a look-ahead job whose start was
    /// confirmed late) is stopped with the same reason at once.
    stopped: Mutex<Option<StopReason>>,
}

impl Leases {
    /// Registers a Processing job for heartbeats, cancel requests and lease loss.
    pub(super) fn track(&self, job: &ClaimedJob) -> Arc<JobControl> {
        let control = Arc::new(JobControl::new());
        self.track_with(job.lease_ref(), control.clone());
        control
    }

    /// [`Leases::track`] with the job's existing stop switch (a look-ahead job whose handler
    /// started before its start was confirmed).
    pub(super) fn track_with(&self, lease: LeaseRef, control: Arc<JobControl>) {
        if let Some(reason) = *self.stopped.lock().unwrap() {
            control.stop(reason);
        }
        let old = self.held.lock().unwrap().insert(lease.id, Held { lease, control, finished: false });
        if let Some(old) = old {
            // This worker still runs an earlier attempt of the same job, which was rescued and
            // granted anew: the earlier lease is lost, whatever the next heartbeat would say.
            old.control.stop(StopReason::LeaseLost);
        }
    }

    /// One attempt's handler is done: its lease stays held (heart-beaten) until its outcome
    /// is written, but it no longer counts as running.
    pub(super) fn finish(&self, lease: LeaseRef) {
        if let Some(r) = self.held.lock().unwrap().get_mut(&lease.id).filter(|r| r.lease == lease) {
            r.finished = true;
        }
    }

    /// Forgets one attempt's lease, and only that attempt's (a newer lease of the same job
    /// may be held): its outcome is written, or it is lost.
    pub(super) fn untrack(&self, lease: LeaseRef) {
        let mut held = self.held.lock().unwrap();
        if held.get(&lease.id).is_some_and(|r| r.lease == lease) {
            held.remove(&lease.id);
        }
    }

    /// Whether no job is running or waiting in the look-ahead buffer (finished jobs whose
    /// outcome is not written yet do not count).
    pub(super) fn none_running(&self) -> bool {
        self.held.lock().unwrap().values().all(|r| r.finished)
    }

    /// Fires every held job's switch with `reason`; returns how many.
    pub(super) fn stop_all(&self, reason: StopReason) -> usize {
        if let Ok(mut s) = self.stopped.lock() {
            s.get_or_insert(reason);
        }
        let controls: Vec<Arc<JobControl>> = match self.held.lock() {
            Ok(held) => held.values().map(|r| r.control.clone()).collect(),
            Err(_) => return 0,
        };
        for c in &controls {
            c.stop(reason);
        }
        controls.len()
    }

    /// The leases to extend: all held but those already known lost.
    fn to_extend(&self) -> Vec<LeaseRef> {
        self.held
            .lock()
            .unwrap()
            .values()
            .filter(|r| r.control.reason() != Some(StopReason::LeaseLost))
            .map(|r| r.lease)
            .collect()
    }

    /// Fires the switches of the jobs the heartbeat found lost or asked to cancel. The reply
    /// is about the leases `sent`: a job held now under another (newer) lease is left alone.
    fn apply(&self, sent: &[LeaseRef], lost: &[JobId], cancel_requested: &[JobId], by_id: bool) {
        let sent: HashMap<JobId, LeaseRef> = sent.iter().map(|l| (l.id, *l)).collect();
        let held = self.held.lock().unwrap();
        let about_sent = |id: &JobId| held.get(id).filter(|r| by_id || sent.get(id) == Some(&r.lease));
        for id in lost {
            if let Some(r) = about_sent(id) {
                r.control.stop(StopReason::LeaseLost);
            }
        }
        for id in cancel_requested {
            if let Some(r) = about_sent(id) {
                r.control.stop(StopReason::CancelRequested);
            }
        }
    }
}

/// The heartbeat task.
pub(super) struct Heartbeat {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) worker: WorkerId,
    pub(super) interval: Duration,
    pub(super) leases: Arc<Leases>,
    pub(super) counters: Arc<Counters>,
    /// This process's row of the workers table, written at start and with every beat.
    pub(super) registration: Option<WorkerRegistration>,
}

/// This process's row of the workers table: host, pid, queues and concurrency.
pub(super) fn registration(worker: WorkerId, cfg: &super::WorkerConfig) -> WorkerRegistration {
    WorkerRegistration {
        worker,
        host: host_name(),
        pid: std::process::id(),
        queues: cfg.queues.clone(),
        concurrency: cfg.concurrency,
    }
}

/// The host name: `$HOSTNAME`, else `/etc/hostname`, else the kernel's
/// (`/proc/sys/kernel/hostname`), else `unknown`; control characters removed and cut to
/// [`MAX_HOST_LEN`] bytes, so the registration is always valid.
pub(super) fn host_name() -> String {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let raw = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| read("/etc/hostname").filter(|h| !h.trim().is_empty()))
        .or_else(|| read("/proc/sys/kernel/hostname").filter(|h| !h.trim().is_empty()))
        .unwrap_or_else(|| "unknown".to_string());
    let mut host: String = raw.trim().chars().filter(|c| !c.is_control()).collect();
    while host.len() > MAX_HOST_LEN {
        host.pop();
    }
    host
}

impl Heartbeat {
    /// Registers this process at once, then one batched heartbeat (and one registration) per
    /// interval until `stop` fires (the first beat after one interval).
    pub(super) async fn run(self, stop: CancellationToken) {
        let mut warned = false;
        self.register(&mut warned).await;
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.register(&mut warned).await;
            self.beat().await;
        }
    }

    /// Upserts this process's row. A failure never stops the worker: it is logged (as a
    /// warning the first time, then at debug level until a registration succeeds again).
    pub(super) async fn register(&self, warned: &mut bool) {
        let Some(reg) = &self.registration else { return };
        match self.backend.register_worker(reg).await {
            Ok(()) => *warned = false,
            Err(e) if !*warned => {
                *warned = true;
                let hint = if e.kind() == ErrorKind::NotMigrated { " (run the migrations)" } else { "" };
                tracing::warn!(error = %e, "could not register this worker in the workers table{hint}; jobs still run");
            }
            Err(e) => tracing::debug!(error = %e, "worker registration failed again"),
        }
    }

    pub(super) async fn beat(&self) {
        let leases = self.leases.to_extend();
        if leases.is_empty() {
            return;
        }
        add(&self.counters.heartbeat_calls, 1);
        match self.backend.heartbeat(self.worker, &leases).await {
            Ok(report) => {
                if report.lost.is_empty() && report.cancel_requested.is_empty() {
                    return;
                }
                let by_id = super::broken(self.worker, super::Broken::LostById);
                self.leases.apply(&leases, &report.lost, &report.cancel_requested, by_id);
            }
            Err(e) => tracing::warn!(error = %e, count = leases.len(), "heartbeat failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chokaq_core::memory::MemoryBackend;
    use chokaq_core::{
        Backend, BackendExt, ClaimMode, ClaimParams, ClaimedJob, FailAction, Fenced, NewJob, QueueName, WorkerId,
    };

    use super::{Heartbeat, Leases};
    use crate::job::StopReason;
    use crate::worker::Counters;

    async fn claimed(b: &MemoryBackend, w: WorkerId, n: usize) -> Vec<ClaimedJob> {
        for _ in 0..n {
            b.enqueue(NewJob::build("q", "k").unwrap()).await.unwrap();
        }
        let q = vec![QueueName::new("q").unwrap()];
        b.claim(&ClaimParams::new(w, q, n as u32, ClaimMode::Start)).await.unwrap()
    }

    fn heartbeat(b: Arc<MemoryBackend>, w: WorkerId, leases: Arc<Leases>) -> (Heartbeat, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let hb = Heartbeat {
            backend: b,
            worker: w,
            interval: Duration::from_secs(1),
            leases,
            counters: counters.clone(),
            registration: None,
        };
        (hb, counters)
    }

    /// A job tracked again (rescued and granted anew while its earlier attempt still runs):
    /// the earlier attempt's switch fires `LeaseLost`, and forgetting the earlier lease leaves
    /// the newer one held.
    #[tokio::test]
    async fn tracking_again_stops_the_earlier_attempt() {
        let b = MemoryBackend::new();
        let w = WorkerId::random();
        let job = claimed(&b, w, 1).await.remove(0);
        let leases = Leases::default();
        let first = leases.track(&job);
        let mut again = job.clone();
        again.lease = chokaq_core::Lease(job.lease.0 + 1);
        let second = leases.track(&again);
        assert_eq!(first.reason(), Some(StopReason::LeaseLost));
        assert_eq!(second.reason(), None);
        leases.untrack(job.lease_ref());
        assert!(!leases.none_running(), "the newer lease stays");
        leases.finish(again.lease_ref());
        assert!(leases.none_running(), "finished: held, not running");
        assert_eq!(leases.to_extend(), vec![again.lease_ref()], "a finished lease is still extended");
        leases.untrack(again.lease_ref());
        assert!(leases.none_running() && leases.to_extend().is_empty());
    }

    /// One call for all held leases; a lease the backend reports lost fires its job's switch
    /// and is not extended again; nothing held, no call.
    #[tokio::test]
    async fn a_beat_extends_all_and_stops_the_lost() {
        let b = Arc::new(MemoryBackend::new());
        let w = WorkerId::random();
        let jobs = claimed(&b, w, 2).await;
        let leases = Arc::new(Leases::default());
        let controls: Vec<_> = jobs.iter().map(|j| leases.track(j)).collect();
        // The first job's lease goes: its attempt is put back to Pending behind our back.
        let snoozed = b.fail(w, jobs[0].lease_ref(), FailAction::Snooze { delay: Duration::ZERO }).await.unwrap();
        assert!(matches!(snoozed, Fenced::Done(_)));
        let (hb, counters) = heartbeat(b.clone(), w, leases.clone());
        hb.beat().await;
        assert_eq!(counters.report().heartbeat_calls, 1);
        assert_eq!(controls[0].reason(), Some(StopReason::LeaseLost));
        assert_eq!(controls[1].reason(), None);
        assert_eq!(leases.to_extend(), vec![jobs[1].lease_ref()]);
        assert_eq!(leases.stop_all(StopReason::Shutdown), 2);
        assert_eq!(controls[1].reason(), Some(StopReason::Shutdown));

        let empty = Arc::new(Leases::default());
        let (hb, counters) = heartbeat(b, w, empty);
        hb.beat().await;
        assert_eq!(counters.report().heartbeat_calls, 0);
    }

    /// An operator's cancel request reported by the heartbeat fires `CancelRequested`.
    #[tokio::test]
    async fn a_cancel_request_stops_the_job() {
        let b = Arc::new(MemoryBackend::new());
        let w = WorkerId::random();
        let job = claimed(&b, w, 1).await.remove(0);
        let leases = Arc::new(Leases::default());
        let control = leases.track(&job);
        b.cancel(job.id).await.unwrap();
        let (hb, _) = heartbeat(b, w, leases);
        hb.beat().await;
        assert_eq!(control.reason(), Some(StopReason::CancelRequested));
        assert!(control.token.is_cancelled());
    }
}
