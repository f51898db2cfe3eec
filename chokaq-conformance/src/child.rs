//! Child worker processes for the multi-process cases. The parent re-executes its own binary
//! with [`ENV_CHILD_ROLE`] set; [`maybe_run_child`] (called first thing by `run_main` and by
//! the runner binary) then does the child's work, reports on stdout, and exits.

use std::io::Write;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use chokaq_core::{ClaimMode, ClaimParams, JobId, Lease, LeaseRef, QueueName, WorkerId};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::ctx::{ChildLauncher, Failure};
use crate::harness::Harness;

/// Env var that turns a process into a child worker: `claim-all`, `hold` or `scheduler`.
pub const ENV_CHILD_ROLE: &str = "CHOKAQ_CONFORMANCE_CHILD";
/// Env var: the queue the child works on.
pub const ENV_CHILD_QUEUE: &str = "CHOKAQ_CONFORMANCE_CHILD_QUEUE";
/// Env var: the claim batch size of a `claim-all` child.
pub const ENV_CHILD_BATCH: &str = "CHOKAQ_CONFORMANCE_CHILD_BATCH";
/// Env var: the schedule name of a `scheduler` child.
pub const ENV_CHILD_SCHEDULE: &str = "CHOKAQ_CONFORMANCE_CHILD_SCHEDULE";
/// Env var: the first tick (Unix seconds) of a `scheduler` child.
pub const ENV_CHILD_FIRST_TICK: &str = "CHOKAQ_CONFORMANCE_CHILD_FIRST_TICK";
/// Env var: how many ticks (one a second) a `scheduler` child enqueues.
pub const ENV_CHILD_TICKS: &str = "CHOKAQ_CONFORMANCE_CHILD_TICKS";

/// If this process is a child worker, runs its role and returns the exit code.
pub fn maybe_run_child<H: Harness + ?Sized>(rt: &tokio::runtime::Runtime, harness: &H) -> Option<ExitCode> {
    let role = std::env::var(ENV_CHILD_ROLE).ok()?;
    let code = match rt.block_on(child_main(harness, &role)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stdout(), "error {e}");
            eprintln!("conformance child ({role}) failed: {e}");
            ExitCode::from(3)
        }
    };
    Some(code)
}

