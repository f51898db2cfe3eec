//! `chokaq-core`: the contract every chokaq backend implements.
//!
//! This crate has no database driver in it. It defines the value types (job ids, queue
//! names, kinds, leases), the [`Backend`] trait with the operations of the behaviour contract
//! (claim, start, heartbeat, complete, fail, release, rescue, cancel, queue controls, requeue,
//! purge, stats), the typed outcomes of guarded writes ([`Fenced`]), the single [`Error`]
//! type, the [`RetryPolicy`] and the [`Capabilities`] a backend declares.
//!
//! Backends live in their own crates (`chokaq-postgres`, `chokaq-mssql`); the shared
//! conformance suite (`chokaq-conformance`) drives any of them through this trait plus the
//! [`testing::TestSupport`] trait.

mod backend;
pub mod batch;
mod capabilities;
mod claim;
pub mod deadline;
mod error;
mod job;
mod list;
#[cfg(feature = "sql-listing")]
pub mod listing;
mod maintenance;
pub mod memory;
mod outcome;
mod periodic;
mod process;
mod queue;
mod retry;
mod stats;
#[cfg(feature = "testing")]
pub mod testing;
mod types;
mod unique;
pub mod url_params;
pub mod validate;
mod wake;
pub mod workflow;

pub use backend::{Backend, BackendExt};
pub use batch::{Batch, BatchEvent, BatchId, BatchInfo, BatchStatus, EnqueuedBatch};
pub use capabilities::{Capabilities, TimestampPrecision};
pub use claim::{ClaimMode, ClaimParams, MAX_CLAIM_LIMIT, MAX_ENQUEUE_BATCH};
pub use deadline::ReadDeadline;
pub use error::{Error, ErrorKind, Result};
pub use job::*;
pub use list::{JobPage, JobTable, ListJobsParams};
pub use maintenance::{
    PurgeParams, PurgeTarget, RescueParams, RescueReport, DEFAULT_FETCHED_TIMEOUT, DEFAULT_ZOMBIE_TIMEOUT,
};
pub use outcome::{BatchOutcome, CancelOutcome, FailAction, FailOutcome, Fenced, HeartbeatReport, RequeueOutcome};
pub use periodic::{
    missed_ticks, tick_key, ticks_between, validate_live_schedules, validate_schedule_name, validate_tick, Interval,
    MissedTickPolicy, ScheduleDef, ScheduleRow, TickOutcome, TickRequest, TickSource, DEFAULT_SCHEDULE_GROUP,
    MAX_CATCH_UP_TICKS, MAX_INTERVAL, MAX_LIVE_SCHEDULES, MAX_SCHEDULE_GROUP_LEN, MAX_SCHEDULE_NAME_LEN,
    MAX_SCHEDULE_SPEC_LEN, MAX_TIME_ZONE_LEN, MIN_INTERVAL,
};
pub use process::{
    ThroughputBucket, ThroughputParams, WorkerProcess, WorkerRegistration, MAX_HOST_LEN, MAX_THROUGHPUT_WINDOW,
    MAX_WORKER_QUEUES,
};
pub use queue::{QueueControl, QueueSettings, RateLimit, ZombiePolicy};
pub use retry::RetryPolicy;
pub use stats::{KeyCount, QueueStats, StatsSnapshot, MAX_BUSIEST_KEYS};
pub use types::*;
pub use unique::{
    canonical_json, due_for_period, prunable, prune_from, prune_limit, unique_key, unique_keys, UniqueArgs, UniqueHold,
    UniqueKey, UniqueOpts, UniqueState, UniqueStates, MAX_PRUNE_UNIQUES, MAX_UNIQUE_FIELDS, MAX_UNIQUE_PERIOD,
    UNIQUE_KEY_LEN,
};
pub use wake::{Wake, Wakeups};
pub use workflow::{
    EnqueuedWorkflow, OnFailedDependency, Task, TaskState, TaskStatus, Workflow, WorkflowError, WorkflowId,
    WorkflowPlan, WorkflowStatus,
};

/// Re-exported so backends and users agree on one version.
pub use chrono;
pub use serde_json;
pub use uuid;

/// A point in time, always UTC.
pub type Timestamp = chrono::DateTime<chrono::Utc>;
