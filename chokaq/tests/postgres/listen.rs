//! One LISTEN connection per backend: twenty workers share it.

use super::*;

/// Twenty workers on one backend whose pool has ten connections drain a backlog woken by
/// NOTIFY (their poll interval is a minute), and the backend holds ONE listening session for
/// all of them, not one per worker.
pub(crate) async fn twenty_workers_share_one_listener() -> TestResult {
    let b = Arc::new(connect(&fresh_schema_name(), 10).await.map_err(err)?);
    b.migrate().await.map_err(err)?;
    let out = twenty_workers(&b).await;
    if let Err(e) = b.drop_schema().await {
        eprintln!("could not drop schema {}: {e}", b.schema());
    }
    out
}

pub(crate) async fn twenty_workers(b: &Arc<PgBackend>) -> TestResult {
    use chokaq::core::{JobKind, NewJob, QueueName};
    let dynb: Arc<dyn Backend> = b.clone();
    let poll = Duration::from_secs(60);
    let mut running = Vec::new();
    let mut stats = Vec::new();
    for _ in 0..20 {
        let w = Worker::builder(dynb.clone())
            .queue("fan")
            .concurrency(2)
            .poll_interval(poll)
            .min_poll_interval(poll)
            .maintenance(MaintenanceConfig { enabled: false, ..MaintenanceConfig::default() })
            .register_raw("fan.v1", |_p, _c| async { Ok(()) })
            .build()
            .map_err(err)?;
        let token = CancellationToken::new();
        let (handle, fut) = w.run_with_handle(token.clone());
        stats.push(handle);
        running.push((token, tokio::spawn(fut)));
    }
    // Every worker has made its first (empty) claim, so each has subscribed to wake-ups.
    common::wait_for("every worker's first claim", Duration::from_secs(30), || async {
        Ok(stats.iter().all(|s| s.report().claim_calls >= 1))
    })
    .await?;
    let queue = QueueName::new("fan").map_err(err)?;
    let kind = JobKind::new("fan.v1").map_err(err)?;
    for _ in 0..4 {
        let jobs = (0..100).map(|_| NewJob::new(queue.clone(), kind.clone())).collect();
        b.enqueue_many(jobs).await.map_err(err)?;
    }
    common::wait_for("400 jobs archived by wake-ups alone", Duration::from_secs(30), || async {
        Ok(b.stats().await.map_err(err)?.archived == 400)
    })
    .await?;
    let listeners: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE 'LISTEN%'",
    )
    .bind(format!("chokaq:{}", b.schema()))
    .fetch_one(b.pool())
    .await
    .map_err(err)?;
    for (token, h) in running {
        token.cancel();
        h.await.map_err(err)?.map_err(err)?;
    }
    ensure!(listeners == 1, "listening sessions for 20 workers on one backend: expected 1, got {listeners}");
    println!("    20 workers, pool of 10: 400 jobs drained by wake-ups, {listeners} listening session");
    Ok(())
}
