//! Unique jobs (issue 42): at most one job per *unique key* among the jobs in the states that
//! count. The client computes the key ([`unique_key`]); the backend only enforces it, through
//! a unique index on the key (the `uniques` table of every SQL schema, a map in the memory
//! backend). The rules are in `docs/unique.md`.
//!
//! The key is the SHA-256 (hex) of a canonical JSON array: a version tag, the job's kind, its
//! queue (when [`UniqueOpts::by_queue`]), its arguments (when [`UniqueOpts::by_args`]: the
//! canonical JSON of the payload, object keys sorted at every depth, or only the named
//! top-level fields), its period bucket (when [`UniqueOpts::by_period`]:
//! `floor(unix seconds of the due time / period)`) and its state set: jobs of two state sets
//! never share a key, so the holder of a key always counts by the same states as the enqueuer.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{validate, DeadReason, Error, JobId, JobLocation, JobRecord, JobStatus, NewJob, Result, RunAt, Timestamp};

/// The longest period a unique job may name (a leap year).
pub const MAX_UNIQUE_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);
/// At most this many named fields ([`UniqueOpts::by_fields`]).
pub const MAX_UNIQUE_FIELDS: usize = 32;
/// The most key rows one [`crate::Backend::prune_uniques`] call deletes.
pub const MAX_PRUNE_UNIQUES: u32 = 10_000;
/// Length of a unique key: 64 lowercase hex digits (SHA-256).
pub const UNIQUE_KEY_LEN: usize = 64;

/// Where a job stands, as uniqueness sees it: the five live states and the three finished
/// ones. A Pending or Scheduled job whose attempt is above 0 (it ran and failed, and waits for
/// its retry) is [`UniqueState::Retrying`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UniqueState {
    /// Waiting, due now.
    Pending,
    /// Waiting, due later (never run).
    Scheduled,
    /// Claimed, not started.
    Fetched,
    /// Running.
    Processing,
    /// Waiting for a retry (Pending or Scheduled after a failed attempt).
    Retrying,
    /// In the archive.
    Succeeded,
    /// Dead-lettered as `cancelled`.
    Cancelled,
    /// Dead-lettered for any other reason (failed, timed out, zombie, expired).
    Discarded,
}

impl UniqueState {
    /// Every state, in bit order.
    pub const ALL: [UniqueState; 8] = [
        UniqueState::Pending,
        UniqueState::Scheduled,
        UniqueState::Fetched,
        UniqueState::Processing,
        UniqueState::Retrying,
        UniqueState::Succeeded,
        UniqueState::Cancelled,
        UniqueState::Discarded,
    ];

    /// Its bit in a [`UniqueStates`] set.
    pub fn bit(self) -> UniqueStates {
        UniqueStates(1 << (self as u16))
    }

    /// Its name, as `docs/unique.md` and `chokaq jobs show` write it.
    pub fn as_str(self) -> &'static str {
        match self {
            UniqueState::Pending => "pending",
            UniqueState::Scheduled => "scheduled",
            UniqueState::Fetched => "fetched",
            UniqueState::Processing => "processing",
            UniqueState::Retrying => "retrying",
            UniqueState::Succeeded => "succeeded",
            UniqueState::Cancelled => "cancelled",
            UniqueState::Discarded => "discarded",
        }
    }

    /// The state of a hot row from its stored status code (0 Pending, 1 Fetched,
    /// 2 Processing, 3 Scheduled, 4 Blocked: a Pending job of a saturated key), its attempt,
    /// and whether it is due later than now.
    pub fn of_hot(status: i16, attempt: i32, due_later: bool) -> Result<Self> {
        Ok(match status {
            1 => UniqueState::Fetched,
            2 => UniqueState::Processing,
            0 | 3 | 4 if attempt > 0 => UniqueState::Retrying,
            0 | 3 | 4 if due_later => UniqueState::Scheduled,
            0 | 3 | 4 => UniqueState::Pending,
            other => return Err(Error::new(crate::ErrorKind::Other, format!("unknown job status code {other}"))),
        })
    }

    /// The state of a dead letter with this reason.
    pub fn of_dead(reason: DeadReason) -> Self {
        match reason {
            DeadReason::Cancelled => UniqueState::Cancelled,
            _ => UniqueState::Discarded,
        }
    }

    /// The state of a job record at `now`.
    pub fn of_record(r: &JobRecord, now: Timestamp) -> Self {
        match r.location {
            JobLocation::Hot(JobStatus::Fetched) => UniqueState::Fetched,
            JobLocation::Hot(JobStatus::Processing) => UniqueState::Processing,
            JobLocation::Hot(JobStatus::Pending) if r.attempt > 0 => UniqueState::Retrying,
            JobLocation::Hot(JobStatus::Pending) if r.scheduled_at.is_some_and(|t| t > now) => UniqueState::Scheduled,
            JobLocation::Hot(JobStatus::Pending) => UniqueState::Pending,
            JobLocation::Archived => UniqueState::Succeeded,
            JobLocation::Dead(reason) => UniqueState::of_dead(reason),
        }
    }
}

