//! Keyed caps under the runtime (issue 25).

use super::*;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tenant {
    pub tenant: String,
    pub n: u32,
}

impl Job for Tenant {
    const KIND: &'static str = "test.tenant.v1";
    fn queue() -> &'static str {
        "tenants"
    }
    fn concurrency_key(&self) -> Option<String> {
        Some(self.tenant.clone())
    }
}

/// Keyed caps under the runtime (issue 25): three workers of 6 slots each drain 10 tenants'
/// jobs (the key derived from the payload by `Job::concurrency_key`) under a per-key cap of 2.
/// The handlers' own log (a running count per tenant, raised when a handler begins and lowered
/// when it ends) never shows a tenant above 2, every job runs once and is archived once, and
/// the busiest tenants really reached the cap (the cap, not a lack of work, bounded them). Each
/// handler holds its slot 25 ms: with 5 ms, two runs of one tenant did not overlap in a run
/// beside other test binaries at a load of 24 ("no tenant ever reached the cap").
pub async fn keyed_cap_under_the_runtime<B: TestSupport>(b: Arc<B>) -> TestResult {
    const CAP: u32 = 2;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb.clone());
    let queue = chokaq::QueueName::new("tenants").map_err(err)?;
    let st = dynb.control_queue(&queue, chokaq::core::QueueControl::SetKeyMaxWorkers(Some(CAP))).await.map_err(err)?;
    ensure!(st.key_max_workers == Some(CAP), "key cap not set: {st:?}");
    let jobs: Vec<Tenant> = (0..120).map(|n| Tenant { tenant: format!("t{}", n % 10), n }).collect();
    client.enqueue_many(&jobs).await.map_err(err)?;
    let running: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let max_seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let runs: Arc<Mutex<HashMap<JobId, u32>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (running, max_seen, runs) = (running.clone(), max_seen.clone(), runs.clone());
        let w = Worker::builder(dynb.clone())
            .queue("tenants")
            .concurrency(6)
            .maintenance(no_maintenance())
            .register(move |job: Tenant, ctx: JobContext| {
                let (running, max_seen, runs) = (running.clone(), max_seen.clone(), runs.clone());
                async move {
                    {
                        let mut r = running.lock().unwrap();
                        let n = r.entry(job.tenant.clone()).or_default();
                        *n += 1;
                        let mut m = max_seen.lock().unwrap();
                        let top = m.entry(job.tenant.clone()).or_default();
                        *top = (*top).max(*n);
                    }
                    *runs.lock().unwrap().entry(ctx.id()).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(25)).await;
                    *running.lock().unwrap().get_mut(&job.tenant).expect("raised above") -= 1;
                    Ok(())
                }
            })
            .build()
            .map_err(err)?;
        workers.push(spawn_worker(w));
    }
    wait_for("120 archived", Duration::from_secs(60), || async { Ok(b.stats().await.map_err(err)?.archived == 120) })
        .await?;
    let mut completed = 0;
    for (token, h) in workers {
        completed += stop(token, h).await?.completed;
    }
    ensure!(completed == 120, "completed {completed} != 120");
    let max_seen = max_seen.lock().unwrap().clone();
    ensure!(max_seen.len() == 10, "tenants seen: {max_seen:?}");
    ensure!(max_seen.values().all(|&n| n <= CAP), "a tenant ran more than {CAP} jobs at once: {max_seen:?}");
    ensure!(
        max_seen.values().any(|&n| n == CAP),
        "no tenant ever reached the cap (18 slots, 10 tenants): {max_seen:?}"
    );
    let runs = runs.lock().unwrap().clone();
    ensure!(
        runs.len() == 120 && runs.values().all(|&n| n == 1),
        "handler runs: {} jobs, max {:?}",
        runs.len(),
        runs.values().max()
    );
    Ok(())
}
