//! Leases and wake-ups: a lost lease discards its outcome, a snooze does not count as an attempt, a wake-up beats polling, a dropped worker hands its jobs back.

use super::*;

/// A job whose lease is lost while it runs (rescued as a zombie behind its worker's back) has
/// its token fired and its outcome discarded; the job then runs again and completes once.
pub async fn lease_lost_discards_outcome<B: TestSupport>(b: Arc<B>) -> TestResult {
    use chokaq::core::RescueParams;
    use chokaq_core::testing::JobPatch;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let fired: Arc<Mutex<Vec<i32>>> = Arc::default();
    let f2 = fired.clone();
    let started = Arc::new(tokio::sync::Notify::new());
    let s2 = started.clone();
    let w = Worker::builder(dynb)
        .concurrency(1)
        .heartbeat_interval(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(move |_: Block, ctx: JobContext| {
            let (fired, started) = (f2.clone(), s2.clone());
            async move {
                if ctx.attempt() == 1 {
                    started.notify_one();
                    ctx.cancelled().await;
                    fired.lock().unwrap().push(ctx.attempt());
                    // This success must be discarded: the lease is gone.
                    return Ok(());
                }
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await.map_err(|_| "handler never started")?;
    // The job is held until its deferred start is written (20 ms into the run): wait for it
    // to be Processing, its attempt counted.
    wait_for("the run's start recorded", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Hot(chokaq::core::JobStatus::Processing)))
    })
    .await?;
    // Make it look like a zombie and rescue it (retry until the rescue lands between two
    // heartbeats).
    wait_for("zombie rescued", Duration::from_secs(10), || async {
        let now = b.db_now().await.map_err(err)?;
        let old = now - chrono::Duration::hours(1);
        let patch = JobPatch { heartbeat_at: Some(Some(old)), ..JobPatch::default() };
        if !b.force(id, &patch).await.map_err(err)? {
            return Ok(false);
        }
        // An hour-old heartbeat is past the default zombie timeout (300 s).
        let params = RescueParams { limit: 10, ..RescueParams::default() };
        Ok(b.rescue(&params).await.map_err(err)?.zombies_retried == 1)
    })
    .await?;
    wait_for("archived after the second attempt", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let report = stop(token, h).await?;
    let r = b.get_job(id).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 2, "attempt {}", r.attempt);
    ensure!(*fired.lock().unwrap() == vec![1], "token fired for attempts {:?}", fired.lock().unwrap());
    ensure!(report.lease_lost == 1 && report.completed == 1 && report.started == 2, "{report:?}");
    Ok(())
}

/// A snooze puts the job back without counting the attempt.
pub async fn snooze_does_not_count<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let calls = Arc::new(Mutex::new(0u32));
    let c2 = calls.clone();
    let w = Worker::builder(dynb)
        .concurrency(1)
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(move |_: Block, _ctx: JobContext| {
            let calls = c2.clone();
            async move {
                let n = {
                    let mut c = calls.lock().unwrap();
                    *c += 1;
                    *c
                };
                if n == 1 {
                    return Err(JobError::Snooze(Duration::from_millis(100)));
                }
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    wait_for("archived", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let report = stop(token, h).await?;
    let r = b.get_job(id).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 1, "attempt {} (a snooze must not count)", r.attempt);
    ensure!(*calls.lock().unwrap() == 2, "handler calls {}", calls.lock().unwrap());
    ensure!(report.snoozed == 1 && report.completed == 1 && report.failed == 0, "{report:?}");
    Ok(())
}

/// With wake-ups (LISTEN/NOTIFY), an idle worker whose next poll is far away still picks up
/// a new job at once.
pub async fn wakeup_beats_polling<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let poll = Duration::from_secs(60);
    let w = Worker::builder(dynb)
        .concurrency(2)
        .poll_interval(poll)
        .min_poll_interval(poll)
        .maintenance(no_maintenance())
        .register(|_: Block, _ctx: JobContext| async move { Ok(()) })
        .build()
        .map_err(err)?;
    let token = CancellationToken::new();
    let (stats, fut) = w.run_with_handle(token.clone());
    let h = tokio::spawn(fut);
    // The first (empty) claim has happened; the next poll is a minute away.
    wait_for("first claim", Duration::from_secs(10), || async { Ok(stats.report().claim_calls >= 1) }).await?;
    // The worker subscribed before its first claim; a missed notification would leave the
    // job waiting for the next poll, a minute away, and fail the test.
    let t0 = Instant::now();
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    wait_for("archived long before the next poll", Duration::from_secs(5), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let took = t0.elapsed();
    let report = stop(token, h).await?;
    ensure!(report.completed == 1, "{report:?}");
    println!("    woken by NOTIFY: job archived {took:?} after enqueue (poll interval {poll:?})");
    Ok(())
}

/// Dropping the worker's future (instead of cancelling its token) does not leak: running
/// handlers are cancelled and their jobs handed back.
pub async fn dropped_worker_hands_back<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let started = Arc::new(tokio::sync::Notify::new());
    let cancelled = Arc::new(tokio::sync::Notify::new());
    let (s2, c2) = (started.clone(), cancelled.clone());
    let w = Worker::builder(dynb)
        .concurrency(1)
        .maintenance(no_maintenance())
        .register(move |_: Block, ctx: JobContext| {
            let (started, cancelled) = (s2.clone(), c2.clone());
            async move {
                started.notify_one();
                ctx.cancelled().await;
                cancelled.notify_one();
                Err(JobError::Retry("stopped".into()))
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (_token, h) = spawn_worker(w);
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await.map_err(|_| "handler never started")?;
    h.abort();
    let _ = h.await;
    tokio::time::timeout(Duration::from_secs(5), cancelled.notified()).await.map_err(|_| "token never fired")?;
    wait_for("handed back", Duration::from_secs(5), || async {
        let r = b.get_job(id).await.map_err(err)?.ok_or("job vanished")?;
        Ok(r.location == JobLocation::Hot(JobStatus::Pending)
            && r.last_error.as_deref() == Some(chokaq::SHUTDOWN_ERROR))
    })
    .await
}
