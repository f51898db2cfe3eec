//! What a case gets ([`Ctx`]), how it fails ([`Failure`]) and the helpers cases share.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq_core::testing::{JobPatch, Presence};
use chokaq_core::{
    BackendExt, Capabilities, ClaimMode, ClaimParams, ClaimedJob, JobId, JobKind, JobLocation, JobRecord, NewJob,
    QueueName, QueueStats, RescueParams, RescueReport, WorkerId,
};

use crate::harness::TestBackend;

/// Why a case failed: a plain message naming what was expected and what was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<chokaq_core::Error> for Failure {
    fn from(e: chokaq_core::Error) -> Self {
        let mut msg = format!("backend error: {e}");
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            msg.push_str(&format!(" (caused by: {s})"));
            src = s.source();
        }
        Failure(msg)
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Self {
        Failure(s.to_string())
    }
}

/// The result of one case.
pub type CaseResult = Result<(), Failure>;

/// Fails the case with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !($cond) {
            return Err($crate::Failure(format!("{} [{}:{}]", format!($($arg)+), file!(), line!())));
        }
    };
}

/// Fails the case unless `left == right`, showing both.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($arg:tt)+) => {
        match (&$left, &$right) {
            (l, r) => {
                if !(*l == *r) {
                    return Err($crate::Failure(format!(
                        "{}: expected {:?}, got {:?} [{}:{}]",
                        format!($($arg)+), r, l, file!(), line!()
                    )));
                }
            }
        }
    };
}

/// Stress settings, read from the environment (defaults keep the suite under a minute on two
/// cores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StressSettings {
    /// `CHOKAQ_STRESS_CLAIMERS`: concurrent claimer tasks in one process (default 8).
    pub claimers: usize,
    /// `CHOKAQ_STRESS_PROCESSES`: child OS processes (default 4).
    pub processes: usize,
    /// `CHOKAQ_STRESS_JOBS`: jobs per stress case (default 400).
    pub jobs: usize,
    /// `CHOKAQ_STRESS_SECONDS`: how long the timed stress cases run (default 2).
    pub seconds: u64,
    /// `CHOKAQ_STRESS_ROUNDS`: rounds of the cap race per cap (default 3).
    pub rounds: usize,
}

impl Default for StressSettings {
    fn default() -> Self {
        StressSettings { claimers: 8, processes: 4, jobs: 400, seconds: 2, rounds: 3 }
    }
}

impl StressSettings {
    /// The defaults, overridden by the `CHOKAQ_STRESS_*` environment variables.
    pub fn from_env() -> Self {
        fn get(name: &str, default: usize) -> usize {
            std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).filter(|&n: &usize| n > 0).unwrap_or(default)
        }
        let d = StressSettings::default();
        StressSettings {
            claimers: get("CHOKAQ_STRESS_CLAIMERS", d.claimers),
            processes: get("CHOKAQ_STRESS_PROCESSES", d.processes),
            jobs: get("CHOKAQ_STRESS_JOBS", d.jobs),
            seconds: get("CHOKAQ_STRESS_SECONDS", d.seconds as usize) as u64,
            rounds: get("CHOKAQ_STRESS_ROUNDS", d.rounds),
        }
    }
}

/// How to start a child OS process that reopens the backend under test.
#[derive(Clone)]
pub struct ChildLauncher {
    pub(crate) exe: PathBuf,
    pub(crate) env: Vec<(String, String)>,
}

impl fmt::Debug for ChildLauncher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The env may hold a connection string: show the names only.
        let names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ChildLauncher").field("exe", &self.exe).field("env", &names).finish()
    }
}

impl ChildLauncher {
    /// Re-executes the current binary with `env` added (see [`crate::Harness::child_env`]).
    pub fn current_exe(env: Vec<(String, String)>) -> std::io::Result<Self> {
        Ok(ChildLauncher { exe: std::env::current_exe()?, env })
    }
}

