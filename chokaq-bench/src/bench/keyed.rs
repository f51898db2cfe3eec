//! Issue 25's workloads: keyed caps and rate limits. They use only the `Backend` trait (the
//! PostgreSQL run and the MySQL run both call them); a backend whose `control_queue` answers
//! `Unsupported` for the per-key cap or the rate limit gets no figure (`unsupported`), never a
//! made-up one.
//!
//! - the keyed drain: `--jobs` jobs over `--keyed-keys` keys at `--key-cap` per key, drained by
//!   the runtime with 8 slots (the caps never bind: consecutive jobs have different keys);
//! - the hot key: the time `--keyed-keys` jobs of one key each take to drain, alone and behind
//!   `--hot-jobs` jobs of one key capped at 1 (enqueued first, same priority, so earlier in
//!   claim order);
//! - the keyed claim: claim-10 latency with `--backlog-small` jobs of as many distinct keys
//!   in a key-capped queue, as the claim-cost workload measures it;
//! - the rate limit: `--rate-claimers` claim loops (Start mode, completing at once) against a
//!   queue limited to `--rate-limit` for `--rate-secs`; the start times read back from the
//!   archive.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chokaq::core::{
    ClaimMode, ClaimParams, ClaimedJob, JobTable, LeaseRef, ListJobsParams, QueueControl, RateLimit, MAX_ENQUEUE_BATCH,
};
use chokaq::{Backend, CancellationToken, ErrorKind, JobContext, JobKind, NewJob, QueueName, Result, Worker, WorkerId};
use serde_json::json;

use super::{NOOP_KIND, WAIT_LIMIT};
use crate::figures::{KeyedFigures, Latency, Rate, RateFigures};
use crate::other;
use crate::timed::CallStats;

/// The kind of the hot-key workload's jobs of one key each (the ones timed).
const COLD_KIND: &str = "bench.cold.v1";
/// Slots of the keyed drains (the same as `drain_jobs_per_s`).
pub(crate) const KEYED_CONCURRENCY: u32 = 8;
/// Jobs per claim of the keyed claim and the rate limit's claim loops.
const CLAIM_LIMIT: u32 = 10;

/// What a backend does between a fill and the timed part (PostgreSQL: VACUUM ANALYZE of the
/// hot table, as before every drain; MySQL: nothing).
#[async_trait]
pub(crate) trait Settle: Send + Sync {
    async fn settle(&self) -> Result<()>;
}

/// Nothing to do between a fill and the timed part.
pub(crate) struct NoSettle;

#[async_trait]
impl Settle for NoSettle {
    async fn settle(&self) -> Result<()> {
        Ok(())
    }
}

/// The settings of the keyed workloads (from the flags).
#[derive(Debug, Clone)]
pub(crate) struct KeyedSettings {
    /// Jobs of the keyed drain (`--jobs`).
    pub(crate) jobs: u64,
    pub(crate) keys: u32,
    pub(crate) cap: u32,
    pub(crate) hot_jobs: u64,
    /// Keyed claim: backlog (as many keys), queues, timed samples.
    pub(crate) claim_backlog: u64,
    pub(crate) claim_queues: u32,
    pub(crate) claim_samples: u32,
    pub(crate) min_poll_ms: Option<u64>,
}

