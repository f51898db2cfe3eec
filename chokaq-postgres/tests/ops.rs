//! Every operation and every guard of the PostgreSQL backend, against the real server.

mod common;

// The cases, by what they test (`tests/ops/*.rs`).
#[path = "ops/admin.rs"]
mod admin;
#[path = "ops/claims.rs"]
mod claims;
#[path = "ops/errors.rs"]
mod errors;
#[path = "ops/guards.rs"]
mod guards;

use std::time::Duration;

use chokaq_core::testing::{JobPatch, TestSupport};
use chokaq_core::{
    Backend, BackendExt, CancelOutcome, ClaimMode, ClaimParams, DeadReason, ErrorKind, FailAction, FailOutcome, Fenced,
    JobId, JobLocation, JobStatus, LeaseRef, QueueControl, QueueName, RequeueOutcome, WorkerId, ZombiePolicy,
};
use common::{claim, claim_one, job, q};
use rstest::rstest;
use serde_json::json;
use sqlx::Connection;

fn ago(secs: i64) -> chokaq_core::Timestamp {
    chokaq_core::chrono::Utc::now() - chokaq_core::chrono::Duration::seconds(secs)
}

fn chrono_secs(s: i64) -> chokaq_core::chrono::Duration {
    chokaq_core::chrono::Duration::seconds(s)
}
