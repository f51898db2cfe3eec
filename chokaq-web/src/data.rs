//! What the overview shows, gathered from the backend in one concurrent round.

use std::collections::BTreeMap;
use std::time::Duration;

use chokaq_core::{
    Backend, ErrorKind, KeyCount, RateLimit, Result, ThroughputBucket, ThroughputParams, Timestamp, WorkerProcess,
};
use serde::Serialize;

pub use crate::chart::Series;

/// Sums over every queue.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub pending: u64,
    pub fetched: u64,
    pub processing: u64,
    pub archived: u64,
    /// `archived` holds an estimate (a large archive; the queue page has the exact count).
    pub archived_estimated: bool,
    /// Every dead letter.
    pub dead: u64,
    /// Of `dead`, the deliberate cancels.
    pub cancelled: u64,
    /// Of `dead`, the failures (failed, timed out, zombie, expired): what the alarm shows.
    pub failed: u64,
}

/// One queue on the overview.
#[derive(Debug, Clone, Serialize)]
pub struct QueueRow {
    pub queue: String,
    pub pending: u64,
    pub fetched: u64,
    pub processing: u64,
    pub archived: u64,
    pub archived_estimated: bool,
    pub dead: u64,
    pub cancelled: u64,
    pub failed: u64,
    /// Seconds the oldest due Pending job has waited (database clock).
    pub lag_seconds: Option<f64>,
    pub is_paused: bool,
    pub is_active: bool,
    pub max_workers: Option<u32>,
    /// The per-key cap.
    pub key_max_workers: Option<u32>,
    /// The rate limit (`per` in milliseconds).
    pub rate_limit: Option<RateLimit>,
    /// The keys with the most Fetched + Processing jobs, most first (at most
    /// [`chokaq_core::MAX_BUSIEST_KEYS`]).
    pub busiest_keys: Vec<KeyCount>,
    /// Whether the queue has a control row (it is listed even with no job).
    pub controlled: bool,
    /// Jobs finished over the last hour; None when the backend cannot say.
    pub finished_last_hour: Option<u64>,
    /// Done, failed and retried per minute over the last hour; None when throughput is not
    /// available.
    pub per_minute: Option<Series>,
}

/// Live worker processes in short.
#[derive(Debug, Clone, Serialize)]
pub struct WorkersSummary {
    pub alive: usize,
    /// Registered but not seen within `worker_stale_after`.
    pub stuck: usize,
    pub concurrency: u64,
}

/// Everything on the overview page (also `GET /api/overview`).
#[derive(Debug, Clone, Serialize)]
pub struct OverviewData {
    pub taken_at: Option<Timestamp>,
    pub totals: Totals,
    pub queues: Vec<QueueRow>,
    /// False when the backend does not report throughput (yet).
    pub throughput_available: bool,
    /// The shared snapshot's first throughput read has not answered yet: the chart follows at
    /// the next refresh (`ThroughputCache`).
    pub throughput_pending: bool,
    /// Every queue summed, per minute; None when throughput is not available.
    pub per_minute: Option<Series>,
    /// None when the backend does not list workers (yet).
    pub workers: Option<WorkersSummary>,
}

/// `Ok(None)` for an Unsupported operation, which the pages show as "not available".
pub fn optional<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == ErrorKind::Unsupported => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a worker is stuck: not seen within `stale_after` of `now`.
pub fn is_stuck(w: &WorkerProcess, now: Timestamp, stale_after: Duration) -> bool {
    let age = now.signed_duration_since(w.last_seen_at);
    age.to_std().map(|a| a > stale_after).unwrap_or(false)
}

/// Reads stats (estimated where the backend keeps a large archive cheap that way; settings
/// included), throughput and workers at once: one round of three calls, whatever the number
/// of queues.
pub async fn overview(backend: &dyn Backend, stale_after: Duration) -> Result<OverviewData> {
    let tp = ThroughputParams::last_hour();
    let (stats, throughput, workers) =
        futures::join!(backend.stats_estimated(), backend.throughput(&tp), backend.list_workers());
    let throughput = optional(throughput)?;
    Ok(build(stats?, throughput.as_deref(), false, optional(workers)?, stale_after))
}