impl fmt::Display for UniqueState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`UniqueState`]s: the states in which a job holding a key makes a new job with
/// that key a duplicate. Stored as a small bitmask (bit `n` = the `n`-th state of
/// [`UniqueState::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UniqueStates(u16);

impl UniqueStates {
    /// Whether this set counts exactly the live states ([`UniqueStates::DEFAULT`]): "one live
    /// job per key", which a backend may enforce with a unique index over its hot table alone.
    pub fn is_live_only(self) -> bool {
        self == UniqueStates::DEFAULT
    }

    /// The default: every live state (Pending, Scheduled, Fetched, Processing, Retrying);
    /// a job that succeeded, was cancelled or discarded frees its key.
    pub const DEFAULT: UniqueStates = UniqueStates(0b0001_1111);
    /// Waiting only (Pending, Scheduled, Retrying): a running job does not block a new one.
    pub const WAITING: UniqueStates = UniqueStates(0b0001_0011);
    /// Every state, finished ones included.
    pub const ALL: UniqueStates = UniqueStates(0b1111_1111);

    /// The set of these states.
    pub fn of(states: &[UniqueState]) -> Self {
        UniqueStates(states.iter().fold(0, |acc, s| acc | s.bit().0))
    }

    /// This set and `state`.
    #[must_use]
    pub fn with(self, state: UniqueState) -> Self {
        UniqueStates(self.0 | state.bit().0)
    }

    /// This set without `state`.
    #[must_use]
    pub fn without(self, state: UniqueState) -> Self {
        UniqueStates(self.0 & !state.bit().0)
    }

    /// Whether `state` counts.
    pub fn contains(self, state: UniqueState) -> bool {
        self.0 & state.bit().0 != 0
    }

    /// Whether a finished state (succeeded, cancelled, discarded) counts: the key then
    /// outlives the job's stay in the hot table.
    pub fn counts_finished(self) -> bool {
        self.0 & 0b1110_0000 != 0
    }

    /// The stored number.
    pub fn bits(self) -> i32 {
        i32::from(self.0)
    }

    /// The set for a stored number (any bit outside [`UniqueStates::ALL`] is an error).
    pub fn from_bits(bits: i32) -> Result<Self> {
        match u16::try_from(bits) {
            Ok(b) if b & !Self::ALL.0 == 0 => Ok(UniqueStates(b)),
            _ => Err(Error::invalid(format!("unique states {bits} has bits outside 0..=255"))),
        }
    }

    /// The states in the set, in bit order.
    pub fn states(self) -> Vec<UniqueState> {
        UniqueState::ALL.into_iter().filter(|s| self.contains(*s)).collect()
    }
}

impl Default for UniqueStates {
    fn default() -> Self {
        UniqueStates::DEFAULT
    }
}

impl fmt::Display for UniqueStates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.states().into_iter().map(UniqueState::as_str).collect();
        f.write_str(&names.join(","))
    }
}

/// Which part of the payload makes two jobs the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum UniqueArgs {
    /// The payload takes no part: the kind (and queue, period) alone.
    #[default]
    Ignored,
    /// The whole payload, as canonical JSON (object keys sorted at every depth).
    All,
    /// Only these top-level fields of an object payload (a missing field counts as `null`).
    Fields(Vec<String>),
}

/// How a job is unique: by arguments, period, queue, and the states that count. The default
/// (`UniqueOpts::new()`) is unique by kind alone, among the live states.
///
/// ```
/// use std::time::Duration;
/// use chokaq_core::{UniqueOpts, UniqueStates};
/// // At most one refresh of an account per hour, whatever state it is in:
/// let hourly = UniqueOpts::new().by_fields(["account"]).by_period(Duration::from_secs(3600))
///     .states(UniqueStates::ALL);
/// // Not while one is waiting (a running one does not block the next):
/// let waiting = UniqueOpts::new().by_args().states(UniqueStates::WAITING);
/// # let _ = (hourly, waiting);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct UniqueOpts {
    /// Which part of the payload takes part in the key.
    #[serde(default, skip_serializing_if = "args_ignored")]
    pub args: UniqueArgs,
    /// The period, in whole seconds: jobs whose due times fall in different buckets
    /// (`floor(unix seconds / period)`) are different.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_secs: Option<u64>,
    /// Whether the queue takes part (default: no, the same job on two queues is one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_queue: bool,
    /// The states in which the holder of the key makes a new job a duplicate.
    #[serde(default, skip_serializing_if = "states_default")]
    pub states: UniqueStates,
}

