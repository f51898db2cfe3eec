//! Shutdown and pause: the prefetch buffer handed back, the look-ahead kept running.

use super::*;

/// Shutdown with a full prefetch buffer: buffered jobs are Pending again at once; a handler
/// that ignores its token is handed back after the grace period.
pub async fn shutdown_releases_prefetch<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let grace = Duration::from_millis(700);
    let w = Worker::builder(dynb)
        .concurrency(1)
        .prefetch(4)
        .shutdown_grace(grace)
        .cancel_wait(Duration::from_millis(200))
        .maintenance(no_maintenance())
        .register(|_: Block, _ctx: JobContext| async move {
            // Ignores cancellation entirely.
            futures::future::pending::<()>().await;
            Ok(())
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Block> = (0..5).map(|n| Block { n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    wait_for("1 processing + 4 fetched", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.processing == 1 && s.fetched == 4)
    })
    .await?;
    let t0 = Instant::now();
    token.cancel();
    wait_for("4 pending again", Duration::from_secs(1), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.pending == 4 && s.fetched == 0)
    })
    .await?;
    let released_after = t0.elapsed();
    let report = tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .map_err(|_| "worker did not stop")?
        .map_err(err)?
        .map_err(err)?;
    let stopped_after = t0.elapsed();
    ensure!(stopped_after >= grace, "stopped after {stopped_after:?}, before the grace period");
    let s = b.stats().await.map_err(err)?;
    ensure!(s.pending == 5 && s.processing == 0 && s.fetched == 0, "after shutdown: {s:?}");
    let page = b.list_jobs(&chokaq::core::ListJobsParams::new(chokaq::core::JobTable::Hot)).await.map_err(err)?;
    let handed: Vec<_> = page.jobs.iter().filter(|j| j.last_error.as_deref() == Some(chokaq::SHUTDOWN_ERROR)).collect();
    ensure!(handed.len() == 1 && handed[0].attempt == 1, "handed back: {handed:?}");
    ensure!(report.released == 4 && report.handed_back == 1, "{report:?}");
    println!(
        "    prefetched jobs pending again {released_after:?} after shutdown; worker stopped after {stopped_after:?}"
    );
    Ok(())
}

/// Prefetched (Fetched, not started) jobs of a queue that gets paused are released by their
/// worker, not run; the running job finishes.
pub async fn pause_releases_prefetch<B: TestSupport>(b: Arc<B>) -> TestResult {
    use chokaq::BackendExt;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let go = Arc::new(tokio::sync::Notify::new());
    let ran: Arc<Mutex<Vec<u32>>> = Arc::default();
    let (g2, r2) = (go.clone(), ran.clone());
    let hb = Duration::from_millis(200);
    let w = Worker::builder(dynb)
        .concurrency(1)
        .prefetch(3)
        .heartbeat_interval(hb)
        .maintenance(no_maintenance())
        .register(move |job: Block, _ctx: JobContext| {
            let (go, ran) = (g2.clone(), r2.clone());
            async move {
                ran.lock().unwrap().push(job.n);
                go.notified().await;
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Block> = (0..4).map(|n| Block { n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    wait_for("1 processing + 3 fetched", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.processing == 1 && s.fetched == 3)
    })
    .await?;
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.pause(&queue).await.map_err(err)?;
    let t0 = Instant::now();
    wait_for("3 pending again", 3 * hb + Duration::from_secs(1), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.pending == 3 && s.fetched == 0)
    })
    .await?;
    let took = t0.elapsed();
    go.notify_one();
    wait_for("running job archived", Duration::from_secs(5), || async {
        Ok(b.stats().await.map_err(err)?.archived == 1)
    })
    .await?;
    let report = stop(token, h).await?;
    ensure!(ran.lock().unwrap().len() == 1, "handlers ran: {:?}", ran.lock().unwrap());
    ensure!(report.released == 3 && report.completed == 1, "{report:?}");
    println!("    paused queue: prefetched jobs released {took:?} after the pause");
    Ok(())
}

/// Pausing a queue stops claims only: the look-ahead jobs a worker already holds (reserved,
/// Fetched, started when a slot takes them) keep their leases and run to completion, once
/// each with attempt 1; nothing else is claimed until the queue is resumed
/// (`docs/contract.md`, "Operations and guards", pause).
pub async fn pause_keeps_lookahead_running<B: TestSupport>(b: Arc<B>) -> TestResult {
    use chokaq::BackendExt;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let ran: Arc<Mutex<Vec<u32>>> = Arc::default();
    let (g2, r2) = (gate.clone(), ran.clone());
    let hb = Duration::from_millis(100);
    let w = Worker::builder(dynb)
        .concurrency(1)
        .prefetch(0)
        .lookahead(3)
        // The held jobs wait behind a blocked one on purpose: not released for waiting.
        .lookahead_wait(Duration::from_secs(3600))
        .heartbeat_interval(hb)
        .maintenance(no_maintenance())
        .register(move |job: Block, _ctx: JobContext| {
            let (gate, ran) = (g2.clone(), r2.clone());
            async move {
                ran.lock().unwrap().push(job.n);
                gate.acquire().await.map_err(|e| JobError::Fatal(e.to_string()))?.forget();
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Block> = (0..8).map(|n| Block { n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    // One running, at least one held in the look-ahead buffer.
    wait_for("a running job and look-ahead jobs", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.processing + s.fetched >= 2 && ran.lock().unwrap().len() == 1)
    })
    .await?;
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.pause(&queue).await.map_err(err)?;
    let s = b.stats().await.map_err(err)?;
    let held = s.processing + s.fetched;
    // Over three heartbeat intervals nothing goes back to Pending and nothing new is claimed.
    let window = Instant::now() + 3 * hb;
    while Instant::now() < window {
        let s = b.stats().await.map_err(err)?;
        ensure!(s.processing + s.fetched == held && s.pending == 8 - held, "after the pause: {s:?} (held {held})");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gate.add_permits(100);
    wait_for("the held jobs archived", Duration::from_secs(10), || async {
        Ok(b.stats().await.map_err(err)?.archived == held)
    })
    .await?;
    let s = b.stats().await.map_err(err)?;
    ensure!(s.pending == 8 - held && s.processing == 0, "while paused, after the held jobs: {s:?}");
    let mut f = chokaq::core::ListJobsParams::new(chokaq::core::JobTable::Archive);
    f.queue = Some(queue.clone());
    for r in b.list_jobs(&f).await.map_err(err)?.jobs {
        ensure!(r.attempt == 1, "job {} archived with attempt {}", r.id, r.attempt);
    }
    ensure!(ran.lock().unwrap().len() as u64 == held, "handler runs while paused: {:?}", ran.lock().unwrap());
    b.resume(&queue).await.map_err(err)?;
    wait_for("every job archived after the resume", Duration::from_secs(10), || async {
        Ok(b.stats().await.map_err(err)?.archived == 8)
    })
    .await?;
    let report = stop(token, h).await?;
    ensure!(ran.lock().unwrap().len() == 8, "handler runs: {:?}", ran.lock().unwrap());
    ensure!(report.released == 0 && report.completed == 8, "{report:?}");
    println!("    paused queue: {held} look-ahead jobs ran to completion while paused");
    Ok(())
}