/// The overview of what was read; `throughput` None: not available (`pending`: not read yet).
fn build(
    stats: chokaq_core::StatsSnapshot,
    throughput: Option<&[ThroughputBucket]>,
    pending: bool,
    workers: Option<Vec<WorkerProcess>>,
    stale_after: Duration,
) -> OverviewData {
    let now = stats.taken_at.unwrap_or_else(chrono::Utc::now);
    let mut per_queue: BTreeMap<&str, Series> = BTreeMap::new();
    if let Some(buckets) = throughput {
        for b in buckets {
            per_queue.entry(b.queue.as_str()).or_insert_with(Series::zeros).add(b, now);
        }
    }

    let totals = Totals {
        pending: stats.pending,
        fetched: stats.fetched,
        processing: stats.processing,
        archived: stats.archived,
        archived_estimated: stats.archived_estimated,
        dead: stats.dead,
        cancelled: stats.cancelled,
        failed: stats.failed(),
    };
    let queues = stats
        .queues
        .iter()
        .map(|q| {
            let per_minute =
                throughput.as_ref().map(|_| per_queue.get(q.queue.as_str()).cloned().unwrap_or_else(Series::zeros));
            QueueRow {
                queue: q.queue.clone(),
                pending: q.pending,
                fetched: q.fetched,
                processing: q.processing,
                archived: q.archived,
                archived_estimated: q.archived_estimated,
                dead: q.dead,
                cancelled: q.cancelled,
                failed: q.failed(),
                lag_seconds: q
                    .oldest_due_at
                    .map(|t| (now.signed_duration_since(t).num_milliseconds().max(0) as f64) / 1000.0),
                is_paused: q.is_paused(),
                is_active: q.is_active(),
                max_workers: q.settings.as_ref().and_then(|s| s.max_workers),
                key_max_workers: q.settings.as_ref().and_then(|s| s.key_max_workers),
                rate_limit: q.settings.as_ref().and_then(|s| s.rate_limit),
                busiest_keys: q.busiest_keys.clone(),
                controlled: q.settings.is_some(),
                finished_last_hour: per_minute.as_ref().map(Series::done_total),
                per_minute,
            }
        })
        .collect();

    let workers = workers.map(|ws| {
        let stuck = ws.iter().filter(|w| is_stuck(w, now, stale_after)).count();
        WorkersSummary {
            alive: ws.len() - stuck,
            stuck,
            concurrency: ws.iter().filter(|w| !is_stuck(w, now, stale_after)).map(|w| u64::from(w.concurrency)).sum(),
        }
    });

    OverviewData {
        taken_at: stats.taken_at,
        totals,
        queues,
        throughput_available: throughput.is_some() || pending,
        throughput_pending: pending,
        per_minute: throughput.map(|b| Series::of(b, now)),
        workers,
    }
}

/// How long a snapshot waits for the throughput read it started (see [`ThroughputCache`]).
pub const THROUGHPUT_WAIT: Duration = Duration::from_millis(10);

/// The last hour's throughput, read off the snapshot's critical path. A refresh of the shared
/// snapshot starts one throughput read (unless one is running), reads stats and workers
/// meanwhile, then waits at most [`THROUGHPUT_WAIT`] for it; a read that takes longer (the
/// last hour of a busy archive: ~160 ms for 500,000 jobs) finishes in the background and the
/// snapshot uses the previous read, or, on a dashboard's very first snapshot, shows the chart
/// as being computed. So the first snapshot costs stats and workers only, and the chart is at
/// most one refresh (about a second) behind the counts.
#[derive(Debug, Default)]
pub struct ThroughputCache {
    state: std::sync::Mutex<TpState>,
    done: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct TpState {
    last: Option<std::sync::Arc<Vec<ThroughputBucket>>>,
    unsupported: bool,
    running: bool,
}

impl ThroughputCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, TpState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// [`overview`] for the shared snapshot: throughput through the [`ThroughputCache`].
async fn overview_cached(st: &crate::Shared) -> Result<OverviewData> {
    let tc = &st.cache.throughput;
    let done = tc.done.notified();
    tokio::pin!(done);
    done.as_mut().enable();
    let start = {
        let mut t = tc.lock();
        !t.unsupported && !std::mem::replace(&mut t.running, true)
    };
    if start {
        let st2 = st.clone();
        tokio::spawn(async move {
            let r = st2.reads_from_now().throughput(&ThroughputParams::last_hour()).await;
            {
                let mut t = st2.cache.throughput.lock();
                t.running = false;
                match optional(r) {
                    Ok(Some(b)) => t.last = Some(std::sync::Arc::new(b)),
                    Ok(None) => t.unsupported = true,
                    Err(e) => tracing::warn!(error = %e, "dashboard: throughput read failed"),
                }
            }
            st2.cache.throughput.done.notify_waiters();
        });
    }
    // Off the request path: bounded by the request timeout from now.
    let backend = st.reads_from_now();
    let (stats, workers) = futures::join!(backend.stats_estimated(), backend.list_workers());
    let (stats, workers) = (stats?, optional(workers)?);
    if tc.lock().running {
        let _ = tokio::time::timeout(THROUGHPUT_WAIT, done).await;
    }
    let (last, unsupported) = {
        let t = tc.lock();
        (t.last.clone(), t.unsupported)
    };
    let pending = last.is_none() && !unsupported;
    Ok(build(stats, last.as_deref().map(Vec::as_slice), pending, workers, st.opts.worker_stale_after))
}

/// The overview as one snapshot shared by every viewer of a dashboard, kept fresh off the
/// request path: at most one computation runs at a time, whatever the number of open pages. A
/// request is served the snapshot there is (the page prints its database time); one older than
/// `snapshot_max_age` starts one background refresh and waits up to [`FRESH_WAIT`] for it. Only the very first request, before any
/// snapshot exists, waits for a computation (`router` starts one at once when it is built inside
/// a tokio runtime). Every action (POST) recomputes the snapshot before its response, so the
/// page after it shows its effect.
#[derive(Debug, Default)]
pub struct SnapshotCache {
    state: std::sync::Mutex<CacheState>,
    compute: tokio::sync::Mutex<()>,
    /// Woken when a refresh stores a snapshot.
    stored: tokio::sync::Notify,
    throughput: ThroughputCache,
}

/// How long a request for an out-of-date snapshot waits for the refresh it started before it
/// is served the old one: a small database answers within it (the page is current), a big one
/// does not (the page is at most one refresh old, and the next poll shows the new one), and
/// the request's server time stays within the overview's 50 ms budget either way.
pub const FRESH_WAIT: Duration = Duration::from_millis(25);

#[derive(Debug, Default)]
struct CacheState {
    snap: Option<(std::time::Instant, std::sync::Arc<OverviewData>)>,
    refreshing: bool,
    /// Bumped by every invalidation: a computation started before one is not stored.
    generation: u64,
}

impl SnapshotCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the snapshot out of date (after an action): a computation started before this is
    /// not stored. The old snapshot is still served until [`refresh_now`] replaces it.
    pub fn invalidate(&self) {
        let mut s = self.lock();
        if let Some((at, _)) = s.snap.as_mut() {
            *at -= (*at).elapsed().max(Duration::from_secs(3600));
        }
        s.generation += 1;
    }

