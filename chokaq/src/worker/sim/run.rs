//! One simulation run: the plan (queues, jobs, processes, faults), the real worker runtime
//! started for each process, the handler every job runs, and the world's own actors (the
//! rescuer, the operator, the crasher and the supervisor that restarts dead processes).

use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    Backend, BackendExt, NewJob, QueueControl, QueueName, RateLimit, RescueParams, RetryPolicy, WorkerId,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::check::{JobInfo, Margins};
use super::faults::SimBackend;
use super::flow::{check_batch_end, check_flow_begin, enqueue_batch, enqueue_flow, BatchPlan, FlowPlan};
use super::world::{job_no, Rates, Window, World};
use crate::job::{JobContext, JobError};
use crate::worker::{Broken, MaintenanceConfig, Worker, BROKEN};

/// The heartbeat interval of every simulated worker.
pub(super) const HEARTBEAT: Duration = Duration::from_millis(200);
/// Every queue's zombie timeout.
pub(super) const ZOMBIE: Duration = Duration::from_millis(1500);
/// Every queue's fetched timeout.
pub(super) const FETCHED: Duration = Duration::from_millis(1000);
/// How long a stopped handler is given to return.
pub(super) const CANCEL_WAIT: Duration = Duration::from_millis(100);

/// How a job's handler ends.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub(super) enum Out {
    Ok,
    Retry,
    Fatal,
    Panic,
}

/// One job: what its handler does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Spec {
    pub(super) ms: u64,
    pub(super) out: Out,
    /// Returns as soon as it is stopped (else runs on until dropped).
    pub(super) coop: bool,
    /// Kills its process this many ms after it begins.
    pub(super) poison: Option<u64>,
}

#[derive(Debug, Clone)]
pub(super) struct JobPlan {
    pub(super) at: Duration,
    pub(super) queue: String,
    pub(super) key: Option<String>,
    pub(super) max_attempts: i32,
    pub(super) spec: Spec,
}

#[derive(Debug, Clone)]
pub(super) struct QueuePlan {
    pub(super) name: String,
    pub(super) cap: Option<u32>,
    pub(super) key_cap: Option<u32>,
    pub(super) rate: Option<RateLimit>,
}

#[derive(Debug, Clone)]
pub(super) struct ProcPlan {
    pub(super) at: Duration,
    pub(super) concurrency: u32,
    pub(super) prefetch: u32,
    /// `unwritten_outcomes` (None: the default, 2 x `concurrency`).
    pub(super) unwritten: Option<u32>,
    /// Queues with slots of their own (`queue_concurrency`), carved out of `concurrency`.
    pub(super) queue_slots: Vec<(String, u32)>,
    pub(super) windows: Vec<(Duration, Duration, Window)>,
}

/// Everything a run does, drawn from its seed or written out by a scenario.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) seed: u64,
    pub(super) queues: Vec<QueuePlan>,
    pub(super) jobs: Vec<JobPlan>,
    pub(super) procs: Vec<ProcPlan>,
    pub(super) rates: Rates,
    /// Random crashes of processes while faults are on.
    pub(super) crashes: bool,
    /// Random operator actions while faults are on.
    pub(super) operator: bool,
    /// Faults (random ones, crashes, operator actions) stop here.
    pub(super) fault_end: Duration,
    /// Every job must be final by then.
    pub(super) deadline: Duration,
    /// Broken runtime variants every process runs with (the teeth).
    pub(super) broken: Vec<Broken>,
    /// A workflow among the jobs (issue 41).
    pub(super) flow: Option<FlowPlan>,
    /// A batch among the jobs (issue 41).
    pub(super) batch: Option<BatchPlan>,
}

/// What a run left: its event log and the rules it broke.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) log: Vec<String>,
    pub(super) violations: Vec<String>,
    /// Every job's place and attempt at the end.
    pub(super) finals: std::collections::BTreeMap<u32, (String, i32)>,
}

/// Real time a run may take before it is reported as stuck: the runtime spinning without
/// ever letting virtual time move (a loop whose every await is ready at once).
const STUCK_AFTER: Duration = Duration::from_secs(60);

/// Runs `plan` on a fresh single-threaded runtime with paused (virtual) time, in a thread of
/// its own watched for [`STUCK_AFTER`].
pub(super) fn run(plan: &Plan) -> Outcome {
    quiet_sim_panics();
    let (tx, rx) = std::sync::mpsc::channel();
    let p = plan.clone();
    std::thread::spawn(move || {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("runtime");
        let out = rt.block_on(simulate(&p));
        rt.shutdown_background();
        let _ = tx.send(out);
    });
    match rx.recv_timeout(STUCK_AFTER) {
        Ok(out) => out,
        Err(_) => Outcome {
            log: Vec::new(),
            violations: vec![format!(
                "seed {}: stuck for {STUCK_AFTER:?} of real time (a task spins without letting virtual time move)",
                plan.seed
            )],
            finals: Default::default(),
        },
    }
}

