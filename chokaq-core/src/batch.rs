//! Batches (issue 41, item 3; `docs/workflows.md`, "Batches"): a set of jobs with callbacks,
//! each a job of its own enqueued exactly once: when every job of the batch is final (with
//! the counts), when every one succeeded, and when the first one is dead-lettered. A job of
//! the batch may add jobs to it while the batch is not final.
//!
//! The memory backend stores batches (the reference); the SQL backends do not yet
//! ([`crate::Capabilities::workflows`] covers both).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::JobId;

/// The most jobs one batch may hold (its first enqueue and every addition together).
pub const MAX_BATCH_JOBS: usize = 100_000;

/// A stored batch's id (UUID v7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BatchId(pub uuid::Uuid);

impl BatchId {
    /// A fresh id.
    pub fn new() -> Self {
        BatchId(uuid::Uuid::now_v7())
    }
}

impl Default for BatchId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Which callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchEvent {
    /// Every job of the batch is final (archived or dead-lettered).
    Finished,
    /// Every job of the batch succeeded (sent with `Finished`, after it).
    Succeeded,
    /// The first job of the batch was dead-lettered.
    FirstDead,
}

impl BatchEvent {
    /// `finished`, `succeeded`, `first_dead`.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchEvent::Finished => "finished",
            BatchEvent::Succeeded => "succeeded",
            BatchEvent::FirstDead => "first_dead",
        }
    }
}

/// What a callback job finds under the key `"batch"` of its payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchInfo {
    /// The batch.
    pub id: BatchId,
    /// Its name.
    pub name: String,
    /// Which callback this is.
    pub event: BatchEvent,
    /// Jobs in the batch when the callback was enqueued.
    pub total: u64,
    /// Of those, archived.
    pub succeeded: u64,
    /// Of those, dead-lettered.
    pub dead: u64,
}

/// A batch to enqueue: its jobs and its callbacks.
#[derive(Debug, Clone)]
pub struct Batch {
    name: String,
    jobs: Vec<NewJob>,
    callbacks: Vec<(BatchEvent, NewJob)>,
}

impl Batch {
    /// An empty batch.
    pub fn new(name: impl Into<String>) -> Self {
        Batch { name: name.into(), jobs: Vec::new(), callbacks: Vec::new() }
    }

    /// Adds a job.
    pub fn job(mut self, job: NewJob) -> Self {
        self.jobs.push(job);
        self
    }

    /// Adds jobs.
    pub fn jobs(mut self, jobs: impl IntoIterator<Item = NewJob>) -> Self {
        self.jobs.extend(jobs);
        self
    }

    /// The job enqueued once when every job of the batch is final.
    pub fn on_finished(self, job: NewJob) -> Self {
        self.callback(BatchEvent::Finished, job)
    }

    /// The job enqueued once when every job of the batch succeeded.
    pub fn on_succeeded(self, job: NewJob) -> Self {
        self.callback(BatchEvent::Succeeded, job)
    }

    /// The job enqueued once when the first job of the batch is dead-lettered.
    pub fn on_first_dead(self, job: NewJob) -> Self {
        self.callback(BatchEvent::FirstDead, job)
    }

    fn callback(mut self, event: BatchEvent, job: NewJob) -> Self {
        self.callbacks.retain(|(e, _)| *e != event);
        self.callbacks.push((event, job));
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its jobs.
    pub fn job_list(&self) -> &[NewJob] {
        &self.jobs
    }

    /// Its callbacks.
    pub fn callbacks(&self) -> &[(BatchEvent, NewJob)] {
        &self.callbacks
    }

    /// Checks what is checkable before a write: a name like a workflow's, at least one job
    /// and at most [`MAX_BATCH_JOBS`], no job or callback with an idempotency key or unique
    /// settings (it could be answered with another job's id), each callback's payload an
    /// object or null (the batch's [`BatchInfo`] goes under its key `"batch"`).
    pub fn check(&self) -> Result<()> {
        let bad_name = self.name.is_empty()
            || self.name.len() > crate::workflow::MAX_TASK_NAME_LEN
            || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
        if bad_name {
            return Err(Error::invalid(format!(
                "invalid batch name {:?}: 1 to {} bytes of ASCII letters, digits, '_', '-', '.' and ':'",
                self.name,
                crate::workflow::MAX_TASK_NAME_LEN
            )));
        }
        if self.jobs.is_empty() {
            return Err(Error::invalid(format!("batch {:?} has no jobs", self.name)));
        }
        check_jobs(&self.name, &self.jobs, 0)?;
        for (event, job) in &self.callbacks {
            if job.idempotency_key.is_some() || job.unique.is_some() {
                return Err(Error::invalid(format!(
                    "batch {:?}: the {} callback has an idempotency key or unique settings",
                    self.name,
                    event.as_str()
                )));
            }
            if !(job.payload.is_object() || job.payload.is_null()) {
                return Err(Error::invalid(format!(
                    "batch {:?}: the {} callback's payload must be a JSON object or null (the batch goes under \
                     its key \"batch\")",
                    self.name,
                    event.as_str()
                )));
            }
        }
        Ok(())
    }
}

/// Checks jobs added to a batch that holds `already`: the limit, no idempotency key or unique
/// settings.
pub fn check_jobs(batch: &str, jobs: &[NewJob], already: usize) -> Result<()> {
    if already + jobs.len() > MAX_BATCH_JOBS {
        return Err(Error::invalid(format!(
            "batch {batch:?} would hold {} jobs, more than the limit of {MAX_BATCH_JOBS}",
            already + jobs.len()
        )));
    }
    if jobs.iter().any(|j| j.idempotency_key.is_some() || j.unique.is_some()) {
        return Err(Error::invalid(format!(
            "batch {batch:?}: a job with an idempotency key or unique settings cannot be in a batch"
        )));
    }
    Ok(())
}

/// The callback job of `event`, its payload given the batch under `"batch"`.
pub fn callback_job(mut job: NewJob, info: &BatchInfo) -> NewJob {
    let batch = serde_json::to_value(info).unwrap_or(serde_json::Value::Null);
    match &mut job.payload {
        serde_json::Value::Object(m) => {
            m.insert("batch".to_string(), batch);
        }
        other => *other = serde_json::json!({ "batch": batch }),
    }
    job
}

/// What [`crate::Backend::enqueue_batch`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueuedBatch {
    /// The batch's id.
    pub id: BatchId,
    /// Its jobs, in the order given.
    pub jobs: Vec<JobId>,
}

/// A stored batch, as [`crate::Backend::get_batch`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchStatus {
    /// Its id.
    pub id: BatchId,
    /// Its name.
    pub name: String,
    /// Jobs in it.
    pub total: u64,
    /// Archived.
    pub succeeded: u64,
    /// Dead-lettered.
    pub dead: u64,
    /// The callbacks enqueued so far, with their jobs, in the order they were enqueued.
    pub fired: Vec<(BatchEvent, JobId)>,
}

impl BatchStatus {
    /// Every job is final.
    pub fn is_final(&self) -> bool {
        self.succeeded + self.dead == self.total
    }
}
