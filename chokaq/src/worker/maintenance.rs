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
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            enabled: true,
            interval: Duration::from_secs(30),
            rescue: RescueParams::default(),
            archive_retention: Some(Duration::from_secs(7 * 24 * 3600)),
            dead_letter_retention: Some(Duration::from_secs(30 * 24 * 3600)),
        }
    }
}

/// The maintenance task: its settings and the backend, nothing else of the worker.
pub(super) struct Maintenance {
    backend: Arc<dyn Backend>,
    config: MaintenanceConfig,
}

impl Maintenance {
    pub(super) fn new(backend: Arc<dyn Backend>, config: MaintenanceConfig) -> Self {
        Maintenance { backend, config }
    }

    /// Runs every interval until `stop` fires; the first run comes at a random point of the
    /// first interval, so the instances spread out.
    pub(super) async fn run(self, stop: CancellationToken) {
        let mc = &self.config;
        let first = mc.interval.mul_f64(rand::random::<f64>());
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(first) => {}
        }
        let mut tick = tokio::time::interval(mc.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
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

    /// One round: rescue, then (in the same call, under the same lock) the retention purges.
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
        Maintenance::new(b.clone(), keep).once().await;
        assert_eq!(b.stats().await.unwrap().archived, 1, "retention unset: kept");

        tokio::time::sleep(Duration::from_millis(5)).await;
        Maintenance::new(b.clone(), config(Duration::from_secs(1))).once().await;
        assert_eq!(b.stats().await.unwrap().archived, 0, "older than a zero retention: purged");
    }

    /// The loop returns as soon as its token fires, also before its first round.
    #[tokio::test]
    async fn stops_on_its_token() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let stop = CancellationToken::new();
        let task = tokio::spawn(Maintenance::new(b, config(Duration::from_secs(3600))).run(stop.clone()));
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("stopped in time").unwrap();
    }
}