async fn simulate(plan: &Plan) -> Outcome {
    let margins = Margins { fence: CANCEL_WAIT + Duration::from_millis(1), begin_delay: plan.rates.delay };
    let world = World::new(plan.seed, margins, plan.rates);
    let queues: Vec<String> = plan.queues.iter().map(|q| q.name.clone()).collect();
    for q in &plan.queues {
        let name = QueueName::new(q.name.clone()).expect("queue name");
        let db = &world.db;
        db.control_queue(&name, QueueControl::SetZombieTimeout(Some(ZOMBIE))).await.expect("zombie");
        db.control_queue(&name, QueueControl::SetFetchedTimeout(Some(FETCHED))).await.expect("fetched");
        db.control_queue(&name, QueueControl::SetMaxWorkers(q.cap)).await.expect("cap");
        db.control_queue(&name, QueueControl::SetKeyMaxWorkers(q.key_cap)).await.expect("key cap");
        db.control_queue(&name, QueueControl::SetRateLimit(q.rate)).await.expect("rate");
        let mut c = world.check.lock().unwrap();
        c.set_cap(Duration::ZERO, &q.name, q.cap);
        c.set_key_cap(Duration::ZERO, &q.name, q.key_cap);
        if let Some(r) = q.rate {
            c.rates.insert(q.name.clone(), (r.jobs, r.per, r.by_key));
        }
    }
    // The producer: jobs enqueued at their times.
    {
        let world = world.clone();
        let jobs = plan.jobs.clone();
        tokio::spawn(async move {
            for j in jobs {
                let now = world.now();
                if j.at > now {
                    tokio::time::sleep(j.at - now).await;
                }
                let id = world.db.enqueue(sim_job(&j)).await.expect("enqueue").id;
                let info = JobInfo::of(&j);
                world.check.lock().unwrap().jobs.insert(job_no(id), info);
                world.log(format!("enqueue job {} {} {:?}", job_no(id), j.queue, j.spec));
                world.observe();
            }
        });
    }
    if let Some(flow) = plan.flow.clone() {
        tokio::spawn(enqueue_flow(world.clone(), flow));
    }
    if let Some(batch) = plan.batch.clone() {
        tokio::spawn(enqueue_batch(world.clone(), batch));
    }
    for pp in &plan.procs {
        let world = world.clone();
        let (pp, queues, broken) = (pp.clone(), queues.clone(), plan.broken.clone());
        tokio::spawn(async move {
            tokio::time::sleep(pp.at).await;
            spawn_proc(&world, &pp, &queues, &broken);
        });
    }
    tokio::spawn(rescuer(world.clone()));
    tokio::spawn(supervisor(world.clone(), plan.procs.clone(), queues.clone(), plan.broken.clone()));
    if plan.crashes {
        tokio::spawn(crasher(world.clone()));
    }
    if plan.operator {
        tokio::spawn(operator(world.clone(), plan.queues.clone(), plan.jobs.len()));
    }
    let total = plan.jobs.len()
        + plan.flow.as_ref().map_or(0, |f| f.tasks.len())
        + plan.batch.as_ref().map_or(0, |b| b.jobs.len());
    let mut finals;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = world.now();
        if now >= plan.fault_end && world.faults() {
            world.faults_on.store(false, std::sync::atomic::Ordering::Relaxed);
            world.log("faults stop".to_string());
            for q in &queues {
                let name = QueueName::new(q.clone()).expect("queue");
                let _ = world.db.control_queue(&name, QueueControl::Resume).await;
            }
        }
        finals = world.finals();
        // The plan's jobs (a batch's callbacks, in a queue no process takes, are not).
        let known: Vec<u32> = world.check.lock().unwrap().jobs.keys().copied().collect();
        let done = known.len() == total
            && known.iter().all(|j| finals.get(j).is_some_and(|(l, _)| l == "archived" || l.starts_with("dead")));
        if (now >= plan.fault_end && done) || now >= plan.deadline {
            if done {
                check_batch_end(&world).await;
            }
            let mut c = world.check.lock().unwrap();
            c.finish(now, &finals);
            break;
        }
    }
    let violations = std::mem::take(&mut world.check.lock().unwrap().violations);
    Outcome { log: world.take_log(), violations, finals }
}

