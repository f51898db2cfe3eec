//! Worker processes: several processes drain one queue, one of them killed.

use super::*;

pub(crate) const JOBS: usize = 10_000;
pub(crate) const PROCESSES: usize = 4;
pub(crate) const CONCURRENCY: u32 = 8;
/// The SIGKILL victim stalls every handler after this many runs of its own (each stalled
/// handler writes its run line first, then waits forever), so the kill lands at a known point
/// instead of a timed one.
pub(crate) const STALL_AFTER: usize = 300;

/// A worker process: runs `Count` jobs until its stdin closes, appending each run's job id to
/// its own file. Prints `WORKER <id>` first and `REPORT ...` last. With `CHOKAQ_RT_STALL_AFTER`
/// set to `n`, every run after the `n`-th writes its line and then never returns. With
/// `CHOKAQ_RT_ABORT` set, every run writes its line and then aborts the process at once
/// (`std::process::abort()`), and the worker runs no maintenance (the parent rescues).
pub(crate) fn child_main() -> ExitCode {
    let schema = std::env::var("CHOKAQ_RT_SCHEMA").expect("schema");
    let runs_file = PathBuf::from(std::env::var("CHOKAQ_RT_RUNS").expect("runs file"));
    let stall_after: Option<usize> = std::env::var("CHOKAQ_RT_STALL_AFTER").ok().map(|v| v.parse().expect("a count"));
    let abort = std::env::var_os(ABORT_ENV).is_some();
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let rt = runtime();
    let out = rt.block_on(async move {
        let backend: Arc<dyn Backend> = Arc::new(connect(&schema, 4).await.map_err(err)?);
        let file =
            Arc::new(Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(&runs_file).map_err(err)?));
        let maintenance = MaintenanceConfig {
            enabled: true,
            interval: Duration::from_millis(500),
            // The 3 s timeouts are the queue's settings (set by the parent).
            rescue: RescueParams { limit: 1000, purge: Vec::new() },
            archive_retention: None,
            dead_letter_retention: None,
            worker_stale_after: None,
            unique_prune_limit: 1000,
        };
        let maintenance = if abort { common::no_maintenance() } else { maintenance };
        // The aborting worker has one slot, so the innocent job waits in its look-ahead.
        let worker = Worker::builder(backend)
            .concurrency(if abort { 1 } else { CONCURRENCY })
            .heartbeat_interval(Duration::from_millis(300))
            .poll_interval(Duration::from_millis(200))
            .maintenance(maintenance)
            .register(move |job: Count, ctx: JobContext| {
                let (file, ran) = (file.clone(), ran.clone());
                async move {
                    // One write(2) per run, straight to the file: survives SIGKILL.
                    let line = format!("{}\n", ctx.id());
                    file.lock().unwrap().write_all(line.as_bytes()).map_err(chokaq::JobError::retry)?;
                    if abort && job.n == 0 {
                        // The poison job's handler kills its process as soon as it begins.
                        std::process::abort();
                    }
                    let n = ran.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1;
                    if stall_after.is_some_and(|limit| n > limit) {
                        // Stalled until the process is killed.
                        futures::future::pending::<()>().await;
                    }
                    // A little simulated work so a kill lands mid-run.
                    tokio::time::sleep(Duration::from_millis(3)).await;
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
        let report = worker.run(token).await.map_err(err)?;
        println!("REPORT {report:?}");
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

pub(crate) struct ChildProc {
    pub(crate) child: tokio::process::Child,
    pub(crate) worker_id: String,
    pub(crate) runs_file: PathBuf,
    pub(crate) stdout: BufReader<tokio::process::ChildStdout>,
}

pub(crate) async fn spawn_child(
    schema: &str,
    runs_file: &Path,
    stall_after: Option<usize>,
) -> Result<ChildProc, String> {
    let extra: Vec<(&str, String)> =
        stall_after.map(|n| ("CHOKAQ_RT_STALL_AFTER", n.to_string())).into_iter().collect();
    spawn_child_env(schema, runs_file, &extra).await
}

/// [`spawn_child`] with more environment variables for the child.
pub(crate) async fn spawn_child_env(
    schema: &str,
    runs_file: &Path,
    extra: &[(&str, String)],
) -> Result<ChildProc, String> {
    let exe = std::env::current_exe().map_err(err)?;
    let mut command = tokio::process::Command::new(exe);
    for (k, v) in extra {
        command.env(k, v);
    }
    let mut child = command
        .env(CHILD_ENV, "1")
        .env("CHOKAQ_RT_SCHEMA", schema)
        .env("CHOKAQ_RT_RUNS", runs_file)
        .env("CHOKAQ_TEST_POSTGRES_URL", url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(err)?;
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(30), stdout.read_line(&mut line))
        .await
        .map_err(|_| "worker process did not start within 30 s")?
        .map_err(err)?;
    let worker_id = line.trim().strip_prefix("WORKER ").ok_or_else(|| format!("unexpected first line {line:?}"))?;
    Ok(ChildProc { worker_id: worker_id.to_string(), child, runs_file: runs_file.to_path_buf(), stdout })
}

pub(crate) fn read_runs(path: &Path) -> Result<Vec<JobId>, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| l.parse::<JobId>().map_err(err)).collect()
}

/// 10,000 jobs through four worker processes (concurrency 8 each). With `kill`, one process
/// is SIGKILLed mid-run and the others (rescue included) finish its jobs.
pub(crate) async fn multi_process(b: Arc<PgBackend>, kill: bool) -> TestResult {
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetZombieTimeout(Some(Duration::from_secs(3))))
        .await
        .map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetFetchedTimeout(Some(Duration::from_secs(3))))
        .await
        .map_err(err)?;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb);
    let jobs: Vec<Count> = (0..JOBS as u32).map(|n| Count { n }).collect();
    let ids: Vec<JobId> = client.enqueue_many(&jobs).await.map_err(err)?.into_iter().map(|e| e.id).collect();
    ensure!(ids.len() == JOBS, "enqueued {}", ids.len());

    let dir = std::env::temp_dir().join(format!("chokaq_rt_{}", b.schema()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    let t0 = Instant::now();
    let mut children = Vec::new();
    for i in 0..PROCESSES {
        // With `kill`, process 0 is the victim: it stalls after `STALL_AFTER` runs.
        let stall = (kill && i == 0).then_some(STALL_AFTER);
        children.push(spawn_child(b.schema(), &dir.join(format!("runs-{i}.txt")), stall).await?);
    }

    let mut victim: Option<ChildProc> = None;
    if kill {
        // Kill process 0 at a known point, not a timed one: every one of its slots holds a
        // stalled handler (it has written `STALL_AFTER + CONCURRENCY` run lines), and every
        // other run of it has its outcome written (exactly `CONCURRENCY` of its runs are
        // still in the hot table).
        let mut v = children.remove(0);
        let stalled = STALL_AFTER + CONCURRENCY as usize;
        common::wait_for("the victim's slots all stalled", Duration::from_secs(60), || async {
            Ok(read_runs(&v.runs_file)?.len() >= stalled)
        })
        .await?;
        common::wait_for("the victim's finished runs all written", Duration::from_secs(30), || async {
            let mine = read_runs(&v.runs_file)?;
            let hot = b.presence_many(&mine).await.map_err(err)?.iter().filter(|(_, p)| p.hot == 1).count();
            Ok(hot == CONCURRENCY as usize)
        })
        .await?;
        let n = read_runs(&v.runs_file)?.len();
        ensure!(n == stalled, "the victim ran {n} handlers, {stalled} expected (its slots are stalled)");
        v.child.start_kill().map_err(err)?; // SIGKILL: no cleanup at all
        v.child.wait().await.map_err(err)?;
        println!("    SIGKILLed worker process {} after {:?}", v.worker_id, t0.elapsed());
        victim = Some(v);
    }

    common::wait_for("all 10,000 archived", Duration::from_secs(90), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.archived == JOBS as u64 && s.hot() == 0)
    })
    .await?;
    let elapsed = t0.elapsed();

    // Graceful stop of the survivors: close stdin, collect reports.
    for c in &mut children {
        drop(c.child.stdin.take());
    }
    for c in &mut children {
        let status = tokio::time::timeout(Duration::from_secs(30), c.child.wait())
            .await
            .map_err(|_| "worker process did not exit")?
            .map_err(err)?;
        let mut rest = String::new();
        c.stdout.read_to_string(&mut rest).await.map_err(err)?;
        ensure!(status.success(), "worker process exited with {status}");
        println!("    worker {}: {}", c.worker_id, rest.trim());
    }

    // Exactly once in the tables: archived, nowhere else.
    for chunk in ids.chunks(1000) {
        for (id, p) in b.presence_many(chunk).await.map_err(err)? {
            ensure!(p.archive == 1 && p.hot == 0 && p.dead == 0, "job {id}: {p:?}");
        }
    }

    // Handler runs, counted outside the tables.
    let mut runs: HashMap<JobId, u32> = HashMap::new();
    let mut total_runs = 0usize;
    for i in 0..PROCESSES {
        for id in read_runs(&dir.join(format!("runs-{i}.txt")))? {
            *runs.entry(id).or_default() += 1;
            total_runs += 1;
        }
    }
    let known: HashSet<JobId> = ids.iter().copied().collect();
    ensure!(runs.keys().all(|id| known.contains(id)), "a handler ran for an unknown id");
    let never: Vec<_> = ids.iter().filter(|id| !runs.contains_key(id)).collect();
    ensure!(never.is_empty(), "{} jobs archived without a handler run", never.len());
    let twice: HashSet<JobId> = runs.iter().filter(|(_, &n)| n > 1).map(|(id, _)| *id).collect();
    let max_runs = runs.values().copied().max().unwrap_or(0);

    if let Some(v) = victim {
        // Which of the victim's runs were cut off: it wrote the line but its job was archived
        // by someone else.
        let victim_runs: HashSet<JobId> = read_runs(&v.runs_file)?.into_iter().collect();
        let mut archived_by: HashMap<JobId, Option<String>> = HashMap::new();
        let mut attempts: HashMap<JobId, i32> = HashMap::new();
        let mut filter = ListJobsParams::new(JobTable::Archive);
        filter.limit = 1000;
        loop {
            let page = b.list_jobs(&filter).await.map_err(err)?;
            for j in &page.jobs {
                archived_by.insert(j.id, j.worker_id.map(|w| w.to_string()));
                attempts.insert(j.id, j.attempt);
            }
            match page.next {
                Some(n) => filter.after = Some(n),
                None => break,
            }
        }
        let cut_off: HashSet<JobId> = victim_runs
            .iter()
            .filter(|id| archived_by.get(id).and_then(|w| w.as_deref()) != Some(v.worker_id.as_str()))
            .copied()
            .collect();
        println!(
            "    kill: victim ran {} jobs, {} of them cut off; {} jobs ran twice (max runs per job {max_runs}); \
             {total_runs} handler runs for {JOBS} jobs; {elapsed:?}",
            victim_runs.len(),
            cut_off.len(),
            twice.len()
        );
        ensure!(max_runs <= 2, "a job ran {max_runs} times");
        ensure!(
            twice == cut_off,
            "jobs run twice ({}) must be exactly the victim's cut-off runs ({}); extra: {:?}",
            twice.len(),
            cut_off.len(),
            twice.symmetric_difference(&cut_off).take(5).collect::<Vec<_>>()
        );
        // The kill landed at a known point: exactly the stalled handlers were cut off.
        ensure!(
            cut_off.len() == CONCURRENCY as usize,
            "{} cut-off runs; the victim had exactly {CONCURRENCY} stalled handlers and every other outcome written",
            cut_off.len()
        );
        // Attempts spent without a run: none. The victim's look-ahead jobs were Fetched (a job
        // is started only when a slot takes it), so the rescuer put them back uncounted.
        let burned = attempts.iter().filter(|(id, a)| **a as u32 > runs.get(id).copied().unwrap_or(0)).count();
        println!("    kill: {burned} jobs archived with more attempts than handler runs");
        ensure!(burned == 0, "{burned} jobs lost an attempt without a run (look-ahead claimed started?)");
    } else {
        println!(
            "    {JOBS} jobs, {PROCESSES} processes x {CONCURRENCY}: {total_runs} handler runs in {elapsed:?} \
             ({:.0} jobs/s)",
            JOBS as f64 / elapsed.as_secs_f64()
        );
        ensure!(twice.is_empty() && total_runs == JOBS, "{} jobs ran more than once", twice.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
