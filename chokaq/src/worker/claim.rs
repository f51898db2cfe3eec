//! The claim loop and the look-ahead buffer: what to claim and when, in either claim mode,
//! and the jobs held beyond the running ones. One claim loop per lane of the worker
//! ([`super::lanes`]): it claims only its lane's queues, for its lane's slots.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    Backend, ClaimMode, ClaimParams, ClaimedJob, JobId, JobStatus, LeaseRef, QueueName, QueueSettings, WorkerId,
    MAX_CLAIM_LIMIT,
};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::completer::{Completer, Outcomes};
use super::executor::Executor;
use super::heartbeat::Leases;
use super::lanes::LaneSpec;
pub(super) use super::lookahead::Lookahead;
use super::lookahead::{lookahead_target, lookahead_wait};
use super::{add, broken, ewma, with_retries, Broken, Counters, WorkerConfig};
use crate::metrics_names as m;

/// The claim loop's settings and the parts it drives (of one lane).
pub(super) struct Claimer {
    backend: Arc<dyn Backend>,
    worker: WorkerId,
    /// The lane's place in the worker's lanes.
    lane: usize,
    /// The lane's queues.
    queues: Vec<QueueName>,
    /// The lane's slots.
    concurrency: usize,
    /// The lane's share of the prefetch.
    prefetch: usize,
    /// The lane's look-ahead bound (0 with a prefetch).
    lookahead_max: usize,
    min_poll_interval: Duration,
    poll_interval: Duration,
    /// How often the prefetched jobs' queues are checked for a pause, and the queues' caps
    /// read again.
    pause_check: Duration,
    /// The caps of the worker's queues added up ([`caps_total`]; `NOT_ALL_CAPPED` when a queue
    /// has none), read at the start, then every `pause_check`. Every queue capped, within
    /// `concurrency`: the worker alone can fill them, so a full cap-bound claim leaves nothing
    /// to claim until a slot frees. Every queue capped, whatever the sum: a cap-bound claim
    /// that got no more jobs than it completed was a handoff, and the caps are still full.
    caps_total: AtomicUsize,
    /// One of the lane's queues has a rate limit (read with the caps): then the worker claims
    /// only for free slots, in Start mode, holding nothing back, so that a rate limit binds the
    /// handlers' begins, not only the claims (issue 36, hole 3).
    rate_limited: AtomicBool,
    /// The worker's `lookahead_wait` setting (`None`: adaptive, [`lookahead_wait`]).
    lookahead_wait: Option<Duration>,
    claim_batch_window: Duration,
    completion_batch: usize,
    /// Back-pressure: outcomes not written yet plus jobs held never exceed this
    /// (the unwritten-outcome bound beyond what the lane can hold: slots, prefetch, look-ahead
    /// bound).
    backlog_bound: usize,
    /// Wake-ups from the backend (`wake_loop`).
    wake: Arc<Notify>,
    executor: Arc<Executor>,
    leases: Arc<Leases>,
    lookahead: Arc<Lookahead>,
    completer: Arc<Completer>,
    outcomes: Arc<Outcomes>,
    counters: Arc<Counters>,
}

/// The parts the claim loop drives, built by the worker.
pub(super) struct Parts {
    pub(super) wake: Arc<Notify>,
    pub(super) executor: Arc<Executor>,
    pub(super) leases: Arc<Leases>,
    pub(super) lookahead: Arc<Lookahead>,
    pub(super) completer: Arc<Completer>,
    pub(super) outcomes: Arc<Outcomes>,
    pub(super) counters: Arc<Counters>,
}

