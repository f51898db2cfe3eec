//! `Broken`: the memory backend with one deliberate fault (`Fault`) switched on, each a real
//! bug shape the suite must catch.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// `complete_and_claim` claims first and completes after: its claim cannot see its own
    /// completions.
    CompleteAndClaimClaimsFirst,
    /// `complete_and_claim` completes with the row's current lease instead of the caller's.
    CompleteAndClaimIgnoresLease,
    /// `complete_and_claim` presumes every listed completion frees a slot: it claims first,
    /// with each capped queue's cap raised by the list's length, then completes.
    CompleteAndClaimPresumesCompletions,
    /// `complete` never answers after its first 20 calls (a hung connection).
    CompleteHangs,
    /// Not a fault: wake-ups naming each enqueued queue (the baseline of the two below).
    WakeupsCorrect,
    /// Every enqueue pushes the generic `Wake::Any`, never the queue.
    WakeupsGeneric,
    /// A batch wakes only the queue of its first job.
    WakeupsFirstQueueOnly,
    /// Complete takes the row's current lease instead of checking the caller's.
    CompleteIgnoresLease,
    /// Heartbeat takes the row's current lease instead of checking the caller's.
    HeartbeatIgnoresLease,
    /// `record_output` takes the row's current lease instead of checking the caller's.
    RecordOutputIgnoresLease,
    /// The cap is read, then the claim runs uncapped for "the gap": a check-then-act race.
    CapCheckThenAct,
    /// Retry never dead-letters: attempts are not counted against max_attempts.
    RetryForever,
    /// A retry, snooze or rescue of a job whose cancel was accepted clears the request and puts
    /// the job back to Pending (the lost-cancel bug).
    CancelLost,
    /// Complete reports Done for a stale lease of a job that is archived (the look-up of the
    /// outcome that stands ignores the lease).
    CompleteStaleIsDone,
    /// Batches: the `finished` callback is enqueued again by every completion that finds the
    /// batch final afterwards (a check after the move instead of in it).
    BatchCallbackTwice,
    /// Workflows: each task waits for its first dependency only (a backend that releases a
    /// dependent after the first of its dependencies succeeds).
    ReleaseAfterFirstDependency,
    /// Workflows: every task runs anyway (a backend that releases a dependent after a
    /// dead-lettered dependency instead of cancelling it).
    ReleaseAfterFailedDependency,
    /// Registering a worker again replaces its row: `started_at` moves with every heartbeat.
    RegisterResetsStarted,
    /// Pruning removes every worker row, stale or not.
    PruneIgnoresAge,
    /// Throughput for one queue counts every queue.
    ThroughputIgnoresQueue,
    /// `start` is not repeatable: a job its lease already started is reported lost (the guard
    /// wants Fetched), so a start whose reply was lost after its commit drops a job that ran.
    StartNotRepeatable,
    /// A cancel of a held job is final at once (it is dead-lettered while its worker may run
    /// it), as for a reserved one.
    HeldCancelFinal,
    /// `enqueue_tick` skips the compare-and-set on the schedule row: it inserts the tick's job
    /// and leaves the uniqueness to the idempotency key (live jobs only).
    TickSkipsCas,
    /// The per-key cap is checked before the claim acts: each key's running count is read,
    /// then (after a yield: the window) the claim runs with the key cap lifted, keeping only
    /// what the stale counts allowed (issue 25).
    KeyCheckThenAct,
    /// The claim ignores the concurrency key: the per-key cap is never applied.
    KeyIgnored,
    /// A key slot is freed twice: a complete that finds its job already archived by the same
    /// lease (a repeat whose first reply was lost) frees the key's slot again, as a
    /// counter-based limiter that decrements on every outcome call does (Solid Queue's
    /// semaphore released twice).
    KeyFreedTwice,
    /// The rate window is off by one: a claim may start `jobs + 1` per window.
    RateOffByOne,
    /// Unique jobs by check-then-insert (issue 42): the hot table is read for a job with the
    /// same key in a counted state, then (after a yield: the window) the job is inserted with
    /// no key of its own, so nothing but that read guards it.
    UniqueCheckThenInsert,
    /// The unique key is computed without the period: every bucket is one.
    UniqueKeyWithoutPeriod,
}

