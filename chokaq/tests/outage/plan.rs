//! The outages' plan and the helpers the scenarios share: the batches, enqueue and rescue retried across outages, queue stats, waiting on a condition.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    RestartFast,
    RestartImmediate,
    ShortStop,
    LongStop,
    /// Longer than every internal budget of the runtime, shorter than the zombie timeout in
    /// force for it (`LONG_ZOMBIE_TIMEOUT`).
    VeryLongStop,
}

/// When an outage of a round begins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum When {
    /// This share of the round's uncapped jobs is archived (both queues busy).
    FreeShare(f64),
    /// The uncapped queue has nothing pending: only the capped queue is claimed, every claim
    /// is cap-bound and takes its completions along in `complete_and_claim`.
    FreeDrained,
    /// 30 more capped jobs archived since the last outage (or none left).
    CappedMore,
    /// The same, and at least `LONG_STOP_GAP` after the last outage ended.
    CappedMoreAfterGap,
    /// `LONG_STOP_GAP` after the last outage ended, the zombie timeout of every queue is set to
    /// the outage's (`Kind::zombie_timeout`) and a new batch of the round's size is enqueued;
    /// the outage begins once this share of its uncapped jobs is archived (both queues busy).
    NewBatchShare(f64),
}

/// The outages of one round, in order.
pub(crate) const PLAN: [(Kind, When); 6] = [
    (Kind::RestartFast, When::FreeShare(0.2)),
    (Kind::RestartImmediate, When::FreeShare(0.55)),
    (Kind::ShortStop, When::FreeDrained),
    (Kind::RestartFast, When::CappedMore),
    (Kind::LongStop, When::CappedMoreAfterGap),
    (Kind::VeryLongStop, When::NewBatchShare(0.2)),
];

impl Kind {
    pub(crate) fn describe(self) -> String {
        match self {
            Kind::RestartFast => "pg_ctl restart -m fast".to_string(),
            Kind::RestartImmediate => "pg_ctl restart -m immediate".to_string(),
            Kind::ShortStop => format!("pg_ctl stop -m fast, {:.1} s down, pg_ctl start", SHORT_STOP.as_secs_f64()),
            Kind::LongStop => format!("pg_ctl stop -m fast, {:.1} s down, pg_ctl start", LONG_STOP.as_secs_f64()),
            Kind::VeryLongStop => {
                format!("pg_ctl stop -m fast, {:.1} s down, pg_ctl start", VERY_LONG_STOP.as_secs_f64())
            }
        }
    }