impl Claimer {
    /// The claim loop of `lane` of the worker configured with `cfg`.
    pub(super) fn new(
        backend: Arc<dyn Backend>,
        worker: WorkerId,
        cfg: &WorkerConfig,
        lane: &LaneSpec,
        settings: &[QueueSettings],
        parts: Parts,
    ) -> Self {
        let Parts { wake, executor, leases, lookahead, completer, outcomes, counters } = parts;
        let lookahead_max = lane.lookahead_max;
        Claimer {
            backend,
            worker,
            lane: lane.index,
            queues: lane.queues.clone(),
            concurrency: lane.slots,
            prefetch: lane.prefetch,
            lookahead_max,
            min_poll_interval: cfg.min_poll_interval,
            poll_interval: cfg.poll_interval,
            pause_check: cfg.heartbeat_interval,
            caps_total: AtomicUsize::new(caps_total(&lane.queues, settings).unwrap_or(NOT_ALL_CAPPED)),
            rate_limited: AtomicBool::new(any_rate_limit(&lane.queues, settings)),
            lookahead_wait: cfg.lookahead_wait,
            claim_batch_window: cfg.claim_batch_window,
            completion_batch: cfg.completion_batch,
            backlog_bound: backlog_bound(cfg.unwritten_cap(), lane.slots, lane.prefetch, lookahead_max),
            wake,
            executor,
            leases,
            lookahead,
            completer,
            outcomes,
            counters,
        }
    }