#[derive(Debug)]
pub(crate) struct Broken {
    pub(crate) inner: MemoryBackend,
    pub(crate) fault: Option<Fault>,
    /// `KeyFreedTwice`: extra key slots per queue, freed by repeated completes.
    pub(crate) extra_key_slots: std::sync::Mutex<std::collections::HashMap<QueueName, u32>>,
}

impl Broken {
    /// Ids of the Processing jobs whose cancel was accepted.
    pub(crate) async fn cancel_requested(&self) -> Result<Vec<JobId>> {
        let mut out = Vec::new();
        let mut params = ListJobsParams::new(JobTable::Hot);
        params.status = Some(JobStatus::Processing);
        params.limit = 1000;
        loop {
            let page = self.inner.list_jobs(&params).await?;
            out.extend(page.jobs.iter().filter(|r| r.cancel_requested).map(|r| r.id));
            match page.next {
                Some(next) => params.after = Some(next),
                None => return Ok(out),
            }
        }
    }

    /// Puts a job the correct backend dead-lettered as cancelled back to Pending.
    pub(crate) async fn undo_cancel(&self, id: JobId) -> Result<bool> {
        let cancelled = matches!(
            self.inner.get_job(id).await?,
            Some(JobRecord { location: JobLocation::Dead(DeadReason::Cancelled), .. })
        );
        Ok(cancelled && self.inner.requeue_dead(id).await? == RequeueOutcome::Requeued)
    }

    /// `UniqueCheckThenInsert`'s check: a job of the hot table of `job`'s queue whose key (its
    /// kind, queue, payload and due time under `job`'s settings) is `job`'s and whose state
    /// counts.
    pub(crate) async fn unique_holder_by_reading(&self, job: &NewJob) -> Result<Option<JobId>> {
        let now = self.inner.db_now().await?;
        let Some(want) = unique_key(job, now)? else { return Ok(None) };
        let mut params = ListJobsParams::new(JobTable::Hot);
        (params.queue, params.limit) = (Some(job.queue.clone()), 1000);
        for r in self.inner.list_jobs(&params).await?.jobs {
            let mut as_new = NewJob::new(r.queue.clone(), r.kind.clone()).json(r.payload.clone());
            as_new.unique = job.unique.clone();
            as_new.run_at = RunAt::At(r.scheduled_at.unwrap_or(r.created_at));
            let same = unique_key(&as_new, now)?.is_some_and(|k| k.key == want.key);
            if same && want.states.contains(UniqueState::of_record(&r, now)) {
                return Ok(Some(r.id));
            }
        }
        Ok(None)
    }

    /// The lease the row holds now (what a lease-less guard would match).
    pub(crate) async fn current(&self, l: LeaseRef) -> Result<LeaseRef> {
        Ok(match self.inner.get_job(l.id).await? {
            Some(JobRecord { lease: Some(lease), .. }) => LeaseRef { id: l.id, lease },
            _ => l,
        })
    }
}

/// The wake-up channel of the broken backends that push wake-ups (one per process: the
/// other tests' wake-ups are noise of other queues, which the notify case must ignore).
pub(crate) fn wake_channel() -> &'static tokio::sync::broadcast::Sender<Wake> {
    static CHANNEL: std::sync::OnceLock<tokio::sync::broadcast::Sender<Wake>> = std::sync::OnceLock::new();
    CHANNEL.get_or_init(|| tokio::sync::broadcast::channel(1024).0)
}