/// Everything a case gets.
#[derive(Clone)]
pub struct Ctx {
    /// The backend under test.
    pub backend: Arc<dyn TestBackend>,
    /// Its capabilities.
    pub caps: Capabilities,
    /// The running case's name.
    pub case: &'static str,
    /// Stress settings.
    pub stress: StressSettings,
    pub(crate) children: Option<ChildLauncher>,
}

impl fmt::Debug for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx")
            .field("backend", &self.backend.name())
            .field("case", &self.case)
            .field("stress", &self.stress)
            .finish_non_exhaustive()
    }
}

/// Default deadline of [`Ctx::poll`].
pub const POLL_DEADLINE: Duration = Duration::from_secs(20);

/// How long [`within`] waits for one backend call before it fails the case.
pub const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// Awaits `fut` for at most [`CALL_DEADLINE`]; a call that hangs fails with `what` named, so a
/// case's own deadline can fire (a plain `.await` on a hung call never returns).
pub async fn within<T, F>(what: &str, fut: F) -> Result<T, Failure>
where
    F: Future<Output = Result<T, Failure>>,
{
    match tokio::time::timeout(CALL_DEADLINE, fut).await {
        Ok(r) => r,
        Err(_) => Err(Failure(format!("no answer within {CALL_DEADLINE:?} to {what}"))),
    }
}

impl Ctx {
    /// A queue name unique to this case and run: `q-<case>-<random>`.
    pub fn queue(&self) -> QueueName {
        self.queue_named("")
    }

