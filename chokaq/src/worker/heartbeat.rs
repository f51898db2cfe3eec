//! The leases a worker holds, and the task that extends them: one batched heartbeat per
//! interval for every running and look-ahead job.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::{
    Backend, ClaimedJob, ErrorKind, JobId, LeaseRef, QueueName, WorkerId, WorkerRegistration, MAX_HOST_LEN,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{add, Counters};
use crate::job::{JobControl, StopReason};

struct Held {
    lease: LeaseRef,
    /// Its queue: whose zombie timeout bounds how long its lease may go unconfirmed.
    queue: QueueName,
    control: Arc<JobControl>,
    /// The handler is done; the lease is held until its outcome is written.
    finished: bool,
    /// A held look-ahead job waiting in the buffer: its handler has not begun.
    buffered: bool,
    /// The database counted this attempt (claimed in Start mode, or `start` confirmed). A held
    /// job whose handler began is started later ([`Leases::to_start`]) or by its outcome.
    started: bool,
    /// When its handler began (held jobs only, for the deferred start).
    began: Option<Instant>,
    /// When a request that found the lease held was sent (the claim, the last heartbeat or
    /// start that held it): the database cannot have expired it before that plus its timeout.
    confirmed: Instant,
}

/// The Processing leases this worker holds (running jobs, look-ahead ones, and finished ones
/// whose outcome is not written yet), each with the stop switch of its job. The heartbeat extends them; a lost lease or a cancel request it
/// reports fires the job's switch.
#[derive(Default)]
pub(super) struct Leases {
    /// Ordered by job id, so every walk over it (heartbeats, starts, stops) goes the same way
    /// in every run: the simulator (`sim`) replays a seed exactly.
    held: Mutex<BTreeMap<JobId, Held>>,
    /// Set by [`Leases::stop_all`]: a job tracked afterwards (a look-ahead job whose start was
    /// confirmed late) is stopped with the same reason at once.
    stopped: Mutex<Option<StopReason>>,
    /// The worker's queues' zombie timeouts, as last read (absent: the contract's default).
    zombie: Mutex<HashMap<QueueName, Duration>>,
}

impl Leases {
    /// Registers a Processing job (its attempt counted) for heartbeats, cancel requests and
    /// lease loss.
    #[cfg(test)]
    pub(super) fn track(&self, job: &ClaimedJob) -> Arc<JobControl> {
        self.track_sent(job, Instant::now())
    }

    /// [`Leases::track`] for a job whose lease was granted (or confirmed) by a request sent at
    /// `sent`: the database cannot have expired it before that plus its zombie timeout.
    pub(super) fn track_sent(&self, job: &ClaimedJob, sent: Instant) -> Arc<JobControl> {
        let control = Arc::new(JobControl::new());
        self.insert(job.lease_ref(), &job.queue, control.clone(), false, sent);
        control
    }

    /// Registers a held look-ahead job (Fetched, attempt not counted) waiting in the buffer:
    /// heart-beaten from now on, so the database keeps it for this worker however long it
    /// waits; `sent`: when its claim was sent.
    pub(super) fn hold(&self, lease: LeaseRef, queue: &QueueName, sent: Instant) -> Arc<JobControl> {
        let control = Arc::new(JobControl::new());
        self.insert(lease, queue, control.clone(), true, sent);
        control
    }

    fn insert(&self, lease: LeaseRef, queue: &QueueName, control: Arc<JobControl>, buffered: bool, confirmed: Instant) {
        if let Some(reason) = *self.stopped.lock().unwrap() {
            control.stop(reason);
        }
        let queue = queue.clone();
        let held =
            Held { lease, queue, control, finished: false, buffered, started: !buffered, began: None, confirmed };
        let old = self.held.lock().unwrap().insert(lease.id, held);
        if let Some(old) = old {
            // This worker still runs an earlier attempt of the same job, which was rescued and
            // granted anew: the earlier lease is lost, whatever the next heartbeat would say.
            old.control.stop(StopReason::LeaseLost);
        }
    }

    /// A slot takes a held look-ahead job: its stop switch and when its lease was last
    /// confirmed, or `None` when this lease is no longer tracked (replaced or forgotten). The
    /// job counts as running from now on.
    pub(super) fn begin(&self, lease: LeaseRef) -> Option<(Arc<JobControl>, Instant)> {
        let mut held = self.held.lock().unwrap();
        let r = held.get_mut(&lease.id).filter(|r| r.lease == lease)?;
        r.buffered = false;
        r.began = Some(Instant::now());
        Some((r.control.clone(), r.confirmed))
    }

