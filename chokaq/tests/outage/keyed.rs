//! The keyed variant (issue 25): a per-key cap through the same restarts.

use super::*;

pub(crate) const KEYED_QUEUE: &str = "outage_keyed";
/// Concurrency keys of the keyed queue, and the cap on each.
pub(crate) const KEYS: u32 = 20;
pub(crate) const KEY_CAP: u32 = 2;
/// Consecutive jobs (in claim order) of one key: the head of the queue is always a few keys
/// with many jobs each, so the cap binds and every claim skips keys at their cap.
pub(crate) const KEY_BLOCK: u32 = 10;
pub(crate) const KEYED_WORK: Duration = Duration::from_millis(20);

/// The keyed case's outages, each once this share of its jobs is archived: the restarts and
/// stops of [`PLAN`] but the 45 s one (the zombie-timeout rule it checks has nothing keyed). The
/// long stop also waits `LONG_STOP_GAP` after the outage before it.
pub(crate) const KEYED_PLAN: [(Kind, f64); 5] = [
    (Kind::RestartFast, 0.15),
    (Kind::RestartImmediate, 0.3),
    (Kind::ShortStop, 0.45),
    (Kind::RestartFast, 0.55),
    (Kind::LongStop, 0.65),
];

/// The key of the keyed case's job `n`.
pub(crate) fn key_of(n: u32) -> String {
    format!("tenant-{:02}", (n / KEY_BLOCK) % KEYS)
}

/// The database-side per-key check: the most Fetched + Processing jobs any key of the keyed
/// queue held in a `stats()` sample (`busiest_keys`).
#[derive(Debug, Default)]
pub(crate) struct KeySamples {
    pub(crate) samples: u64,
    pub(crate) errors: u64,
    pub(crate) max_running: u64,
    pub(crate) over: Vec<(i64, String, u64)>,
}

pub(crate) fn keyed_summary(s: &chokaq::core::StatsSnapshot) -> String {
    let q = s.queue(KEYED_QUEUE).cloned().unwrap_or_default();
    let busiest: Vec<String> = q.busiest_keys.iter().map(|k| format!("{} {}", k.key, k.running)).collect();
    format!("{KEYED_QUEUE}: {} pending, {} processing, busiest keys [{}]", q.pending, q.processing, busiest.join(", "))
}

pub(crate) async fn keyed_scenario(bin: PgBin) -> Result<(), String> {
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