/// The sim job of a plan's job.
pub(super) fn sim_job(j: &JobPlan) -> NewJob {
    let mut job = NewJob::build(j.queue.as_str(), "sim")
        .expect("job")
        .json(serde_json::to_value(&j.spec).expect("spec"))
        .max_attempts(j.max_attempts);
    if let Some(k) = &j.key {
        job = job.concurrency_key(k.as_str());
    }
    job
}

/// Starts a process: the real worker over its own fault layer.
fn spawn_proc(world: &Arc<World>, pp: &ProcPlan, queues: &[String], broken: &[Broken]) -> usize {
    let worker = WorkerId::random();
    let bound = pp.unwritten.unwrap_or(2 * pp.concurrency);
    let p = world.register_proc(worker, bound, pp.prefetch, pp.windows.clone());
    for b in broken {
        BROKEN.lock().unwrap().push((worker, *b));
    }
    let backend: Arc<dyn Backend> = Arc::new(SimBackend { world: world.clone(), p });
    let w = world.clone();
    let mut builder = Worker::builder(backend);
    if let Some(n) = pp.unwritten {
        builder = builder.unwritten_outcomes(n);
    }
    for (q, n) in &pp.queue_slots {
        builder = builder.queue_concurrency(q.as_str(), *n);
    }
    world.check.lock().unwrap().queue_slots.insert(p, pp.queue_slots.iter().cloned().collect());
    let built = builder
        .worker_id(worker)
        .queues(queues.iter().cloned())
        .concurrency(pp.concurrency)
        .prefetch(pp.prefetch)
        .heartbeat_interval(HEARTBEAT)
        .poll_interval(Duration::from_millis(100))
        .min_poll_interval(Duration::from_millis(10))
        .cancel_wait(CANCEL_WAIT)
        .job_timeout(Duration::from_secs(10))
        .retry_policy(RetryPolicy::new(Duration::from_millis(50), 2.0, Duration::from_secs(1), 0.0).expect("policy"))
        .maintenance(MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() })
        .register_raw("sim", move |payload, ctx| handler(w.clone(), p, payload, ctx))
        .build()
        .expect("worker");
    let task = tokio::spawn(async move {
        let _ = built.run(CancellationToken::new()).await;
    });
    world.procs.lock().unwrap()[p].task = Some(task);
    world.log(format!(
        "start p{p} concurrency {} prefetch {} unwritten bound {bound} queue slots {:?}",
        pp.concurrency, pp.prefetch, pp.queue_slots
    ));
    p
}

/// Logs a handler's end when it is dropped without returning (stopped and not cooperative).
struct EndGuard {
    world: Arc<World>,
    p: usize,
    job: u32,
    lease: i64,
    done: bool,
    ctx: JobContext,
}

impl EndGuard {
    fn finish(&mut self, how: &str, ok: bool) {
        self.done = true;
        // A handler stopped because its lease was lost has no outcome to write (discarded).
        let lost = self.ctx.stop_reason() == Some(crate::job::StopReason::LeaseLost);
        let how = if lost { format!("{how} (lease lost)") } else { how.to_string() };
        self.world.log(format!("end job {} lease {} p{} {how}", self.job, self.lease, self.p));
        let at = self.world.now();
        self.world.check.lock().unwrap().end(at, self.p, self.job, self.lease, ok, !lost);
    }
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if !self.done && !self.world.is_dead(self.p) {
            self.finish("dropped", false);
        }
    }
}

async fn handler(world: Arc<World>, p: usize, payload: serde_json::Value, ctx: JobContext) -> Result<(), JobError> {
    if world.is_dead(p) {
        futures::future::pending::<()>().await;
    }
    let spec: Spec = serde_json::from_value(payload).map_err(JobError::fatal)?;
    let (job, lease) = (job_no(ctx.id()), ctx.lease().lease.0);
    world.log(format!("begin job {job} lease {lease} p{p} attempt {}", ctx.attempt()));
    let at = world.now();
    world.check.lock().unwrap().begin(at, p, job, lease);
    check_flow_begin(&world, job, lease);
    let mut guard = EndGuard { world: world.clone(), p, job, lease, done: false, ctx: ctx.clone() };
    if let Some(after) = spec.poison {
        if after > 0 {
            tokio::time::sleep(Duration::from_millis(after)).await;
        }
        guard.done = true;
        world.crash(p, Some(job));
        futures::future::pending::<()>().await;
    }
    let d = Duration::from_millis(spec.ms);
    let finished = if spec.coop {
        tokio::select! {
            biased;
            _ = ctx.cancellation_token().cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    } else {
        tokio::time::sleep(d).await;
        true
    };
    if world.is_dead(p) {
        guard.done = true;
        futures::future::pending::<()>().await;
    }
    if !finished {
        guard.finish("stopped", false);
        return Err(JobError::retry("sim: stopped"));
    }
    match spec.out {
        Out::Ok => {
            guard.finish("ok", true);
            Ok(())
        }
        Out::Retry => {
            guard.finish("retry", false);
            Err(JobError::retry("sim: retry"))
        }
        Out::Fatal => {
            guard.finish("fatal", false);
            Err(JobError::fatal("sim: fatal"))
        }
        Out::Panic => {
            guard.finish("panic", false);
            panic!("{SIM_PANIC}");
        }
    }
}

const SIM_PANIC: &str = "sim: a handler panics on purpose";

/// The default panic hook, minus the simulated handlers' own panics (caught by the runtime).
fn quiet_sim_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info.payload().downcast_ref::<String>().map(String::as_str);
            if msg != Some(SIM_PANIC) {
                default(info);
            }
        }));
    });
}

