//! The worker processes: the child's main (this binary re-executed), its log counts, and the parent's handle on each process.

use super::*;

/// Counts of the logged events (warnings and errors, and chokaq's info events such as rescues)
/// per (level, target, message), with the first `error` field seen and the sums of numeric
/// fields: printed by the worker process at the end, for the report.
#[derive(Debug, Default)]
pub(crate) struct LogCounts(Mutex<BTreeMap<(String, String, String), LogEntry>>);

#[derive(Debug, Default)]
pub(crate) struct LogEntry {
    pub(crate) count: u64,
    pub(crate) first_error: String,
    pub(crate) sums: BTreeMap<&'static str, u64>,
}

#[derive(Default)]
pub(crate) struct EventFields {
    pub(crate) message: String,
    pub(crate) error: String,
    pub(crate) numbers: Vec<(&'static str, u64)>,
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
pub(crate) fn child_main() -> ExitCode {
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
            unique_prune_limit: 1000,
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
pub(crate) struct ChildOut {
    pub(crate) worker_id: Option<String>,
    /// (time, jobs claimed so far, leases lost so far).
    pub(crate) stats: Vec<(i64, u64, u64)>,
    pub(crate) report: Option<String>,
    pub(crate) logs: Vec<String>,
    pub(crate) eof: bool,
}

pub(crate) struct Proc {
    pub(crate) idx: usize,
    pub(crate) child: tokio::process::Child,
    pub(crate) runs: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) stderr: PathBuf,
    pub(crate) out: Arc<Mutex<ChildOut>>,
}

impl Proc {
    /// Worker process `idx`, claiming from `queues` (the shared ones) and its own probe queue.
    pub(crate) async fn spawn(idx: usize, url: &str, dir: &Path, queues: &[&str]) -> Result<Proc, String> {
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

    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default().trim().to_string()
    }

    /// `Err` when the process has exited (it must survive every outage).
    pub(crate) fn check_alive(&mut self, when: &str) -> Result<(), String> {
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
    pub(crate) fn claimed_again(&self, after: i64) -> Option<i64> {
        let o = self.out.lock().unwrap();
        let base = o.stats.iter().take_while(|(t, _, _)| *t <= after).last().map(|s| s.1).unwrap_or(0);
        o.stats.iter().find(|(t, n, _)| *t > after && *n > base).map(|s| s.0)
    }

    /// The leases this process had reported lost by `at` (its last sample at or before it).
    pub(crate) fn lost_by(&self, at: i64) -> u64 {
        let o = self.out.lock().unwrap();
        o.stats.iter().take_while(|(t, _, _)| *t <= at).last().map(|s| s.2).unwrap_or(0)
    }
}
