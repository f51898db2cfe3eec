//! Completions: finished jobs queue their lease here and one task writes them in batches.
//! Also the count of outcomes not written yet, which the claim loop waits on.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::{Backend, Error, JobId, JobKind, LeaseRef, QueueName, WorkerId};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::heartbeat::Leases;
use super::{add, broken, write_with_retries, Broken, Counters, WorkerConfig};
use crate::metrics_names as m;

/// A finished job waiting for its completion write.
#[derive(Debug, Clone)]
pub(super) struct Completion {
    /// The lane of the worker that ran it.
    pub(super) lane: usize,
    pub(super) lease: LeaseRef,
    pub(super) queue: QueueName,
    pub(super) kind: JobKind,
}

/// Finished jobs whose outcome (completion or failure) is not written yet: they still count
/// against their queue's cap in the database. The executor counts them in, the completer and
/// the failure path count them out; the claim loops read the counts and wait for writes. Counted
/// for the whole worker (the unwritten-outcome bound is the process's) and per lane (a lane's
/// claim loop waits only for its own queues' writes).
pub(super) struct Outcomes {
    unwritten: AtomicUsize,
    /// Outcome writes so far (a `written` wake-up with no new write since a claim is stale).
    writes: AtomicU64,
    lanes: Vec<LaneOutcomes>,
}

/// One lane's share of [`Outcomes`].
#[derive(Default)]
struct LaneOutcomes {
    unwritten: AtomicUsize,
    writes: AtomicU64,
    /// Every write wakes every lane: a write of any lane may reopen the worker-wide gate.
    written: Notify,
}

impl Default for Outcomes {
    fn default() -> Self {
        Outcomes::new(1)
    }
}

impl Outcomes {
    /// The counts of a worker of `lanes` lanes (at least one).
    pub(super) fn new(lanes: usize) -> Self {
        Outcomes {
            unwritten: AtomicUsize::new(0),
            writes: AtomicU64::new(0),
            lanes: (0..lanes.max(1)).map(|_| LaneOutcomes::default()).collect(),
        }
    }

    fn lane(&self, lane: usize) -> &LaneOutcomes {
        &self.lanes[lane.min(self.lanes.len() - 1)]
    }

    /// A finished job of lane `lane` whose outcome is to be written.
    pub(super) fn finished(&self, lane: usize) {
        self.unwritten.fetch_add(1, Ordering::AcqRel);
        self.lane(lane).unwritten.fetch_add(1, Ordering::AcqRel);
    }

    /// `n` outcomes of lane `lane` were written (or given up on): tell the claim loops.
    pub(super) fn written(&self, lane: usize, n: usize) {
        self.unwritten.fetch_sub(n, Ordering::AcqRel);
        let l = self.lane(lane);
        l.unwritten.fetch_sub(n, Ordering::AcqRel);
        l.writes.fetch_add(1, Ordering::AcqRel);
        self.writes.fetch_add(1, Ordering::AcqRel);
        for l in &self.lanes {
            l.written.notify_one();
        }
    }

    /// Outcomes of the whole worker not written yet.
    pub(super) fn unwritten(&self) -> usize {
        self.unwritten.load(Ordering::Acquire)
    }

    /// Whether any outcome of the worker is not written yet.
    #[cfg(test)]
    pub(super) fn any_unwritten(&self) -> bool {
        self.unwritten.load(Ordering::Acquire) > 0
    }

    /// Whether any outcome of lane `lane` is not written yet.
    pub(super) fn any_unwritten_in(&self, lane: usize) -> bool {
        self.lane(lane).unwritten.load(Ordering::Acquire) > 0
    }

    /// Writes so far, of the whole worker.
    #[cfg(test)]
    pub(super) fn writes(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    /// Writes of lane `lane` so far.
    pub(super) fn writes_in(&self, lane: usize) -> u64 {
        self.lane(lane).writes.load(Ordering::Acquire)
    }

    /// Waits for the next write notice of lane `lane` (any lane's write sends one).
    pub(super) async fn next_write(&self, lane: usize) {
        self.lane(lane).written.notified().await
    }
}

/// The completion queue and its settings. The executor pushes, the completer task flushes, and
/// a cap-bound claim loop takes completions along in `complete_and_claim`.
pub(super) struct Completer {
    backend: Arc<dyn Backend>,
    worker: WorkerId,
    /// Most completions per call.
    max: usize,
    /// Longest a finished job waits for its batch.
    flush_every: Duration,
    /// Flush at once when this many wait (the unwritten-outcome bound), unless cap-bound.
    early: usize,
    /// Finished jobs waiting for their completion write, oldest first.
    queue: Mutex<VecDeque<Completion>>,
    queued: Notify,
    /// Per lane: the lane's last claim came back short with jobs in flight: it completes the
    /// queued jobs itself, so the completer gathers full batches only (while any lane is).
    cap_bound: Vec<AtomicBool>,
    /// Finished jobs' leases stay held here until their completion is written.
    leases: Arc<Leases>,
    outcomes: Arc<Outcomes>,
    counters: Arc<Counters>,
}

impl Completer {
    /// The completer of `worker`, with the completion settings of `cfg` (batch size, flush
    /// interval, concurrency).
    pub(super) fn new(
        backend: Arc<dyn Backend>,
        worker: WorkerId,
        cfg: &WorkerConfig,
        leases: Arc<Leases>,
        outcomes: Arc<Outcomes>,
        counters: Arc<Counters>,
    ) -> Self {
        Completer {
            backend,
            worker,
            max: cfg.completion_batch,
            flush_every: cfg.completion_flush,
            early: cfg.unwritten_cap(),
            queue: Mutex::new(VecDeque::new()),
            queued: Notify::new(),
            cap_bound: (0..super::lanes::layout(cfg).len()).map(|_| AtomicBool::new(false)).collect(),
            leases,
            outcomes,
            counters,
        }
    }