/// The maintenance of the world: a rescue at random intervals.
async fn rescuer(world: Arc<World>) {
    loop {
        let d = Duration::from_millis(world.pick(100..400u64));
        tokio::time::sleep(d).await;
        let _ = world.db.rescue(&RescueParams::default()).await;
        world.observe();
    }
}

/// Restarts every dead process (a new process, a new worker id) a moment after it died.
async fn supervisor(world: Arc<World>, procs: Vec<ProcPlan>, queues: Vec<String>, broken: Vec<Broken>) {
    let mut replaced = 0usize;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let dead: Vec<usize> = {
            let ps = world.procs.lock().unwrap();
            (0..ps.len()).filter(|p| ps[*p].dead).collect()
        };
        while replaced < dead.len() {
            let template = &procs[world.pick(0..procs.len())];
            let pp = ProcPlan { at: Duration::ZERO, windows: Vec::new(), ..template.clone() };
            spawn_proc(&world, &pp, &queues, &broken);
            replaced += 1;
        }
    }
}

/// Kills a random live process now and then while faults are on.
async fn crasher(world: Arc<World>) {
    while world.faults() {
        let d = Duration::from_millis(world.pick(1000..5000u64));
        tokio::time::sleep(d).await;
        if !world.faults() {
            return;
        }
        let live: Vec<usize> = {
            let ps = world.procs.lock().unwrap();
            (0..ps.len()).filter(|p| !ps[*p].dead).collect()
        };
        if !live.is_empty() {
            let p = live[world.pick(0..live.len())];
            world.crash(p, None);
        }
    }
}

/// An operator at random moments: cancels a job, pauses a queue for a while, changes caps.
async fn operator(world: Arc<World>, queues: Vec<QueuePlan>, jobs: usize) {
    while world.faults() {
        let d = Duration::from_millis(world.pick(300..1500u64));
        tokio::time::sleep(d).await;
        if !world.faults() {
            return;
        }
        let q = &queues[world.pick(0..queues.len())];
        let name = QueueName::new(q.name.clone()).expect("queue");
        let at = world.now();
        match world.pick(0..4u32) {
            0 if jobs > 0 => {
                let n = world.pick(1..=jobs as u128);
                let id = chokaq_core::JobId(uuid::Uuid::from_u128((1u128 << 127) | n));
                let r = world.db.cancel(id).await;
                world.log(format!("operator: cancel job {n}: {r:?}"));
                world.observe();
            }
            1 => {
                let _ = world.db.control_queue(&name, QueueControl::Pause).await;
                world.log(format!("operator: pause {}", q.name));
                let (w, n2) = (world.clone(), name.clone());
                let for_ms = world.pick(100..800u64);
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(for_ms)).await;
                    let _ = w.db.control_queue(&n2, QueueControl::Resume).await;
                    w.log(format!("operator: resume {}", n2.as_str()));
                });
            }
            2 => {
                let cap = if world.chance(300) { None } else { Some(world.pick(1..=3u32)) };
                let _ = world.db.control_queue(&name, QueueControl::SetMaxWorkers(cap)).await;
                world.check.lock().unwrap().set_cap(at, &q.name, cap);
                world.log(format!("operator: cap {} {cap:?}", q.name));
            }
            _ => {
                let cap = if world.chance(300) { None } else { Some(world.pick(1..=2u32)) };
                let _ = world.db.control_queue(&name, QueueControl::SetKeyMaxWorkers(cap)).await;
                world.check.lock().unwrap().set_key_cap(at, &q.name, cap);
                world.log(format!("operator: key cap {} {cap:?}", q.name));
            }
        }
    }
}