// The stored settings leave out what is the default (a row of the bench's unique enqueue
// stored 62 bytes of settings, now 14: `{"args":"all"}`); reading fills it back in.
fn args_ignored(a: &UniqueArgs) -> bool {
    *a == UniqueArgs::Ignored
}

fn states_default(s: &UniqueStates) -> bool {
    s.is_live_only()
}

impl UniqueOpts {
    /// Unique by kind alone, among the live states ([`UniqueStates::DEFAULT`]).
    pub fn new() -> Self {
        UniqueOpts::default()
    }

    /// The whole payload takes part (canonical JSON: object keys in sorted order).
    pub fn by_args(mut self) -> Self {
        self.args = UniqueArgs::All;
        self
    }

    /// Only these top-level fields of the payload take part.
    pub fn by_fields<I, S>(mut self, fields: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = UniqueArgs::Fields(fields.into_iter().map(Into::into).collect());
        self
    }

    /// Jobs due in different periods of this length are different (whole seconds).
    pub fn by_period(mut self, period: Duration) -> Self {
        // Sub-second or fractional periods are refused by `validate`, not rounded.
        self.period_secs = Some(if period.subsec_nanos() == 0 { period.as_secs() } else { 0 });
        self
    }

    /// The queue takes part: the same job on two queues is two jobs.
    pub fn by_queue(mut self) -> Self {
        self.by_queue = true;
        self
    }

    /// The states that count.
    pub fn states(mut self, states: UniqueStates) -> Self {
        self.states = states;
        self
    }

    /// The period, if any.
    pub fn period(&self) -> Option<Duration> {
        self.period_secs.map(Duration::from_secs)
    }

    /// Checks the settings: a period of whole seconds from 1 s to [`MAX_UNIQUE_PERIOD`],
    /// 1 to [`MAX_UNIQUE_FIELDS`] distinct field names (text rules of
    /// [`validate::text_field`], at most 255 bytes each), at least one state.
    pub fn validate(&self) -> Result<()> {
        if let Some(p) = self.period_secs {
            if p == 0 || p > MAX_UNIQUE_PERIOD.as_secs() {
                return Err(Error::invalid(format!(
                    "unique period must be whole seconds from 1 to {} (got {p} s, or a fraction)",
                    MAX_UNIQUE_PERIOD.as_secs()
                )));
            }
        }
        if let UniqueArgs::Fields(fields) = &self.args {
            if fields.is_empty() || fields.len() > MAX_UNIQUE_FIELDS {
                return Err(Error::invalid(format!(
                    "unique fields: name 1 to {MAX_UNIQUE_FIELDS} fields, got {}",
                    fields.len()
                )));
            }
            for (i, f) in fields.iter().enumerate() {
                validate::text_field("unique field", f, 255)?;
                if fields[..i].contains(f) {
                    return Err(Error::invalid(format!("unique field {f:?} named twice")));
                }
            }
        }
        if self.states.0 == 0 {
            return Err(Error::invalid("unique states: name at least one state"));
        }
        Ok(())
    }

    /// The settings as stored beside the key (compact JSON).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Settings read back from storage.
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::new(crate::ErrorKind::Other, format!("unique settings: {e}")))
    }
}

impl fmt::Display for UniqueOpts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.args {
            UniqueArgs::Ignored => f.write_str("args: no")?,
            UniqueArgs::All => f.write_str("args: all")?,
            UniqueArgs::Fields(fields) => write!(f, "args: {}", fields.join(","))?,
        }
        match self.period_secs {
            Some(p) => write!(f, "; period: {p}s")?,
            None => f.write_str("; period: no")?,
        }
        write!(f, "; queue: {}; states: {}", if self.by_queue { "yes" } else { "no" }, self.states)
    }
}

/// The unique key of a job about to be inserted, with what the backend stores beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueKey {
    /// 64 lowercase hex digits.
    pub key: String,
    /// The states that count for this enqueue.
    pub states: UniqueStates,
    /// The end of the period bucket (`None` without a period): after it, no job due now can
    /// compute this key again, and maintenance may delete the key row.
    pub expires_at: Option<Timestamp>,
    /// The settings, as JSON text ([`UniqueOpts::to_json`]).
    pub settings: String,
}