async fn child_main<H: Harness + ?Sized>(harness: &H, role: &str) -> Result<(), Failure> {
    let queue = std::env::var(ENV_CHILD_QUEUE).map_err(|_| Failure(format!("{ENV_CHILD_QUEUE} not set")))?;
    let queue = QueueName::new(queue)?;
    let backend = harness.open().await?;
    let worker = WorkerId::random();
    let mut out = std::io::stdout().lock();
    match role {
        "claim-all" => {
            let batch: u32 = std::env::var(ENV_CHILD_BATCH).ok().and_then(|v| v.parse().ok()).unwrap_or(5);
            let deadline = Instant::now() + Duration::from_secs(120);
            writeln!(out, "ready").ok();
            out.flush().ok();
            loop {
                let req = ClaimParams::new(worker, vec![queue.clone()], batch, ClaimMode::Start);
                let got = backend.claim(&req).await?;
                if got.is_empty() {
                    let s = backend.stats().await?;
                    let pending = s.queue(queue.as_str()).map(|q| q.pending).unwrap_or(0);
                    if pending == 0 {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(Failure("child gave up: deadline passed with jobs pending".into()));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                for j in &got {
                    writeln!(out, "claimed {} {}", j.id, j.lease).ok();
                }
                out.flush().ok();
                let done = backend.complete(worker, &leases).await?;
                for id in &done.lost {
                    writeln!(out, "lost {id}").ok();
                }
            }
            writeln!(out, "done").ok();
            out.flush().ok();
            Ok(())
        }
        "hold" => {
            let req = ClaimParams::new(worker, vec![queue.clone()], 1, ClaimMode::Start);
            let got = backend.claim(&req).await?;
            let Some(j) = got.first() else {
                return Err(Failure("hold child claimed nothing".into()));
            };
            writeln!(out, "held {} {}", j.id, j.lease).ok();
            out.flush().ok();
            drop(out);
            // Keep the job until the parent kills us with SIGKILL (bounded, in case it does not).
            tokio::time::sleep(Duration::from_secs(300)).await;
            Ok(())
        }
        "scheduler" => {
            let env = |k: &str| std::env::var(k).map_err(|_| Failure(format!("{k} not set")));
            let name = env(ENV_CHILD_SCHEDULE)?;
            let num = |k: &str| -> Result<i64, Failure> {
                env(k)?.parse().map_err(|e| Failure(format!("{k} is not a number: {e}")))
            };
            let (first, ticks) = (num(ENV_CHILD_FIRST_TICK)?, num(ENV_CHILD_TICKS)?);
            writeln!(out, "ready").ok();
            out.flush().ok();
            crate::cases::run_scheduler(&*backend, &name, &queue, first, ticks, |t, won| {
                writeln!(out, "tick {t} {}", u8::from(won)).ok();
                out.flush().ok();
            })
            .await?;
            writeln!(out, "done").ok();
            out.flush().ok();
            Ok(())
        }
        other => Err(Failure(format!("unknown child role {other:?}"))),
    }
}

/// One line a child reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildLine {
    Ready,
    Claimed(JobId, Lease),
    Held(JobId, Lease),
    Lost(JobId),
    /// A `scheduler` child's attempt at a tick (Unix seconds) and whether it won it.
    Tick(i64, bool),
    Done,
    Error(String),
}

/// Parses one stdout line of a child.
pub fn parse_line(line: &str) -> Result<ChildLine, Failure> {
    let mut parts = line.split_whitespace();
    let tag = parts.next().unwrap_or("");
    let mut id_lease = |what: &str| -> Result<(JobId, Lease), Failure> {
        let id: JobId = parts.next().ok_or_else(|| Failure(format!("{what} line without id")))?.parse()?;
        let lease: i64 = parts
            .next()
            .ok_or_else(|| Failure(format!("{what} line without lease")))?
            .parse()
            .map_err(|e| Failure(format!("bad lease in {line:?}: {e}")))?;
        Ok((id, Lease(lease)))
    };
    Ok(match tag {
        "ready" => ChildLine::Ready,
        "claimed" => {
            let (id, l) = id_lease("claimed")?;
            ChildLine::Claimed(id, l)
        }
        "held" => {
            let (id, l) = id_lease("held")?;
            ChildLine::Held(id, l)
        }
        "lost" => ChildLine::Lost(line.trim_start_matches("lost").trim().parse()?),
        "tick" => {
            let t: i64 =
                parts.next().and_then(|v| v.parse().ok()).ok_or_else(|| Failure(format!("bad tick line {line:?}")))?;
            let won = match parts.next() {
                Some("1") => true,
                Some("0") => false,
                _ => return Err(Failure(format!("bad tick line {line:?}"))),
            };
            ChildLine::Tick(t, won)
        }
        "done" => ChildLine::Done,
        "error" => ChildLine::Error(line.trim_start_matches("error").trim().to_string()),
        other => return Err(Failure(format!("unexpected child output {other:?} in {line:?}"))),
    })
}

/// A running child worker.
#[derive(Debug)]
pub struct ChildProc {
    pub child: tokio::process::Child,
    pub lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl ChildLauncher {
    /// Starts a child with `role` on `queue`.
    pub fn spawn(&self, role: &str, queue: &QueueName, batch: u32) -> Result<ChildProc, Failure> {
        self.spawn_with(role, queue, batch, &[])
    }

    /// [`ChildLauncher::spawn`] with more environment variables.
    pub fn spawn_with(
        &self,
        role: &str,
        queue: &QueueName,
        batch: u32,
        extra: &[(&str, String)],
    ) -> Result<ChildProc, Failure> {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.envs(extra.iter().map(|(k, v)| (*k, v.as_str())));
        cmd.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(ENV_CHILD_ROLE, role)
            .env(ENV_CHILD_QUEUE, queue.as_str())
            .env(ENV_CHILD_BATCH, batch.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| Failure(format!("could not start child process: {e}")))?;
        let stdout = child.stdout.take().ok_or("child has no stdout")?;
        Ok(ChildProc { child, lines: BufReader::new(stdout).lines() })
    }
}

impl ChildProc {
    /// The next parsed line, or `None` at end of output.
    pub async fn next(&mut self) -> Result<Option<ChildLine>, Failure> {
        match self.lines.next_line().await.map_err(|e| Failure(format!("reading child output: {e}")))? {
            Some(l) => Ok(Some(parse_line(&l)?)),
            None => Ok(None),
        }
    }
}
