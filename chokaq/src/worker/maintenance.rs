//! Maintenance: rescue of expired leases and retention purges, on an interval, in every
//! worker (the backend makes sure only one instance at a time does the work).

use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{Backend, PurgeParams, PurgeTarget, RescueParams};
use tokio_util::sync::CancellationToken;

/// Maintenance every worker runs on an interval; the backend makes sure only one instance at
/// a time does the work.
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenanceConfig {
    /// Run maintenance at all.
    pub enabled: bool,
    /// How often (each worker adds a random delay of up to one interval before its first run).
    pub interval: Duration,
    /// Rescue parameters: the batch limit, and purges to run with the rescue besides the
    /// retention purges below. The timeouts are each queue's settings in the database.
    pub rescue: RescueParams,
    /// Purge archived jobs older than this (`None`: keep them).
    pub archive_retention: Option<Duration>,
    /// Purge dead-lettered jobs older than this (`None`: keep them).
    pub dead_letter_retention: Option<Duration>,
    /// Remove rows of the workers table not seen for this long (`None`: ten heartbeat
    /// intervals of this worker, at least [`MIN_WORKER_STALE_AFTER`]). A live worker
    /// re-registers with every heartbeat, so its row is never older than one interval plus
    /// a round trip.
    pub worker_stale_after: Option<Duration>,
    /// At most this many unique-key rows looked at per round for pruning
    /// ([`Backend::prune_uniques`]: keys whose job left the hot table and decides nothing any
    /// more, `docs/unique.md`); 0: no pruning.
    pub unique_prune_limit: u32,
}

/// The least time a worker row must go unseen before maintenance removes it.
pub const MIN_WORKER_STALE_AFTER: Duration = Duration::from_secs(60);

impl MaintenanceConfig {
    /// When a worker row counts as stale, for a worker heart-beating every `heartbeat`.
    pub fn worker_stale_after_for(&self, heartbeat: Duration) -> Duration {
        self.worker_stale_after.unwrap_or_else(|| heartbeat.saturating_mul(10).max(MIN_WORKER_STALE_AFTER))
    }
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            enabled: true,
            interval: Duration::from_secs(30),
            rescue: RescueParams::default(),
            archive_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            dead_letter_retention: Some(Duration::from_secs(30 * 24 * 3600)),
            worker_stale_after: None,
            unique_prune_limit: 1000,
        }
    }
}

/// The maintenance task: its settings and the backend, nothing else of the worker.
pub(super) struct Maintenance {
    backend: Arc<dyn Backend>,
    config: MaintenanceConfig,
    /// Worker rows not seen for this long are removed.
    worker_stale_after: Duration,
}

impl Maintenance {
    /// `heartbeat`: this worker's heartbeat interval (for the default staleness of worker rows).
    pub(super) fn new(backend: Arc<dyn Backend>, config: MaintenanceConfig, heartbeat: Duration) -> Self {
        let worker_stale_after = config.worker_stale_after_for(heartbeat);
        Maintenance { backend, config, worker_stale_after }
    }