    /// A unique queue name with an extra label.
    pub fn queue_named(&self, label: &str) -> QueueName {
        let case: String = self.case.chars().take(60).collect();
        let name = if label.is_empty() {
            format!("q-{case}-{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
        } else {
            format!("q-{case}-{label}-{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
        };
        QueueName::new(name).expect("generated queue names are valid")
    }

    /// A job of kind `test.job.v1` in `queue`.
    pub fn job(&self, queue: &QueueName) -> NewJob {
        NewJob::new(queue.clone(), JobKind::new("test.job.v1").expect("valid kind"))
    }

    /// Enqueues `n` default jobs into `queue` in one call; returns their ids in order.
    pub async fn enqueue_n(&self, queue: &QueueName, n: usize) -> Result<Vec<JobId>, Failure> {
        let mut ids = Vec::with_capacity(n);
        let jobs: Vec<NewJob> = (0..n).map(|i| self.job(queue).json(serde_json::json!({ "i": i }))).collect();
        for chunk in jobs.chunks(chokaq_core::MAX_ENQUEUE_BATCH) {
            let out = self.backend.enqueue_many(chunk.to_vec()).await?;
            ensure_eq!(out.len(), chunk.len(), "enqueue_many result count");
            ids.extend(out.into_iter().map(|e| e.id));
        }
        Ok(ids)
    }

    /// Enqueues one job; returns its id.
    pub async fn enqueue(&self, job: NewJob) -> Result<JobId, Failure> {
        Ok(self.backend.enqueue(job).await?.id)
    }

    /// One claim by `worker` from `queue`.
    pub async fn claim(
        &self,
        worker: WorkerId,
        queue: &QueueName,
        limit: u32,
        mode: ClaimMode,
    ) -> Result<Vec<ClaimedJob>, Failure> {
        Ok(self.backend.claim(&ClaimParams::new(worker, vec![queue.clone()], limit, mode)).await?)
    }

    /// Claims exactly one job in start mode; fails the case if none came back.
    pub async fn claim_one_started(&self, worker: WorkerId, queue: &QueueName) -> Result<ClaimedJob, Failure> {
        let mut got = self.claim(worker, queue, 1, ClaimMode::Start).await?;
        ensure_eq!(got.len(), 1, "claim(limit 1, start) from {queue}");
        Ok(got.remove(0))
    }

    /// The job record; fails the case if the id is unknown.
    pub async fn record(&self, id: JobId) -> Result<JobRecord, Failure> {
        match self.backend.get_job(id).await? {
            Some(r) => Ok(r),
            None => Err(Failure(format!("get_job({id}) returned None"))),
        }
    }

    /// Presence of one id.
    pub async fn presence(&self, id: JobId) -> Result<Presence, Failure> {
        Ok(self.backend.presence(id).await?)
    }

    /// One queue's stats (all zeros when the snapshot does not list it).
    pub async fn queue_stats(&self, queue: &QueueName) -> Result<QueueStats, Failure> {
        let s = self.backend.stats().await?;
        Ok(s.queue(queue.as_str())
            .cloned()
            .unwrap_or_else(|| QueueStats { queue: queue.to_string(), ..Default::default() }))
    }

    /// Forces a hot job's fields; fails if the row is not hot.
    pub async fn force(&self, id: JobId, patch: JobPatch) -> Result<(), Failure> {
        let ok = self.backend.force(id, &patch).await?;
        ensure!(ok, "force({id}) found no hot row");
        Ok(())
    }

    /// Puts a job's heartbeat (when it has one) and updated_at `ago` into the past (database
    /// clock).
    pub async fn age(&self, id: JobId, ago: Duration) -> Result<(), Failure> {
        let now = self.backend.db_now().await?;
        let past = now - chrono::Duration::from_std(ago).expect("small duration");
        // A reserved Fetched job has no heartbeat (a held one has): keep it so.
        let heartbeat_at = self.record(id).await?.heartbeat_at.map(|_| Some(past));
        self.force(id, JobPatch { heartbeat_at, updated_at: Some(past), ..Default::default() }).await
    }

    /// Runs rescue (with [`rescue_params`]) until `cond` holds, within the poll deadline.
    /// Cases run in parallel and share one store, so another case's rescue may do the work
    /// (or hold the maintenance lock): the condition is checked on the job's state, never on
    /// one call's report. Returns the reports of the calls that ran.
    pub async fn rescue_until<F, Fut>(&self, what: &str, mut cond: F) -> Result<Vec<RescueReport>, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, Failure>>,
    {
        let deadline = Instant::now() + POLL_DEADLINE;
        let mut reports = Vec::new();
        loop {
            let r = self.backend.rescue(&rescue_params()).await?;
            if r.ran {
                reports.push(r);
            }
            if cond().await? {
                return Ok(reports);
            }
            if Instant::now() > deadline {
                return Err(Failure(format!("rescue did not reach {what} within {POLL_DEADLINE:?}: {reports:?}")));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Runs rescue until job `id` is in `location`.
    pub async fn rescue_until_at(&self, id: JobId, location: JobLocation) -> Result<Vec<RescueReport>, Failure> {
        self.rescue_until(&format!("job {id} at {location:?}"), || async move {
            Ok(self.record(id).await?.location == location)
        })
        .await
    }

    /// Polls `cond` until it returns true, failing after [`POLL_DEADLINE`].
    pub async fn poll<F, Fut>(&self, what: &str, mut cond: F) -> CaseResult
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, Failure>>,
    {
        let deadline = Instant::now() + POLL_DEADLINE;
        loop {
            if cond().await? {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Failure(format!("timed out after {POLL_DEADLINE:?} waiting for {what}")));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The launcher for child processes, when this run has one and the backend is
    /// multi-process.
    pub fn children(&self) -> Option<&ChildLauncher> {
        self.children.as_ref()
    }
}

/// The rescue parameters of the cases: no purges. The timeouts are each queue's settings
/// (else the contract's defaults, 60 s and 300 s): only jobs a case aged on purpose are old
/// enough.
pub fn rescue_params() -> RescueParams {
    RescueParams { limit: 1000, purge: Vec::new() }
}

/// How far into the past [`Ctx::age`] pushes a job in rescue cases (beyond
/// [`rescue_params`]'s timeouts).
pub const AGED: Duration = Duration::from_secs(3600);
