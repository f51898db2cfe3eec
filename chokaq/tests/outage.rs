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

// ---------------------------------------------------------------------------------------------
// The throwaway cluster

#[derive(Debug, Clone)]
struct PgBin {
    dir: PathBuf,
    /// Run the binaries as the `postgres` OS user (the test runs as root).
    as_postgres: bool,
}

impl PgBin {
    /// The newest `/usr/lib/postgresql/<version>/bin` with the binaries the case needs, or the
    /// directory `CHOKAQ_OUTAGE_PG_BIN` names; `Err` says why there is none.
    fn find() -> Result<PgBin, String> {
        let needed = ["initdb", "pg_ctl", "postgres", "psql"];
        let dir = match std::env::var_os("CHOKAQ_OUTAGE_PG_BIN") {
            Some(d) => PathBuf::from(d),
            None => {
                let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
                    .map_err(|_| "no PostgreSQL binaries: /usr/lib/postgresql does not exist".to_string())?
                    .filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let v = e.file_name().to_string_lossy().split('.').next()?.parse::<u32>().ok()?;
                        Some((v, e.path().join("bin")))
                    })
                    .collect();
                found.sort();
                found.pop().map(|(_, p)| p).ok_or("no PostgreSQL binaries under /usr/lib/postgresql")?
            }
        };
        for b in needed {
            if !dir.join(b).is_file() {
                return Err(format!("no PostgreSQL binary {b} in {}", dir.display()));
            }
        }
        // The effective uid of this process.
        let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
        if root {
            let runuser =
                ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"].iter().any(|p| Path::new(p).is_file());
            if !runuser {
                return Err("running as root and runuser is missing (initdb refuses root)".to_string());
            }
            let user = std::process::Command::new("id").args(["-u", "postgres"]).output();
            if !user.map(|o| o.status.success()).unwrap_or(false) {
                return Err("running as root and there is no postgres OS user to run the server".to_string());
            }
        }
        Ok(PgBin { dir, as_postgres: root })
    }

    fn command(&self, prog: &str) -> std::process::Command {
        let path = self.dir.join(prog);
        if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            std::process::Command::new(path)
        }
    }
}

/// A cluster in a temporary directory; stopped (`-m immediate`) and deleted on drop.
#[derive(Debug)]
struct Cluster {
    bin: PgBin,
    root: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    Ok(l.local_addr().map_err(err)?.port())
}