    /// Claims until `shutdown` fires; returns the prefetch buffer left then.
    pub(super) async fn run(&self, shutdown: &CancellationToken) -> VecDeque<ClaimedJob> {
        let concurrency = self.concurrency;
        let prefetch = self.prefetch;
        let ex = &self.executor;
        // Moving average of claim round trips, microseconds.
        let mut rtt_us = 0u64;
        let mut buffer: VecDeque<ClaimedJob> = VecDeque::new();
        let mut backoff = self.min_poll_interval;
        let mut next_claim = Instant::now();
        let max_idle = self.poll_interval;
        let mut next_pause_check = Instant::now() + self.pause_check;
        let mut next_caps_check = Instant::now() + self.pause_check;
        let mut gather_until: Option<Instant> = None;
        // The last claim came back short while outcomes of this worker were still unwritten:
        // the next claim waits for the next write (a queue cap counts unwritten jobs) instead
        // of polling.
        let mut await_written = false;
        // The last claim came back short with jobs in flight: the next claim completes the
        // queued finished jobs in the same call.
        let mut cap_bound = false;
        let mut seen_writes = 0u64;
        // Look-ahead jobs were released for waiting too long: hold none until a slot frees.
        let mut lookahead_blocked = false;
        // The teeth: the look-ahead before issue 36 (also for `RateAtClaimOnly`, which restores
        // the rate path as it was: look-ahead jobs held and begun later, like any queue's).
        let hoards = broken(self.worker, Broken::LookaheadHoards) || broken(self.worker, Broken::RateAtClaimOnly);

        loop {
            if shutdown.is_cancelled() {
                break;
            }
            // 0. Prefetched jobs of a queue paused (or deactivated) since are released, not run.
            if !buffer.is_empty() && Instant::now() >= next_pause_check {
                next_pause_check = Instant::now() + self.pause_check;
                self.release_paused(&mut buffer).await;
            }
            // 0b. The caps may have changed (an operator's `SetMaxWorkers`).
            if Instant::now() >= next_caps_check {
                next_caps_check = Instant::now() + self.pause_check;
                self.read_caps().await;
            }
            // 1. Start buffered jobs on free slots (reserve mode).
            if !buffer.is_empty() {
                // Within the unwritten-outcome gate, like every other begin path (issue 36, hole 5).
                let gate = if broken(self.worker, Broken::BufferWithoutGate) { usize::MAX } else { ex.begin_room() };
                let free = ex.free_slots().min(buffer.len()).min(gate);
                if free > 0 {
                    if let Ok(permits) = ex.slots.clone().try_acquire_many_owned(free as u32) {
                        let batch: Vec<ClaimedJob> = buffer.drain(..free).collect();
                        self.start_and_spawn(batch, permits).await;
                        continue;
                    }
                }
            }
            // 1b. Look-ahead jobs onto free slots (finishing handlers normally take them first).
            ex.fill_slots();
            // 1c. Look-ahead jobs that waited too long for a slot (a long job holds it) go back
            // for other workers (issue 36, hole 6); so does the whole look-ahead of a worker
            // whose queue got a rate limit.
            let rate = self.rate_limited.load(Ordering::Relaxed) && !broken(self.worker, Broken::RateAtClaimOnly);
            if let Some(oldest) = self.lookahead.oldest().filter(|_| !hoards) {
                let now = Instant::now();
                let wait = self.lookahead_wait.unwrap_or_else(|| lookahead_wait(rtt_us, ex.job_us()));
                if rate || now >= oldest + wait {
                    let cutoff = if rate { now + Duration::from_secs(1) } else { now - wait };
                    self.release_waiting(cutoff).await;
                    lookahead_blocked = true;
                    continue;
                }
            }
            // 2. Claim what fits: running + prefetched (Fetched) + look-ahead (Processing). A
            // rate-limited worker holds nothing back: it claims for free slots only, each job
            // begun at its claim, so the limit binds the handlers' begins (issue 36, hole 3).
            let prefetch = if rate { 0 } else { prefetch };
            let lookahead = if rate || lookahead_blocked {
                0
            } else {
                lookahead_target(concurrency, self.lookahead_max, rtt_us, ex.job_us())
            };
            let capacity = concurrency + prefetch + lookahead;
            let free = ex.free_slots();
            // Jobs whose start is in flight handed their slot on already: still held.
            let held =
                (concurrency - free.min(concurrency)) + buffer.len() + self.lookahead.len() + ex.starting_count();
            let want = capacity.saturating_sub(held).min(MAX_CLAIM_LIMIT as usize);
            // Back-pressure: while outcomes wait to be written (a stalled database), claim no
            // more than keeps unwritten outcomes plus held jobs within the bound.
            let room = self.backlog_bound.saturating_sub(self.outcomes.unwritten() + held);
            let backpressured = want > room;
            let want = want.min(room);
            let want = if rate { want.min(free).min(ex.begin_room()) } else { want };
            let now = Instant::now();
            // Batch claims: while most of the capacity is still held, give others a moment to
            // free up.
            let small = want > 0 && want * 2 < capacity;
            let gathering = if small && !self.claim_batch_window.is_zero() && now >= next_claim {
                let until = *gather_until.get_or_insert(now + self.claim_batch_window);
                now < until
            } else {
                false
            };
            if want > 0 && now >= next_claim && !gathering {
                gather_until = None;
                await_written = false;
                // Without a prefetch: the free slots and the look-ahead beyond them are
                // reserved (Fetched, attempt not counted) in one claim; a slot that takes one
                // runs its handler at once while its start (coalesced with the other slots')
                // counts the attempt, so no round trip is waited for and a job whose handler
                // never began never loses an attempt.
                // Cap-bound (the last claim came back short with jobs in flight): the claim
                // takes only free slots, each taken before the claim, in Start mode, so a job
                // starts with its claim and no start round trip lengthens the time it holds a
                // slot of the cap.
                let slots = if (prefetch == 0 && cap_bound) || rate {
                    // Each of them begins at once: within the unwritten-outcome gate.
                    let n = ex.free_slots().min(want).min(ex.begin_room());
                    (n > 0).then(|| ex.slots.clone().try_acquire_many_owned(n as u32).ok()).flatten()
                } else {
                    None
                };
                let (mode, limit) = match &slots {
                    Some(p) => (ClaimMode::Start, p.num_permits()),
                    None if prefetch == 0 && broken(self.worker, Broken::LookaheadStart) => (ClaimMode::Start, want),
                    // The look-ahead is held: heart-beaten from its claim, its attempt counted
                    // once its handler has run (see `Executor::begin_held`).
                    None if prefetch == 0 => (ClaimMode::Hold, want),
                    None => (ClaimMode::Reserve, want),
                };
                let mut slots = slots;
                let want = limit;
                let req = ClaimParams::new(self.worker, self.queues.clone(), limit as u32, mode);
                let t0 = Instant::now();
                let res = self.claim(&req, cap_bound).await;
                add(&self.counters.claim_calls, 1);
                let took = t0.elapsed();
                rtt_us = ewma(rtt_us, took.as_micros() as u64);
                metrics::histogram!(m::CLAIM_LATENCY).record(took.as_secs_f64());
                match res {
                    Ok((jobs, completed)) => {
                        let got = jobs.len();
                        add(&self.counters.claimed, got as u64);
                        if let Some(permits) = slots.as_mut() {
                            for job in jobs {
                                if let Some(p) = permits.split(1) {
                                    ex.spawn_new(job, p, t0);
                                }
                            }
                            // Slots taken for jobs that did not come are free again.
                            drop(slots.take());
                        } else if prefetch == 0 {
                            for j in &jobs {
                                if j.status == JobStatus::Fetched {
                                    self.leases.hold(j.lease_ref(), &j.queue, t0);
                                }
                            }
                            self.lookahead.extend(jobs);
                            ex.fill_slots();
                        } else {
                            buffer.extend(jobs);
                        }
                        // A full cap-bound claim over caps this worker alone fills took the
                        // caps' last places: it counts as short (a claim now, before a slot
                        // frees, would find the caps reached and come back empty). So does a
                        // handoff over capped queues shared with other workers: no more jobs
                        // than the call completed, so the caps are as full as before.
                        let caps = self.caps_total.load(Ordering::Relaxed);
                        let fills = cap_bound && caps <= concurrency;
                        let handoff = cap_bound && completed > 0 && got <= completed && caps != NOT_ALL_CAPPED;
                        let full = got >= want && !fills && !handoff;
                        if full {
                            // More may be waiting (rows skipped as locked by other claimers, or
                            // a full batch): claim again as soon as there is room.
                            backoff = self.min_poll_interval;
                            next_claim = Instant::now();
                            cap_bound = false;
                            self.completer.set_cap_bound(self.lane, false);
                        } else {
                            // Short: the queues ran dry, or a cap (which counts this worker's
                            // finished but unwritten jobs) is reached. While this worker holds
                            // jobs or unwritten outcomes, claim again as soon as they are all
                            // finished (taking their completions along) or an outcome is
                            // written, instead of polling.
                            // (This lane's: another lane's jobs count against other queues.)
                            let in_flight = self.outcomes.any_unwritten_in(self.lane)
                                || !self.leases.none_running_of(&self.queues)
                                || ex.starting_count() > 0;
                            cap_bound = in_flight;
                            self.completer.set_cap_bound(self.lane, in_flight);
                            await_written = in_flight;
                            seen_writes = self.outcomes.writes_in(self.lane);
                            if got == 0 {
                                next_claim = Instant::now() + backoff;
                                backoff = (backoff * 2).min(max_idle);
                            } else if in_flight {
                                next_claim = Instant::now() + backoff;
                            } else {
                                backoff = self.min_poll_interval;
                                next_claim = Instant::now();
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed; backing off");
                        next_claim = Instant::now() + backoff;
                        backoff = (backoff * 2).min(max_idle);
                    }
                }
                continue;
            }
            // 3. Wait for a free slot, a written outcome, a wake-up, the next poll, the look-ahead's
            // longest wait, or shutdown.
            let lookahead_due = self
                .lookahead
                .oldest()
                .map(|t| t + self.lookahead_wait.unwrap_or_else(|| lookahead_wait(rtt_us, ex.job_us())));
            // A suspect job waiting for the one before it to have run a moment.
            let suspect_due = ex.suspect_gate().filter(|_| self.lookahead.has_suspect() && ex.free_slots() > 0);
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = ex.slot_freed.notified() => {
                    lookahead_blocked = false;
                    if await_written {
                        // Cap-bound: once nothing runs, complete what finished and claim at
                        // once, without waiting for the completer's batch window.
                        if self.leases.none_running_of(&self.queues) && ex.starting_count() == 0 && !self.completer.is_empty() {
                            await_written = false;
                            next_claim = Instant::now();
                        }
                    } else {
                        // Let other finishing handlers free their slots too, so claims batch up.
                        tokio::task::yield_now().await;
                    }
                }
                // A write also reopens the gate of buffered jobs held back by unwritten outcomes.
                // A rate-limited worker's claims are gated by unwritten outcomes too.
                _ = self.outcomes.next_write(self.lane), if await_written || backpressured || rate || !self.lookahead.is_empty() || !buffer.is_empty() => {
                    if await_written && self.outcomes.writes_in(self.lane) != seen_writes {
                        await_written = false;
                        next_claim = Instant::now();
                    }
                }
                _ = self.wake.notified() => {
                    backoff = self.min_poll_interval;
                    next_claim = Instant::now();
                }
                _ = tokio::time::sleep_until(next_claim), if want > 0 && !gathering => {}
                _ = tokio::time::sleep_until(gather_until.unwrap_or(now)), if gathering => {}
                _ = tokio::time::sleep_until(next_pause_check), if !buffer.is_empty() => {}
                _ = tokio::time::sleep_until(lookahead_due.unwrap_or(now)), if lookahead_due.is_some() && !hoards => {}
                _ = tokio::time::sleep_until(suspect_due.unwrap_or(now)), if suspect_due.is_some() => {}
            }
        }
        buffer
    }

    /// One claim round trip. Cap-bound, it takes the queued completions along, so the claim's
    /// cap count sees them (one round trip where the backend supports it).
    /// Returns the jobs and how many completions it wrote.
    async fn claim(&self, req: &ClaimParams, cap_bound: bool) -> chokaq_core::Result<(Vec<ClaimedJob>, usize)> {
        let batch = if cap_bound { self.completer.take(self.completion_batch) } else { Vec::new() };
        if batch.is_empty() {
            return self.backend.claim(req).await.map(|jobs| (jobs, 0));
        }
        let leases: Vec<LeaseRef> = batch.iter().map(|c| c.lease).collect();
        match self.backend.complete_and_claim(self.worker, &leases, req).await {
            Ok((out, jobs)) => {
                let completed = out.done.len();
                self.completer.written(&batch, Ok(out.lost));
                Ok((jobs, completed))
            }
            Err(e) => {
                // Nothing is dropped: the completions go back to the queue, to be written by
                // the completer (or the next cap-bound claim).
                tracing::warn!(error = %e, count = batch.len(), "complete_and_claim failed; completions kept");
                self.completer.requeue(batch);
                Err(e)
            }
        }
    }

    /// Reads the queues' caps again; a queue that cannot be read leaves the last answer.
    async fn read_caps(&self) {
        let mut settings = Vec::with_capacity(self.queues.len());
        for q in &self.queues {
            match self.backend.queue_settings(q).await {
                Ok(s) => settings.push(s),
                Err(e) => {
                    tracing::debug!(error = %e, queue = %q, "could not read the queue's cap");
                    return;
                }
            }
        }
        self.caps_total.store(caps_total(&self.queues, &settings).unwrap_or(NOT_ALL_CAPPED), Ordering::Relaxed);
        self.rate_limited.store(any_rate_limit(&self.queues, &settings), Ordering::Relaxed);
        // An operator may have changed a zombie timeout: how long a held job may wait unconfirmed.
        self.leases.set_zombie_timeouts(&settings);
        let fresh = super::hold_fresh(&self.queues, self.pause_check, &settings);
        self.executor.hold_fresh_us.store(fresh.as_micros() as u64, Ordering::Relaxed);
    }

    /// Releases the look-ahead jobs put there before `cutoff` (they waited too long for a slot),
    /// so that other workers can run them; their attempt is not counted.
    async fn release_waiting(&self, cutoff: Instant) {
        let jobs = self.lookahead.take_older(cutoff);
        if jobs.is_empty() {
            return;
        }
        let leases: Vec<LeaseRef> = jobs.iter().map(ClaimedJob::lease_ref).collect();
        match with_retries(|| self.backend.release(self.worker, &leases)).await {
            Ok(out) => {
                tracing::debug!(released = out.done.len(), "look-ahead jobs waited too long for a slot; released");
                add(&self.counters.released, out.done.len() as u64);
                add(&self.counters.lease_lost, out.lost.len() as u64);
            }
            Err(e) => tracing::warn!(error = %e, "could not release waiting look-ahead jobs; the rescuer will"),
        }
        for l in leases {
            self.leases.untrack(l);
        }
    }

    /// Releases the buffered jobs of queues that are now paused or inactive.
    async fn release_paused(&self, buffer: &mut VecDeque<ClaimedJob>) {
        let mut queues: Vec<QueueName> = Vec::new();
        for j in buffer.iter() {
            if !queues.contains(&j.queue) {
                queues.push(j.queue.clone());
            }
        }
        let mut stopped: Vec<QueueName> = Vec::new();
        for q in queues {
            match self.backend.queue_settings(&q).await {
                Ok(s) if s.is_paused || !s.is_active => stopped.push(q),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, queue = %q, "could not read queue settings"),
            }
        }
        if stopped.is_empty() {
            return;
        }
        let (release, keep): (Vec<ClaimedJob>, Vec<ClaimedJob>) =
            buffer.drain(..).partition(|j| stopped.contains(&j.queue));
        buffer.extend(keep);
        let leases: Vec<LeaseRef> = release.iter().map(ClaimedJob::lease_ref).collect();
        match with_retries(|| self.backend.release(self.worker, &leases)).await {
            Ok(out) => {
                tracing::info!(released = out.done.len(), "released prefetched jobs of paused queues");
                add(&self.counters.released, out.done.len() as u64);
                add(&self.counters.lease_lost, out.lost.len() as u64);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not release prefetched jobs of paused queues; the rescuer will")
            }
        }
    }