/// Applies `control`; `Ok(false)` when the backend answers `Unsupported`.
async fn control(b: &Arc<dyn Backend>, queue: &QueueName, control: QueueControl) -> Result<bool> {
    match b.control_queue(queue, control).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            eprintln!("{}: {control:?} is unsupported ({e})", b.name());
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Enqueues `n` jobs of `kind` on `queue`, job `i` with key `key(i)`, `MAX_ENQUEUE_BATCH` a call.
async fn enqueue_keyed(
    b: &Arc<dyn Backend>,
    queue: &QueueName,
    kind: &str,
    n: u64,
    key: &(dyn Fn(u64) -> Option<String> + Sync),
) -> Result<()> {
    let kind = JobKind::new(kind)?;
    let mut i = 0u64;
    while i < n {
        let hi = (i + MAX_ENQUEUE_BATCH as u64).min(n);
        let jobs: Vec<NewJob> = (i..hi)
            .map(|j| {
                let job = NewJob::new(queue.clone(), kind.clone()).json(json!({ "n": j }));
                match key(j) {
                    Some(k) => job.concurrency_key(k),
                    None => job,
                }
            })
            .collect();
        let out = b.enqueue_many(jobs).await?;
        if out.len() as u64 != hi - i || out.iter().any(|e| e.duplicate) {
            return Err(other(format!("enqueue_many returned {} results for {} jobs", out.len(), hi - i)));
        }
        i = hi;
    }
    Ok(())
}

/// Pending + Fetched + Processing jobs of `queue`.
async fn hot_jobs(b: &Arc<dyn Backend>, queue: &QueueName) -> Result<u64> {
    let s = b.stats().await?;
    Ok(s.queue(queue.as_str()).map_or(0, |q| q.pending + q.fetched + q.processing))
}

/// The runtime with `concurrency` slots on `queue` (no-op handlers for `NOOP_KIND`, and for
/// `COLD_KIND` one that counts into `cold`) until `done` holds for (completed jobs, cold jobs
/// run); returns the seconds from the start until then and the jobs completed when the worker
/// stopped.
async fn run_until(
    b: &Arc<dyn Backend>,
    queue: &QueueName,
    concurrency: u32,
    min_poll_ms: Option<u64>,
    what: &str,
    done: impl Fn(u64, u64) -> bool,
) -> Result<(f64, u64)> {
    let cold = Arc::new(AtomicU64::new(0));
    let cold_in = cold.clone();
    let mut builder = Worker::builder(b.clone())
        .queue(queue.as_str())
        .concurrency(concurrency)
        .register_raw(NOOP_KIND, |_payload, _ctx: JobContext| async { Ok(()) })
        .register_raw(COLD_KIND, move |_payload, _ctx: JobContext| {
            let cold = cold_in.clone();
            async move {
                cold.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        });
    if let Some(ms) = min_poll_ms {
        builder = builder.min_poll_interval(Duration::from_millis(ms.max(1)));
    }
    let worker = builder.build()?;
    let token = CancellationToken::new();
    let t0 = Instant::now();
    let (stats, fut) = worker.run_with_handle(token.clone());
    let run = tokio::spawn(fut);
    loop {
        let completed = stats.report().completed;
        if done(completed, cold.load(Ordering::Relaxed)) {
            break;
        }
        if t0.elapsed() > WAIT_LIMIT || run.is_finished() {
            token.cancel();
            return Err(other(format!("{what}: only {completed} jobs completed")));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    token.cancel();
    let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
    if report.failed != 0 || report.lease_lost != 0 {
        return Err(other(format!("{what}: {} failed, {} leases lost", report.failed, report.lease_lost)));
    }
    Ok((secs, report.completed))
}

/// Drains `queue` (`n` jobs) with the caps it has; returns the seconds it took.
async fn drain_all(
    b: &Arc<dyn Backend>,
    queue: &QueueName,
    n: u64,
    min_poll_ms: Option<u64>,
    what: &str,
) -> Result<f64> {
    let (secs, completed) = run_until(b, queue, KEYED_CONCURRENCY, min_poll_ms, what, |c, _| c >= n).await?;
    let left = hot_jobs(b, queue).await?;
    if completed != n || left != 0 {
        return Err(other(format!("{what}: {completed} of {n} jobs completed, {left} left")));
    }
    Ok(secs)
}

/// The keyed drain, the hot key and the keyed claim. `calls`: the timed wrapper's counters
/// behind `b`, if it is one (the keyed drain's claim and complete calls are reported).
pub(crate) async fn keyed(
    b: &Arc<dyn Backend>,
    s: &KeyedSettings,
    settle: &dyn Settle,
    calls: Option<&CallStats>,
) -> Result<KeyedFigures> {
    let mut f = KeyedFigures {
        keys: s.keys,
        cap: s.cap,
        concurrency: KEYED_CONCURRENCY,
        hot_jobs: s.hot_jobs,
        cold_jobs: u64::from(s.keys),
        claim_backlog: s.claim_backlog,
        ..Default::default()
    };
    // The keyed drain: job i has key i mod keys (consecutive jobs have different keys).
    let q = QueueName::new("keyed")?;
    if !control(b, &q, QueueControl::SetKeyMaxWorkers(Some(s.cap))).await? {
        f.unsupported = true;
        return Ok(f);
    }
    let keys = u64::from(s.keys);
    enqueue_keyed(b, &q, NOOP_KIND, s.jobs, &|i| Some(format!("k{}", i % keys))).await?;
    settle.settle().await?;
    if let Some(c) = calls {
        c.reset();
    }
    let secs = drain_all(b, &q, s.jobs, s.min_poll_ms, "keyed drain").await?;
    f.drain = Some(Rate { jobs: s.jobs, secs, wal_bytes: 0 });
    if let Some(c) = calls {
        // Both kinds the runtime uses: claims (complete_and_claim's too) and completes.
        f.drain_claim = Some(c.claim.snapshot() + c.complete_and_claim.snapshot());
        f.drain_complete = Some(c.complete.snapshot());
    }
    eprintln!(
        "keyed drain x{KEYED_CONCURRENCY}: {} jobs over {} keys (cap {}): {:.0} jobs/s",
        s.jobs,
        s.keys,
        s.cap,
        s.jobs as f64 / secs
    );

    // The hot key: `keys` jobs of one key each, alone, then behind `hot_jobs` of one key at cap 1.
    let q = QueueName::new("keyed_hot")?;
    control(b, &q, QueueControl::SetKeyMaxWorkers(Some(1))).await?;
    let cold = u64::from(s.keys);
    let what = "hot key: the jobs of one key each";
    enqueue_keyed(b, &q, COLD_KIND, cold, &|i| Some(format!("c{i}"))).await?;
    settle.settle().await?;
    let (alone, _) = run_until(b, &q, KEYED_CONCURRENCY, s.min_poll_ms, what, |_, c| c >= cold).await?;
    enqueue_keyed(b, &q, NOOP_KIND, s.hot_jobs, &|_| Some("hot".to_string())).await?;
    enqueue_keyed(b, &q, COLD_KIND, cold, &|i| Some(format!("c{i}"))).await?;
    settle.settle().await?;
    let before = b.stats().await?.queue(q.as_str()).map_or(0, |x| x.archived);
    let (with_hot, completed) = run_until(b, &q, KEYED_CONCURRENCY, s.min_poll_ms, what, |_, c| c >= cold).await?;
    f.cold_alone_s = Some(alone);
    f.cold_with_hot_s = Some(with_hot);
    f.hot_ran = completed.saturating_sub(cold);
    let after = b.stats().await?.queue(q.as_str()).map_or(0, |x| x.archived);
    eprintln!(
        "hot key: {cold} jobs of one key each in {:.3} s alone, {:.3} s behind {} jobs of one key at cap 1 \
         ({} of those ran meanwhile, {} archived): ratio {:.2}",
        alone,
        with_hot,
        s.hot_jobs,
        f.hot_ran,
        after - before,
        with_hot / alone
    );
    // The hot key's leftovers, drained uncapped so they weigh on nothing after.
    control(b, &q, QueueControl::SetKeyMaxWorkers(None)).await?;
    let left = hot_jobs(b, &q).await?;
    drain_all(b, &q, left, s.min_poll_ms, "hot key: the leftovers").await?;

    f.claim = Some(claim_keys(b, s, settle).await?);
    Ok(f)
}

/// Claim-10 latency (Start mode, every claim queue named) with `claim_backlog` Pending jobs of
/// as many distinct keys over `claim_queues` key-capped queues: each sample is a timed claim,
/// then an untimed complete and a refill of as many jobs with new keys (20 warm-up samples).
async fn claim_keys(b: &Arc<dyn Backend>, s: &KeyedSettings, settle: &dyn Settle) -> Result<Latency> {
    let queues: Vec<QueueName> =
        (0..s.claim_queues).map(|i| QueueName::new(format!("kclaim{i}"))).collect::<Result<_>>()?;
    for q in &queues {
        control(b, q, QueueControl::SetKeyMaxWorkers(Some(s.cap))).await?;
    }
    let per_queue = s.claim_backlog / u64::from(s.claim_queues);
    let mut next_key = 0u64;
    for (i, q) in queues.iter().enumerate() {
        let n = per_queue + u64::from((i as u64) < s.claim_backlog % u64::from(s.claim_queues));
        let base = next_key;
        enqueue_keyed(b, q, NOOP_KIND, n, &|j| Some(format!("key{}", base + j))).await?;
        next_key += n;
    }
    settle.settle().await?;
    let worker = WorkerId::random();
    let kind = JobKind::new(NOOP_KIND)?;
    let warmup = 20usize;
    let samples = s.claim_samples as usize;
    let mut ms = Vec::with_capacity(samples);
    for i in 0..samples + warmup {
        let req = ClaimParams::new(worker, queues.clone(), CLAIM_LIMIT, ClaimMode::Start);
        let t0 = Instant::now();
        let jobs = b.claim(&req).await?;
        let took = t0.elapsed().as_secs_f64() * 1e3;
        if jobs.len() != CLAIM_LIMIT as usize {
            return Err(other(format!(
                "keyed claim from a backlog of {} returned {} jobs",
                s.claim_backlog,
                jobs.len()
            )));
        }
        if i >= warmup {
            ms.push(took);
        }
        let leases: Vec<LeaseRef> = jobs.iter().map(ClaimedJob::lease_ref).collect();
        let out = b.complete(worker, &leases).await?;
        if out.done.len() != leases.len() {
            return Err(other(format!("complete lost {} leases", out.lost.len())));
        }
        let refill: Vec<NewJob> = jobs
            .iter()
            .map(|j| {
                next_key += 1;
                NewJob::new(j.queue.clone(), kind.clone())
                    .json(json!({ "n": i }))
                    .concurrency_key(format!("key{next_key}"))
            })
            .collect();
        b.enqueue_many(refill).await?;
    }
    let l = Latency::of(ms);
    eprintln!("keyed claim: claim-10 p50 {:.3} ms with {} distinct keys in the backlog", l.p50, s.claim_backlog);
    // The backlog, drained uncapped so it weighs on nothing after.
    for q in &queues {
        control(b, q, QueueControl::SetKeyMaxWorkers(None)).await?;
        let left = hot_jobs(b, q).await?;
        drain_all(b, q, left, s.min_poll_ms, "keyed claim: the backlog").await?;
    }
    Ok(l)
}

/// The rate limit: `claimers` loops claim (10 at a time, Start mode) and complete at once from
/// a queue limited to `limit`, for `secs`; then every started job's `started_at` is read back
/// from the archive.
pub(crate) async fn rate_limited(
    b: &Arc<dyn Backend>,
    limit: RateLimit,
    secs: u32,
    claimers: u32,
    min_poll_ms: Option<u64>,
    settle: &dyn Settle,
) -> Result<RateFigures> {
    let mut f = RateFigures { limit: Some(limit), secs, claimers, ..Default::default() };
    let q = QueueName::new("rated")?;
    if !control(b, &q, QueueControl::SetRateLimit(Some(limit))).await? {
        f.unsupported = true;
        return Ok(f);
    }
    // More than the limit can let start in the run: jobs x (windows in the run + 2).
    let per_ms = limit.per_millis().max(1) as u64;
    let windows = (u64::from(secs) * 1000).div_ceil(per_ms);
    let backlog = u64::from(limit.jobs) * (windows + 2);
    enqueue_keyed(b, &q, NOOP_KIND, backlog, &|_| None).await?;
    settle.settle().await?;
    let started = Arc::new(AtomicU64::new(0));
    let claims = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(u64::from(secs));
    let mut loops = Vec::new();
    for _ in 0..claimers {
        let (b, q, started, claims) = (b.clone(), q.clone(), started.clone(), claims.clone());
        loops.push(tokio::spawn(async move {
            let worker = WorkerId::random();
            let req = ClaimParams::new(worker, vec![q], CLAIM_LIMIT, ClaimMode::Start);
            while Instant::now() < deadline {
                let jobs = b.claim(&req).await?;
                claims.fetch_add(1, Ordering::Relaxed);
                if jobs.is_empty() {
                    // Nothing may start now: poll again shortly.
                    tokio::time::sleep(Duration::from_millis(min_poll_ms.unwrap_or(2).max(1))).await;
                    continue;
                }
                started.fetch_add(jobs.len() as u64, Ordering::Relaxed);
                let leases: Vec<LeaseRef> = jobs.iter().map(ClaimedJob::lease_ref).collect();
                let out = b.complete(worker, &leases).await?;
                if out.done.len() != leases.len() {
                    return Err(other(format!("rate limit: complete lost {} leases", out.lost.len())));
                }
            }
            Ok::<(), chokaq::Error>(())
        }));
    }
    for l in loops {
        l.await.map_err(|e| other(format!("claim loop failed: {e}")))??;
    }
    let starts = started.load(Ordering::Relaxed);
    // Every start, read back from the archive.
    let mut stamps: Vec<i64> = Vec::with_capacity(starts as usize);
    let mut filter = ListJobsParams::new(JobTable::Archive);
    filter.queue = Some(q.clone());
    filter.limit = 1000;
    filter.without_payloads = true;
    loop {
        let page = b.list_jobs(&filter).await?;
        for j in &page.jobs {
            let t = j.started_at.ok_or_else(|| other(format!("archived job {} has no started_at", j.id)))?;
            stamps.push(t.timestamp_micros());
        }
        match page.next {
            Some(n) => filter.after = Some(n),
            None => break,
        }
    }
    if stamps.len() as u64 != starts {
        return Err(other(format!("rate limit: {starts} jobs started, {} archived", stamps.len())));
    }
    f.claims = claims.load(Ordering::Relaxed);
    f.set_stamps(stamps);
    eprintln!(
        "rate limit {limit}: {} starts in {secs} s by {claimers} claim loops ({} claims), at most {} in any {} ms \
         window, utilisation {:.3}",
        f.starts,
        f.claims,
        f.max_in_window,
        per_ms,
        f.utilisation().unwrap_or(f64::NAN)
    );
    // The rest of the backlog, drained without the limit so it weighs on nothing after.
    control(b, &q, QueueControl::SetRateLimit(None)).await?;
    let left = hot_jobs(b, &q).await?;
    drain_all(b, &q, left, min_poll_ms, "rate limit: the backlog").await?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chokaq::core::memory::MemoryBackend;

    fn settings() -> KeyedSettings {
        KeyedSettings {
            jobs: 300,
            keys: 30,
            cap: 2,
            hot_jobs: 100,
            claim_backlog: 100,
            claim_queues: 2,
            claim_samples: 10,
            min_poll_ms: None,
        }
    }

    /// The keyed workloads on the memory backend (the reference semantics): every figure is
    /// measured and every queue is left empty.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keyed_workloads_on_the_reference_backend() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let f = keyed(&b, &settings(), &NoSettle, None).await.unwrap();
        assert!(!f.unsupported);
        assert_eq!(f.drain.as_ref().map(|d| d.jobs), Some(300));
        assert!(f.hot_ratio().is_some_and(|r| r > 0.0), "{f:?}");
        assert_eq!(f.claim.map(|l| l.samples), Some(10));
        let s = b.stats().await.unwrap();
        assert_eq!(s.hot(), 0, "{s:?}");
        // 300 keyed, 30 + 100 + 30 hot-key, 100 + 30 x 10 claimed keyed claim jobs (each refill
        // claimed or drained).
        assert_eq!(s.archived, 300 + 160 + 100 + 10 * (10 + 20));
    }

    /// The rate limit on the memory backend: never more than the limit in a window of the
    /// stamps read back, and most of what it allows used.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rate_limit_on_the_reference_backend() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let limit = RateLimit::new(20, Duration::from_millis(200));
        let f = rate_limited(&b, limit, 1, 2, None, &NoSettle).await.unwrap();
        assert!(!f.unsupported);
        assert!(f.max_in_window <= 20 && f.max_in_window > 0, "{f:?}");
        assert!(f.starts <= f.allowed && f.starts >= 20, "{f:?}");
        assert_eq!(b.stats().await.unwrap().hot(), 0);
    }
}