#[async_trait]
impl Backend for Broken {
    fn name(&self) -> &'static str {
        "broken-memory"
    }
    /// The inner backend's, except that this wrapper gives no read-deadline view.
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_read_deadline(chokaq_core::ReadDeadline::Unbounded)
    }
    async fn migrate(&self) -> Result<()> {
        self.inner.migrate().await
    }
    async fn wakeups(&self) -> Result<Option<chokaq_core::Wakeups>> {
        match self.fault {
            Some(Fault::WakeupsCorrect | Fault::WakeupsGeneric | Fault::WakeupsFirstQueueOnly) => {
                Ok(Some(chokaq_core::Wakeups::new(wake_channel().subscribe())))
            }
            _ => self.inner.wakeups().await,
        }
    }
    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let mut queues: Vec<String> = Vec::new();
        for j in &jobs {
            if !queues.contains(&j.queue.to_string()) {
                queues.push(j.queue.to_string());
            }
        }
        let jobs = match self.fault {
            Some(Fault::UniqueCheckThenInsert) if jobs.len() == 1 && jobs[0].unique.is_some() => {
                if let Some(id) = self.unique_holder_by_reading(&jobs[0]).await? {
                    return Ok(vec![Enqueued { id, duplicate: true }]);
                }
                tokio::task::yield_now().await; // the window between "check" and "insert"
                jobs.into_iter().map(|j| NewJob { unique: None, ..j }).collect()
            }
            Some(Fault::UniqueKeyWithoutPeriod) => jobs
                .into_iter()
                .map(|mut j| {
                    if let Some(o) = j.unique.as_mut() {
                        o.period_secs = None;
                    }
                    j
                })
                .collect(),
            _ => jobs,
        };
        let out = self.inner.enqueue_many(jobs).await?;
        let wakes = match self.fault {
            Some(Fault::WakeupsCorrect) => queues.into_iter().map(Wake::Queue).collect(),
            Some(Fault::WakeupsGeneric) => vec![Wake::Any],
            Some(Fault::WakeupsFirstQueueOnly) => queues.into_iter().take(1).map(Wake::Queue).collect(),
            _ => Vec::new(),
        };
        for w in wakes {
            let _ = wake_channel().send(w);
        }
        Ok(out)
    }
    async fn unique_of(&self, id: JobId) -> Result<Option<UniqueHold>> {
        self.inner.unique_of(id).await
    }
    async fn prune_uniques(&self, limit: u32) -> Result<u64> {
        self.inner.prune_uniques(limit).await
    }
    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        if self.fault == Some(Fault::CapCheckThenAct) && req.queues.len() == 1 {
            let q = &req.queues[0];
            if let Some(max) = self.inner.queue_settings(q).await?.max_workers {
                let s = self.inner.stats().await?;
                let active = s.queue(q.as_str()).map(|s| s.fetched + s.processing).unwrap_or(0);
                tokio::task::yield_now().await; // the window between "count" and "take"
                let gap = u64::from(max).saturating_sub(active) as u32;
                if gap == 0 {
                    return Ok(Vec::new());
                }
                // Take the gap from a view of the queue with the cap lifted.
                self.inner.control_queue(q, QueueControl::SetMaxWorkers(None)).await?;
                let mut r = req.clone();
                r.limit = r.limit.min(gap);
                let out = self.inner.claim(&r).await;
                self.inner.control_queue(q, QueueControl::SetMaxWorkers(Some(max))).await?;
                return out;
            }
        }
        if req.queues.len() == 1 {
            let q = &req.queues[0];
            let st = self.inner.queue_settings(q).await?;
            match (self.fault, st.key_max_workers, st.rate_limit) {
                (Some(Fault::KeyIgnored), Some(cap), _) => {
                    self.inner.control_queue(q, QueueControl::SetKeyMaxWorkers(None)).await?;
                    let out = self.inner.claim(req).await;
                    self.inner.control_queue(q, QueueControl::SetKeyMaxWorkers(Some(cap))).await?;
                    return out;
                }
                (Some(Fault::KeyFreedTwice), Some(cap), _) => {
                    let extra = self.extra_key_slots.lock().unwrap().get(q).copied().unwrap_or(0);
                    self.inner.control_queue(q, QueueControl::SetKeyMaxWorkers(Some(cap + extra))).await?;
                    let out = self.inner.claim(req).await;
                    self.inner.control_queue(q, QueueControl::SetKeyMaxWorkers(Some(cap))).await?;
                    return out;
                }
                (Some(Fault::KeyCheckThenAct), Some(cap), _) => {
                    let mut running: std::collections::HashMap<String, u32> = Default::default();
                    for status in [JobStatus::Fetched, JobStatus::Processing] {
                        let mut params = ListJobsParams::new(JobTable::Hot);
                        (params.queue, params.status, params.limit) = (Some(q.clone()), Some(status), 1000);
                        for r in self.inner.list_jobs(&params).await?.jobs {
                            if let Some(k) = r.concurrency_key {
                                *running.entry(k).or_insert(0) += 1;
                            }
                        }
                    }
                    tokio::task::yield_now().await; // the window between "count" and "take"
                    self.inner.control_queue(q, QueueControl::SetKeyMaxWorkers(None)).await?;
                    let out = self.inner.claim(req).await;
                    self.inner.control_queue(q, QueueControl::SetKeyMaxWorkers(Some(cap))).await?;
                    let mut keep = Vec::new();
                    let mut back = Vec::new();
                    for j in out? {
                        match &j.concurrency_key {
                            Some(k) if running.get(k).copied().unwrap_or(0) >= cap => back.push(j),
                            Some(k) => {
                                *running.entry(k.clone()).or_insert(0) += 1;
                                keep.push(j);
                            }
                            None => keep.push(j),
                        }
                    }
                    for j in back {
                        let l = [j.lease_ref()];
                        match j.status {
                            JobStatus::Fetched => self.inner.release(req.worker, &l).await?,
                            _ => {
                                self.inner
                                    .force(j.id, &JobPatch { status: Some(JobStatus::Fetched), ..Default::default() })
                                    .await?;
                                self.inner.release(req.worker, &l).await?
                            }
                        };
                    }
                    return Ok(keep);
                }
                (Some(Fault::RateOffByOne), _, Some(limit)) => {
                    let wider = chokaq_core::RateLimit { jobs: limit.jobs + 1, ..limit };
                    self.inner.control_queue(q, QueueControl::SetRateLimit(Some(wider))).await?;
                    let out = self.inner.claim(req).await;
                    self.inner.control_queue(q, QueueControl::SetRateLimit(Some(limit))).await?;
                    return out;
                }
                _ => {}
            }
        }
        self.inner.claim(req).await
    }
    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        if self.fault == Some(Fault::StartNotRepeatable) {
            let mut fetched = Vec::new();
            let mut lost = Vec::new();
            for l in leases {
                match self.inner.get_job(l.id).await? {
                    Some(r) if r.location == JobLocation::Hot(JobStatus::Fetched) => fetched.push(*l),
                    _ => lost.push(l.id),
                }
            }
            let mut out = self.inner.start(worker, &fetched).await?;
            out.lost.extend(lost.into_iter().filter(|id| !out.done.contains(id)));
            out.done.retain(|id| !out.lost.contains(id));
            return Ok(out);
        }
        self.inner.start(worker, leases).await
    }
    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        if self.fault == Some(Fault::HeartbeatIgnoresLease) {
            let mut cur = Vec::new();
            for l in leases {
                cur.push(self.current(*l).await?);
            }
            return self.inner.heartbeat(worker, &cur).await;
        }
        self.inner.heartbeat(worker, leases).await
    }
    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        if self.fault == Some(Fault::BatchCallbackTwice) {
            let out = self.inner.complete(worker, leases).await?;
            let fired: Vec<(chokaq_core::BatchId, NewJob)> = {
                let m = batch_jobs().lock().unwrap();
                out.done.iter().filter_map(|id| m.get(id).cloned()).collect()
            };
            for (bid, cb) in fired {
                if let Some(st) = self.inner.get_batch(bid).await? {
                    if st.is_final() {
                        let info = chokaq_core::BatchInfo {
                            id: bid,
                            name: st.name.clone(),
                            event: chokaq_core::BatchEvent::Finished,
                            total: st.total,
                            succeeded: st.succeeded,
                            dead: st.dead,
                        };
                        self.inner.enqueue(chokaq_core::batch::callback_job(cb, &info)).await?;
                    }
                }
            }
            return Ok(out);
        }
        if self.fault == Some(Fault::CompleteHangs) {
            static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            if CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 20 {
                std::future::pending::<()>().await;
            }
        }
        if self.fault == Some(Fault::CompleteStaleIsDone) {
            let out = self.inner.complete(worker, leases).await?;
            let mut fixed = BatchOutcome { done: out.done, lost: Vec::new() };
            for id in out.lost {
                let archived =
                    matches!(self.inner.get_job(id).await?, Some(JobRecord { location: JobLocation::Archived, .. }));
                if archived {
                    fixed.done.push(id)
                } else {
                    fixed.lost.push(id)
                }
            }
            return Ok(fixed);
        }
        if self.fault == Some(Fault::KeyFreedTwice) {
            for l in leases {
                if let Some(r) = self.inner.get_job(l.id).await? {
                    if r.location == JobLocation::Archived && r.lease == Some(l.lease) && r.concurrency_key.is_some() {
                        *self.extra_key_slots.lock().unwrap().entry(r.queue.clone()).or_insert(0) += 1;
                    }
                }
            }
        }
        if self.fault == Some(Fault::CompleteIgnoresLease) {
            let mut cur = Vec::new();
            for l in leases {
                cur.push(self.current(*l).await?);
            }
            return self.inner.complete(worker, &cur).await;
        }
        self.inner.complete(worker, leases).await
    }
    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        req.validate()?;
        match self.fault {
            Some(Fault::CompleteAndClaimClaimsFirst) => {
                let jobs = self.claim(req).await?;
                Ok((self.complete(worker, leases).await?, jobs))
            }
            Some(Fault::CompleteAndClaimIgnoresLease) => {
                let mut cur = Vec::new();
                for l in leases {
                    cur.push(self.current(*l).await?);
                }
                self.inner.complete_and_claim(worker, &cur, req).await
            }
            Some(Fault::CompleteAndClaimPresumesCompletions) => {
                let mut raised = Vec::new();
                for q in &req.queues {
                    if let Some(max) = self.inner.queue_settings(q).await?.max_workers {
                        let more = max.saturating_add(leases.len() as u32);
                        self.inner.control_queue(q, QueueControl::SetMaxWorkers(Some(more))).await?;
                        raised.push((q, max));
                    }
                }
                let jobs = self.inner.claim(req).await;
                for (q, max) in raised {
                    self.inner.control_queue(q, QueueControl::SetMaxWorkers(Some(max))).await?;
                }
                Ok((self.complete(worker, leases).await?, jobs?))
            }
            // The trait's default, over this wrapper's (possibly broken) complete and claim.
            _ => {
                let done = self.complete(worker, leases).await?;
                Ok((done, self.claim(req).await?))
            }
        }
    }
    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        if self.fault == Some(Fault::RetryForever) {
            if let FailAction::Retry { .. } = outcome {
                // Forget the attempt count before failing, so attempts never run out.
                self.inner.force(lease.id, &JobPatch { attempt: Some(0), ..Default::default() }).await?;
            }
        }
        if self.fault == Some(Fault::CancelLost) {
            let at = self.inner.db_now().await?;
            let pending = match &outcome {
                FailAction::Retry { .. } => Some(FailOutcome::Retried { at }),
                FailAction::Snooze { .. } => Some(FailOutcome::Snoozed { until: at }),
                _ => None,
            };
            let out = self.inner.fail(worker, lease, outcome).await?;
            if let (Some(pending), Fenced::Done(FailOutcome::DeadLettered(DeadReason::Cancelled))) = (pending, out) {
                if self.undo_cancel(lease.id).await? {
                    return Ok(Fenced::Done(pending));
                }
            }
            return Ok(out);
        }
        self.inner.fail(worker, lease, outcome).await
    }
    async fn record_output(&self, worker: WorkerId, lease: LeaseRef, output: &serde_json::Value) -> Result<Fenced> {
        if self.fault == Some(Fault::RecordOutputIgnoresLease) {
            let cur = self.current(lease).await?;
            return self.inner.record_output(worker, cur, output).await;
        }
        self.inner.record_output(worker, lease, output).await
    }
    async fn get_output(&self, id: JobId) -> Result<Option<serde_json::Value>> {
        self.inner.get_output(id).await
    }
    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.inner.release(worker, leases).await
    }
    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        if self.fault == Some(Fault::CancelLost) {
            let cancelled = self.cancel_requested().await?;
            let mut report = self.inner.rescue(params).await?;
            for id in cancelled {
                if self.undo_cancel(id).await? {
                    report.zombies_dead -= 1;
                    report.zombies_retried += 1;
                }
            }
            return Ok(report);
        }
        self.inner.rescue(params).await
    }
    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        if self.fault == Some(Fault::HeldCancelFinal) {
            if let Some(r) = self.inner.get_job(id).await? {
                if r.location == JobLocation::Hot(JobStatus::Fetched) {
                    // Seen as reserved: dead-lettered at once.
                    self.inner.force(id, &JobPatch { heartbeat_at: Some(None), ..Default::default() }).await?;
                }
            }
        }
        self.inner.cancel(id).await
    }
    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        self.inner.control_queue(queue, control).await
    }
    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        self.inner.queue_settings(queue).await
    }
    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        self.inner.requeue_dead(id).await
    }
    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        self.inner.purge(req).await
    }
    async fn stats(&self) -> Result<StatsSnapshot> {
        self.inner.stats().await
    }
    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.inner.get_job(id).await
    }
    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        self.inner.list_jobs(filter).await
    }
    async fn enqueue_batch(&self, batch: &chokaq_core::Batch) -> chokaq_core::Result<chokaq_core::EnqueuedBatch> {
        let e = self.inner.enqueue_batch(batch).await?;
        if self.fault == Some(Fault::BatchCallbackTwice) {
            if let Some((_, cb)) = batch.callbacks().iter().find(|(ev, _)| *ev == chokaq_core::BatchEvent::Finished) {
                let mut m = batch_jobs().lock().unwrap();
                for id in &e.jobs {
                    m.insert(*id, (e.id, cb.clone()));
                }
            }
        }
        Ok(e)
    }
    async fn add_to_batch(
        &self,
        id: chokaq_core::BatchId,
        jobs: Vec<chokaq_core::NewJob>,
    ) -> chokaq_core::Result<Vec<chokaq_core::JobId>> {
        self.inner.add_to_batch(id, jobs).await
    }
    async fn get_batch(&self, id: chokaq_core::BatchId) -> chokaq_core::Result<Option<chokaq_core::BatchStatus>> {
        self.inner.get_batch(id).await
    }
    async fn enqueue_workflow(&self, wf: &chokaq_core::Workflow) -> chokaq_core::Result<chokaq_core::EnqueuedWorkflow> {
        let broken = match self.fault {
            Some(Fault::ReleaseAfterFirstDependency) => wf.tasks().iter().fold(Workflow::new(wf.name()), |w, t| {
                let mut t = t.clone();
                t.deps.truncate(1);
                w.task(t)
            }),
            Some(Fault::ReleaseAfterFailedDependency) => {
                wf.tasks().iter().fold(Workflow::new(wf.name()), |w, t| w.task(t.clone().run_anyway()))
            }
            _ => return self.inner.enqueue_workflow(wf).await,
        };
        self.inner.enqueue_workflow(&broken).await
    }
    async fn workflow_of(&self, job: chokaq_core::JobId) -> chokaq_core::Result<Option<chokaq_core::WorkflowId>> {
        self.inner.workflow_of(job).await
    }
    async fn get_workflow(
        &self,
        id: chokaq_core::WorkflowId,
    ) -> chokaq_core::Result<Option<chokaq_core::WorkflowStatus>> {
        self.inner.get_workflow(id).await
    }
    async fn cancel_workflow(&self, id: chokaq_core::WorkflowId) -> chokaq_core::Result<u64> {
        self.inner.cancel_workflow(id).await
    }
    async fn register_worker(&self, reg: &WorkerRegistration) -> Result<()> {
        if self.fault == Some(Fault::RegisterResetsStarted) {
            // A plain replace: the row is deleted and written anew, so started_at moves.
            self.inner.deregister_worker(reg.worker).await?;
        }
        self.inner.register_worker(reg).await
    }
    async fn deregister_worker(&self, worker: WorkerId) -> Result<bool> {
        self.inner.deregister_worker(worker).await
    }
    async fn list_workers(&self) -> Result<Vec<WorkerProcess>> {
        self.inner.list_workers().await
    }
    async fn prune_workers(&self, stale_after: std::time::Duration) -> Result<u64> {
        if self.fault == Some(Fault::PruneIgnoresAge) {
            return self.inner.prune_workers(std::time::Duration::ZERO).await;
        }
        self.inner.prune_workers(stale_after).await
    }
    async fn throughput(&self, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
        if self.fault == Some(Fault::ThroughputIgnoresQueue) {
            let mut all = params.clone();
            all.queue = None;
            return self.inner.throughput(&all).await;
        }
        self.inner.throughput(params).await
    }
    async fn register_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        self.inner.register_schedule(def).await
    }
    async fn enqueue_tick(&self, req: &TickRequest) -> Result<TickOutcome> {
        if self.fault == Some(Fault::TickSkipsCas) {
            req.validate(validate::DEFAULT_MAX_PAYLOAD_BYTES)?;
            return Ok(TickOutcome::Enqueued(self.inner.enqueue(req.job.clone()).await?));
        }
        self.inner.enqueue_tick(req).await
    }
    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>> {
        self.inner.list_schedules().await
    }
    async fn set_schedule_enabled(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        self.inner.set_schedule_enabled(name, enabled).await
    }
    async fn mark_stale_schedules(&self, group: &str, live: &[String]) -> Result<u64> {
        self.inner.mark_stale_schedules(group, live).await
    }
}