    /// Reserve mode: starts buffered jobs (one call for the batch) and spawns the ones still
    /// held.
    async fn start_and_spawn(&self, batch: Vec<ClaimedJob>, mut permits: OwnedSemaphorePermit) {
        // One lease per job in a call, so a reply about an id is about that lease: an older
        // lease of a job buffered twice (rescued and claimed again by this worker) is dropped.
        let mut batch = batch;
        batch.sort_by_key(|j| std::cmp::Reverse(j.lease));
        let mut seen = HashSet::new();
        let (batch, stale): (Vec<ClaimedJob>, Vec<ClaimedJob>) = batch.into_iter().partition(|j| seen.insert(j.id));
        add(&self.counters.lease_lost, stale.len() as u64);
        let leases: Vec<LeaseRef> = batch.iter().map(ClaimedJob::lease_ref).collect();
        let sent = Instant::now();
        match with_retries(|| self.backend.start(self.worker, &leases)).await {
            Ok(out) => {
                let done: HashSet<JobId> = out.done.into_iter().collect();
                for mut job in batch {
                    if done.contains(&job.id) {
                        job.attempt += 1;
                        job.status = JobStatus::Processing;
                        if let Some(p) = permits.split(1) {
                            self.executor.spawn_new(job, p, sent);
                        }
                    } else {
                        add(&self.counters.lease_lost, 1);
                        metrics::counter!(m::LEASE_LOST, "queue" => job.queue.to_string(),
                            "kind" => job.kind.to_string())
                        .increment(1);
                        tracing::debug!(id = %job.id, "lease lost before start (rescued or cancelled)");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, count = leases.len(), "start failed; releasing the jobs");
                if let Err(e) = self.backend.release(self.worker, &leases).await {
                    tracing::warn!(error = %e, "release failed too; the rescuer will put them back");
                }
            }
        }
    }
}

/// Whether one of `queues` has a rate limit (in `settings`).
fn any_rate_limit(queues: &[QueueName], settings: &[QueueSettings]) -> bool {
    settings.iter().any(|s| s.rate_limit.is_some() && queues.contains(&s.name))
}

/// [`Claimer::caps_total`] when a queue of the worker has no cap.
const NOT_ALL_CAPPED: usize = usize::MAX;

/// The caps of `queues` (from `settings`) added up; `None` when there are no queues or one of
/// them has no cap (or no settings read).
fn caps_total(queues: &[QueueName], settings: &[QueueSettings]) -> Option<usize> {
    if queues.is_empty() {
        return None;
    }
    queues.iter().try_fold(0usize, |sum, q| {
        let cap = settings.iter().find(|s| &s.name == q)?.max_workers?;
        Some(sum.saturating_add(cap as usize).min(NOT_ALL_CAPPED - 1))
    })
}

/// Whether every one of `queues` has a cap (in `settings`) and the caps add up to at most
/// `concurrency`: then this worker alone can fill them (the claim loop's test on
/// [`caps_total`], spelled out for the unit tests).
#[cfg(test)]
pub(super) fn caps_fill_slots(queues: &[QueueName], settings: &[QueueSettings], concurrency: usize) -> bool {
    caps_total(queues, settings).is_some_and(|total| total <= concurrency)
}

/// The back-pressure bound: unwritten outcomes plus held jobs (running, prefetched,
/// look-ahead) never exceed the unwritten-outcome bound (`unwritten`, 2 x `concurrency` by
/// default) plus what the worker can hold, so a stalled outcome writer leaves at most
/// `unwritten` finished, unwritten jobs.
pub(super) fn backlog_bound(unwritten: usize, concurrency: usize, prefetch: usize, lookahead_max: usize) -> usize {
    unwritten + concurrency + prefetch + lookahead_max
}

#[cfg(test)]
#[path = "claim_tests.rs"]
mod tests;
