//! Rate limits: at most `jobs` starts (claims) in any window of length `per`, for the queue or
//! for each concurrency key. The windows are read back from the database: in start mode a
//! job's `started_at` is its claim's stamp in the starts log.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    ClaimMode, ErrorKind, JobId, JobRecord, JobTable, LeaseRef, ListJobsParams, QueueControl, QueueName, RateLimit,
    Timestamp, WorkerId,
};

use super::keyed::{enqueue_keyed, per_key};
use crate::child::ChildLine;
use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

mod window;
pub use window::check_long_window;
use window::{kind_change_keeps_the_window, long_window_exact};

super::cases!(rate:
    limits_starts_in_window,
    by_key,
    queue_wide_counts_every_job,
    release_keeps_the_start,
    window_slides,
    cleared,
    race_tasks,
    race_processes [MULTI_PROCESS],
    bad_input,
    long_window_exact,
    kind_change_keeps_the_window,
);

async fn set_rate(cx: &Ctx, q: &QueueName, limit: Option<RateLimit>) -> CaseResult {
    let st = cx.backend.control_queue(q, QueueControl::SetRateLimit(limit)).await?;
    ensure_eq!(st.rate_limit, limit, "rate_limit returned by control_queue");
    Ok(())
}

fn counts(spec: &[(&str, usize)]) -> BTreeMap<String, usize> {
    spec.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// Every archived job of `q` (all pages).
async fn archived(cx: &Ctx, q: &QueueName) -> Result<Vec<JobRecord>, Failure> {
    let mut params = ListJobsParams::new(JobTable::Archive);
    params.queue = Some(q.clone());
    params.limit = 500;
    let mut out = Vec::new();
    loop {
        let page = cx.backend.list_jobs(&params).await?;
        out.extend(page.jobs);
        match page.next {
            Some(next) => params.after = Some(next),
            None => return Ok(out),
        }
    }
}

/// The most stamps any half-open window `[s, s + per)` holds (the windows that matter start at
/// a stamp).
pub fn max_in_window(stamps: &[Timestamp], per: Duration) -> usize {
    let mut s = stamps.to_vec();
    s.sort();
    let per = chrono::Duration::from_std(per).expect("small period");
    let mut best = 0;
    let mut j = 0;
    for i in 0..s.len() {
        if j < i {
            j = i;
        }
        while j < s.len() && s[j] < s[i] + per {
            j += 1;
        }
        best = best.max(j - i);
    }
    best
}

/// Checks the windows of the archived jobs' start stamps, per bucket (`by_key`: per key).
async fn check_windows(cx: &Ctx, q: &QueueName, limit: RateLimit, want_jobs: usize) -> CaseResult {
    let jobs = archived(cx, q).await?;
    ensure_eq!(jobs.len(), want_jobs, "archived jobs");
    let mut buckets: BTreeMap<Option<String>, Vec<Timestamp>> = BTreeMap::new();
    for j in &jobs {
        let stamp = j.started_at.ok_or(format!("archived job {} has no started_at", j.id))?;
        let bucket = if limit.by_key { j.concurrency_key.clone() } else { None };
        buckets.entry(bucket).or_default().push(stamp);
    }
    for (bucket, stamps) in &buckets {
        if limit.by_key && bucket.is_none() {
            continue; // key-less jobs are not limited by a per-key rate
        }
        let max = max_in_window(stamps, limit.per);
        ensure!(
            max <= limit.jobs as usize,
            "bucket {bucket:?}: {max} starts in one window of {:?} (limit {})",
            limit.per,
            limit.jobs
        );
    }
    Ok(())
}

/// A queue limited to 3 starts per hour: one claim takes 3 of 10 due jobs; completing them
/// frees nothing (the window counts starts, not running jobs).
pub async fn limits_starts_in_window(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 10).await?;
    let limit = RateLimit::new(3, Duration::from_secs(3600));
    set_rate(&cx, &q, Some(limit)).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure_eq!(got.len(), 3, "claim under a limit of 3 per hour");
    let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
    ensure_eq!(cx.backend.complete(w, &leases).await?.done.len(), 3, "completed");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 0, "claim after the 3 finished, same window");
    ensure_eq!(cx.claim(w, &q, 1, ClaimMode::Reserve).await?.len(), 0, "a reserve claim, same window");
    ensure_eq!(cx.backend.queue_settings(&q).await?.rate_limit, Some(limit), "queue_settings rate_limit");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(s.settings.and_then(|s| s.rate_limit), Some(limit), "rate_limit in the stats' settings");
    Ok(())
}

