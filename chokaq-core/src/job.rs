use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{validate, DeadReason, Error, JobId, JobKind, JobStatus, Lease, QueueName, Result, Timestamp, WorkerId};

/// Default `max_attempts` of a new job.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;

/// When a new job becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAt {
    /// As soon as possible.
    Now,
    /// At this instant.
    At(Timestamp),
    /// This long after the database's clock at enqueue time.
    After(Duration),
}

/// A job to enqueue. Build it with [`NewJob::new`] and the builder methods; everything is
/// validated by [`NewJob::validate`], which every backend calls before touching SQL.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// The queue it goes to.
    pub queue: QueueName,
    /// The handler key.
    pub kind: JobKind,
    /// The JSON payload.
    pub payload: serde_json::Value,
    /// Higher runs first. Default 0.
    pub priority: i32,
    /// When it becomes due.
    pub run_at: RunAt,
    /// At most one live (hot) job carries a given key; enqueueing a duplicate returns the
    /// existing id.
    pub idempotency_key: Option<String>,
    /// Free-form tags for filtering.
    pub tags: Vec<String>,
    /// How many attempts before it is dead-lettered. Default [`DEFAULT_MAX_ATTEMPTS`].
    pub max_attempts: i32,
    /// Who enqueued it (free text, for audit).
    pub created_by: Option<String>,
}

impl NewJob {
    /// A job with an empty (`null`) payload and defaults for everything else.
    pub fn new(queue: QueueName, kind: JobKind) -> Self {
        NewJob {
            queue,
            kind,
            payload: serde_json::Value::Null,
            priority: 0,
            run_at: RunAt::Now,
            idempotency_key: None,
            tags: Vec::new(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            created_by: None,
        }
    }

    /// Validates the queue and kind strings and builds a job (convenience for examples/tests).
    pub fn build(queue: &str, kind: &str) -> Result<Self> {
        Ok(Self::new(QueueName::new(queue)?, JobKind::new(kind)?))
    }

    /// Sets the payload from any serializable value.
    pub fn payload<T: Serialize + ?Sized>(mut self, payload: &T) -> Result<Self> {
        self.payload = serde_json::to_value(payload)?;
        Ok(self)
    }

    /// Sets the payload from a JSON value.
    pub fn json(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    /// Sets the priority (higher runs first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Runs the job no earlier than `at`.
    pub fn run_at(mut self, at: Timestamp) -> Self {
        self.run_at = RunAt::At(at);
        self
    }

    /// Runs the job no earlier than `delay` from now (database clock).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.run_at = RunAt::After(delay);
        self
    }

    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Adds a tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }

    /// Sets the tags.
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the maximum number of attempts (at least 1).
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Sets `created_by`.
    pub fn created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }

    /// Checks every field against the limits; returns the serialized payload size in bytes.
    pub fn validate(&self, max_payload_bytes: usize) -> Result<usize> {
        validate::queue_name(self.queue.as_str())?;
        validate::job_kind(self.kind.as_str())?;
        if self.max_attempts < 1 {
            return Err(Error::invalid(format!("max_attempts must be at least 1, got {}", self.max_attempts)));
        }
        if let Some(key) = &self.idempotency_key {
            validate::text_field("idempotency key", key, validate::MAX_IDEMPOTENCY_KEY_LEN)?;
        }
        if self.tags.len() > validate::MAX_TAGS {
            return Err(Error::invalid(format!("too many tags: {} (at most {})", self.tags.len(), validate::MAX_TAGS)));
        }
        for tag in &self.tags {
            validate::text_field("tag", tag, validate::MAX_TAG_LEN)?;
        }
        if let Some(who) = &self.created_by {
            validate::text_field("created_by", who, validate::MAX_CREATED_BY_LEN)?;
        }
        let size = serde_json::to_vec(&self.payload)?.len();
        if size > max_payload_bytes {
            return Err(Error::invalid(format!(
                "payload is {size} bytes, over the limit of {max_payload_bytes} bytes"
            )));
        }
        if payload_has_nul(&self.payload) {
            return Err(Error::invalid(
                "payload contains a NUL character (\\u0000), which databases cannot store in text",
            ));
        }
        Ok(size)
    }
}

fn payload_has_nul(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(a) => a.iter().any(payload_has_nul),
        serde_json::Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || payload_has_nul(v)),
        _ => false,
    }
}

/// What enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// The job's id: new, or the existing live job's when the idempotency key was taken.
    pub id: JobId,
    /// True when a live job already had the idempotency key and no row was inserted.
    pub duplicate: bool,
}

/// A job claimed by a worker. `lease` is the fencing token every later write must name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedJob {
    pub id: JobId,
    pub queue: QueueName,
    pub kind: JobKind,
    pub payload: serde_json::Value,
    pub tags: Vec<String>,
    pub idempotency_key: Option<String>,
    pub priority: i32,
    /// `Fetched` (reserve mode) or `Processing` (start mode).
    pub status: JobStatus,
    /// Attempts started so far, this one included once the job is Processing.
    pub attempt: i32,
    pub max_attempts: i32,
    pub lease: Lease,
    pub worker_id: WorkerId,
    pub scheduled_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub heartbeat_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub created_by: Option<String>,
}

impl ClaimedJob {
    /// The reference that fences every later write of this claim.
    pub fn lease_ref(&self) -> LeaseRef {
        LeaseRef { id: self.id, lease: self.lease }
    }

    /// Deserializes the payload.
    pub fn payload_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        Ok(serde_json::from_value(self.payload.clone())?)
    }
}

/// A job id with the lease its holder got at claim time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseRef {
    pub id: JobId,
    pub lease: Lease,
}

/// Where a job is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobLocation {
    /// Live, in the hot table, with this status.
    Hot(JobStatus),
    /// Succeeded, in the archive.
    Archived,
    /// In the dead-letter table, for this reason.
    Dead(DeadReason),
}

/// A full view of a job, wherever it is: for inspection, listing and tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: JobId,
    pub location: JobLocation,
    pub queue: QueueName,
    pub kind: JobKind,
    pub payload: serde_json::Value,
    pub tags: Vec<String>,
    pub idempotency_key: Option<String>,
    pub priority: i32,
    pub attempt: i32,
    pub max_attempts: i32,
    /// The last lease handed out (None if never claimed).
    pub lease: Option<Lease>,
    pub worker_id: Option<WorkerId>,
    pub scheduled_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub heartbeat_at: Option<Timestamp>,
    pub updated_at: Timestamp,
    /// Archive: when it completed; dead-letter: when it was moved there.
    pub finished_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub cancel_requested: bool,
    pub created_by: Option<String>,
}