    fn store(&self, generation: u64, d: std::sync::Arc<OverviewData>) {
        let mut s = self.lock();
        if s.generation == generation {
            s.snap = Some((std::time::Instant::now(), d));
        }
        drop(s);
        self.stored.notify_waiters();
    }
}

/// Computes the overview now and stores it (after an action; at start-up).
pub async fn refresh_now(st: &crate::Shared) -> Result<std::sync::Arc<OverviewData>> {
    let _one = st.cache.compute.lock().await;
    let generation = st.cache.lock().generation;
    let d = std::sync::Arc::new(overview_cached(st).await?);
    st.cache.store(generation, d.clone());
    Ok(d)
}

/// The start-up computation (`router`): stored only when no snapshot exists once it holds the
/// computation's lock. Spawned when the router is built, it may run after a request computed
/// and stored a newer snapshot; replacing it would show an older or newer state than the
/// young snapshot every other viewer was served (`tests/snapshot.rs`).
pub async fn refresh_first(st: &crate::Shared) -> Result<()> {
    let _one = st.cache.compute.lock().await;
    let generation = {
        let s = st.cache.lock();
        if s.snap.is_some() {
            return Ok(());
        }
        s.generation
    };
    let d = std::sync::Arc::new(overview_cached(st).await?);
    st.cache.store(generation, d);
    Ok(())
}

/// The overview for a request, through the dashboard's [`SnapshotCache`].
pub async fn overview_shared(st: &crate::Shared) -> Result<std::sync::Arc<OverviewData>> {
    let max_age = st.opts.snapshot_max_age;
    if max_age.is_zero() {
        return Ok(std::sync::Arc::new(overview(&*st.reads_from_now(), st.opts.worker_stale_after).await?));
    }
    let cache = &st.cache;
    let stored = cache.stored.notified();
    tokio::pin!(stored);
    stored.as_mut().enable();
    let old = {
        let mut s = cache.lock();
        match &s.snap {
            Some((at, d)) if at.elapsed() < max_age => return Ok(d.clone()),
            Some((_, d)) => {
                let d = d.clone();
                if !s.refreshing {
                    s.refreshing = true;
                    let st = st.clone();
                    tokio::spawn(async move {
                        if let Err(e) = refresh_now(&st).await {
                            tracing::warn!(error = %e, "dashboard: overview refresh failed");
                        }
                        st.cache.lock().refreshing = false;
                    });
                }
                Some(d)
            }
            None => None,
        }
    };
    if let Some(old) = old {
        // Out of date: a moment for the refresh, then whatever is there.
        let _ = tokio::time::timeout(FRESH_WAIT, stored).await;
        return Ok(cache.lock().snap.as_ref().map_or(old, |(_, d)| d.clone()));
    }
    // No snapshot yet: the first request waits for one (another request may be computing it).
    let _one = cache.compute.lock().await;
    if let Some(d) = cache.lock().snap.as_ref().map(|(_, d)| d.clone()) {
        return Ok(d);
    }
    drop(_one);
    refresh_now(st).await
}