/// A per-key limit of 2 per hour: 2 jobs of each key and every key-less job.
pub async fn by_key(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 4), (Some("b"), 4), (None, 3)]).await?;
    set_rate(&cx, &q, Some(RateLimit::new(2, Duration::from_secs(3600)).by_key())).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 20, ClaimMode::Start).await?;
    ensure_eq!(per_key(&got), counts(&[("-", 3), ("a", 2), ("b", 2)]), "jobs per key under 2 per hour per key");
    ensure_eq!(cx.claim(w, &q, 20, ClaimMode::Start).await?.len(), 0, "claim with every key's window full");
    Ok(())
}

/// A queue-wide limit counts keyed and key-less jobs alike.
pub async fn queue_wide_counts_every_job(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    enqueue_keyed(&cx, &q, &[(Some("a"), 2), (Some("b"), 2), (None, 2)]).await?;
    set_rate(&cx, &q, Some(RateLimit::new(3, Duration::from_secs(3600)))).await?;
    let w = WorkerId::random();
    let first = cx.claim(w, &q, 2, ClaimMode::Start).await?;
    let second = cx.claim(w, &q, 10, ClaimMode::Reserve).await?;
    ensure_eq!((first.len(), second.len()), (2, 1), "claims of 2 then 10 under a queue-wide 3 per hour");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Hold).await?.len(), 0, "claim with the window full");
    Ok(())
}

/// A start stays in the window when its job goes back to Pending (release).
pub async fn release_keeps_the_start(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 4).await?;
    set_rate(&cx, &q, Some(RateLimit::new(2, Duration::from_secs(3600)))).await?;
    let w = WorkerId::random();
    let got = cx.claim(w, &q, 10, ClaimMode::Reserve).await?;
    ensure_eq!(got.len(), 2, "claim under 2 per hour");
    let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
    ensure_eq!(cx.backend.release(w, &leases).await?.done.len(), 2, "released");
    ensure_eq!(cx.queue_stats(&q).await?.pending, 4, "pending after the release");
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 0, "claim after the release, same window");
    Ok(())
}

/// 2 starts per 400 ms: six jobs claimed as fast as the limit lets them run in at least three
/// windows; read back from the database, no window of 400 ms holds more than 2 starts.
pub async fn window_slides(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 6).await?;
    let limit = RateLimit::new(2, Duration::from_millis(400));
    set_rate(&cx, &q, Some(limit)).await?;
    let w = WorkerId::random();
    let done = AtomicU64::new(0);
    cx.poll("six jobs started and completed under 2 per 400 ms", || async {
        let got = cx.claim(w, &q, 10, ClaimMode::Start).await?;
        ensure!(got.len() <= 2, "one claim took {} jobs under 2 per 400 ms", got.len());
        let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
        let n = cx.backend.complete(w, &leases).await?.done.len() as u64;
        Ok(done.fetch_add(n, Ordering::SeqCst) + n >= 6)
    })
    .await?;
    check_windows(&cx, &q, limit, 6).await?;
    let jobs = archived(&cx, &q).await?;
    let mut stamps: Vec<Timestamp> = jobs.iter().filter_map(|j| j.started_at).collect();
    stamps.sort();
    let span = (stamps[5] - stamps[0]).to_std().unwrap_or_default();
    ensure!(span >= Duration::from_millis(800), "six starts under 2 per 400 ms spanned only {span:?}");
    Ok(())
}

/// Clearing the limit lets every job through.
pub async fn cleared(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 5).await?;
    set_rate(&cx, &q, Some(RateLimit::new(1, Duration::from_secs(3600)))).await?;
    let w = WorkerId::random();
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 1, "claim under 1 per hour");
    set_rate(&cx, &q, None).await?;
    ensure_eq!(cx.claim(w, &q, 10, ClaimMode::Start).await?.len(), 4, "claim with the limit cleared");
    ensure_eq!(cx.backend.queue_settings(&q).await?.rate_limit, None, "queue_settings rate_limit");
    Ok(())
}

