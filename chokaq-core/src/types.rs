use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{validate, Error, Result};

/// A job's id: a UUID v7, so ids sort by creation time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub Uuid);

impl JobId {
    /// A new time-ordered id.
    pub fn new() -> Self {
        JobId(Uuid::now_v7())
    }
}

impl Default for JobId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for JobId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(JobId).map_err(|e| Error::invalid(format!("invalid job id {s:?}: {e}")))
    }
}

/// A worker's identity: a random UUID v4 (122 random bits) per process start, so two
/// processes on one host never share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerId(pub Uuid);

impl WorkerId {
    /// A new random worker id.
    pub fn random() -> Self {
        WorkerId(Uuid::new_v4())
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The fencing token: a number that grows at every claim of any job and is returned with the
/// claimed job. Every guarded write names it; a write whose lease no longer matches the row
/// reports [`Fenced::LeaseLost`](crate::Fenced::LeaseLost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Lease(pub i64);

impl fmt::Display for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A validated queue name (1 to 128 bytes of `A-Z a-z 0-9 _ - . :`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct QueueName(String);

impl QueueName {
    /// Validates and wraps a queue name.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        validate::queue_name(&name)?;
        Ok(QueueName(name))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for QueueName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        QueueName::new(s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for QueueName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        QueueName::new(s)
    }
}

impl TryFrom<&str> for QueueName {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        QueueName::new(s)
    }
}

impl AsRef<str> for QueueName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A validated job kind: the handler key, e.g. `email.send.v1`.
///
/// [`JobKind::new`] applies the enqueue rule ([`validate::job_kind`]: no control, bidi or
/// zero-width characters). A kind read back from storage ([`JobKind::from_stored`], and
/// `Deserialize`) is held to the rule it may have been stored under
/// ([`validate::stored_job_kind`]), so rows written by an earlier version stay readable;
/// [`NewJob::validate`](crate::NewJob::validate) applies the enqueue rule again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct JobKind(String);

impl JobKind {
    /// Validates and wraps a job kind.
    pub fn new(kind: impl Into<String>) -> Result<Self> {
        let kind = kind.into();
        validate::job_kind(&kind)?;
        Ok(JobKind(kind))
    }

    /// Wraps a kind read back from storage: checks only [`validate::stored_job_kind`]. For
    /// backends decoding rows; never for new input.
    pub fn from_stored(kind: impl Into<String>) -> Result<Self> {
        let kind = kind.into();
        validate::stored_job_kind(&kind)?;
        Ok(JobKind(kind))
    }

    /// The kind as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for JobKind {
    /// Reads a kind as stored ([`JobKind::from_stored`]).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobKind::from_stored(s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<&str> for JobKind {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        JobKind::new(s)
    }
}

/// The state of a live job in the hot table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(i16)]
pub enum JobStatus {
    /// Waiting to be claimed (possibly scheduled for later).
    Pending = 0,
    /// Claimed by a worker, not started yet.
    Fetched = 1,
    /// Running on a worker.
    Processing = 2,
}

impl JobStatus {
    /// The number stored in the `status` column.
    pub fn code(self) -> i16 {
        self as i16
    }

    /// The status for a stored number.
    pub fn from_code(code: i16) -> Result<Self> {
        match code {
            0 => Ok(JobStatus::Pending),
            1 => Ok(JobStatus::Fetched),
            2 => Ok(JobStatus::Processing),
            other => Err(Error::new(crate::ErrorKind::Other, format!("unknown job status code {other}"))),
        }
    }
}

/// Why a job is in the dead-letter table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeadReason {
    /// Failed with no attempts left, or with a fatal error.
    Failed,
    /// Cancelled by an operator or by its handler.
    Cancelled,
    /// Timed out and the policy said not to retry.
    TimedOut,
    /// Its worker stopped heart-beating and the queue's policy (or attempts) said not to retry.
    Zombie,
    /// Expired before it ran.
    Expired,
}

impl DeadReason {
    /// The text stored in the `reason` column.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::Failed => "failed",
            DeadReason::Cancelled => "cancelled",
            DeadReason::TimedOut => "timed_out",
            DeadReason::Zombie => "zombie",
            DeadReason::Expired => "expired",
        }
    }

    /// The reason for a stored text.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "failed" => DeadReason::Failed,
            "cancelled" => DeadReason::Cancelled,
            "timed_out" => DeadReason::TimedOut,
            "zombie" => DeadReason::Zombie,
            "expired" => DeadReason::Expired,
            other => return Err(Error::new(crate::ErrorKind::Other, format!("unknown dead-letter reason {other:?}"))),
        })
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