/// The key a job holds, as [`crate::Backend::unique_of`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UniqueHold {
    /// 64 lowercase hex digits.
    pub key: String,
    /// The job holding it.
    pub job_id: JobId,
    /// The settings of the job that took the key.
    pub opts: UniqueOpts,
    /// The end of the period bucket, if the settings have a period.
    pub expires_at: Option<Timestamp>,
}

/// Canonical JSON: object keys sorted (by their UTF-8 bytes) at every depth, no whitespace;
/// strings and numbers as serde_json writes them (so `1` and `1.0` differ).
pub fn canonical_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// When `job` is due, for its period bucket: its `RunAt::At`, `now` plus its delay, or `now`.
pub fn due_for_period(job: &NewJob, now: Timestamp) -> Timestamp {
    match job.run_at {
        RunAt::Now => now,
        RunAt::At(t) => t,
        RunAt::After(d) => chrono::Duration::from_std(d).ok().and_then(|d| now.checked_add_signed(d)).unwrap_or(now),
    }
}

/// The unique key of `job` (`None` when it has no [`NewJob::unique`] settings), with `now` the
/// enqueuer's clock (the period bucket of a job due now or after a delay is taken from it).
/// Checks the settings ([`UniqueOpts::validate`]) and, for named fields, that the payload is
/// a JSON object.
pub fn unique_key(job: &NewJob, now: Timestamp) -> Result<Option<UniqueKey>> {
    let Some(opts) = &job.unique else { return Ok(None) };
    opts.validate()?;
    let args = match &opts.args {
        UniqueArgs::Ignored => serde_json::Value::Null,
        UniqueArgs::All => serde_json::Value::String(canonical_json(&job.payload)),
        UniqueArgs::Fields(fields) => {
            let serde_json::Value::Object(map) = &job.payload else {
                return Err(Error::invalid("unique by fields needs a JSON object payload"));
            };
            let picked: serde_json::Map<String, serde_json::Value> =
                fields.iter().map(|f| (f.clone(), map.get(f).cloned().unwrap_or(serde_json::Value::Null))).collect();
            serde_json::Value::String(canonical_json(&serde_json::Value::Object(picked)))
        }
    };
    let (bucket, expires_at) = match opts.period_secs {
        None => (serde_json::Value::Null, None),
        Some(p) => {
            let p = i64::try_from(p).map_err(|_| Error::invalid("unique period out of range"))?;
            let b = due_for_period(job, now).timestamp().div_euclid(p);
            let end = b.checked_add(1).and_then(|n| n.checked_mul(p)).and_then(|s| Timestamp::from_timestamp(s, 0));
            (serde_json::Value::from(b), end)
        }
    };
    let queue = if opts.by_queue { serde_json::Value::from(job.queue.as_str()) } else { serde_json::Value::Null };
    let preimage = serde_json::json!(["chokaq.unique.v1", job.kind.as_str(), queue, args, bucket, opts.states.bits()]);
    let digest = Sha256::digest(canonical_json(&preimage).as_bytes());
    let key = hex(&digest);
    Ok(Some(UniqueKey { key, states: opts.states, expires_at, settings: opts.to_json() }))
}

/// `bytes` as lowercase hexadecimal digits.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// A random point of the key space (64 hex digits, as a key): where a
/// [`crate::Backend::prune_uniques`] pass starts, so passes spread over the keys.
pub fn prune_from() -> String {
    hex(&rand::random::<[u8; 32]>())
}

/// Checks a [`crate::Backend::prune_uniques`] limit: 1 to [`MAX_PRUNE_UNIQUES`].
pub fn prune_limit(limit: u32) -> Result<()> {
    if limit == 0 || limit > MAX_PRUNE_UNIQUES {
        return Err(Error::invalid(format!("prune_uniques limit must be 1 to {MAX_PRUNE_UNIQUES}, got {limit}")));
    }
    Ok(())
}

/// Whether a key row can be pruned: its job is not live, and either its states count no
/// finished state, or the job is gone from every table, or the period ended before `now`.
pub fn prunable(
    states: UniqueStates,
    job_live: bool,
    job_finished: bool,
    expires_at: Option<Timestamp>,
    now: Timestamp,
) -> bool {
    !job_live && (!states.counts_finished() || !job_finished || expires_at.is_some_and(|e| e <= now))
}

/// The unique keys of a batch (validated; `None` for jobs without settings), with `now` the
/// enqueuer's clock.
pub fn unique_keys(jobs: &[NewJob], now: Timestamp) -> Result<Vec<Option<UniqueKey>>> {
    jobs.iter().map(|j| unique_key(j, now)).collect()
}

#[cfg(test)]
#[path = "unique/tests.rs"]
mod tests;