async fn run_cmd(what: &str, cmd: std::process::Command) -> Result<(), String> {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let out = cmd.output().await.map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Cluster {
    async fn create(bin: PgBin) -> Result<Cluster, String> {
        let root = std::env::temp_dir().join(format!("chokaq_outage_{:016x}", rand::random::<u64>()));
        if bin.as_postgres {
            let mut mk = std::process::Command::new("runuser");
            mk.args(["-u", "postgres", "--", "mkdir", "-m", "700"]).arg(&root);
            run_cmd("mkdir as postgres", mk).await?;
        } else {
            std::fs::create_dir(&root).map_err(err)?;
        }
        let c = Cluster { data: root.join("data"), log: root.join("server.log"), port: free_port()?, root, bin };
        let mut init = c.bin.command("initdb");
        init.arg("-D").arg(&c.data).args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
        run_cmd("initdb", init).await?;
        // fsync and full_page_writes off are safe here: the server may crash (`-m immediate`),
        // the operating system does not. synchronous_commit stays on: off, an immediate restart
        // loses the last commits the server acknowledged (seen: completions reported done, then
        // gone, and their jobs rescued and run again).
        let conf = format!(
            "\n# chokaq outage test\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nfull_page_writes = off\nmax_connections = 100\n",
            c.port,
            c.root.display()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(c.data.join("postgresql.conf"))
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .map_err(err)?;
        c.pg_ctl(&["start"]).await?;
        Ok(c)
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl -D <data> -l <log> -w -t 60 <args>`; returns when pg_ctl does (with `-w`: the
    /// server accepts connections, or is gone).
    async fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let mut c = self.bin.command("pg_ctl");
        c.arg("-D").arg(&self.data).arg("-l").arg(&self.log).args(["-w", "-t", "60"]).args(args);
        run_cmd(&format!("pg_ctl {}", args.join(" ")), c).await.map_err(|e| format!("{e}\n{}", self.log_tail()))
    }

    /// Takes the server through `kind`; returns once it accepts connections again.
    async fn outage(&self, kind: Kind) -> Result<(), String> {
        match kind {
            Kind::RestartFast => self.pg_ctl(&["-m", "fast", "restart"]).await,
            Kind::RestartImmediate => self.pg_ctl(&["-m", "immediate", "restart"]).await,
            Kind::ShortStop | Kind::LongStop | Kind::VeryLongStop => {
                self.pg_ctl(&["-m", "fast", "stop"]).await?;
                // The outage itself (not a synchronisation): the server stays down this long.
                tokio::time::sleep(match kind {
                    Kind::ShortStop => SHORT_STOP,
                    Kind::LongStop => LONG_STOP,
                    _ => VERY_LONG_STOP,
                })
                .await;
                self.pg_ctl(&["start"]).await
            }
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!("server log (last lines):\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
    }

    /// Runs one statement with psql; returns the unaligned, space-separated rows.
    async fn psql(&self, sql: &str) -> Result<Vec<String>, String> {
        let mut c = tokio::process::Command::new(self.bin.dir.join("psql"));
        c.args(["-X", "-q", "-A", "-t", "-F", " ", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &self.port.to_string(), "-d", "postgres", "-c", sql])
            .stdin(Stdio::null());
        let out = c.output().await.map_err(|e| format!("psql: {e}"))?;
        if !out.status.success() {
            return Err(format!("psql failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut c = self.bin.command("pg_ctl");
        c.arg("-D").arg(&self.data).args(["-m", "immediate", "-w", "stop"]);
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let _ = c.status();
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            eprintln!("could not delete the test cluster at {}: {e}", self.root.display());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Worker processes

/// Counts of the logged events (warnings and errors, and chokaq's info events such as rescues)
/// per (level, target, message), with the first `error` field seen and the sums of numeric
/// fields: printed by the worker process at the end, for the report.
#[derive(Debug, Default)]
struct LogCounts(Mutex<BTreeMap<(String, String, String), LogEntry>>);

#[derive(Debug, Default)]
struct LogEntry {
    count: u64,
    first_error: String,
    sums: BTreeMap<&'static str, u64>,
}

#[derive(Default)]
struct EventFields {
    message: String,
    error: String,
    numbers: Vec<(&'static str, u64)>,
}

impl tracing::field::Visit for EventFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "error" => self.error = format!("{value:?}"),
            _ => {}
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "error" => self.error = value.to_string(),
            _ => {}
        }
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.numbers.push((field.name(), value));
    }
    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.numbers.push((field.name(), value.max(0) as u64));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for &'static LogCounts {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        let mut f = EventFields::default();
        event.record(&mut f);
        let key = (meta.level().to_string(), meta.target().to_string(), f.message);
        let mut counts = self.0.lock().unwrap();
        let e = counts.entry(key).or_default();
        if e.count == 0 {
            e.first_error = f.error;
        }
        e.count += 1;
        for (name, v) in f.numbers {
            *e.sums.entry(name).or_default() += v;
        }
    }
}

/// A worker process: claims from both queues until its stdin closes. Prints `WORKER <id>`
/// first, `STAT <time> <claimed> <lease lost>` every 25 ms, and `REPORT ...` and `LOG ...` lines last;
/// writes each handler run's start and end to its runs file and its log (warnings, errors,
/// chokaq's info events) to its log file.
fn child_main() -> ExitCode {
    static COUNTS: LogCounts = LogCounts(Mutex::new(BTreeMap::new()));
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let (url, runs, log) = (var("CHOKAQ_OUTAGE_URL"), var("CHOKAQ_OUTAGE_RUNS"), var("CHOKAQ_OUTAGE_LOG"));
    let release = PathBuf::from(var("CHOKAQ_OUTAGE_RELEASE"));
    let own_queue = var("CHOKAQ_OUTAGE_OWN_QUEUE");
    // The shared queues this process claims from, comma separated.
    let mut queues: Vec<String> = var("CHOKAQ_OUTAGE_QUEUES").split(',').map(str::to_string).collect();
    queues.push(own_queue);
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let file = std::fs::File::create(&log).expect("log file");
        tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(Mutex::new(file)))
            .with(&COUNTS)
            .with(tracing_subscriber::EnvFilter::new("warn,chokaq=info,chokaq_postgres=info"))
            .init();
    }
    let out = runtime().block_on(async move {
        let backend: Arc<dyn Backend> =
            Arc::new(PgBackend::connect(PgConfig::new(url).schema(SCHEMA).max_connections(6)).await.map_err(err)?);
        let file =
            Arc::new(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(&runs).map_err(err)?));
        let maintenance = MaintenanceConfig {
            enabled: true,
            interval: MAINTENANCE_INTERVAL,
            // The timeouts are the queues' settings (set by the parent), not the worker's.
            rescue: RescueParams { limit: 1000, purge: Vec::new() },
            archive_retention: None,
            dead_letter_retention: None,
            worker_stale_after: None,
        };
        let worker = Worker::builder(backend)
            .queues(queues)
            .concurrency(CONCURRENCY)
            .heartbeat_interval(HEARTBEAT)
            .poll_interval(Duration::from_millis(200))
            .min_poll_interval(Duration::from_millis(10))
            .shutdown_grace(Duration::from_secs(5))
            .maintenance(maintenance)
            .register(move |job: Work, ctx: JobContext| {
                let (file, release) = (file.clone(), release.clone());
                async move {
                    let lease = ctx.lease().lease.0;
                    let write = |line: String| {
                        // One write(2) per line, straight to the file.
                        file.lock().unwrap().write_all(line.as_bytes()).map_err(chokaq::JobError::retry)
                    };
                    write(format!("S {} {lease} {} {}\n", ctx.id(), ctx.attempt(), now_us()))?;
                    // The simulated work; a handler stops early when its token fires.
                    let fired = if job.hold {
                        let deadline = Instant::now() + Duration::from_secs(300);
                        loop {
                            if release.exists() || Instant::now() > deadline {
                                break false;
                            }
                            tokio::select! {
                                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                                _ = ctx.cancelled() => break true,
                            }
                        }
                    } else {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(job.ms)) => false,
                            _ = ctx.cancelled() => true,
                        }
                    };
                    write(format!("E {} {lease} {} {}\n", ctx.id(), now_us(), u8::from(fired)))?;
                    Ok(())
                }
            })
            .build()
            .map_err(err)?;
        println!("WORKER {}", worker.id());
        let token = CancellationToken::new();
        let t2 = token.clone();
        tokio::spawn(async move {
            // Shut down gracefully when the parent closes our stdin.
            let _ = tokio::task::spawn_blocking(|| {
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            })
            .await;
            t2.cancel();
        });
        let (stats, run) = worker.run_with_handle(token);
        tokio::spawn(async move {
            loop {
                let r = stats.report();
                println!("STAT {} {} {}", now_us(), r.claimed, r.lease_lost);
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        });
        let report = run.await.map_err(err)?;
        println!("REPORT {report:?}");
        for ((level, target, message), e) in COUNTS.0.lock().unwrap().iter() {
            let sums = e.sums.iter().map(|(k, v)| format!(" {k}={v}")).collect::<String>();
            let error =
                if e.first_error.is_empty() { String::new() } else { format!(" (first error: {})", e.first_error) };
            println!("LOG {level} x{} {target}: {message}{sums}{error}", e.count);
        }
        Ok::<(), String>(())
    });
    match out {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("worker process failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the parent has read from a worker process's stdout.
#[derive(Debug, Default)]
struct ChildOut {
    worker_id: Option<String>,
    /// (time, jobs claimed so far, leases lost so far).
    stats: Vec<(i64, u64, u64)>,
    report: Option<String>,
    logs: Vec<String>,
    eof: bool,
}

struct Proc {
    idx: usize,
    child: tokio::process::Child,
    runs: PathBuf,
    log: PathBuf,
    stderr: PathBuf,
    out: Arc<Mutex<ChildOut>>,
}

impl Proc {
    /// Worker process `idx`, claiming from `queues` (the shared ones) and its own probe queue.
    async fn spawn(idx: usize, url: &str, dir: &Path, queues: &[&str]) -> Result<Proc, String> {
        let release = dir.join("release");
        let runs = dir.join(format!("runs-{idx}.txt"));
        let log = dir.join(format!("worker-{idx}.log"));
        let stderr = dir.join(format!("worker-{idx}.stderr"));
        let mut child = tokio::process::Command::new(std::env::current_exe().map_err(err)?)
            .env(CHILD_ENV, "1")
            .env("CHOKAQ_OUTAGE_URL", url)
            .env("CHOKAQ_OUTAGE_RUNS", &runs)
            .env("CHOKAQ_OUTAGE_LOG", &log)
            .env("CHOKAQ_OUTAGE_RELEASE", &release)
            .env("CHOKAQ_OUTAGE_OWN_QUEUE", probe_queue(idx))
            .env("CHOKAQ_OUTAGE_QUEUES", queues.join(","))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(std::fs::File::create(&stderr).map_err(err)?))
            .kill_on_drop(true)
            .spawn()
            .map_err(err)?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let out: Arc<Mutex<ChildOut>> = Arc::default();
        let o2 = out.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut o = o2.lock().unwrap();
                if let Some(rest) = line.strip_prefix("STAT ") {
                    let mut it = rest.split(' ').map(|s| s.parse::<i64>().unwrap_or_default());
                    let (t, n) = (it.next().unwrap_or_default(), it.next().unwrap_or_default());
                    o.stats.push((t, n as u64, it.next().unwrap_or_default() as u64));
                } else if let Some(rest) = line.strip_prefix("WORKER ") {
                    o.worker_id = Some(rest.to_string());
                } else if let Some(rest) = line.strip_prefix("REPORT ") {
                    o.report = Some(rest.to_string());
                } else if let Some(rest) = line.strip_prefix("LOG ") {
                    o.logs.push(rest.to_string());
                }
            }
            o2.lock().unwrap().eof = true;
        });
        let p = Proc { idx, child, runs, log, stderr, out };
        let deadline = Instant::now() + Duration::from_secs(30);
        while p.out.lock().unwrap().worker_id.is_none() {
            if Instant::now() > deadline {
                return Err(format!("worker process {idx} did not start within 30 s: {}", p.stderr_text()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(p)
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default().trim().to_string()
    }

    /// `Err` when the process has exited (it must survive every outage).
    fn check_alive(&mut self, when: &str) -> Result<(), String> {
        match self.child.try_wait().map_err(err)? {
            None => Ok(()),
            Some(status) => Err(format!(
                "worker process {} exited with {status} {when}; stderr: {}; log: {}",
                self.idx,
                self.stderr_text(),
                self.log.display()
            )),
        }
    }

    /// When this process first claimed a job after `after` (its `claimed` counter rose above
    /// the last value sampled at or before `after`).
    fn claimed_again(&self, after: i64) -> Option<i64> {
        let o = self.out.lock().unwrap();
        let base = o.stats.iter().take_while(|(t, _, _)| *t <= after).last().map(|s| s.1).unwrap_or(0);
        o.stats.iter().find(|(t, n, _)| *t > after && *n > base).map(|s| s.0)
    }

    /// The leases this process had reported lost by `at` (its last sample at or before it).
    fn lost_by(&self, at: i64) -> u64 {
        let o = self.out.lock().unwrap();
        o.stats.iter().take_while(|(t, _, _)| *t <= at).last().map(|s| s.2).unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// The scenario

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    RestartFast,
    RestartImmediate,
    ShortStop,
    LongStop,
    /// Longer than every internal budget of the runtime, shorter than the zombie timeout in
    /// force for it (`LONG_ZOMBIE_TIMEOUT`).
    VeryLongStop,
}

/// When an outage of a round begins.
#[derive(Debug, Clone, Copy, PartialEq)]
enum When {
    /// This share of the round's uncapped jobs is archived (both queues busy).
    FreeShare(f64),
    /// The uncapped queue has nothing pending: only the capped queue is claimed, every claim
    /// is cap-bound and takes its completions along in `complete_and_claim`.
    FreeDrained,
    /// 30 more capped jobs archived since the last outage (or none left).
    CappedMore,
    /// The same, and at least `LONG_STOP_GAP` after the last outage ended.
    CappedMoreAfterGap,
    /// `LONG_STOP_GAP` after the last outage ended, the zombie timeout of every queue is set to
    /// the outage's (`Kind::zombie_timeout`) and a new batch of the round's size is enqueued;
    /// the outage begins once this share of its uncapped jobs is archived (both queues busy).
    NewBatchShare(f64),
}

/// The outages of one round, in order.
const PLAN: [(Kind, When); 6] = [
    (Kind::RestartFast, When::FreeShare(0.2)),
    (Kind::RestartImmediate, When::FreeShare(0.55)),
    (Kind::ShortStop, When::FreeDrained),
    (Kind::RestartFast, When::CappedMore),
    (Kind::LongStop, When::CappedMoreAfterGap),
    (Kind::VeryLongStop, When::NewBatchShare(0.2)),
];

impl Kind {
    fn describe(self) -> String {
        match self {
            Kind::RestartFast => "pg_ctl restart -m fast".to_string(),
            Kind::RestartImmediate => "pg_ctl restart -m immediate".to_string(),
            Kind::ShortStop => format!("pg_ctl stop -m fast, {:.1} s down, pg_ctl start", SHORT_STOP.as_secs_f64()),
            Kind::LongStop => format!("pg_ctl stop -m fast, {:.1} s down, pg_ctl start", LONG_STOP.as_secs_f64()),
            Kind::VeryLongStop => {
                format!("pg_ctl stop -m fast, {:.1} s down, pg_ctl start", VERY_LONG_STOP.as_secs_f64())
            }
        }
    }

    /// The zombie timeout of every queue during this outage.
    fn zombie_timeout(self) -> Duration {
        match self {
            Kind::VeryLongStop => LONG_ZOMBIE_TIMEOUT,
            _ => ZOMBIE_TIMEOUT,
        }
    }
}

#[derive(Debug)]
struct Outage {
    n: usize,
    kind: Kind,
    /// When the stop began and when the server accepted connections again (pg_ctl -w).
    down: i64,
    up: i64,
    /// The zombie timeout of every queue during it.
    zombie: Duration,
    /// Long enough to expire a lease under `zombie` (see `EXPIRY_SLACK`).
    can_expire: bool,
    /// Per queue, Pending/Processing just before.
    before: String,
    /// When the probe jobs were enqueued (after `up`).
    probes: i64,
    /// Per process: when it claimed again.
    resumed: Vec<Option<i64>>,
    /// Per process: leases reported lost by `down`.
    lost_before: Vec<u64>,
}

impl Outage {
    fn name(&self) -> String {
        format!("outage {} ({})", self.n, self.kind.describe())
    }
}

/// The queue only worker process `i` claims from (besides the shared ones).
fn probe_queue(i: usize) -> String {
    format!("outage_p{i}")
}

/// The jobs of one round: one in `CAPPED_EVERY` on the capped queue; with `hold`, the first
/// `HOLD_JOBS` (the first of them capped) are held and go first.
fn batch(round: u32, jobs: u32, hold: bool) -> Vec<(String, Work)> {
    (0..jobs)
        .map(|n| {
            let (queue, work) =
                if n % CAPPED_EVERY == 0 { (CAPPED_QUEUE, CAPPED_WORK) } else { (FREE_QUEUE, FREE_WORK) };
            (queue.to_string(), Work { n: round * jobs + n, ms: work.as_millis() as u64, hold: hold && n < HOLD_JOBS })
        })
        .collect()
}

fn split_counts(jobs: &[(String, Work)]) -> (u64, u64) {
    let capped = jobs.iter().filter(|(q, _)| q == CAPPED_QUEUE).count() as u64;
    (jobs.len() as u64 - capped, capped)
}

/// What the test enqueued: ids in order, and which are on the capped queue.
#[derive(Debug, Default)]
struct TestJobs {
    ids: Vec<JobId>,
    capped: std::collections::HashSet<JobId>,
}

async fn enqueue(b: &PgBackend, jobs: &[(String, Work)], enq: &mut TestJobs) -> Result<(), String> {
    for chunk in jobs.chunks(MAX_ENQUEUE_BATCH) {
        let mut batch = Vec::with_capacity(chunk.len());
        for (queue, w) in chunk {
            let job = NewJob::build(queue, Work::KIND).map_err(err)?.priority(if w.hold { 10 } else { 0 });
            batch.push(job.payload(w).map_err(err)?);
        }
        let out = b.enqueue_many(batch).await.map_err(err)?;
        if out.len() != chunk.len() {
            return Err(format!("enqueue_many returned {} results for {} jobs", out.len(), chunk.len()));
        }
        for ((queue, _), e) in chunk.iter().zip(out) {
            if queue == CAPPED_QUEUE {
                enq.capped.insert(e.id);
            }
            enq.ids.push(e.id);
        }
    }
    Ok(())
}

/// [`enqueue`] right after the server came back: the test's own pool may hand out a dead
/// connection first. An enqueue that failed inserted nothing (one statement), so it is
/// simply tried again.
async fn enqueue_retrying(b: &PgBackend, jobs: &[(String, Work)], enq: &mut TestJobs) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match enqueue(b, jobs, enq).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(format!("could not enqueue after the outage: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// One rescue that ran (held the maintenance lock), right after the server came back: the
/// test's own pool may hand out a dead connection first, and a worker may hold the lock.
async fn rescue_retrying(b: &PgBackend) -> Result<chokaq::core::RescueReport, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let params = RescueParams { limit: 1000, purge: Vec::new() };
    loop {
        match b.rescue(&params).await {
            Ok(r) if r.ran => return Ok(r),
            Ok(_) | Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(5)).await,
            Ok(_) => return Err("no rescue could take the maintenance lock after the outage".to_string()),
            Err(e) => return Err(format!("could not rescue after the outage: {e}")),
        }
    }
}

async fn queue_stats(b: &PgBackend, queue: &str) -> Result<chokaq::core::QueueStats, String> {
    let mut last = String::new();
    for _ in 0..100 {
        match b.stats().await {
            Ok(s) => return Ok(s.queue(queue).cloned().unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("stats failed: {last}"))
}

/// Sets the zombie timeout of every queue the workers claim from (the rescue reads it from the
/// database at each run; the workers checked theirs against it only at start).
async fn set_zombie_timeouts(b: &PgBackend, zombie: Duration) -> Result<(), String> {
    let queues = [FREE_QUEUE.to_string(), CAPPED_QUEUE.to_string()].into_iter().chain((0..PROCESSES).map(probe_queue));
    for q in queues {
        let q = QueueName::new(q).map_err(err)?;
        b.control_queue(&q, QueueControl::SetZombieTimeout(Some(zombie))).await.map_err(err)?;
    }
    Ok(())
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; errors are retried (the server
/// may have just come back) and the last one is reported on timeout.
async fn wait_until<F, Fut>(what: &str, limit: Duration, mut cond: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + limit;
    let mut last_err = String::new();
    loop {
        match cond().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = e,
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what} (last error: {last_err:?})"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn queue_summary(s: &chokaq::core::StatsSnapshot) -> String {
    [FREE_QUEUE, CAPPED_QUEUE]
        .iter()
        .map(|q| {
            let qs = s.queue(q).cloned().unwrap_or_default();
            format!("{q}: {} pending, {} processing", qs.pending, qs.processing)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The database-side cap check: Processing rows of the capped queue in each stats sample.
#[derive(Debug, Default)]
struct CapSamples {
    samples: u64,
    errors: u64,
    max_processing: u64,
    over: Vec<(i64, u64)>,
}

async fn scenario(bin: PgBin) -> Result<(), String> {
    let jobs = env_number("CHOKAQ_OUTAGE_JOBS", 3_000);
    let rounds = env_number("CHOKAQ_OUTAGE_ROUNDS", 1) as usize;
    let t_begin = Instant::now();
    let t0 = now_us();
    let rel = |t: i64| secs(t - t0);

    let cluster = Cluster::create(bin.clone()).await?;
    println!(
        "    cluster: {} (as {}), port {}, fsync=off; ready after {:.1} s",
        bin.dir.display(),
        if bin.as_postgres { "the postgres user" } else { "this user" },
        cluster.port,
        t_begin.elapsed().as_secs_f64()
    );
    let url = cluster.url();
    let b = Arc::new(
        PgBackend::connect(
            PgConfig::new(url.clone()).schema(SCHEMA).max_connections(3).connect_timeout(Duration::from_secs(5)),
        )
        .await
        .map_err(err)?,
    );
    b.migrate().await.map_err(err)?;
    let capped = QueueName::new(CAPPED_QUEUE).map_err(err)?;
    b.set_max_workers(&capped, Some(CAP)).await.map_err(err)?;
    for q in [FREE_QUEUE, CAPPED_QUEUE] {
        let q = QueueName::new(q).map_err(err)?;
        b.control_queue(&q, QueueControl::SetZombieTimeout(Some(ZOMBIE_TIMEOUT))).await.map_err(err)?;
        b.control_queue(&q, QueueControl::SetFetchedTimeout(Some(FETCHED_TIMEOUT))).await.map_err(err)?;
    }

    for i in 0..PROCESSES {
        let q = QueueName::new(probe_queue(i)).map_err(err)?;
        b.control_queue(&q, QueueControl::SetZombieTimeout(Some(ZOMBIE_TIMEOUT))).await.map_err(err)?;
        b.control_queue(&q, QueueControl::SetFetchedTimeout(Some(FETCHED_TIMEOUT))).await.map_err(err)?;
    }
    let mut enq = TestJobs::default();
    let first = batch(0, jobs, true);
    let (free_n, capped_n) = split_counts(&first);
    enqueue(&b, &first, &mut enq).await?;
    println!(
        "    {jobs} jobs a round ({capped_n} on {CAPPED_QUEUE}, max_workers {CAP}; handlers {FREE_WORK:?} / \
         {CAPPED_WORK:?}; {HOLD_JOBS} of the first round held through the outages); {PROCESSES} worker processes x \
         concurrency {CONCURRENCY}; heartbeat {HEARTBEAT:?}, zombie timeout {ZOMBIE_TIMEOUT:?}, maintenance every \
         {MAINTENANCE_INTERVAL:?}; {rounds} round(s) of {} outages",
        PLAN.len()
    );

    let files = std::env::temp_dir().join(format!("chokaq_outage_runs_{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&files).map_err(err)?;
    let mut procs = Vec::new();
    for i in 0..PROCESSES {
        procs.push(Proc::spawn(i, &url, &files, &[FREE_QUEUE, CAPPED_QUEUE]).await?);
    }

    // The database-side cap sampler.
    let cap: Arc<Mutex<CapSamples>> = Arc::default();
    let sampler_stop = CancellationToken::new();
    let sampler = {
        let (b, cap, stop) = (b.clone(), cap.clone(), sampler_stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                let s = b.stats().await;
                let mut c = cap.lock().unwrap();
                match s {
                    Ok(s) => {
                        let p = s.queue(CAPPED_QUEUE).map(|q| q.processing).unwrap_or(0);
                        c.samples += 1;
                        c.max_processing = c.max_processing.max(p);
                        if p > CAP as u64 {
                            c.over.push((now_us(), p));
                        }
                    }
                    Err(_) => c.errors += 1,
                }
            }
        })
    };

    let mut failures: Vec<String> = Vec::new();
    let mut outages: Vec<Outage> = Vec::new();
    let mut capped_after_last = 0u64;
    let mut last_up = 0i64;
    let mut zombie_now = ZOMBIE_TIMEOUT;
    for round in 0..rounds as u32 {
        if round > 0 {
            enqueue(&b, &batch(round, jobs, false), &mut enq).await?;
        }
        let base_free = queue_stats(&b, FREE_QUEUE).await?.archived;
        // The extra batch of `When::NewBatchShare`: uncapped jobs archived before it, its count.
        let (mut extra_base, mut extra_free) = (0u64, 0u64);
        for (kind, when) in PLAN {
            let n = outages.len() + 1;
            let zombie = kind.zombie_timeout();
            if let When::NewBatchShare(_) = when {
                // Leases lost in the outage before have been rescued and reported by now.
                wait_until(&format!("{LONG_STOP_GAP:?} after outage {}", n - 1), Duration::from_secs(60), || async {
                    Ok(now_us() >= last_up + us(LONG_STOP_GAP))
                })
                .await?;
            }
            if zombie != zombie_now {
                set_zombie_timeouts(&b, zombie).await?;
                println!("    zombie timeout of every queue set to {zombie:?} (for outage {n})");
                zombie_now = zombie;
            }
            if let When::NewBatchShare(_) = when {
                let extra = batch(rounds as u32 + round, jobs, false);
                extra_free = split_counts(&extra).0;
                extra_base = queue_stats(&b, FREE_QUEUE).await?.archived;
                enqueue(&b, &extra, &mut enq).await?;
            }
            let seen: Arc<Mutex<String>> = Arc::default();
            wait_until(&format!("the moment for outage {n} ({kind:?})"), Duration::from_secs(120), || {
                let (b, seen) = (b.clone(), seen.clone());
                async move {
                    let s = b.stats().await.map_err(err)?;
                    *seen.lock().unwrap() = queue_summary(&s);
                    let free = s.queue(FREE_QUEUE).cloned().unwrap_or_default();
                    let capped = s.queue(CAPPED_QUEUE).cloned().unwrap_or_default();
                    let capped_more = capped.archived >= capped_after_last + 30 || capped.pending == 0;
                    Ok(match when {
                        When::FreeShare(f) => free.archived >= base_free + (free_n as f64 * f) as u64,
                        When::FreeDrained => free.pending == 0,
                        When::CappedMore => capped_more,
                        When::CappedMoreAfterGap => capped_more && now_us() >= last_up + us(LONG_STOP_GAP),
                        When::NewBatchShare(f) => free.archived >= extra_base + (extra_free as f64 * f) as u64,
                    })
                }
            })
            .await?;
            let before = seen.lock().unwrap().clone();
            let down = now_us();
            let lost_before: Vec<u64> = procs.iter().map(|p| p.lost_by(down)).collect();
            cluster.outage(kind).await?;
            let up = now_us();
            if kind == Kind::VeryLongStop {
                // The worst order for the leases in hand: a rescue as soon as the server accepts
                // connections, before any worker's heartbeat lands again (as the maintenance of
                // any worker could). It must find nothing expired.
                let r = rescue_retrying(&b).await?;
                println!(
                    "    rescue {:.2} s after the server came back from outage {n}: {} held jobs put back, {} \
                     zombies retried, {} dead-lettered",
                    secs(now_us() - up),
                    r.fetched_released,
                    r.zombies_retried,
                    r.zombies_dead
                );
                if r.fetched_released + r.zombies_retried + r.zombies_dead > 0 {
                    failures.push(format!(
                        "the rescue right after outage {n} ({:.1} s down, zombie timeout {zombie:?}) expired leases: \
                         {r:?}",
                        secs(up - down)
                    ));
                }
            }
            last_up = up;
            let can_expire = up - down >= us(zombie) - us(EXPIRY_SLACK);
            let mut o = Outage {
                n,
                kind,
                down,
                up,
                zombie,
                can_expire,
                before,
                probes: 0,
                resumed: vec![None; PROCESSES],
                lost_before,
            };
            resume_after(&mut o, &mut procs, &b, &mut enq, t0, &mut failures).await?;
            capped_after_last = queue_stats(&b, CAPPED_QUEUE).await?.archived;
            println!(
                "    {}: down at +{:.2} s for {:.2} s (zombie timeout {:?}){}; before: {}; probes enqueued after \
                 {:.2} s; claiming again after {}",
                o.name(),
                rel(down),
                secs(up - down),
                o.zombie,
                if can_expire { " (can expire leases)" } else { "" },
                o.before,
                secs(o.probes - up),
                o.resumed
                    .iter()
                    .enumerate()
                    .map(|(i, r)| match r {
                        Some(t) => format!("p{i} {:.2} s", secs(t - up)),
                        None => format!("p{i} never"),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            outages.push(o);
        }
    }
    let (ids, capped_ids) = (enq.ids, enq.capped);
    let jobs = ids.len() as u32;

    // Release the held jobs, then drain.
    std::fs::write(files.join("release"), b"").map_err(err)?;
    let drain_limit = Duration::from_secs(60 + u64::from(jobs) / 100);
    let drained = wait_until(&format!("all {jobs} jobs finished"), drain_limit, || {
        let b = b.clone();
        async move {
            let s = b.stats().await.map_err(err)?;
            Ok(s.hot() == 0 && s.archived + s.dead == u64::from(jobs))
        }
    })
    .await;
    let drained_at = now_us();
    if let Err(e) = &drained {
        let s = b.stats().await.map(|s| format!("{} archived, {} dead; {}", s.archived, s.dead, queue_summary(&s)));
        failures.push(format!("{e}; now: {}", s.unwrap_or_else(|e| e.to_string())));
    }
    for p in &mut procs {
        p.check_alive("before the graceful stop")?;
    }
    // Leases each process had reported lost once everything was drained.
    let lost_end: Vec<u64> = {
        let t = now_us();
        procs.iter().map(|p| p.lost_by(t)).collect()
    };
    sampler_stop.cancel();
    let _ = sampler.await;

    // Graceful stop: close stdin, collect reports.
    stop_workers(&mut procs, &mut failures).await?;
    let elapsed = t_begin.elapsed();

    // ---- Analysis -----------------------------------------------------------------------
    let runs = read_runs(&procs, &mut failures)?;
    let a = analyse(&ids, &capped_ids, &runs, &outages, &mut failures);

    check_archived(&cluster, &b, &ids, &a, &mut failures).await?;

    // ---- Report ---------------------------------------------------------------------------
    println!(
        "    drained at +{:.2} s; {} handler runs for {jobs} jobs: {} re-runs",
        rel(drained_at),
        runs.len(),
        a.reruns.len()
    );
    let mut causes: BTreeMap<String, usize> = BTreeMap::new();
    for r in &a.reruns {
        *causes.entry(r.cause.clone()).or_default() += 1;
    }
    for (cause, n) in &causes {
        println!("      {n:>5} x {cause}");
    }
    let unexplained: Vec<&Rerun> = a.reruns.iter().filter(|r| !r.explained).collect();
    for r in unexplained.iter().take(8) {
        println!("      e.g. {}", r.detail);
    }
    for id in ids.iter().take(HOLD_JOBS as usize) {
        let rs = a.by_job.get(id).map(Vec::as_slice).unwrap_or_default();
        let text: Vec<String> = rs
            .iter()
            .map(|r| {
                format!(
                    "lease {} on p{} +{:.2}..{} s{}",
                    r.lease,
                    r.proc,
                    rel(r.start),
                    r.end.map_or("?".to_string(), |e| format!("+{:.2}", rel(e))),
                    if r.fired { " (token fired)" } else { "" }
                )
            })
            .collect();
        let q = if capped_ids.contains(id) { CAPPED_QUEUE } else { FREE_QUEUE };
        println!("    held job {id} ({q}): {}", text.join("; "));
    }
    // Outages shorter than their zombie timeout however long (issue 24, rule 5): no lease lost
    // from the moment the server went until the next outage (or the end), no job run twice.
    for (i, o) in outages.iter().enumerate() {
        let until = outages.get(i + 1).map_or(&lost_end, |next| &next.lost_before);
        let lost: Vec<u64> = o.lost_before.iter().zip(until).map(|(b, e)| e.saturating_sub(*b)).collect();
        let reruns = a.reruns.iter().filter(|r| r.across == Some(o.n)).count();
        println!(
            "    {}: {reruns} re-runs across it; leases reported lost from its start to {}: {}",
            o.name(),
            if i + 1 < outages.len() { format!("outage {}", o.n + 1) } else { "the end".to_string() },
            lost.iter().enumerate().map(|(p, n)| format!("p{p} {n}")).collect::<Vec<_>>().join(", ")
        );
        if o.kind == Kind::VeryLongStop {
            if reruns > 0 {
                failures.push(format!(
                    "{reruns} jobs ran twice across {} ({:.1} s down, zombie timeout {:?}): an outage shorter \
                     than the zombie timeout re-runs nothing, whatever its length",
                    o.name(),
                    secs(o.up - o.down),
                    o.zombie
                ));
            }
            if lost.iter().any(|n| *n > 0) {
                failures.push(format!(
                    "leases were lost from the start of {} ({:.1} s down, zombie timeout {:?}) on: {lost:?} per \
                     process",
                    o.name(),
                    secs(o.up - o.down),
                    o.zombie
                ));
            }
        }
    }
    println!(
        "    overlapping runs of one job: {} pairs ({} with the older lease lost to an outage)",
        a.overlaps, a.overlaps_explained
    );
    let c = cap.lock().unwrap();
    println!(
        "    cap {CAP} on {CAPPED_QUEUE}: at most {} handlers at once on live leases ({} counting runs whose lease \
         was already lost); database samples: at most {} Processing in {} samples ({} failed during outages)",
        a.cap_live, a.cap_all, c.max_processing, c.samples, c.errors
    );
    if a.cap_live > CAP as usize {
        failures.push(format!(
            "the cap was exceeded: {} handlers of {CAPPED_QUEUE} ran at once on live leases (max_workers {CAP})",
            a.cap_live
        ));
    }
    if !c.over.is_empty() {
        failures.push(format!(
            "the cap was exceeded in the database: {} samples over {CAP} Processing, e.g. {:?}",
            c.over.len(),
            c.over.iter().take(3).map(|(t, n)| format!("{n} at +{:.2} s", rel(*t))).collect::<Vec<_>>()
        ));
    }
    drop(c);
    for p in &procs {
        let o = p.out.lock().unwrap();
        println!(
            "    worker p{} {}: {}",
            p.idx,
            o.worker_id.as_deref().unwrap_or("?"),
            o.report.as_deref().unwrap_or("no report")
        );
        for l in &o.logs {
            println!("      log {l}");
        }
    }
    println!("    total {:.1} s", elapsed.as_secs_f64());

    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&files);
        Ok(())
    } else {
        Err(format!(
            "{} check(s) failed (runs and worker logs kept in {}):\n  - {}",
            failures.len(),
            files.display(),
            failures.join("\n  - ")
        ))
    }
}

/// Every job is in exactly one table, the archive (raw row counts per table through `psql`),
/// archived under the newest lease any of its runs held.
async fn check_archived(
    cluster: &Cluster,
    b: &PgBackend,
    ids: &[JobId],
    a: &Analysis,
    failures: &mut Vec<String>,
) -> Result<(), String> {
    // Exactly one row per job, in the archive (raw counts per table).
    let rows = cluster
        .psql(&format!(
            "SELECT id::text, sum(h), sum(a), sum(d) FROM (\
             SELECT id, 1 AS h, 0 AS a, 0 AS d FROM {SCHEMA}.jobs_hot \
             UNION ALL SELECT id, 0, 1, 0 FROM {SCHEMA}.jobs_archive \
             UNION ALL SELECT id, 0, 0, 1 FROM {SCHEMA}.jobs_dlq) t GROUP BY id"
        ))
        .await?;
    let mut presence: HashMap<JobId, (u32, u32, u32)> = HashMap::new();
    for r in &rows {
        let f: Vec<&str> = r.split(' ').collect();
        let id: JobId = f.first().ok_or("empty psql row")?.parse().map_err(err)?;
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u32>().ok()).unwrap_or(99);
        presence.insert(id, (n(1), n(2), n(3)));
    }
    let not_once: Vec<String> = ids
        .iter()
        .filter_map(|id| match presence.get(id) {
            Some((0, 1, 0)) => None,
            Some((h, a, d)) => Some(format!("{id}: hot {h}, archive {a}, dead-letter {d}")),
            None => Some(format!("{id}: in no table")),
        })
        .collect();
    if !not_once.is_empty() {
        failures.push(format!(
            "{} jobs are not archived exactly once (and nowhere else), e.g. {:?}",
            not_once.len(),
            &not_once[..not_once.len().min(5)]
        ));
    }
    if presence.len() != ids.len() {
        failures.push(format!("{} rows over the tables for {} enqueued jobs", presence.len(), ids.len()));
    }

    // Archived under the newest lease a run held.
    let mut archived_lease: HashMap<JobId, i64> = HashMap::new();
    let mut filter = ListJobsParams::new(JobTable::Archive);
    filter.limit = 1000;
    loop {
        let page = b.list_jobs(&filter).await.map_err(err)?;
        for j in &page.jobs {
            archived_lease.insert(j.id, j.lease.map(|l| l.0).unwrap_or(-1));
        }
        match page.next {
            Some(n) => filter.after = Some(n),
            None => break,
        }
    }
    let mut wrong_lease = Vec::new();
    for (id, rs) in &a.by_job {
        let newest = rs.iter().map(|r| r.lease).max().unwrap_or(-1);
        if let Some(l) = archived_lease.get(id) {
            if *l != newest {
                wrong_lease.push(format!("{id}: archived with lease {l}, newest run held {newest}"));
            }
        }
    }
    if !wrong_lease.is_empty() {
        failures.push(format!(
            "{} jobs archived under a lease other than the newest run's, e.g. {:?}",
            wrong_lease.len(),
            &wrong_lease[..wrong_lease.len().min(5)]
        ));
    }
    Ok(())
}

/// After outage `o`: every process still runs, two jobs go to each process's own queue (so
/// every process has work, whatever the others hold), and each must claim again within
/// `RESUME_LIMIT` of the server coming back (`o.resumed`, `o.probes`).
async fn resume_after(
    o: &mut Outage,
    procs: &mut [Proc],
    b: &PgBackend,
    enq: &mut TestJobs,
    t0: i64,
    failures: &mut Vec<String>,
) -> Result<(), String> {
    for p in procs.iter_mut() {
        p.check_alive(&format!("during {}", o.name()))?;
    }
    let n = o.n;
    let probes: Vec<(String, Work)> = (0..PROCESSES)
        .flat_map(|i| {
            (0..PROBES).map(move |k| (probe_queue(i), Work { n: 1_000_000 * n as u32 + k, ms: 10, hold: false }))
        })
        .collect();
    enqueue_retrying(b, &probes, enq).await?;
    o.probes = now_us();
    let deadline = Instant::now() + RESUME_LIMIT;
    loop {
        for (i, p) in procs.iter().enumerate() {
            o.resumed[i] = o.resumed[i].or_else(|| p.claimed_again(o.up));
        }
        if o.resumed.iter().all(Option::is_some) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for p in procs.iter_mut() {
        p.check_alive(&format!("after {}", o.name()))?;
    }
    for (i, r) in o.resumed.iter().enumerate() {
        if r.is_none() {
            failures.push(format!(
                "worker process {i} did not claim within {RESUME_LIMIT:?} after {} (server up at +{:.2} s)",
                o.name(),
                secs(o.up - t0)
            ));
        }
    }
    Ok(())
}

/// Closes every process's stdin (a graceful stop) and waits for each to exit and for the end of
/// its output; a process that exits with an error is a failure.
async fn stop_workers(procs: &mut [Proc], failures: &mut Vec<String>) -> Result<(), String> {
    for p in procs.iter_mut() {
        drop(p.child.stdin.take());
    }
    for p in procs.iter_mut() {
        let status = tokio::time::timeout(Duration::from_secs(30), p.child.wait())
            .await
            .map_err(|_| format!("worker process {} did not exit within 30 s of its stdin closing", p.idx))?
            .map_err(err)?;
        let o = p.out.clone();
        wait_until("the end of a worker's output", Duration::from_secs(10), || {
            let o = o.clone();
            async move { Ok(o.lock().unwrap().eof) }
        })
        .await?;
        if !status.success() {
            failures.push(format!("worker process {} exited with {status}: {}", p.idx, p.stderr_text()));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The keyed variant (issue 25): a per-key cap through the same restarts

const KEYED_QUEUE: &str = "outage_keyed";
/// Concurrency keys of the keyed queue, and the cap on each.
const KEYS: u32 = 20;
const KEY_CAP: u32 = 2;
/// Consecutive jobs (in claim order) of one key: the head of the queue is always a few keys
/// with many jobs each, so the cap binds and every claim skips keys at their cap.
const KEY_BLOCK: u32 = 10;
const KEYED_WORK: Duration = Duration::from_millis(20);

/// The keyed case's outages, each once this share of its jobs is archived: the restarts and
/// stops of [`PLAN`] but the 45 s one (the zombie-timeout rule it checks has nothing keyed). The
/// long stop also waits `LONG_STOP_GAP` after the outage before it.
const KEYED_PLAN: [(Kind, f64); 5] = [
    (Kind::RestartFast, 0.15),
    (Kind::RestartImmediate, 0.3),
    (Kind::ShortStop, 0.45),
    (Kind::RestartFast, 0.55),
    (Kind::LongStop, 0.65),
];

/// The key of the keyed case's job `n`.
fn key_of(n: u32) -> String {
    format!("tenant-{:02}", (n / KEY_BLOCK) % KEYS)
}

/// The database-side per-key check: the most Fetched + Processing jobs any key of the keyed
/// queue held in a `stats()` sample (`busiest_keys`).
#[derive(Debug, Default)]
struct KeySamples {
    samples: u64,
    errors: u64,
    max_running: u64,
    over: Vec<(i64, String, u64)>,
}

fn keyed_summary(s: &chokaq::core::StatsSnapshot) -> String {
    let q = s.queue(KEYED_QUEUE).cloned().unwrap_or_default();
    let busiest: Vec<String> = q.busiest_keys.iter().map(|k| format!("{} {}", k.key, k.running)).collect();
    format!("{KEYED_QUEUE}: {} pending, {} processing, busiest keys [{}]", q.pending, q.processing, busiest.join(", "))
}

async fn keyed_scenario(bin: PgBin) -> Result<(), String> {
    let jobs = env_number("CHOKAQ_OUTAGE_KEYED_JOBS", 4_000);
    let t_begin = Instant::now();
    let t0 = now_us();
    let rel = |t: i64| secs(t - t0);

    let cluster = Cluster::create(bin.clone()).await?;
    println!(
        "    cluster: {} (as {}), port {}, fsync=off; ready after {:.1} s",
        bin.dir.display(),
        if bin.as_postgres { "the postgres user" } else { "this user" },
        cluster.port,
        t_begin.elapsed().as_secs_f64()
    );
    let url = cluster.url();
    let b = Arc::new(
        PgBackend::connect(
            PgConfig::new(url.clone()).schema(SCHEMA).max_connections(3).connect_timeout(Duration::from_secs(5)),
        )
        .await
        .map_err(err)?,
    );
    b.migrate().await.map_err(err)?;
    let keyed = QueueName::new(KEYED_QUEUE).map_err(err)?;
    let settings = b
        .control_queue(&keyed, QueueControl::SetKeyMaxWorkers(Some(KEY_CAP)))
        .await
        .map_err(|e| format!("the PostgreSQL backend must take a per-key cap: {e}"))?;
    if settings.key_max_workers != Some(KEY_CAP) {
        return Err(format!("key_max_workers read back as {:?}, set to {KEY_CAP}", settings.key_max_workers));
    }
    let queues = [KEYED_QUEUE.to_string()].into_iter().chain((0..PROCESSES).map(probe_queue));
    for q in queues {
        let q = QueueName::new(q).map_err(err)?;
        b.control_queue(&q, QueueControl::SetZombieTimeout(Some(ZOMBIE_TIMEOUT))).await.map_err(err)?;
        b.control_queue(&q, QueueControl::SetFetchedTimeout(Some(FETCHED_TIMEOUT))).await.map_err(err)?;
    }

    // The jobs, each with its key.
    let mut enq = TestJobs::default();
    let mut key_by_job: HashMap<JobId, String> = HashMap::new();
    let all: Vec<u32> = (0..jobs).collect();
    for chunk in all.chunks(MAX_ENQUEUE_BATCH) {
        let mut batch = Vec::with_capacity(chunk.len());
        for &n in chunk {
            let w = Work { n, ms: KEYED_WORK.as_millis() as u64, hold: false };
            batch.push(
                NewJob::build(KEYED_QUEUE, Work::KIND)
                    .map_err(err)?
                    .concurrency_key(key_of(n))
                    .payload(&w)
                    .map_err(err)?,
            );
        }
        let out = b.enqueue_many(batch).await.map_err(err)?;
        if out.len() != chunk.len() {
            return Err(format!("enqueue_many returned {} results for {} jobs", out.len(), chunk.len()));
        }
        for (&n, e) in chunk.iter().zip(out) {
            key_by_job.insert(e.id, key_of(n));
            enq.ids.push(e.id);
        }
    }
    println!(
        "    {jobs} jobs on {KEYED_QUEUE} over {KEYS} keys (blocks of {KEY_BLOCK} a key in claim order), \
         key_max_workers {KEY_CAP}, handlers {KEYED_WORK:?}; {PROCESSES} worker processes x concurrency \
         {CONCURRENCY}; heartbeat {HEARTBEAT:?}, zombie timeout {ZOMBIE_TIMEOUT:?}, maintenance every \
         {MAINTENANCE_INTERVAL:?}; {} outages",
        KEYED_PLAN.len()
    );

    let files = std::env::temp_dir().join(format!("chokaq_outage_keyed_runs_{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&files).map_err(err)?;
    let mut procs = Vec::new();
    for i in 0..PROCESSES {
        procs.push(Proc::spawn(i, &url, &files, &[KEYED_QUEUE]).await?);
    }

    // The database-side per-key sampler.
    let keyed_samples: Arc<Mutex<KeySamples>> = Arc::default();
    let sampler_stop = CancellationToken::new();
    let sampler = {
        let (b, ks, stop) = (b.clone(), keyed_samples.clone(), sampler_stop.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                let s = b.stats().await;
                let mut c = ks.lock().unwrap();
                match s {
                    Ok(s) => {
                        c.samples += 1;
                        let busiest = s.queue(KEYED_QUEUE).map(|q| q.busiest_keys.clone()).unwrap_or_default();
                        for k in busiest {
                            c.max_running = c.max_running.max(k.running);
                            if k.running > u64::from(KEY_CAP) {
                                c.over.push((now_us(), k.key, k.running));
                            }
                        }
                    }
                    Err(_) => c.errors += 1,
                }
            }
        })
    };

    let mut failures: Vec<String> = Vec::new();
    let mut outages: Vec<Outage> = Vec::new();
    let mut last_up = 0i64;
    for (kind, share) in KEYED_PLAN {
        let n = outages.len() + 1;
        let seen: Arc<Mutex<String>> = Arc::default();
        let target = (f64::from(jobs) * share) as u64;
        let gap = if kind == Kind::LongStop { us(LONG_STOP_GAP) } else { 0 };
        wait_until(&format!("the moment for outage {n} ({kind:?})"), Duration::from_secs(120), || {
            let (b, seen) = (b.clone(), seen.clone());
            async move {
                let s = b.stats().await.map_err(err)?;
                *seen.lock().unwrap() = keyed_summary(&s);
                let archived = s.queue(KEYED_QUEUE).map_or(0, |q| q.archived);
                Ok(archived >= target && now_us() >= last_up + gap)
            }
        })
        .await?;
        let before = seen.lock().unwrap().clone();
        let down = now_us();
        let lost_before: Vec<u64> = procs.iter().map(|p| p.lost_by(down)).collect();
        cluster.outage(kind).await?;
        let up = now_us();
        last_up = up;
        let can_expire = up - down >= us(ZOMBIE_TIMEOUT) - us(EXPIRY_SLACK);
        let mut o = Outage {
            n,
            kind,
            down,
            up,
            zombie: ZOMBIE_TIMEOUT,
            can_expire,
            before,
            probes: 0,
            resumed: vec![None; PROCESSES],
            lost_before,
        };
        resume_after(&mut o, &mut procs, &b, &mut enq, t0, &mut failures).await?;
        println!(
            "    {}: down at +{:.2} s for {:.2} s{}; before: {}; claiming again after {}",
            o.name(),
            rel(down),
            secs(up - down),
            if can_expire { " (can expire leases)" } else { "" },
            o.before,
            o.resumed
                .iter()
                .enumerate()
                .map(|(i, r)| match r {
                    Some(t) => format!("p{i} {:.2} s", secs(t - up)),
                    None => format!("p{i} never"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
        outages.push(o);
    }
    let ids = enq.ids.clone();
    let total = ids.len() as u64;

    let drained = wait_until(&format!("all {total} jobs finished"), Duration::from_secs(60 + total / 100), || {
        let b = b.clone();
        async move {
            let s = b.stats().await.map_err(err)?;
            Ok(s.hot() == 0 && s.archived + s.dead == total)
        }
    })
    .await;
    let drained_at = now_us();
    if let Err(e) = &drained {
        let s = b.stats().await.map(|s| format!("{} archived, {} dead; {}", s.archived, s.dead, keyed_summary(&s)));
        failures.push(format!("{e}; now: {}", s.unwrap_or_else(|e| e.to_string())));
    }
    for p in &mut procs {
        p.check_alive("before the graceful stop")?;
    }
    sampler_stop.cancel();
    let _ = sampler.await;
    stop_workers(&mut procs, &mut failures).await?;
    let elapsed = t_begin.elapsed();

    // ---- Analysis -----------------------------------------------------------------------
    let runs = read_runs(&procs, &mut failures)?;
    let a = analyse(&ids, &std::collections::HashSet::new(), &runs, &outages, &mut failures);
    check_archived(&cluster, &b, &ids, &a, &mut failures).await?;
    // Per key, the most handlers at once on live leases (a run whose lease was lost stops
    // counting when the server came back from the outage that expired it), and in all.
    let peaks = peaks_by_group(&runs, &a.live_until, |id| key_by_job.get(id).cloned());
    let over: Vec<String> = peaks
        .iter()
        .filter(|(_, (live, _))| *live > KEY_CAP as usize)
        .map(|(k, (live, _))| format!("{k}: {live}"))
        .collect();
    if !over.is_empty() {
        failures.push(format!(
            "the per-key cap was exceeded: handlers of one key ran at once on live leases (key_max_workers \
             {KEY_CAP}): {over:?}"
        ));
    }
    let max_live = peaks.values().map(|(l, _)| *l).max().unwrap_or(0);
    let max_all = peaks.values().map(|(_, all)| *all).max().unwrap_or(0);
    let at_cap = peaks.values().filter(|(l, _)| *l == KEY_CAP as usize).count();
    if peaks.len() != KEYS as usize {
        failures.push(format!("handlers ran for {} keys, {KEYS} enqueued", peaks.len()));
    }
    if max_live < KEY_CAP as usize {
        failures.push(format!(
            "the per-key cap never bound (at most {max_live} handlers of a key at once): the case checks nothing"
        ));
    }

    // ---- Report ---------------------------------------------------------------------------
    println!(
        "    drained at +{:.2} s; {} handler runs for {total} jobs: {} re-runs",
        rel(drained_at),
        runs.len(),
        a.reruns.len()
    );
    let mut causes: BTreeMap<String, usize> = BTreeMap::new();
    for r in &a.reruns {
        *causes.entry(r.cause.clone()).or_default() += 1;
    }
    for (cause, n) in &causes {
        println!("      {n:>5} x {cause}");
    }
    for r in a.reruns.iter().filter(|r| !r.explained).take(8) {
        println!("      e.g. {}", r.detail);
    }
    println!(
        "    overlapping runs of one job: {} pairs ({} with the older lease lost to an outage)",
        a.overlaps, a.overlaps_explained
    );
    let c = keyed_samples.lock().unwrap();
    println!(
        "    key cap {KEY_CAP} on {KEYED_QUEUE}: per key at most {max_live} handlers at once on live leases ({at_cap} \
         of {} keys reached {KEY_CAP}; {max_all} counting runs whose lease was already lost); database samples: \
         at most {} Fetched + Processing of a key in {} samples ({} failed during outages)",
        peaks.len(),
        c.max_running,
        c.samples,
        c.errors
    );
    if !c.over.is_empty() {
        failures.push(format!(
            "the per-key cap was exceeded in the database: {} samples over {KEY_CAP}, e.g. {:?}",
            c.over.len(),
            c.over.iter().take(3).map(|(t, k, n)| format!("{k} {n} at +{:.2} s", rel(*t))).collect::<Vec<_>>()
        ));
    }
    if c.samples == 0 {
        failures.push("no database sample of the keyed queue succeeded".to_string());
    }
    drop(c);
    for p in &procs {
        let o = p.out.lock().unwrap();
        println!(
            "    worker p{} {}: {}",
            p.idx,
            o.worker_id.as_deref().unwrap_or("?"),
            o.report.as_deref().unwrap_or("no report")
        );
        for l in &o.logs {
            println!("      log {l}");
        }
    }
    println!("    total {:.1} s", elapsed.as_secs_f64());

    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&files);
        Ok(())
    } else {
        Err(format!(
            "{} check(s) failed (runs and worker logs kept in {}):\n  - {}",
            failures.len(),
            files.display(),
            failures.join("\n  - ")
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Analysis of the handler runs

#[derive(Debug, Clone)]
struct Run {
    job: JobId,
    lease: i64,
    attempt: i32,
    proc: usize,
    start: i64,
    /// None when no end was written (the runtime dropped the handler's future).
    end: Option<i64>,
    /// The handler's token fired while it ran.
    fired: bool,
}

impl Run {
    fn end_or_max(&self) -> i64 {
        self.end.unwrap_or(i64::MAX)
    }
}

fn read_runs(procs: &[Proc], failures: &mut Vec<String>) -> Result<Vec<Run>, String> {
    let mut runs: Vec<Run> = Vec::new();
    let mut index: HashMap<(JobId, i64), usize> = HashMap::new();
    let mut twice = Vec::new();
    for p in procs {
        let text = std::fs::read_to_string(&p.runs).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let bad = || format!("bad line in {}: {line:?}", p.runs.display());
            let job: JobId = f.get(1).ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let lease: i64 = f.get(2).ok_or_else(bad)?.parse().map_err(|_| bad())?;
            match f[0] {
                "S" if f.len() == 5 => {
                    let attempt = f[3].parse().map_err(|_| bad())?;
                    let start = f[4].parse().map_err(|_| bad())?;
                    if index.contains_key(&(job, lease)) {
                        twice.push(format!("{job} lease {lease}"));
                        continue;
                    }
                    index.insert((job, lease), runs.len());
                    runs.push(Run { job, lease, attempt, proc: p.idx, start, end: None, fired: false });
                }
                "E" if f.len() == 5 => {
                    let i = *index.get(&(job, lease)).ok_or_else(bad)?;
                    runs[i].end = Some(f[3].parse().map_err(|_| bad())?);
                    runs[i].fired = f[4] == "1";
                }
                _ => return Err(bad()),
            }
        }
    }
    if !twice.is_empty() {
        failures.push(format!(
            "{} leases ran their handler twice (one claim, two runs), e.g. {:?}",
            twice.len(),
            &twice[..twice.len().min(5)]
        ));
    }
    Ok(runs)
}

#[derive(Debug)]
struct Rerun {
    explained: bool,
    /// The last outage the earlier run lived into, whether it could expire a lease or not.
    across: Option<usize>,
    cause: String,
    detail: String,
}

#[derive(Debug, Default)]
struct Analysis {
    by_job: HashMap<JobId, Vec<Run>>,
    reruns: Vec<Rerun>,
    overlaps: usize,
    overlaps_explained: usize,
    cap_live: usize,
    cap_all: usize,
    /// Until when each run's lease was live, for runs whose lease was lost (`(job, lease)`).
    live_until: HashMap<(JobId, i64), i64>,
}

/// The last outage `older`'s lease lived into before `newer` began: `older` was claimed
/// before the server came back (it started before, or a lease at least as new ran before), its
/// outcome may still have been unwritten when the server went (it could be written at most
/// `OUTCOME_SLACK` before), and `newer` started after the server came back. The last one, not
/// the first: a run that outlived an outage was not lost in it (a lost lease fires the token and
/// the handler ends within a second of the server coming back).
fn outage_across<'o>(
    older: &Run,
    newer: &Run,
    outages: &'o [Outage],
    newest_lease_started_before: &dyn Fn(i64) -> i64,
) -> Option<&'o Outage> {
    outages.iter().rev().find(|o| {
        (older.start < o.up || older.lease <= newest_lease_started_before(o.up))
            && writable_from(older, outages) >= o.down - us(OUTCOME_SLACK)
            && newer.start >= o.up
    })
}

/// The outage that explains why `older`'s lease was lost and `newer` got a new one: the last
/// one `older` lived into ([`outage_across`]), when it was long enough to expire a lease.
fn explaining_outage<'o>(
    older: &Run,
    newer: &Run,
    outages: &'o [Outage],
    newest_lease_started_before: &dyn Fn(i64) -> i64,
) -> Option<&'o Outage> {
    outage_across(older, newer, outages, newest_lease_started_before).filter(|o| o.can_expire)
}

/// When `r`'s outcome could first be written: when it ended, or when the server came back if
/// it ended during an outage.
fn writable_from(r: &Run, outages: &[Outage]) -> i64 {
    let end = r.end_or_max();
    outages.iter().find(|o| end >= o.down && end <= o.up).map_or(end, |o| o.up)
}

/// Where `t` lies relative to the outages, for the report.
fn placement(t: i64, outages: &[Outage]) -> String {
    if let Some(o) = outages.iter().find(|o| t >= o.down && t <= o.up) {
        return format!("during outage {}", o.n);
    }
    let before = outages.iter().filter(|o| o.down > t).min_by_key(|o| o.down);
    let after = outages.iter().filter(|o| o.up < t).max_by_key(|o| o.up);
    match (after, before) {
        (Some(a), Some(b)) if t - a.up <= b.down - t => format!("{:.2} s after outage {}", secs(t - a.up), a.n),
        (_, Some(b)) => format!("{:.2} s before outage {}", secs(b.down - t), b.n),
        (Some(a), None) => format!("{:.2} s after outage {}", secs(t - a.up), a.n),
        (None, None) => "with no outage".to_string(),
    }
}

/// [`placement`] without the distance, to group re-runs by it.
fn coarse_placement(t: i64, outages: &[Outage]) -> String {
    let p = placement(t, outages);
    match p.split_once(" s ") {
        Some((_, rest)) => rest.to_string(),
        None => p,
    }
}

fn analyse(
    ids: &[JobId],
    capped: &std::collections::HashSet<JobId>,
    runs: &[Run],
    outages: &[Outage],
    failures: &mut Vec<String>,
) -> Analysis {
    let mut a = Analysis::default();
    let known: std::collections::HashSet<JobId> = ids.iter().copied().collect();
    for r in runs {
        a.by_job.entry(r.job).or_default().push(r.clone());
    }
    let unknown = a.by_job.keys().filter(|id| !known.contains(id)).count();
    if unknown > 0 {
        failures.push(format!("{unknown} handler runs for ids that were never enqueued"));
    }
    let never = ids.iter().filter(|id| !a.by_job.contains_key(id)).count();
    if never > 0 {
        failures.push(format!("{never} jobs never ran a handler"));
    }
    for rs in a.by_job.values_mut() {
        rs.sort_by_key(|r| r.lease);
    }
    // Leases grow with every claim of any job, so a lease at most as new as one whose run
    // started before `t` was granted before `t`.
    let mut by_start: Vec<(i64, i64)> = runs.iter().map(|r| (r.start, r.lease)).collect();
    by_start.sort();
    let mut prefix_max = Vec::with_capacity(by_start.len());
    let mut m = i64::MIN;
    for (_, l) in &by_start {
        m = m.max(*l);
        prefix_max.push(m);
    }
    let newest_before = |t: i64| -> i64 {
        let i = by_start.partition_point(|(s, _)| *s < t);
        if i == 0 {
            i64::MIN
        } else {
            prefix_max[i - 1]
        }
    };

    // Re-runs: each run after the first, explained by the outage that expired the older lease.
    // For the cap: until when each run's lease was live.
    let mut live_until: HashMap<(JobId, i64), i64> = HashMap::new();
    for (id, rs) in &a.by_job {
        for w in rs.windows(2) {
            let (older, newer) = (&w[0], &w[1]);
            let phase = |o: &Outage| {
                if older.start >= o.down {
                    "started during the outage (claimed before it)"
                } else if older.end_or_max() <= o.down {
                    "finished before the outage, outcome not yet written"
                } else {
                    "running when the server went"
                }
            };
            match explaining_outage(older, newer, outages, &newest_before) {
                Some(o) => {
                    live_until.insert((*id, older.lease), older.end_or_max().min(o.up));
                    a.reruns.push(Rerun {
                        explained: true,
                        across: Some(o.n),
                        cause: format!(
                            "lease expired in {} ({:.1} s down; zombie timeout {:?}), rescued as a zombie: earlier \
                             run {}{}",
                            o.name(),
                            secs(o.up - o.down),
                            o.zombie,
                            phase(o),
                            if older.fired { ", its token fired" } else { "" }
                        ),
                        detail: String::new(),
                    });
                }
                None => {
                    live_until.insert((*id, older.lease), older.end_or_max().min(newer.start));
                    let end = older.end.map_or("never ended".to_string(), |e| placement(e, outages));
                    let across = outage_across(older, newer, outages, &newest_before);
                    a.reruns.push(Rerun {
                        explained: false,
                        across: across.map(|o| o.n),
                        cause: match across {
                            Some(o) => format!(
                                "lease lost across {} ({:.1} s down, shorter than its zombie timeout {:?}): \
                                 earlier run {}{}",
                                o.name(),
                                secs(o.up - o.down),
                                o.zombie,
                                phase(o),
                                if older.fired { ", its token fired" } else { "" }
                            ),
                            None => format!(
                                "lease lost with no outage long enough to expire it: earlier run ended {}",
                                older.end.map_or("never".to_string(), |e| coarse_placement(e, outages))
                            ),
                        },
                        detail: format!(
                            "job {id}: lease {} (attempt {}, p{}) ran {:.3} s, ended {end}, token fired: {}; \
                             lease {} (attempt {}, p{}) started {}",
                            older.lease,
                            older.attempt,
                            older.proc,
                            older.end.map_or(f64::NAN, |e| secs(e - older.start)),
                            older.fired,
                            newer.lease,
                            newer.attempt,
                            newer.proc,
                            placement(newer.start, outages)
                        ),
                    });
                }
            }
        }
        // Overlapping runs of one job.
        for (i, x) in rs.iter().enumerate() {
            for y in &rs[i + 1..] {
                if x.start < y.end_or_max() && y.start < x.end_or_max() {
                    a.overlaps += 1;
                    if explaining_outage(x, y, outages, &newest_before).is_some() {
                        a.overlaps_explained += 1;
                    }
                }
            }
        }
    }
    let unexplained = a.reruns.iter().filter(|r| !r.explained).count();
    if unexplained > 0 {
        failures.push(format!(
            "{unexplained} re-runs without an outage long enough to expire a lease: across an outage shorter \
             than the zombie timeout no lease may be lost, so no job may run twice (first: {})",
            a.reruns.iter().find(|r| !r.explained).map(|r| r.detail.as_str()).unwrap_or_default()
        ));
    }
    if a.overlaps > a.overlaps_explained {
        failures.push(format!(
            "{} pairs of runs of one job overlapped in time while both leases were live",
            a.overlaps - a.overlaps_explained
        ));
    }

    // The cap: the most capped handlers at once, on live leases and in all.
    let peaks = peaks_by_group(runs, &live_until, |id| capped.contains(id).then(String::new));
    (a.cap_live, a.cap_all) = peaks.get("").copied().unwrap_or_default();
    a.live_until = live_until;
    a
}

/// Per group (`group_of` a job; None: in none), the most handlers of the group that ran at
/// once: on live leases (a run counts until `live_until` of its lease, when it has one), and in
/// all. Ends come before starts at the same instant.
fn peaks_by_group(
    runs: &[Run],
    live_until: &HashMap<(JobId, i64), i64>,
    group_of: impl Fn(&JobId) -> Option<String>,
) -> BTreeMap<String, (usize, usize)> {
    // (time, +1 at a start / -1 at an end), on live leases and in all.
    type Events = Vec<(i64, i32)>;
    let mut events: BTreeMap<String, (Events, Events)> = BTreeMap::new();
    for r in runs {
        let Some(g) = group_of(&r.job) else { continue };
        let (live_events, all_events) = events.entry(g).or_default();
        let end = r.end_or_max();
        all_events.push((r.start, 1));
        all_events.push((end, -1));
        let live_end = live_until.get(&(r.job, r.lease)).copied().unwrap_or(end);
        if live_end > r.start {
            live_events.push((r.start, 1));
            live_events.push((live_end, -1));
        }
    }
    let peak = |mut ev: Events| {
        ev.sort();
        let (mut cur, mut max) = (0i32, 0i32);
        for (_, d) in ev {
            cur += d;
            max = max.max(cur);
        }
        max as usize
    };
    events.into_iter().map(|(g, (live, all))| (g, (peak(live), peak(all)))).collect()
}
