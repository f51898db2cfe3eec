use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{
    validate, DeadReason, Error, JobId, JobKind, JobStatus, Lease, QueueName, Result, Timestamp, UniqueOpts, WorkerId,
};

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
    /// The job's concurrency key: the unit of a queue's per-key cap
    /// ([`QueueControl::SetKeyMaxWorkers`](crate::QueueControl::SetKeyMaxWorkers)) and of a
    /// by-key rate limit ([`RateLimit::by_key`](crate::RateLimit::by_key)). `None`: bound by
    /// neither per-key setting (the queue's cap and a queue-wide rate limit still bind it).
    pub concurrency_key: Option<String>,
    /// How many attempts before it is dead-lettered. Default [`DEFAULT_MAX_ATTEMPTS`].
    pub max_attempts: i32,
    /// Who enqueued it (free text, for audit).
    pub created_by: Option<String>,
    /// Unique-job settings (`docs/unique.md`): at most one job per unique key among the jobs
    /// in the states that count; a duplicate returns the holder's id. `None`: not unique.
    pub unique: Option<UniqueOpts>,
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
            concurrency_key: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            created_by: None,
            unique: None,
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

    /// Sets the concurrency key (a tenant, a customer, a resource): a queue's per-key cap and a
    /// by-key rate limit count the jobs of each key apart.
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }

    /// Sets the maximum number of attempts (at least 1).
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Makes the job unique by these settings (`docs/unique.md`).
    pub fn unique(mut self, opts: UniqueOpts) -> Self {
        self.unique = Some(opts);
        self
    }

    /// Sets `created_by`.
    pub fn created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }

    /// Checks every field against the limits; returns the serialized payload size in bytes.
    ///
    /// Accepts only what every backend can store and read back: queue and kind
    /// ([`validate::queue_name`], [`validate::job_kind`]), text fields
    /// ([`validate::text_field`]), the payload ([`validate::payload`]: size, depth, NUL), the
    /// schedule (`RunAt::After` at most [`validate::MAX_DELAY`], `RunAt::At` in the years
    /// [`validate::MIN_YEAR`] to [`validate::MAX_YEAR`]) and `max_attempts` (at least 1).
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
        if let Some(key) = &self.concurrency_key {
            validate::text_field("concurrency key", key, validate::MAX_CONCURRENCY_KEY_LEN)?;
        }
        if let Some(who) = &self.created_by {
            validate::text_field("created_by", who, validate::MAX_CREATED_BY_LEN)?;
        }
        if let Some(opts) = &self.unique {
            opts.validate()?;
            if matches!(opts.args, crate::UniqueArgs::Fields(_)) && !self.payload.is_object() {
                return Err(Error::invalid("unique by fields needs a JSON object payload"));
            }
        }
        match self.run_at {
            RunAt::Now => {}
            RunAt::At(t) => validate::timestamp("run_at", t)?,
            RunAt::After(d) => validate::delay("run_at delay", d)?,
        }
        validate::payload(&self.payload, max_payload_bytes)
    }
}

