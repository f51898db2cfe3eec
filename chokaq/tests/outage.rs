//! Database outage: worker processes draining a queue while their PostgreSQL server restarts
//! and stops (issue 11, item 12).
//!
//! The case starts its own throwaway PostgreSQL cluster (`initdb` and `pg_ctl` from
//! `/usr/lib/postgresql/<version>/bin`, or the directory `CHOKAQ_OUTAGE_PG_BIN` names; run as
//! the `postgres` OS user through `runuser` when the test runs as root) in a temporary
//! directory, on a free port, with `fsync=off`. The cluster is stopped and its directory
//! deleted at the end, also on failure. It enqueues `CHOKAQ_OUTAGE_JOBS` jobs (default 3,000:
//! one in five on a queue capped at `max_workers` 3, 30 ms each; the rest 10 ms on an
//! uncapped queue; two of them, one capped, held until the outages are over) and drains them
//! with three worker processes (re-executions of this test binary, env `CHOKAQ_OUTAGE_CHILD`
//! set) of concurrency 4, heartbeat 250 ms, zombie timeout 5 s, while it
//!
//! 1. restarts the cluster with `pg_ctl restart -m fast` (both queues busy),
//! 2. restarts it with `pg_ctl restart -m immediate`, a crash and recovery (both busy),
//! 3. stops it for 1.5 s, longer than a restart and shorter than the zombie timeout, then starts
//!    it again (the uncapped queue drained: every claim is cap-bound and takes its completions
//!    along in `complete_and_claim`),
//! 4. restarts it with `pg_ctl restart -m fast` again (cap-bound),
//! 5. stops it for 8 s, longer than the zombie timeout, then starts it again (at least 3 s
//!    after the restart before, so a loss in that one is never put down to this one),
//! 6. (issue 24, rule 5: an outage shorter than the zombie timeout re-runs nothing, whatever its
//!    length) 3 s after outage 5, sets every queue's zombie timeout to 120 s through the backend
//!    (`QueueControl::SetZombieTimeout`; the workers check theirs against it only at start, and
//!    a longer one is fine), enqueues a new batch of `CHOKAQ_OUTAGE_JOBS`, and once a fifth of
//!    its uncapped jobs is archived stops the server for 45 s, longer than every internal
//!    budget of the runtime, then starts it again and calls `rescue` at once, before any
//!    worker's heartbeat lands again (the worst order for the leases in hand: it must find
//!    nothing expired). Across it no lease may be lost (the processes' `lease_lost` counters do
//!    not move from its start to the end) and no job may run twice.
//!
//! After each outage it enqueues two jobs on each process's own queue, so every process has
//! work whatever the others hold, and measures how long each takes to claim again.
//! `CHOKAQ_OUTAGE_ROUNDS` (default 1) repeats the six outages, each round with a new batch of
//! `CHOKAQ_OUTAGE_JOBS` (the zombie timeout back to 5 s), for a longer run outside CI.
//!
//! Every handler run appends `S <job> <lease> <attempt> <start>` when it starts and
//! `E <job> <lease> <end> <token fired>` when it ends to its process's own file (one
//! `write(2)` each, times in microseconds of the system clock the processes share), so runs
//! are counted and timed outside the database. The case then checks:
//!
//! * every job is in exactly one table, the archive (raw row counts through `psql`), none
//!   dead-lettered, and it was archived under the newest lease any of its runs held;
//! * no lease runs twice, and two runs of one job overlap in time only when the older one's
//!   lease was lost: to an outage that outlasted the zombie timeout (rescued as a zombie);
//! * every re-run of a job is explained the same way, by the last outage the older run lived
//!   into: across an outage shorter than the zombie timeout in force no lease may be lost,
//!   because finished outcomes are kept and heart-beaten until written (issue 11, item 2) and
//!   every write is retried without limit (issue 24), so no job runs twice;
//! * the cap holds: never more than `max_workers` handlers of the capped queue run at once on
//!   live leases, across the processes; and no database sample shows more Processing rows;
//! * every worker process survives every outage (still running, and exits cleanly at the
//!   end) and claims again within seconds of the server coming back.
//!
//! It prints the outages (how long the server was down, what was in flight, how long each
//! process took to claim again), the re-runs grouped by cause, the cap figures and each
//! process's report and warning/error log counts.
//!
//! Where the PostgreSQL binaries are missing the case is ignored with the reason, unless
//! `CHOKAQ_TEST_REQUIRE` names `postgres`: then it fails.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chokaq::core::{JobTable, ListJobsParams, QueueControl, QueueName, RescueParams, MAX_ENQUEUE_BATCH};
use chokaq::{Backend, BackendExt, CancellationToken, Job, JobContext, JobId, MaintenanceConfig, NewJob, Worker};
use chokaq_postgres::{PgBackend, PgConfig};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

// The case, by part: the cluster, the worker processes, the plan and shared helpers, the two
// scenarios and the analysis of the runs (`tests/outage/*.rs`). This file stays the binary's
// root: scripts/test.sh finds the binary by its name.
#[path = "outage/analysis.rs"]
mod analysis;
#[path = "outage/cluster.rs"]
mod cluster;
#[path = "outage/keyed.rs"]
mod keyed;
#[path = "outage/plan.rs"]
mod plan;
#[path = "outage/procs.rs"]
mod procs;
#[path = "outage/scenario.rs"]
mod scenario;

