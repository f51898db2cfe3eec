//! The simulated world: one memory store on virtual time, the processes that use it (each
//! behind a fault layer of its own), the event log, and the checker fed as events happen.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chokaq_core::memory::MemoryBackend;
use chokaq_core::{JobId, JobLocation, JobStatus, WorkerId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use super::check::{Checker, Held, Job, LeaseNo, Margins};

/// A job as the world last saw it in the store: where, on which lease, held by whom.
type Seen = (JobLocation, Option<LeaseNo>, Option<WorkerId>);

/// A job's number: the memory store counts its ids up from 1 ([`MemoryBackend::with_clock`]).
pub(super) fn job_no(id: JobId) -> Job {
    (id.0.as_u128() & 0xffff_ffff) as Job
}

/// Faults of one process over a stretch of virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Window {
    /// Its heartbeats fail (its other calls work).
    HeartbeatsFail,
    /// Every call of it fails.
    AllFail,
    /// Its outcome writes (complete, fail, the handoff) wait until the window ends.
    WritesStall,
}

/// How often the random faults strike a call (per thousand), while faults are on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rates {
    /// Fails before it reaches the store.
    pub(super) fail_before: u32,
    /// Reaches the store and commits, then its reply is lost.
    pub(super) lost_after: u32,
    /// Longest delay before the store sees a call, and before its reply arrives.
    pub(super) delay: Duration,
}

#[derive(Debug, Default)]
pub(super) struct Proc {
    pub(super) dead: bool,
    pub(super) prefetch: u32,
    pub(super) started: Duration,
    pub(super) windows: Vec<(Duration, Duration, Window)>,
    pub(super) task: Option<tokio::task::JoinHandle<()>>,
}

/// The world. Every decision that varies is drawn from one seeded generator, in the order the
/// (deterministic, single-threaded, virtual-time) runtime asks for them.
pub(super) struct World {
    pub(super) db: Arc<MemoryBackend>,
    t0: Instant,
    rng: Mutex<StdRng>,
    log: Mutex<Vec<String>>,
    pub(super) check: Mutex<Checker>,
    pub(super) procs: Mutex<Vec<Proc>>,
    /// Random faults, crashes and operator actions happen while this is on.
    pub(super) faults_on: std::sync::atomic::AtomicBool,
    /// The batch tooth (issue 41): the store enqueues the `finished` callback again at every
    /// completion that finds the plan's batch final.
    pub(super) batch_twice: std::sync::atomic::AtomicBool,
    /// The plan's batch, once enqueued.
    pub(super) batch_id: Mutex<Option<chokaq_core::BatchId>>,
    pub(super) rates: Rates,
    /// The store's view at the last look: job → (location, lease, worker).
    last: Mutex<BTreeMap<Job, Seen>>,
    by_worker: Mutex<HashMap<WorkerId, usize>>,
    /// `CHOKAQ_SIM_TRACE` set: every line also goes to stderr as it happens.
    trace: bool,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("World")
    }
}

impl World {
    /// A world on virtual time (call inside a paused runtime), seeded with `seed`.
    pub(super) fn new(seed: u64, margins: Margins, rates: Rates) -> Arc<Self> {
        let t0 = Instant::now();
        let base = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").expect("valid").to_utc();
        let db = MemoryBackend::with_clock(move || {
            base + chrono::Duration::from_std(Instant::now() - t0).unwrap_or_default()
        });
        Arc::new(World {
            db: Arc::new(db),
            t0,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            log: Mutex::new(Vec::new()),
            check: Mutex::new(Checker::new(margins)),
            procs: Mutex::new(Vec::new()),
            faults_on: std::sync::atomic::AtomicBool::new(true),
            batch_twice: std::sync::atomic::AtomicBool::new(false),
            batch_id: Mutex::new(None),
            rates,
            last: Mutex::new(BTreeMap::new()),
            by_worker: Mutex::new(HashMap::new()),
            trace: std::env::var_os("CHOKAQ_SIM_TRACE").is_some(),
        })
    }

