//! Runtime scenarios shared by the in-memory and the PostgreSQL test files. Each one takes a
//! fresh backend (its own store or schema) and asserts exact outcomes. No sleeps as
//! synchronisation: every wait polls a condition with a deadline.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq::core::{JobLocation, JobStatus, Timestamp};
use chokaq::{
    Backend, CancellationToken, Client, DeadReason, Job, JobBuilder, JobContext, JobError, JobId, MaintenanceConfig,
    RetryPolicy, Worker, WorkerReport,
};
use chokaq_core::testing::TestSupport;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

pub type TestResult = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

pub fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Polls `cond` every 10 ms until it is true or `limit` passes.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut cond: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn spawn_worker(w: Worker) -> (CancellationToken, JoinHandle<chokaq::Result<WorkerReport>>) {
    let token = CancellationToken::new();
    let h = tokio::spawn(w.run(token.clone()));
    (token, h)
}

pub async fn stop(
    token: CancellationToken,
    h: JoinHandle<chokaq::Result<WorkerReport>>,
) -> Result<WorkerReport, String> {
    token.cancel();
    tokio::time::timeout(Duration::from_secs(30), h)
        .await
        .map_err(|_| "worker did not stop within 30 s".to_string())?
        .map_err(err)?
        .map_err(err)
}

/// Maintenance off (the tests that need rescue turn it on themselves).
pub fn no_maintenance() -> MaintenanceConfig {
    MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() }
}

async fn location<B: TestSupport>(b: &B, id: JobId) -> Result<Option<JobLocation>, String> {
    Ok(b.get_job(id).await.map_err(err)?.map(|r| r.location))
}

/// Keeps the deliberate panic of `poison_and_panic` out of the test output (other panics are
/// reported as usual).
fn quiet_intended_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info.payload().downcast_ref::<&str>().copied().unwrap_or_default();
            if !msg.contains("panic on purpose") {
                previous(info);
            }
        }));
    });
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Count {
    pub n: u32,
}

impl Job for Count {
    const KIND: &'static str = "test.count.v1";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flaky {
    pub mode: String,
}

impl Job for Flaky {
    const KIND: &'static str = "test.flaky.v1";
    fn max_attempts() -> i32 {
        3
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Block {
    pub n: u32,
}

impl Job for Block {
    const KIND: &'static str = "test.block.v1";
}

// The scenarios, by what they test (`common/*.rs`); their paths stay `common::<scenario>`.
mod keyed;
mod leases;
mod outcomes;
mod shutdown;

pub use keyed::*;
pub use leases::*;
pub use outcomes::*;
pub use shutdown::*;