    /// Queues a finished job's completion.
    pub(super) fn push(&self, c: Completion) {
        self.queue.lock().unwrap().push_back(c);
        self.queued.notify_one();
    }

    /// Takes up to `max` queued completions, oldest first.
    pub(super) fn take(&self, max: usize) -> Vec<Completion> {
        let mut queue = self.queue.lock().unwrap();
        let n = queue.len().min(max);
        queue.drain(..n).collect()
    }

    /// Puts completions whose write failed back at the head of the queue, to be written again
    /// (a failed cap-bound `complete_and_claim`).
    pub(super) fn requeue(&self, batch: Vec<Completion>) {
        if broken(self.worker, Broken::DropFailedBatch) {
            let e = Error::new(chokaq_core::ErrorKind::Transient, "dropped on purpose (teeth)");
            self.written(&batch, Err(&e));
            return;
        }
        let mut queue = self.queue.lock().unwrap();
        for c in batch.into_iter().rev() {
            queue.push_front(c);
        }
        drop(queue);
        self.queued.notify_one();
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.lock().unwrap().is_empty()
    }

    fn len(&self) -> usize {
        self.queue.lock().unwrap().len()
    }

    /// Set by lane `lane`'s claim loop after each claim.
    pub(super) fn set_cap_bound(&self, lane: usize, yes: bool) {
        if let Some(b) = self.cap_bound.get(lane) {
            b.store(yes, Ordering::Release);
        }
    }

    /// Whether a lane's claim loop takes the completions along.
    fn any_cap_bound(&self) -> bool {
        self.cap_bound.iter().any(|b| b.load(Ordering::Acquire))
    }