/// Racing claimer tasks on a queue limited to 5 per 300 ms, and on a per-key limit of 2 per
/// 300 ms over 4 keys: every job runs once; no window read back holds more than the limit.
pub async fn race_tasks(cx: Ctx) -> CaseResult {
    for limit in [RateLimit::new(5, Duration::from_millis(300)), RateLimit::new(2, Duration::from_millis(300)).by_key()]
    {
        let q = cx.queue_named(if limit.by_key { "bykey" } else { "queue" });
        let spec: Vec<(Option<&str>, usize)> = if limit.by_key {
            vec![(Some("a"), 6), (Some("b"), 6), (Some("c"), 6), (Some("d"), 6)]
        } else {
            vec![(Some("a"), 10), (None, 10)]
        };
        let ids = enqueue_keyed(&cx, &q, &spec).await?;
        let total = ids.len() as u64;
        set_rate(&cx, &q, Some(limit)).await?;
        let done = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..cx.stress.claimers.max(6) {
            let (cx, q, done) = (cx.clone(), q.clone(), done.clone());
            tasks.spawn(async move {
                let w = WorkerId::random();
                let mut progress = crate::cases::Progress::new();
                while done.load(Ordering::SeqCst) < total {
                    let now_done = done.load(Ordering::SeqCst);
                    ensure!(!progress.stalled(now_done), "rate race: no job finished for 60 s ({now_done} of {total})");
                    let got = cx.claim(w, &q, 1 + (t as u32 % 3), ClaimMode::Start).await?;
                    if got.is_empty() {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    }
                    let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                    let c = cx.backend.complete(w, &leases).await?;
                    ensure!(c.lost.is_empty(), "complete lost leases {:?}", c.lost);
                    done.fetch_add(c.done.len() as u64, Ordering::SeqCst);
                }
                Ok::<(), Failure>(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.map_err(|e| Failure(format!("claimer panicked: {e}")))??;
        }
        check_windows(&cx, &q, limit, ids.len()).await?;
    }
    Ok(())
}

/// Child OS processes race over a queue limited to 4 starts per 250 ms: every job claimed
/// exactly once; no window read back holds more than 4 starts.
pub async fn race_processes(cx: Ctx) -> CaseResult {
    let launcher = cx.children().ok_or("no child launcher")?.clone();
    let q = cx.queue();
    let ids = cx.enqueue_n(&q, 24).await?;
    let limit = RateLimit::new(4, Duration::from_millis(250));
    set_rate(&cx, &q, Some(limit)).await?;
    let mut readers = tokio::task::JoinSet::new();
    for p in 0..cx.stress.processes.max(3) {
        let mut child = launcher.spawn("claim-all", &q, 1 + (p as u32 % 3))?;
        readers.spawn(async move {
            let mut claims = Vec::new();
            let mut done = false;
            while let Some(line) = child.next().await? {
                match line {
                    ChildLine::Claimed(id, _) => claims.push(id),
                    ChildLine::Done => done = true,
                    ChildLine::Lost(id) => return Err(Failure(format!("child lost the lease of {id}"))),
                    ChildLine::Error(e) => return Err(Failure(format!("child failed: {e}"))),
                    ChildLine::Ready | ChildLine::Held(..) | ChildLine::Tick(..) => {}
                }
            }
            let status = child.child.wait().await.map_err(|e| Failure(format!("waiting for child: {e}")))?;
            ensure!(done && status.success(), "child ended without 'done' (exit {status})");
            Ok::<_, Failure>(claims)
        });
    }
    let mut all: Vec<JobId> = Vec::new();
    while let Some(r) = readers.join_next().await {
        all.extend(r.map_err(|e| Failure(format!("reader panicked: {e}")))??);
    }
    let distinct: HashSet<JobId> = all.iter().copied().collect();
    ensure_eq!((distinct.len(), all.len()), (ids.len(), ids.len()), "(distinct jobs claimed, claims)");
    check_windows(&cx, &q, limit, ids.len()).await
}

/// Out-of-range limits are invalid input and change nothing.
pub async fn bad_input(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let good = RateLimit::new(7, Duration::from_secs(60));
    set_rate(&cx, &q, Some(good)).await?;
    for bad in [
        RateLimit::new(0, Duration::from_secs(1)),
        RateLimit::new(chokaq_core::validate::MAX_RATE_JOBS + 1, Duration::from_secs(1)),
        RateLimit::new(1, Duration::ZERO),
        RateLimit::new(1, Duration::from_micros(999)),
        RateLimit::new(1, Duration::from_micros(1500)),
        RateLimit::new(1, chokaq_core::validate::MAX_RATE_PERIOD + Duration::from_millis(1)),
    ] {
        let err = cx.backend.control_queue(&q, QueueControl::SetRateLimit(Some(bad))).await.err();
        ensure_eq!(err.map(|e| e.kind()), Some(ErrorKind::InvalidInput), "error kind for {bad:?}");
    }
    ensure_eq!(cx.backend.queue_settings(&q).await?.rate_limit, Some(good), "rate limit after the rejected changes");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_half_open() {
        let t0 = chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("valid");
        let ms = |n: i64| t0 + chrono::Duration::milliseconds(n);
        let per = Duration::from_millis(100);
        assert_eq!(max_in_window(&[ms(0), ms(100), ms(200)], per), 1);
        assert_eq!(max_in_window(&[ms(0), ms(99), ms(200)], per), 2);
        assert_eq!(max_in_window(&[ms(50), ms(0), ms(99), ms(149)], per), 3);
        assert_eq!(max_in_window(&[], per), 0);
    }
}