/// What enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// The job's id: new, or the existing job's when the idempotency key or the unique key
    /// was taken.
    pub id: JobId,
    /// True when a live job already had the idempotency key, or a job in a counted state the
    /// unique key, and no row was inserted.
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
    /// The job's concurrency key ([`NewJob::concurrency_key`]).
    #[serde(default)]
    pub concurrency_key: Option<String>,
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
    /// How often a hold of this job expired: a worker held it ([`crate::ClaimMode::Hold`]) and
    /// stopped (or lost the claim's reply) before its start was recorded. Such a job may be
    /// the one that kills its worker's process as it begins, or an innocent job that waited
    /// in that worker's look-ahead: the runtime records its start before its handler begins,
    /// so its runs count as attempts from then on. An expiry never dead-letters a job by
    /// itself (`docs/contract.md`, "Held jobs").
    #[serde(default)]
    pub expired_holds: i32,
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
    /// The job's concurrency key ([`NewJob::concurrency_key`]).
    #[serde(default)]
    pub concurrency_key: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn nested(depth: usize) -> serde_json::Value {
        let mut v = serde_json::json!(1);
        for _ in 0..depth {
            v = serde_json::Value::Array(vec![v]);
        }
        v
    }

    fn job() -> NewJob {
        NewJob::build("q", "k.v1").unwrap()
    }

    /// What a backend does on claim: the payload goes out as JSON and comes back through
    /// serde_json's reader, here inside one more object (a row).
    fn reads_back(payload: &serde_json::Value) -> std::result::Result<(), String> {
        let row = serde_json::json!({ "payload": payload });
        let text = serde_json::to_string(&row).map_err(|e| e.to_string())?;
        serde_json::from_str::<serde_json::Value>(&text).map(|_| ()).map_err(|e| e.to_string())
    }

    #[test]
    fn every_accepted_payload_depth_reads_back() {
        for depth in [0, 1, 10, 63, 64, 65, 100, 126, 127, 128, 130, 200, 1000] {
            let payload = nested(depth);
            if job().json(payload.clone()).validate(validate::DEFAULT_MAX_PAYLOAD_BYTES).is_ok() {
                if let Err(e) = reads_back(&payload) {
                    panic!("a payload {depth} levels deep was accepted but does not read back: {e}");
                }
            }
        }
    }

    #[test]
    fn payload_130_levels_deep_is_invalid_input() {
        let err = job().json(nested(130)).validate(validate::DEFAULT_MAX_PAYLOAD_BYTES).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.message().contains("deep"), "{err}");
    }

    #[test]
    fn control_characters_in_text_fields_are_invalid_input() {
        for bad in ["a\nb", "a\rb", "\u{1b}[31mred", "tab\there", "del\u{7f}", "c1\u{85}next", "line\u{2028}sep"] {
            for (what, j) in [
                ("tag", job().tag(bad)),
                ("key", job().idempotency_key(bad)),
                ("created_by", job().created_by(bad)),
                ("concurrency key", job().concurrency_key(bad)),
            ] {
                let r = j.validate(validate::DEFAULT_MAX_PAYLOAD_BYTES);
                assert_eq!(r.map_err(|e| e.kind()).err(), Some(ErrorKind::InvalidInput), "{what} {bad:?}");
            }
        }
        // Non-ASCII text that is not a control character stays accepted.
        let ok = job().tag("Ünïcödé 東京 🚀").idempotency_key("'; DROP TABLE x; --").created_by("RTL שלום");
        assert!(ok.validate(validate::DEFAULT_MAX_PAYLOAD_BYTES).is_ok());
    }

    #[test]
    fn bidi_and_zero_width_in_kinds_are_invalid_input() {
        for bad in [
            "email\u{202E}1v.dnes",
            "a\u{200B}b",
            "a\u{200C}b",
            "a\u{200D}b",
            "a\u{200E}b",
            "a\u{200F}b",
            "a\u{202A}b",
            "a\u{202D}b",
            "a\u{2066}b",
            "a\u{2069}b",
            "\u{FEFF}a",
            "a\u{061C}b",
        ] {
            let err = JobKind::new(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}");
        }
        assert!(JobKind::new("письмо.v1").is_ok());
        assert!(JobKind::new("שלום.v1").is_ok());
        // A kind stored before this rule reads back, and is refused again at enqueue.
        let old = "email\u{202E}1v.dnes";
        let kind: JobKind = serde_json::from_value(serde_json::json!(old)).unwrap();
        assert_eq!(JobKind::from_stored(old).unwrap(), kind);
        let err = NewJob::new(QueueName::new("q").unwrap(), kind).validate(1024).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(JobKind::from_stored("a\nb").is_err());
    }

    #[test]
    fn run_at_outside_the_storable_range_is_invalid_input() {
        let far = chrono::NaiveDate::from_ymd_opt(10_000, 1, 1).unwrap().and_hms_opt(0, 0, 0).unwrap().and_utc();
        let early = Timestamp::MIN_UTC;
        for j in [job().run_at(far), job().run_at(early), job().delay(Duration::MAX)] {
            let r = j.validate(validate::DEFAULT_MAX_PAYLOAD_BYTES);
            assert_eq!(r.map_err(|e| e.kind()).err(), Some(ErrorKind::InvalidInput), "{:?}", j.run_at);
        }
    }
}
