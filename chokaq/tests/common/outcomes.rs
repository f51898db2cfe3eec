//! Handler outcomes under the runtime: typed jobs round-trip, retries and fatal errors, poison jobs and panics, timeouts, an operator's cancel.

use super::*;

/// Typed jobs go through, each handler runs once, each job is archived once.
pub async fn typed_roundtrip<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let runs: Arc<Mutex<HashMap<JobId, u32>>> = Arc::default();
    let r2 = runs.clone();
    let w = Worker::builder(dynb)
        .concurrency(4)
        .maintenance(no_maintenance())
        .register(move |job: Count, ctx: JobContext| {
            let runs = r2.clone();
            async move {
                assert_eq!(ctx.attempt(), 1);
                assert!(job.n < 1000);
                *runs.lock().unwrap().entry(ctx.id()).or_default() += 1;
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let jobs: Vec<Count> = (0..50).map(|n| Count { n }).collect();
    let ids: Vec<JobId> = client.enqueue_many(&jobs).await.map_err(err)?.into_iter().map(|e| e.id).collect();
    let one = client.enqueue(JobBuilder::new(&Count { n: 999 }).priority(5).tag("single")).await.map_err(err)?;
    let (token, h) = spawn_worker(w);
    wait_for("51 archived", Duration::from_secs(20), || async { Ok(b.stats().await.map_err(err)?.archived == 51) })
        .await?;
    let report = stop(token, h).await?;
    ensure!(report.completed == 51, "completed {} != 51", report.completed);
    // Every claim either ran its job or handed it back unrun: a look-ahead job that waited
    // past `lookahead_wait` behind busy slots is released (its attempt not counted) and claimed
    // again. On a loaded machine that happens (two CI runs at once: "claimed 55 != 51", each
    // job still run once), so the claims are counted against the releases, not assumed 51.
    ensure!(
        report.claimed == report.completed + report.released,
        "claimed {} != completed {} + released {}",
        report.claimed,
        report.completed,
        report.released
    );
    ensure!(report.handed_back == 0 && report.lease_lost == 0, "{report:?}");
    let runs = runs.lock().unwrap().clone();
    ensure!(runs.len() == 51 && runs.values().all(|&n| n == 1), "handler runs: {runs:?}");
    let mut all = ids;
    all.push(one.id);
    for (id, p) in b.presence_many(&all).await.map_err(err)? {
        ensure!(p.archive == 1 && p.hot == 0 && p.dead == 0, "job {id}: {p:?}");
    }
    Ok(())
}

/// A retryable failure is retried with the policy's back-off (scheduled times checked), the
/// last one dead-letters with its error; a fatal error dead-letters at once.
pub async fn retry_and_fatal<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let policy = RetryPolicy::fixed_exponential(Duration::from_millis(300), 2.0, Duration::from_secs(10));
    // (attempt, db time when the handler started)
    let starts: Arc<Mutex<Vec<(i32, Timestamp)>>> = Arc::default();
    let s2 = starts.clone();
    let b2 = b.clone();
    let w = Worker::builder(dynb)
        .concurrency(2)
        .retry_policy(policy)
        .poll_interval(Duration::from_millis(50))
        .min_poll_interval(Duration::from_millis(10))
        .maintenance(no_maintenance())
        .register(move |job: Flaky, ctx: JobContext| {
            let starts = s2.clone();
            let b = b2.clone();
            async move {
                if job.mode == "fatal" {
                    return Err(JobError::Fatal("bad input: cannot ever work".into()));
                }
                let now = b.db_now().await?;
                starts.lock().unwrap().push((ctx.attempt(), now));
                Err(JobError::Retry(format!("boom on attempt {}", ctx.attempt())))
            }
        })
        .build()
        .map_err(err)?;
    let retry = client.enqueue(&Flaky { mode: "retry".into() }).await.map_err(err)?.id;
    let fatal = client.enqueue(&Flaky { mode: "fatal".into() }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);

    // Observe each Pending-between-attempts state and check its schedule.
    for attempt in 1..=2 {
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = loop {
            if let Some(r) = b.get_job(retry).await.map_err(err)? {
                if r.location == JobLocation::Hot(JobStatus::Pending) && r.attempt == attempt {
                    break r;
                }
            }
            ensure!(Instant::now() < deadline, "timed out waiting for the retry after attempt {attempt}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let expect = policy.nominal_delay(attempt);
        let scheduled = r.scheduled_at.ok_or("no scheduled_at on a retried job")?;
        let gap = (scheduled - r.updated_at).to_std().map_err(err)?;
        let diff = gap.abs_diff(expect);
        ensure!(
            diff <= Duration::from_millis(5),
            "attempt {attempt}: retry scheduled {gap:?} after the failure, policy says {expect:?}"
        );
        let want_err = format!("boom on attempt {attempt}");
        ensure!(r.last_error.as_deref() == Some(want_err.as_str()), "last_error {:?}", r.last_error);
        println!("    retry after attempt {attempt}: scheduled +{gap:?} (policy {expect:?})");
    }
    wait_for("retry job dead-lettered", Duration::from_secs(10), || async {
        Ok(location(&*b, retry).await? == Some(JobLocation::Dead(DeadReason::Failed)))
    })
    .await?;
    let r = b.get_job(retry).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 3, "attempts {}", r.attempt);
    ensure!(r.last_error.as_deref() == Some("boom on attempt 3"), "last error {:?}", r.last_error);
    // No attempt started before its schedule: the gaps between starts cover the back-off.
    let starts = starts.lock().unwrap().clone();
    ensure!(starts.len() == 3, "starts {starts:?}");
    for i in 1..3 {
        let gap = (starts[i].1 - starts[i - 1].1).to_std().map_err(err)?;
        ensure!(gap >= policy.nominal_delay(i as i32), "attempt {} started {gap:?} after the previous one", i + 1);
    }

    wait_for("fatal job dead-lettered", Duration::from_secs(10), || async {
        Ok(location(&*b, fatal).await? == Some(JobLocation::Dead(DeadReason::Failed)))
    })
    .await?;
    let f = b.get_job(fatal).await.map_err(err)?.unwrap();
    ensure!(f.attempt == 1, "fatal job ran {} attempts", f.attempt);
    ensure!(f.last_error.as_deref() == Some("bad input: cannot ever work"), "fatal error {:?}", f.last_error);
    let report = stop(token, h).await?;
    ensure!(report.failed == 4 && report.retried == 2 && report.dead_lettered == 2, "{report:?}");
    Ok(())
}

/// Unknown kinds and undecodable payloads are dead-lettered with a clear reason; a panic is
/// a retryable failure; the worker keeps going.
pub async fn poison_and_panic<B: TestSupport>(b: Arc<B>) -> TestResult {
    quiet_intended_panics();
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let w = Worker::builder(dynb)
        .concurrency(2)
        .retry_policy(RetryPolicy::fixed_exponential(Duration::from_millis(10), 1.0, Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(|job: Count, ctx: JobContext| async move {
            if job.n == 7 && ctx.attempt() == 1 {
                panic!("panic on purpose in attempt 1");
            }
            Ok(())
        })
        .build()
        .map_err(err)?;
    let unknown = client
        .enqueue(JobBuilder::raw("default", "nobody.handles.this.v1", serde_json::json!({})))
        .await
        .map_err(err)?
        .id;
    let bad = client
        .enqueue(JobBuilder::raw("default", Count::KIND, serde_json::json!({"n": "not a number"})))
        .await
        .map_err(err)?
        .id;
    let panicky = client.enqueue(&Count { n: 7 }).await.map_err(err)?.id;
    let fine = client.enqueue(&Count { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    wait_for("all four finished", Duration::from_secs(10), || async {
        let s = b.stats().await.map_err(err)?;
        Ok(s.archived == 2 && s.dead == 2)
    })
    .await?;
    let report = stop(token, h).await?;
    let u = b.get_job(unknown).await.map_err(err)?.unwrap();
    ensure!(u.location == JobLocation::Dead(DeadReason::Failed), "unknown kind: {:?}", u.location);
    let ue = u.last_error.unwrap_or_default();
    ensure!(ue.starts_with("unknown job kind"), "unknown kind error {ue:?}");
    let bd = b.get_job(bad).await.map_err(err)?.unwrap();
    ensure!(bd.location == JobLocation::Dead(DeadReason::Failed), "bad payload: {:?}", bd.location);
    let be = bd.last_error.unwrap_or_default();
    ensure!(be.starts_with("payload does not deserialize"), "bad payload error {be:?}");
    let p = b.get_job(panicky).await.map_err(err)?.unwrap();
    ensure!(
        p.location == JobLocation::Archived && p.attempt == 2,
        "panicky job: {:?} attempt {}",
        p.location,
        p.attempt
    );
    ensure!(location(&*b, fine).await? == Some(JobLocation::Archived), "fine job not archived");
    ensure!(report.panicked == 1 && report.completed == 2 && report.dead_lettered == 2, "{report:?}");
    println!("    unknown kind -> {ue:?}; bad payload -> {be:?}");
    Ok(())
}

/// A handler over its timeout is cancelled and retried; the retry then succeeds.
pub async fn timeout_retries<B: TestSupport>(b: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let w = Worker::builder(dynb)
        .concurrency(1)
        .job_timeout(Duration::from_millis(300))
        .cancel_wait(Duration::from_millis(100))
        .retry_policy(RetryPolicy::fixed_exponential(Duration::from_millis(10), 1.0, Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .maintenance(no_maintenance())
        .register(|_: Block, ctx: JobContext| async move {
            if ctx.attempt() == 1 {
                // Ignores its token: the runtime must drop it.
                futures::future::pending::<()>().await;
            }
            Ok(())
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    wait_for("archived after a timeout", Duration::from_secs(10), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Archived))
    })
    .await?;
    let report = stop(token, h).await?;
    let r = b.get_job(id).await.map_err(err)?.unwrap();
    ensure!(r.attempt == 2, "attempts {}", r.attempt);
    ensure!(report.timed_out == 1 && report.completed == 1, "{report:?}");
    Ok(())
}

/// An operator cancel from another backend handle fires the running handler's token within
/// two heartbeat intervals; the job ends dead-lettered as cancelled.
pub async fn operator_cancel<B: TestSupport>(b: Arc<B>, operator: Arc<B>) -> TestResult {
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let hb = Duration::from_millis(300);
    let started = Arc::new(tokio::sync::Notify::new());
    let fired: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (s2, f2) = (started.clone(), fired.clone());
    let w = Worker::builder(dynb)
        .concurrency(2)
        .heartbeat_interval(hb)
        .maintenance(no_maintenance())
        .register(move |_: Block, ctx: JobContext| {
            let (started, fired) = (s2.clone(), f2.clone());
            async move {
                started.notify_one();
                ctx.cancelled().await;
                *fired.lock().unwrap() = Some(Instant::now());
                // Returning success must not matter: the operator's cancel wins.
                Ok(())
            }
        })
        .build()
        .map_err(err)?;
    let id = client.enqueue(&Block { n: 1 }).await.map_err(err)?.id;
    let (token, h) = spawn_worker(w);
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await.map_err(|_| "handler never started")?;
    // The handler runs as soon as its slot takes the job; its start (Processing, the attempt
    // counted) lands a round trip later. A cancel before that finds the job Fetched and
    // cancels it at once (docs/runtime.md): this case is about a Processing job.
    wait_for("the job started (Processing)", Duration::from_secs(5), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Hot(JobStatus::Processing)))
    })
    .await?;
    let asked = Instant::now();
    let out = operator.cancel(id).await.map_err(err)?;
    ensure!(out == chokaq::core::CancelOutcome::Requested, "cancel outcome {out:?}");
    wait_for("token fired", 2 * hb + Duration::from_millis(500), || async { Ok(fired.lock().unwrap().is_some()) })
        .await?;
    let took = fired.lock().unwrap().unwrap() - asked;
    ensure!(took <= 2 * hb, "token fired {took:?} after the cancel, more than two heartbeat intervals ({:?})", 2 * hb);
    wait_for("dead-lettered as cancelled", Duration::from_secs(5), || async {
        Ok(location(&*b, id).await? == Some(JobLocation::Dead(DeadReason::Cancelled)))
    })
    .await?;
    let report = stop(token, h).await?;
    ensure!(report.cancelled == 1 && report.completed == 0, "{report:?}");
    println!("    operator cancel: token fired {took:?} after the request (heartbeat {hb:?})");
    Ok(())
}