use analysis::*;
use cluster::*;
use keyed::*;
use plan::*;
use procs::*;
use scenario::*;

const CHILD_ENV: &str = "CHOKAQ_OUTAGE_CHILD";
const SCHEMA: &str = "chokaq_outage";
const FREE_QUEUE: &str = "outage_free";
const CAPPED_QUEUE: &str = "outage_capped";
const CAP: u32 = 3;
/// One job in this many goes to the capped queue.
const CAPPED_EVERY: u32 = 5;
const PROCESSES: usize = 3;
const CONCURRENCY: u32 = 4;
/// Simulated work per handler run.
const FREE_WORK: Duration = Duration::from_millis(10);
const CAPPED_WORK: Duration = Duration::from_millis(30);
/// Jobs whose handler runs from the start until the outages are over (one of them capped):
/// their leases must survive every outage shorter than the zombie timeout on heartbeats alone.
const HOLD_JOBS: u32 = 2;
/// Jobs enqueued on each process's own queue after each outage, so that every process has
/// work to claim, whatever the others hold.
const PROBES: u32 = 2;

const HEARTBEAT: Duration = Duration::from_millis(250);
const ZOMBIE_TIMEOUT: Duration = Duration::from_secs(5);
const FETCHED_TIMEOUT: Duration = Duration::from_secs(5);
const MAINTENANCE_INTERVAL: Duration = Duration::from_millis(500);
/// The short stop: longer than a restart and than the runtime's own retries of a failed
/// write, shorter than the zombie timeout, so no lease may expire.
const SHORT_STOP: Duration = Duration::from_millis(1_500);
/// The long stop: longer than the zombie timeout, so every lease in hand expires.
const LONG_STOP: Duration = Duration::from_secs(8);
/// The very long stop (issue 24, rule 5): longer than every internal budget of the runtime
/// (its retries, back-offs, `cancel_wait`, `shutdown_grace`, the fetched timeout, the first
/// zombie timeout), shorter than the zombie timeout in force for it, so nothing may re-run.
const VERY_LONG_STOP: Duration = Duration::from_secs(45);
/// The zombie timeout of every queue from the very long stop on (set through the backend
/// before it; the workers check their heartbeat against the zombie timeout only at start, and
/// a longer one is always fine).
const LONG_ZOMBIE_TIMEOUT: Duration = Duration::from_secs(120);
/// An outage can expire a lease only if it lasts about the zombie timeout: the last heartbeat
/// is at most one interval old when the server goes, and the first one after it comes back
/// may wait for a reconnection. Outages shorter than `ZOMBIE_TIMEOUT - EXPIRY_SLACK` cannot.
const EXPIRY_SLACK: Duration = Duration::from_millis(2_500);
/// A run that ended this long before an outage began, with the server up, has had its outcome
/// written (the completer flushes within milliseconds): that outage does not explain the loss
/// of its lease.
const OUTCOME_SLACK: Duration = Duration::from_secs(1);
/// The long stop begins at least this long after the outage before it ended, so that a lease
/// lost in that one is never put down to the long stop (see `OUTCOME_SLACK`).
const LONG_STOP_GAP: Duration = Duration::from_secs(3);
/// "Resumes within seconds": the longest accepted gap between the server accepting
/// connections again and a worker process's first successful claim.
const RESUME_LIMIT: Duration = Duration::from_secs(10);

fn required() -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").map(|v| v.split(',').any(|s| s.trim() == "postgres")).unwrap_or(false)
}

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).filter(|n| *n > 0).unwrap_or(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Microseconds since the Unix epoch: the clock every process of the test shares.
fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or_default()
}

fn secs(us: i64) -> f64 {
    us as f64 / 1e6
}

fn us(d: Duration) -> i64 {
    d.as_micros() as i64
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Work {
    n: u32,
    /// Simulated work, milliseconds.
    ms: u64,
    /// Run until the parent creates the release file (or the token fires) instead.
    hold: bool,
}

impl Job for Work {
    const KIND: &'static str = "test.outage.v1";
}

fn main() -> ExitCode {
    if std::env::var_os(CHILD_ENV).is_some() {
        return child_main();
    }
    let mut args = Arguments::from_args();
    // One case at a time: each runs its own cluster and three worker processes, and times
    // what it sees (claims again within seconds of an outage).
    args.test_threads = Some(1);
    let trials = vec![
        trial("outage_restart_fast_immediate_and_long_stop", |bin| runtime().block_on(scenario(bin))),
        trial("outage_keyed_cap_through_restarts", |bin| runtime().block_on(keyed_scenario(bin))),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}

/// A case that needs the PostgreSQL binaries: ignored with the reason where they are missing,
/// unless `CHOKAQ_TEST_REQUIRE` names postgres.
fn trial(name: &'static str, case: fn(PgBin) -> Result<(), String>) -> Trial {
    match PgBin::find() {
        Ok(bin) => Trial::test(name, move || {
            case(bin).map_err(Failed::from)?;
            Ok(())
        }),
        Err(reason) if required() => {
            Trial::test(name, move || Err(format!("{reason}, and CHOKAQ_TEST_REQUIRE names postgres").into()))
        }
        Err(reason) => Trial::ignorable_test(name, move || {
            eprintln!("outage test ignored: {reason}");
            Ok(Completion::ignored_with(reason))
        }),
    }
}