    /// The zombie timeout of every queue during this outage.
    pub(crate) fn zombie_timeout(self) -> Duration {
        match self {
            Kind::VeryLongStop => LONG_ZOMBIE_TIMEOUT,
            _ => ZOMBIE_TIMEOUT,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Outage {
    pub(crate) n: usize,
    pub(crate) kind: Kind,
    /// When the stop began and when the server accepted connections again (pg_ctl -w).
    pub(crate) down: i64,
    pub(crate) up: i64,
    /// The zombie timeout of every queue during it.
    pub(crate) zombie: Duration,
    /// Long enough to expire a lease under `zombie` (see `EXPIRY_SLACK`).
    pub(crate) can_expire: bool,
    /// Per queue, Pending/Processing just before.
    pub(crate) before: String,
    /// When the probe jobs were enqueued (after `up`).
    pub(crate) probes: i64,
    /// Per process: when it claimed again.
    pub(crate) resumed: Vec<Option<i64>>,
    /// Per process: leases reported lost by `down`.
    pub(crate) lost_before: Vec<u64>,
}

impl Outage {
    pub(crate) fn name(&self) -> String {
        format!("outage {} ({})", self.n, self.kind.describe())
    }
}

/// The queue only worker process `i` claims from (besides the shared ones).
pub(crate) fn probe_queue(i: usize) -> String {
    format!("outage_p{i}")
}

/// The jobs of one round: one in `CAPPED_EVERY` on the capped queue; with `hold`, the first
/// `HOLD_JOBS` (the first of them capped) are held and go first.
pub(crate) fn batch(round: u32, jobs: u32, hold: bool) -> Vec<(String, Work)> {
    (0..jobs)
        .map(|n| {
            let (queue, work) =
                if n % CAPPED_EVERY == 0 { (CAPPED_QUEUE, CAPPED_WORK) } else { (FREE_QUEUE, FREE_WORK) };
            (queue.to_string(), Work { n: round * jobs + n, ms: work.as_millis() as u64, hold: hold && n < HOLD_JOBS })
        })
        .collect()
}

pub(crate) fn split_counts(jobs: &[(String, Work)]) -> (u64, u64) {
    let capped = jobs.iter().filter(|(q, _)| q == CAPPED_QUEUE).count() as u64;
    (jobs.len() as u64 - capped, capped)
}

/// What the test enqueued: ids in order, and which are on the capped queue.
#[derive(Debug, Default)]
pub(crate) struct TestJobs {
    pub(crate) ids: Vec<JobId>,
    pub(crate) capped: std::collections::HashSet<JobId>,
}

pub(crate) async fn enqueue(b: &PgBackend, jobs: &[(String, Work)], enq: &mut TestJobs) -> Result<(), String> {
    for chunk in jobs.chunks(MAX_ENQUEUE_BATCH) {
        let mut batch = Vec::with_capacity(chunk.len());
        for (queue, w) in chunk {
            let job = NewJob::build(queue, Work::KIND).map_err(err)?.priority(if w.hold { 10 } else { 0 });
            batch.push(job.payload(w).map_err(err)?);
        }
        let out = b.enqueue_many(batch).await.map_err(err)?;
        if out.len() != chunk.len() {
            return Err(format!("enqueue_many returned {} results for {} jobs", out.len(), chunk.len()));
        }
        for ((queue, _), e) in chunk.iter().zip(out) {
            if queue == CAPPED_QUEUE {
                enq.capped.insert(e.id);
            }
            enq.ids.push(e.id);
        }
    }
    Ok(())
}

/// [`enqueue`] right after the server came back: the test's own pool may hand out a dead
/// connection first. An enqueue that failed inserted nothing (one statement), so it is
/// simply tried again.
pub(crate) async fn enqueue_retrying(b: &PgBackend, jobs: &[(String, Work)], enq: &mut TestJobs) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match enqueue(b, jobs, enq).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(format!("could not enqueue after the outage: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// One rescue that ran (held the maintenance lock), right after the server came back: the
/// test's own pool may hand out a dead connection first, and a worker may hold the lock.
pub(crate) async fn rescue_retrying(b: &PgBackend) -> Result<chokaq::core::RescueReport, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let params = RescueParams { limit: 1000, purge: Vec::new() };
    loop {
        match b.rescue(&params).await {
            Ok(r) if r.ran => return Ok(r),
            Ok(_) | Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(5)).await,
            Ok(_) => return Err("no rescue could take the maintenance lock after the outage".to_string()),
            Err(e) => return Err(format!("could not rescue after the outage: {e}")),
        }
    }
}

pub(crate) async fn queue_stats(b: &PgBackend, queue: &str) -> Result<chokaq::core::QueueStats, String> {
    let mut last = String::new();
    for _ in 0..100 {
        match b.stats().await {
            Ok(s) => return Ok(s.queue(queue).cloned().unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("stats failed: {last}"))
}

/// Sets the zombie timeout of every queue the workers claim from (the rescue reads it from the
/// database at each run; the workers checked theirs against it only at start).
pub(crate) async fn set_zombie_timeouts(b: &PgBackend, zombie: Duration) -> Result<(), String> {
    let queues = [FREE_QUEUE.to_string(), CAPPED_QUEUE.to_string()].into_iter().chain((0..PROCESSES).map(probe_queue));
    for q in queues {
        let q = QueueName::new(q).map_err(err)?;
        b.control_queue(&q, QueueControl::SetZombieTimeout(Some(zombie))).await.map_err(err)?;
    }
    Ok(())
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; errors are retried (the server
/// may have just come back) and the last one is reported on timeout.
pub(crate) async fn wait_until<F, Fut>(what: &str, limit: Duration, mut cond: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + limit;
    let mut last_err = String::new();
    loop {
        match cond().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_err = e,
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what} (last error: {last_err:?})"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn queue_summary(s: &chokaq::core::StatsSnapshot) -> String {
    [FREE_QUEUE, CAPPED_QUEUE]
        .iter()
        .map(|q| {
            let qs = s.queue(q).cloned().unwrap_or_default();
            format!("{q}: {} pending, {} processing", qs.pending, qs.processing)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The database-side cap check: Processing rows of the capped queue in each stats sample.
#[derive(Debug, Default)]
pub(crate) struct CapSamples {
    pub(crate) samples: u64,
    pub(crate) errors: u64,
    pub(crate) max_processing: u64,
    pub(crate) over: Vec<(i64, u64)>,
}