    /// Runs every interval until `stop` fires; the first run comes at a random point of the
    /// first interval, so the instances spread out.
    pub(super) async fn run(self, stop: CancellationToken) {
        let mc = &self.config;
        let first = mc.interval.mul_f64(rand::random::<f64>());
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(first) => {}
        }
        let mut tick = tokio::time::interval(mc.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.once().await;
        }
    }

    /// The rescue parameters of one round: the configured ones plus the retention purges
    /// that are set, which the backend runs after the rescue under its maintenance lock.
    pub(super) fn params(&self) -> RescueParams {
        let mc = &self.config;
        let mut params = mc.rescue.clone();
        for (target, age) in
            [(PurgeTarget::Archive, mc.archive_retention), (PurgeTarget::DeadLetter, mc.dead_letter_retention)]
        {
            if let Some(age) = age {
                params.purge.push(PurgeParams::new(target, age));
            }
        }
        params
    }

    /// One round: rescue, then (in the same call, under the same lock) the retention purges,
    /// then stale worker rows.
    async fn once(&self) {
        match self.backend.rescue(&self.params()).await {
            Ok(r) if r.fetched_released + r.zombies_retried + r.zombies_dead + r.purged > 0 => {
                tracing::info!(
                    fetched_released = r.fetched_released,
                    zombies_retried = r.zombies_retried,
                    zombies_dead = r.zombies_dead,
                    purged = r.purged,
                    "maintenance"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "rescue failed"),
        }
        match self.backend.prune_workers(self.worker_stale_after).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(pruned = n, stale_after = ?self.worker_stale_after, "stale worker rows removed"),
            Err(e) => tracing::warn!(error = %e, "pruning stale worker rows failed"),
        }
        if self.config.unique_prune_limit > 0 {
            match self.backend.prune_uniques(self.config.unique_prune_limit).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(pruned = n, "unique keys that decide nothing any more removed"),
                Err(e) => tracing::warn!(error = %e, "pruning unique keys failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use chokaq_core::memory::MemoryBackend;
    use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, NewJob, QueueName, WorkerId};
    use tokio_util::sync::CancellationToken;

    use super::{Maintenance, MaintenanceConfig};

    fn config(interval: Duration) -> MaintenanceConfig {
        MaintenanceConfig { interval, archive_retention: Some(Duration::ZERO), ..MaintenanceConfig::default() }
    }

    /// One round purges archived jobs older than the retention (zero here); with the
    /// retention unset it keeps them.
    #[tokio::test]
    async fn a_round_purges_by_retention() {
        let b = Arc::new(MemoryBackend::new());
        b.enqueue(NewJob::build("q", "k").unwrap()).await.unwrap();
        let w = WorkerId::random();
        let job = b.claim(&ClaimParams::new(w, vec![QueueName::new("q").unwrap()], 1, ClaimMode::Start)).await.unwrap();
        b.complete(w, &[job[0].lease_ref()]).await.unwrap();
        assert_eq!(b.stats().await.unwrap().archived, 1);

        let keep = MaintenanceConfig { archive_retention: None, ..config(Duration::from_secs(1)) };
        Maintenance::new(b.clone(), keep, Duration::from_secs(1)).once().await;
        assert_eq!(b.stats().await.unwrap().archived, 1, "retention unset: kept");

        tokio::time::sleep(Duration::from_millis(5)).await;
        Maintenance::new(b.clone(), config(Duration::from_secs(1)), Duration::from_secs(1)).once().await;
        assert_eq!(b.stats().await.unwrap().archived, 0, "older than a zero retention: purged");
    }

    /// A round removes worker rows older than the staleness (10 heartbeats, at least a
    /// minute) and keeps the others.
    #[tokio::test]
    async fn a_round_prunes_stale_worker_rows() {
        use chokaq_core::testing::TestSupport;
        use chokaq_core::WorkerRegistration;
        let b = Arc::new(MemoryBackend::new());
        let reg = |host: &str| WorkerRegistration {
            worker: WorkerId::random(),
            host: host.into(),
            pid: 1,
            queues: vec![QueueName::new("q").unwrap()],
            concurrency: 1,
        };
        let (fresh, stale) = (reg("fresh"), reg("stale"));
        b.register_worker(&fresh).await.unwrap();
        b.register_worker(&stale).await.unwrap();
        let now = b.db_now().await.unwrap();
        b.force_worker_seen(fresh.worker, now - chrono::Duration::seconds(59)).await.unwrap();
        b.force_worker_seen(stale.worker, now - chrono::Duration::seconds(61)).await.unwrap();
        let cfg = MaintenanceConfig { archive_retention: None, dead_letter_retention: None, ..Default::default() };
        assert_eq!(cfg.worker_stale_after_for(Duration::from_secs(5)), Duration::from_secs(60));
        assert_eq!(cfg.worker_stale_after_for(Duration::from_secs(10)), Duration::from_secs(100));
        Maintenance::new(b.clone(), cfg, Duration::from_secs(5)).once().await;
        let left: Vec<String> = b.list_workers().await.unwrap().into_iter().map(|w| w.host).collect();
        assert_eq!(left, vec!["fresh".to_string()]);
    }

    /// A round prunes the unique key of a finished job (default states: it decides nothing
    /// any more) and keeps a live job's.
    #[tokio::test]
    async fn a_round_prunes_finished_unique_keys() {
        let b = Arc::new(MemoryBackend::new());
        let u =
            |n: i32| NewJob::build("q", "k").unwrap().json(n.into()).unique(chokaq_core::UniqueOpts::new().by_args());
        let done = b.enqueue(u(1)).await.unwrap().id;
        let w = WorkerId::random();
        let job = b.claim(&ClaimParams::new(w, vec![QueueName::new("q").unwrap()], 1, ClaimMode::Start)).await.unwrap();
        b.complete(w, &[job[0].lease_ref()]).await.unwrap();
        let live = b.enqueue(u(2)).await.unwrap().id;
        let cfg = MaintenanceConfig { archive_retention: None, ..config(Duration::from_secs(1)) };
        Maintenance::new(b.clone(), cfg, Duration::from_secs(1)).once().await;
        assert_eq!(b.unique_of(done).await.unwrap(), None, "the finished job's key pruned");
        assert!(b.unique_of(live).await.unwrap().is_some(), "the live job's key kept");
        assert_eq!(MaintenanceConfig::default().unique_prune_limit, 1000);
    }

    /// The loop returns as soon as its token fires, also before its first round.
    #[tokio::test]
    async fn stops_on_its_token() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            Maintenance::new(b, config(Duration::from_secs(3600)), Duration::from_secs(1)).run(stop.clone()),
        );
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("stopped in time").unwrap();
    }
}