    /// Virtual time since the start.
    pub(super) fn now(&self) -> Duration {
        Instant::now() - self.t0
    }

    /// A number in `range`, from the seed.
    pub(super) fn pick<
        T: rand::distributions::uniform::SampleUniform,
        R: rand::distributions::uniform::SampleRange<T>,
    >(
        &self,
        range: R,
    ) -> T {
        self.rng.lock().unwrap().gen_range(range)
    }

    /// True with probability `per_mille` / 1000.
    pub(super) fn chance(&self, per_mille: u32) -> bool {
        per_mille > 0 && self.pick(0..1000u32) < per_mille
    }

    /// A uniformly drawn duration up to `max`, in whole microseconds.
    pub(super) fn upto(&self, max: Duration) -> Duration {
        if max.is_zero() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.pick(0..=max.as_micros() as u64))
    }

    pub(super) fn faults(&self) -> bool {
        self.faults_on.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Appends a line to the event log (virtual time first) and checks the running handlers.
    pub(super) fn log(&self, line: String) {
        let at = self.now();
        let line = format!("{:>9.3} {line}", at.as_secs_f64() * 1000.0);
        if self.trace {
            eprintln!("{line}");
        }
        self.log.lock().unwrap().push(line);
        self.check.lock().unwrap().tick(at);
        self.check_hoarding(at);
    }

    /// No job waits in a live process's look-ahead for [`HOARD_LIMIT`] while another live
    /// process, up as long and without a fault window, runs nothing (issue 36, hole 6).
    fn check_hoarding(&self, at: Duration) {
        let found = {
            let procs = self.procs.lock().unwrap();
            let calm = |p: usize| {
                procs.get(p).is_some_and(|x| {
                    !x.dead
                        && at >= x.started + HOARD_LIMIT
                        && !x.windows.iter().any(|(f, t, _)| *f <= at && at < *t + HOARD_LIMIT)
                })
            };
            let last = self.last.lock().unwrap();
            let by_worker = self.by_worker.lock().unwrap();
            let check = self.check.lock().unwrap();
            let mut found = None;
            for (job, (loc, lease, worker)) in last.iter() {
                let (JobLocation::Hot(JobStatus::Fetched), Some(lease), Some(w)) = (loc, lease, worker) else {
                    continue;
                };
                let Some(p) = by_worker.get(w).copied() else { continue };
                if !calm(p) || procs[p].prefetch > 0 || check.begun(*job, *lease) {
                    continue;
                }
                let Some(since) = check.leased_at(*job, *lease) else { continue };
                if at < since + HOARD_LIMIT {
                    continue;
                }
                if let Some(q) = (0..procs.len()).find(|q| *q != p && calm(*q) && check.running_of(*q) == 0) {
                    found = Some((*job, *lease, p, q, at - since));
                    break;
                }
            }
            found
        };
        if let Some((job, lease, p, q, waited)) = found {
            let msg = format!(
                "job {job}: waited {:.3} s in proc {p}'s look-ahead (lease {lease}) while proc {q} ran nothing",
                waited.as_secs_f64()
            );
            self.check.lock().unwrap().report(at, msg);
            // Reported once per job: forget it until the store moves it again.
            self.last.lock().unwrap().remove(&job);
        }
    }

    pub(super) fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    pub(super) fn proc_of(&self, w: WorkerId) -> Option<usize> {
        self.by_worker.lock().unwrap().get(&w).copied()
    }

    pub(super) fn register_proc(
        &self,
        worker: WorkerId,
        unwritten_bound: u32,
        prefetch: u32,
        windows: Vec<(Duration, Duration, Window)>,
    ) -> usize {
        let started = self.now();
        let mut procs = self.procs.lock().unwrap();
        let p = procs.len();
        procs.push(Proc { dead: false, prefetch, started, windows, task: None });
        self.by_worker.lock().unwrap().insert(worker, p);
        self.check.lock().unwrap().unwritten_bound.insert(p, unwritten_bound as usize);
        p
    }

    pub(super) fn is_dead(&self, p: usize) -> bool {
        self.procs.lock().unwrap().get(p).is_some_and(|x| x.dead)
    }

    /// The fault window of process `p` in force now, if any.
    pub(super) fn window(&self, p: usize) -> Option<Window> {
        let now = self.now();
        let procs = self.procs.lock().unwrap();
        procs.get(p)?.windows.iter().find(|(from, to, _)| *from <= now && now < *to).map(|w| w.2)
    }

    /// When the stall window of `p` in force now ends.
    pub(super) fn stall_end(&self, p: usize) -> Option<Duration> {
        let now = self.now();
        let procs = self.procs.lock().unwrap();
        procs.get(p)?.windows.iter().find(|(f, t, w)| *w == Window::WritesStall && *f <= now && now < *t).map(|w| w.1)
    }

    /// Process `p` dies: its tasks never reach the store again, its handlers are gone.
    /// `poison`: the job whose handler killed it.
    pub(super) fn crash(&self, p: usize, poison: Option<Job>) {
        let task = {
            let mut procs = self.procs.lock().unwrap();
            let Some(x) = procs.get_mut(p) else { return };
            if x.dead {
                return;
            }
            x.dead = true;
            x.task.take()
        };
        match poison {
            Some(j) => self.log(format!("crash p{p} (poison job {j})")),
            None => self.log(format!("crash p{p}")),
        }
        let at = self.now();
        self.check.lock().unwrap().crashed(at, p, poison);
        if let Some(t) = task {
            t.abort();
        }
    }

    /// Looks at the store after a call that may have moved jobs, and tells the checker what
    /// moved: every lease granted and ended, every job archived or dead-lettered.
    pub(super) fn observe(&self) {
        let at = self.now();
        let view = self.db.view();
        let mut last = self.last.lock().unwrap();
        let mut moves = Vec::new();
        for r in view {
            let job = job_no(r.id);
            let now = (r.location, r.lease.map(|l| l.0), r.worker);
            if last.get(&job) == Some(&now) {
                continue;
            }
            last.insert(job, now);
            moves.push((job, r));
        }
        drop(last);
        for (job, r) in moves {
            let proc = r.worker.and_then(|w| self.proc_of(w));
            let held = match r.location {
                JobLocation::Hot(JobStatus::Fetched | JobStatus::Processing) => {
                    r.lease.map(|l| Held { lease: l.0, proc })
                }
                _ => None,
            };
            let (dead, archived_by) = match r.location {
                JobLocation::Dead(reason) => (Some(reason.as_str()), None),
                JobLocation::Archived => (None, r.lease.map(|l| l.0)),
                _ => (None, None),
            };
            let who = proc.map_or(String::new(), |p| format!(" p{p}"));
            let lease = r.lease.map_or(String::new(), |l| format!(" lease {}", l.0));
            self.log(format!("db job {job} {}{lease}{who} attempt {}", loc(r.location), r.attempt));
            let processing = r.location == JobLocation::Hot(JobStatus::Processing);
            self.check.lock().unwrap().moved(at, job, held, processing, dead, archived_by);
        }
    }

    /// Every job's final place and attempt.
    pub(super) fn finals(&self) -> BTreeMap<Job, (String, i32)> {
        self.db.view().into_iter().map(|r| (job_no(r.id), (loc(r.location), r.attempt))).collect()
    }
}

/// How long a job may wait in one process's look-ahead while another process is idle.
const HOARD_LIMIT: Duration = Duration::from_secs(1);

/// A location as the log writes it.
pub(super) fn loc(l: JobLocation) -> String {
    match l {
        JobLocation::Hot(s) => format!("{s:?}").to_lowercase(),
        JobLocation::Archived => "archived".to_string(),
        JobLocation::Dead(r) => format!("dead {}", r.as_str()),
    }
}