    /// The held jobs whose handler began at least `after` ago and whose start is not recorded
    /// yet (their attempt is counted by the deferred start, or by their outcome if that comes
    /// first).
    pub(super) fn to_start(&self, after: std::time::Duration) -> Vec<LeaseRef> {
        let now = Instant::now();
        self.held
            .lock()
            .unwrap()
            .values()
            .filter(|r| !r.started && !r.finished && r.control.reason().is_none())
            .filter(|r| r.began.is_some_and(|b| now.duration_since(b) >= after))
            .map(|r| r.lease)
            .collect()
    }

    /// Applies a start's reply to exactly the leases sent (by id and lease): the done ones are
    /// started, the lost ones' switches fire.
    pub(super) fn started(&self, sent: &[LeaseRef], done: &[JobId], lost: &[JobId], at: Instant) {
        let mut held = self.held.lock().unwrap();
        for l in sent {
            let Some(r) = held.get_mut(&l.id).filter(|r| r.lease == *l) else { continue };
            if done.contains(&l.id) {
                r.started = true;
                r.confirmed = r.confirmed.max(at);
            } else if lost.contains(&l.id) {
                r.control.stop(StopReason::LeaseLost);
            }
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

    /// Whether no job is running (finished jobs whose outcome is not written yet and held
    /// jobs waiting in the look-ahead buffer do not count).
    #[cfg(test)]
    pub(super) fn none_running(&self) -> bool {
        self.held.lock().unwrap().values().all(|r| r.finished || r.buffered)
    }

    /// [`Leases::none_running`] for the jobs of `queues` only (a lane's queues).
    pub(super) fn none_running_of(&self, queues: &[QueueName]) -> bool {
        self.held.lock().unwrap().values().all(|r| r.finished || r.buffered || !queues.contains(&r.queue))
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

    /// Records the worker's queues' zombie timeouts (read at the start and again every
    /// heartbeat interval), which bound how long a running job's lease may go unconfirmed.
    pub(super) fn set_zombie_timeouts(&self, settings: &[chokaq_core::QueueSettings]) {
        let mut z = self.zombie.lock().unwrap();
        for s in settings {
            z.insert(s.name.clone(), s.effective_zombie_timeout());
        }
    }

    /// The running handlers' leases last confirmed at least their queue's zombie timeout less
    /// `margin` ago (finished jobs and jobs waiting in the look-ahead left out: no handler runs).
    fn aged(&self, margin: Duration) -> Vec<LeaseRef> {
        let now = Instant::now();
        let zombie = self.zombie.lock().unwrap().clone();
        let held = self.held.lock().unwrap();
        held.values()
            .filter(|r| !r.finished && !r.buffered && r.control.reason().is_none())
            .filter(|r| {
                let timeout = zombie.get(&r.queue).copied().unwrap_or(chokaq_core::DEFAULT_ZOMBIE_TIMEOUT);
                now.duration_since(r.confirmed) + margin >= timeout
            })
            .map(|r| r.lease)
            .collect()
    }

    /// Self-fencing (issue 36, hole 2): stops every running handler whose lease was last
    /// confirmed at least its queue's zombie timeout less `slack` ago, as lost. The database may
    /// end such a lease (the rescue) from the zombie timeout on, and another worker run the
    /// job: this handler must be stopped by then. The handler then has the worker's
    /// `cancel_wait` to return before it is dropped. Jobs waiting in the look-ahead are not
    /// stopped here (a slot confirms an old one before its handler begins), nor finished ones
    /// (no handler runs). Returns how many.
    pub(super) fn fence(&self, slack: Duration) -> usize {
        let aged = self.aged(slack);
        let held = self.held.lock().unwrap();
        for l in &aged {
            if let Some(r) = held.get(&l.id).filter(|r| r.lease == *l) {
                tracing::warn!(id = %l.id, queue = %r.queue, unconfirmed = ?r.confirmed.elapsed(),
                    "the job's lease could not be confirmed within its queue's zombie timeout; its handler is stopped");
                r.control.stop(StopReason::LeaseLost);
            }
        }
        aged.len()
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
    fn apply(&self, sent: &[LeaseRef], lost: &[JobId], cancel_requested: &[JobId], by_id: bool, at: Instant) {
        let sent: HashMap<JobId, LeaseRef> = sent.iter().map(|l| (l.id, *l)).collect();
        let mut held = self.held.lock().unwrap();
        // Every lease sent and not reported lost is confirmed as of the send.
        for (id, l) in &sent {
            if lost.contains(id) {
                continue;
            }
            if let Some(r) = held.get_mut(id).filter(|r| r.lease == *l) {
                r.confirmed = r.confirmed.max(at);
            }
        }
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
    /// One batched heartbeat per interval until `stop` fires (the first beat after one
    /// interval). The registration of this process runs in a task of its own
    /// ([`Heartbeat::register_loop`]): the heartbeat waits on nothing but its own statement.
    pub(super) async fn run(self, stop: CancellationToken) {
        let this = Arc::new(self);
        let reg = tokio::spawn(this.clone().register_loop(stop.clone()));
        let mut tick = tokio::time::interval(this.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            this.beat().await;
        }
        let _ = reg.await;
    }

    /// Registers this process at once, then once per interval, each call bounded by the
    /// interval (a blocked workers table delays nothing else).
    async fn register_loop(self: Arc<Self>, stop: CancellationToken) {
        let mut warned = false;
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                r = tokio::time::timeout(self.interval, self.register(&mut warned)) => {
                    if r.is_err() {
                        tracing::debug!("worker registration took longer than the heartbeat interval; given up this time");
                    }
                }
            }
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
        let at = Instant::now();
        match self.backend.heartbeat(self.worker, &leases).await {
            Ok(report) => {
                let by_id = super::broken(self.worker, super::Broken::LostById);
                self.leases.apply(&leases, &report.lost, &report.cancel_requested, by_id, at);
            }
            Err(e) => tracing::warn!(error = %e, count = leases.len(), "heartbeat failed"),
        }
    }
}

/// How long a held job's handler runs before its start is written: jobs that finish sooner
/// have their attempt counted by their outcome, with no write of its own.
pub(super) const START_AFTER: std::time::Duration = std::time::Duration::from_millis(20);

/// The deferred start: every [`START_AFTER`], one `Backend::start` for the held jobs whose
/// handler has run that long (their attempt is recorded, so a crash from then on counts the
/// run). The reply is applied to exactly the leases sent; a lost one stops its handler. A
/// failed start is tried again on the next tick, without limit: the handler already runs, and
/// the heartbeats keep the lease meanwhile (a start is never given up into a release).
pub(super) struct Starter {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) worker: WorkerId,
    pub(super) leases: Arc<Leases>,
    pub(super) counters: Arc<Counters>,
}

impl Starter {
    pub(super) async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(START_AFTER);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failures = 0u32;
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let due = self.leases.to_start(START_AFTER);
            if due.is_empty() {
                continue;
            }
            for chunk in due.chunks(chokaq_core::validate::MAX_LEASES_PER_CALL) {
                let at = Instant::now();
                add(&self.counters.start_calls, 1);
                match self.backend.start(self.worker, chunk).await {
                    Ok(out) => {
                        failures = 0;
                        self.leases.started(chunk, &out.done, &out.lost, at);
                    }
                    Err(e) => {
                        failures += 1;
                        if failures % 10 == 1 {
                            tracing::warn!(error = %e, count = chunk.len(), "deferred start failed; trying again");
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// The self-fencing task ([`Leases::fence`]). Every `slack / 2` (`slack`: half the heartbeat
/// interval, at most a second): a running handler whose lease has gone unconfirmed for its
/// queue's zombie timeout less `2 x slack` gets one heartbeat of its own first, bounded by
/// `slack / 2` (a lease held all along, granted by a claim whose reply came late after an
/// outage, say, is confirmed and runs on); one still unconfirmed at the zombie timeout less
/// `slack` is stopped. An iteration takes at most `slack`, so the stop fires before the zombie
/// timeout. It never waits longer than that on the database, so a hung heartbeat of the
/// heartbeat task delays it not at all.
pub(super) async fn fence_loop(
    leases: Arc<Leases>,
    backend: Arc<dyn Backend>,
    heartbeat: Duration,
    worker: WorkerId,
    stop: CancellationToken,
) {
    let slack = (heartbeat / 2).clamp(Duration::from_millis(2), Duration::from_secs(1));
    let mut tick = tokio::time::interval(slack / 2);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if super::broken(worker, super::Broken::NoSelfFence) {
            continue;
        }
        let aging = leases.aged(2 * slack);
        if !aging.is_empty() {
            let at = Instant::now();
            if let Ok(Ok(report)) = tokio::time::timeout(slack / 2, backend.heartbeat(worker, &aging)).await {
                leases.apply(&aging, &report.lost, &report.cancel_requested, false, at);
            }
        }
        leases.fence(slack);
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
