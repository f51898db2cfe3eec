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
mod capabilities;
mod error;
mod job;
pub mod memory;
mod retry;
pub mod testing;
mod types;
pub mod validate;

pub use backend::*;
pub use capabilities::{Capabilities, TimestampPrecision};
pub use error::{Error, ErrorKind, Result};
pub use job::*;
pub use retry::RetryPolicy;
pub use types::*;

/// Re-exported so backends and users agree on one version.
pub use chrono;
pub use serde_json;
pub use uuid;

/// A point in time, always UTC.
pub type Timestamp = chrono::DateTime<chrono::Utc>;