    /// Flushes until `stop` fires (every job has finished by then), then flushes what is left.
    pub(super) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let max = self.max;
        loop {
            if self.is_empty() {
                tokio::select! {
                    biased;
                    _ = self.queued.notified() => {}
                    _ = stop.cancelled() => {
                        // Stopping (every job has finished): flush what is left.
                        loop {
                            let batch = self.take(max);
                            if batch.is_empty() {
                                return;
                            }
                            self.flush(batch).await;
                        }
                    }
                }
            }
            // Gather for up to the flush interval or a full batch; flush at once when two
            // slot-fulls (2 x `concurrency`) are waiting, so few finished jobs stay unwritten
            // (after a crash they run again), except while the claim loop is cap-bound: it takes
            // them along.
            let deadline = Instant::now() + self.flush_every;
            let early = if self.any_cap_bound() { max } else { max.min(self.early) };
            while self.len() < early {
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = self.queued.notified() => {}
                    // Stopping: write now, however long the flush interval is.
                    _ = stop.cancelled() => break,
                }
            }
            // Empty when a cap-bound claim loop took them along meanwhile.
            let batch = self.take(max);
            self.flush(batch).await;
        }
    }

    async fn flush(&self, batch: Vec<Completion>) {
        if batch.is_empty() {
            return;
        }
        let leases: Vec<LeaseRef> = batch.iter().map(|c| c.lease).collect();
        add(&self.counters.complete_calls, 1);
        let res = write_with_retries(self.worker, "complete", || self.backend.complete(self.worker, &leases)).await;
        self.written(&batch, res.as_ref().map(|out| out.lost.clone()));
    }

    /// Records a completion write (counters, metrics) and tells the claim loop. `res` is the
    /// leases the backend reported lost, or the error of the write.
    pub(super) fn written(&self, batch: &[Completion], res: std::result::Result<Vec<JobId>, &Error>) {
        match res {
            Ok(lost) => {
                let lost: HashSet<JobId> = lost.into_iter().collect();
                let mut done = 0u64;
                for c in batch {
                    if lost.contains(&c.lease.id) {
                        metrics::counter!(m::LEASE_LOST, "queue" => c.queue.to_string(), "kind" => c.kind.to_string())
                            .increment(1);
                        tracing::info!(id = %c.lease.id, "lease lost before completion; outcome discarded");
                    } else {
                        done += 1;
                        metrics::counter!(m::COMPLETED, "queue" => c.queue.to_string(), "kind" => c.kind.to_string())
                            .increment(1);
                    }
                }
                add(&self.counters.completed, done);
                add(&self.counters.lease_lost, lost.len() as u64);
            }
            Err(e) => {
                tracing::error!(error = %e, count = batch.len(),
                    "could not complete jobs (not retryable); they will be rescued and run again (handlers must be idempotent)");
            }
        }
        let mut lanes: Vec<(usize, usize)> = Vec::new();
        for c in batch {
            self.leases.untrack(c.lease);
            match lanes.iter_mut().find(|(l, _)| *l == c.lane) {
                Some((_, n)) => *n += 1,
                None => lanes.push((c.lane, 1)),
            }
        }
        for (lane, n) in lanes {
            self.outcomes.written(lane, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chokaq_core::memory::MemoryBackend;
    use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, NewJob, QueueName, WorkerId};
    use tokio_util::sync::CancellationToken;

    use super::{Completer, Completion, Outcomes};
    use crate::worker::Counters;

    /// Claims `n` jobs and queues their completions as finished jobs do.
    async fn finished(b: &MemoryBackend, w: WorkerId, completer: &Completer, outcomes: &Outcomes, n: usize) {
        for _ in 0..n {
            b.enqueue(NewJob::build("q", "k").unwrap()).await.unwrap();
        }
        let q = vec![QueueName::new("q").unwrap()];
        for job in b.claim(&ClaimParams::new(w, q, n as u32, ClaimMode::Start)).await.unwrap() {
            outcomes.finished(0);
            completer.push(Completion { lane: 0, lease: job.lease_ref(), queue: job.queue, kind: job.kind });
        }
    }

    fn completer(b: Arc<MemoryBackend>, w: WorkerId, max: usize) -> (Arc<Completer>, Arc<Outcomes>, Arc<Counters>) {
        let outcomes = Arc::new(Outcomes::default());
        let counters = Arc::new(Counters::default());
        let leases = Arc::new(crate::worker::heartbeat::Leases::default());
        let cfg = crate::WorkerConfig {
            completion_batch: max,
            completion_flush: Duration::from_millis(2),
            concurrency: 4,
            ..Default::default()
        };
        let c = Completer::new(b, w, &cfg, leases, outcomes.clone(), counters.clone());
        (Arc::new(c), outcomes, counters)
    }

    /// Queued completions are written in batches of at most `max`; stopping flushes the rest;
    /// every outcome is counted out.
    #[tokio::test]
    async fn flushes_in_batches_and_at_stop() {
        let b = Arc::new(MemoryBackend::new());
        let w = WorkerId::random();
        let (c, outcomes, counters) = completer(b.clone(), w, 3);
        finished(&b, w, &c, &outcomes, 7).await;
        assert!(outcomes.any_unwritten());
        let stop = CancellationToken::new();
        stop.cancel();
        c.clone().run(stop).await;
        let r = counters.report();
        assert_eq!((r.completed, r.complete_calls, r.lease_lost), (7, 3, 0), "{r:?}");
        assert!(!outcomes.any_unwritten());
        assert_eq!(outcomes.writes(), 3);
        assert_eq!(b.stats().await.unwrap().archived, 7);
    }

    /// A lease lost before its completion is counted as lost, not completed.
    #[tokio::test]
    async fn a_lost_lease_is_counted_not_completed() {
        let b = Arc::new(MemoryBackend::new());
        let w = WorkerId::random();
        let (c, outcomes, counters) = completer(b.clone(), w, 10);
        finished(&b, w, &c, &outcomes, 2).await;
        let mut batch = c.take(10);
        assert!(c.is_empty());
        batch[1].lease.lease = chokaq_core::Lease(batch[1].lease.lease.0 + 1);
        c.flush(batch).await;
        let r = counters.report();
        assert_eq!((r.completed, r.lease_lost, r.complete_calls), (1, 1, 1), "{r:?}");
        assert!(!outcomes.any_unwritten());
    }

    /// While the task runs, a queued completion is written within the flush interval.
    #[tokio::test]
    async fn writes_within_the_flush_interval() {
        let b = Arc::new(MemoryBackend::new());
        let w = WorkerId::random();
        let (c, outcomes, counters) = completer(b.clone(), w, 500);
        let stop = CancellationToken::new();
        let task = tokio::spawn(c.clone().run(stop.clone()));
        finished(&b, w, &c, &outcomes, 1).await;
        tokio::time::timeout(Duration::from_secs(5), outcomes.next_write(0)).await.expect("written in time");
        assert_eq!(counters.report().completed, 1);
        stop.cancel();
        task.await.unwrap();
    }
}
