//! Enqueueing jobs: by type, or by kind and raw JSON.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    Backend, BackendExt, CancelOutcome, Enqueued, Error, JobId, JobKind, JobRecord, NewJob, QueueName, Result,
    Timestamp, MAX_ENQUEUE_BATCH,
};

use crate::job::Job;
use crate::metrics_names as m;

/// Enqueues jobs and does operator actions through a backend. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    backend: Arc<dyn Backend>,
    created_by: Option<String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The backend's own Debug redacts its connection string.
        f.debug_struct("Client").field("backend", &self.backend.name()).field("created_by", &self.created_by).finish()
    }
}

/// The [`NewJob`] for a typed job: its kind, default queue, max attempts and JSON payload.
pub fn new_job<J: Job>(job: &J) -> Result<NewJob> {
    let nj = NewJob::build(J::queue(), J::KIND)?.max_attempts(J::max_attempts());
    nj.payload(job)
}

impl Client {
    /// A client over `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Client { backend, created_by: None }
    }

    /// Stamps `created_by` on every job this client enqueues (unless the job sets its own).
    pub fn with_created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Enqueues a typed job with its type's defaults.
    pub async fn enqueue<J: Job>(&self, job: &J) -> Result<Enqueued> {
        self.enqueue_new(new_job(job)?).await
    }

    /// Starts a builder for a typed job (priority, delay, idempotency key, tags, ...).
    pub fn job<J: Job>(&self, job: &J) -> EnqueueBuilder<'_> {
        EnqueueBuilder { client: self, job: new_job(job) }
    }

    /// Enqueues many typed jobs in as few round trips as the batch limit allows.
    pub async fn enqueue_many<J: Job>(&self, jobs: &[J]) -> Result<Vec<Enqueued>> {
        let new_jobs = jobs.iter().map(new_job).collect::<Result<Vec<_>>>()?;
        self.enqueue_new_many(new_jobs).await
    }

    /// Enqueues by queue, kind and raw JSON payload.
    pub async fn enqueue_raw(&self, queue: &str, kind: &str, payload: serde_json::Value) -> Result<Enqueued> {
        self.enqueue_new(NewJob::new(QueueName::new(queue)?, JobKind::new(kind)?).json(payload)).await
    }

    /// Enqueues a fully built [`NewJob`].
    pub async fn enqueue_new(&self, mut job: NewJob) -> Result<Enqueued> {
        if job.created_by.is_none() {
            job.created_by.clone_from(&self.created_by);
        }
        let queue = job.queue.as_str().to_string();
        let out = self.backend.enqueue(job).await?;
        if !out.duplicate {
            metrics::counter!(m::ENQUEUED, "queue" => queue).increment(1);
        }
        Ok(out)
    }

    /// Enqueues many [`NewJob`]s, [`MAX_ENQUEUE_BATCH`] per round trip. Each chunk is
    /// validated as a whole: one invalid job rejects its chunk, and the earlier chunks stay.
    pub async fn enqueue_new_many(&self, mut jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        for job in &mut jobs {
            if job.created_by.is_none() {
                job.created_by.clone_from(&self.created_by);
            }
        }
        // Validate everything first, so bad input changes nothing.
        for job in &jobs {
            job.validate(usize::MAX)?;
        }
        let mut out = Vec::with_capacity(jobs.len());
        while !jobs.is_empty() {
            let rest = jobs.split_off(jobs.len().min(MAX_ENQUEUE_BATCH));
            let chunk = std::mem::replace(&mut jobs, rest);
            let queues: Vec<String> = chunk.iter().map(|j| j.queue.as_str().to_string()).collect();
            let done = self.backend.enqueue_many(chunk).await?;
            let mut per_queue: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
            for (q, e) in queues.into_iter().zip(&done) {
                if !e.duplicate {
                    *per_queue.entry(q).or_default() += 1;
                }
            }
            for (q, n) in per_queue {
                metrics::counter!(m::ENQUEUED, "queue" => q).increment(n);
            }
            out.extend(done);
        }
        Ok(out)
    }

    /// Asks to cancel a job (now if it is not running, on its worker's next heartbeat if it is).
    pub async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        self.backend.cancel(id).await
    }

    /// A job wherever it is.
    pub async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.backend.get_job(id).await
    }
}

/// Builder for one typed job; finish with [`EnqueueBuilder::enqueue`].
#[derive(Debug)]
#[must_use = "call .enqueue().await to enqueue the job"]
pub struct EnqueueBuilder<'a> {
    client: &'a Client,
    job: Result<NewJob>,
}

impl EnqueueBuilder<'_> {
    fn map(mut self, f: impl FnOnce(NewJob) -> NewJob) -> Self {
        self.job = self.job.map(f);
        self
    }

    /// Sends it to another queue than the type's default.
    pub fn queue(mut self, queue: &str) -> Self {
        self.job = match (self.job, QueueName::new(queue)) {
            (Ok(mut j), Ok(q)) => {
                j.queue = q;
                Ok(j)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        self
    }

    /// Higher runs first.
    pub fn priority(self, priority: i32) -> Self {
        self.map(|j| j.priority(priority))
    }

    /// Runs no earlier than `delay` from now (database clock).
    pub fn delay(self, delay: Duration) -> Self {
        self.map(|j| j.delay(delay))
    }

    /// Runs no earlier than `at`.
    pub fn run_at(self, at: Timestamp) -> Self {
        self.map(|j| j.run_at(at))
    }

    /// At most one live job carries this key; a duplicate returns the existing id.
    pub fn idempotency_key(self, key: impl Into<String>) -> Self {
        self.map(|j| j.idempotency_key(key))
    }

    /// Adds a tag.
    pub fn tag(self, tag: impl Into<String>) -> Self {
        self.map(|j| j.tag(tag))
    }

    /// Sets the maximum number of attempts.
    pub fn max_attempts(self, n: i32) -> Self {
        self.map(|j| j.max_attempts(n))
    }

    /// The job as built so far.
    pub fn into_new_job(self) -> Result<NewJob> {
        self.job
    }

    /// Enqueues it.
    pub async fn enqueue(self) -> Result<Enqueued> {
        let job = self.job?;
        self.client.enqueue_new(job).await
    }
}

impl From<EnqueueBuilder<'_>> for Result<NewJob, Error> {
    fn from(b: EnqueueBuilder<'_>) -> Self {
        b.job
    }
}