#[async_trait]
impl TestSupport for Broken {
    async fn db_now(&self) -> Result<Timestamp> {
        self.inner.db_now().await
    }
    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        self.inner.force(id, patch).await
    }
    async fn force_worker_seen(&self, worker: WorkerId, last_seen_at: Timestamp) -> Result<bool> {
        self.inner.force_worker_seen(worker, last_seen_at).await
    }
    async fn force_finished_at(&self, id: JobId, finished_at: Timestamp) -> Result<bool> {
        self.inner.force_finished_at(id, finished_at).await
    }
    async fn presence(&self, id: JobId) -> Result<Presence> {
        self.inner.presence(id).await
    }
    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        self.inner.presence_many(ids).await
    }
    async fn add_starts(&self, queue: &QueueName, key: Option<&str>, count: u64, at: Timestamp) -> Result<()> {
        self.inner.add_starts(queue, key, count, at).await
    }
    async fn drop_schema(&self) -> Result<()> {
        self.inner.drop_schema().await
    }
}

/// `BatchCallbackTwice`: each batch job's batch and `finished` callback, as the broken
/// completion looks them up.
fn batch_jobs() -> &'static std::sync::Mutex<std::collections::HashMap<JobId, (chokaq_core::BatchId, NewJob)>> {
    static M: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<JobId, (chokaq_core::BatchId, NewJob)>>> =
        std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}
