//! Rate windows whose size does not matter (issue 40, L7): a window holding a million starts is
//! counted exactly, and a change of a limit's kind (queue-wide / per key) keeps every bucket's
//! count. Each backend counts a window from the bucket's ordinals (or, in memory, a binary
//! search), never row by row; these cases hold the counts exact, the backends' own tests hold
//! the cost.

use std::collections::BTreeMap;
use std::time::Duration;

use chokaq_core::{ClaimMode, QueueControl, QueueName, RateLimit, WorkerId};

use super::super::keyed::{enqueue_keyed, per_key};
use crate::ctx::{CaseResult, Ctx, Failure};
use crate::harness::TestBackend;
use crate::{ensure, ensure_eq};

/// The starts the conformance case puts in its long window (the backends' own tests put
/// 999,990 there through [`check_long_window`]).
const CASE_FILL: u64 = 2_000;

/// A day's window full but for 10 starts: `fill` starts stamped an hour ago in the window of
/// a limit of `fill + 10` per day (queue-wide, or `by_key` for key `k`), and 7 more stamped
/// just before the window (its start less 1 ms, as the database's clock reads it before the
/// claim). A claim of 20 takes exactly 10 (and, by key, every job of another key), the next
/// one nothing. The starts are put in the log in bulk ([`TestSupport::add_starts`]).
///
/// [`TestSupport::add_starts`]: chokaq_core::testing::TestSupport::add_starts
pub async fn check_long_window(
    backend: &dyn TestBackend,
    queue: &QueueName,
    fill: u64,
    by_key: bool,
) -> Result<(), Failure> {
    let key = by_key.then_some("k");
    let mut spec = vec![(key, 25)];
    if by_key {
        spec.push((Some("j"), 3));
    }
    let mut jobs = Vec::new();
    for (k, n) in &spec {
        for _ in 0..*n {
            let j = chokaq_core::NewJob::new(queue.clone(), chokaq_core::JobKind::new("test.job.v1").expect("valid"));
            jobs.push(match k {
                Some(k) => j.concurrency_key(*k),
                None => j,
            });
        }
    }
    ensure_eq!(backend.enqueue_many(jobs).await?.len(), if by_key { 28 } else { 25 }, "enqueued");
    let jobs_per_day = u32::try_from(fill + 10).map_err(|_| Failure(format!("fill {fill} too large")))?;
    let per = Duration::from_secs(86_400);
    let limit = if by_key { RateLimit::new(jobs_per_day, per).by_key() } else { RateLimit::new(jobs_per_day, per) };
    backend.control_queue(queue, QueueControl::SetRateLimit(Some(limit))).await?;
    let now = backend.db_now().await?;
    let day = chrono::Duration::from_std(per).expect("a day");
    let outside = now - day - chrono::Duration::milliseconds(1);
    backend.add_starts(queue, key, 7, outside).await?;
    backend.add_starts(queue, key, fill, now - chrono::Duration::hours(1)).await?;
    let w = WorkerId::random();
    let claim = |n: u32| async move {
        backend.claim(&chokaq_core::ClaimParams::new(w, vec![queue.clone()], n, ClaimMode::Start)).await
    };
    let got = claim(20).await?;
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    want.insert(key.unwrap_or("-").to_string(), 10);
    if by_key {
        want.insert("j".into(), 3);
    }
    ensure_eq!(
        per_key(&got),
        want,
        "jobs per key claimed with {fill} starts in the window of {jobs_per_day} per day (7 more just outside)"
    );
    ensure_eq!(claim(20).await?.len(), 0, "claim with {} starts in the window of {jobs_per_day} per day", fill + 10);
    Ok(())
}

/// [`check_long_window`] with a window of a few thousand starts, queue-wide and per key.
pub async fn long_window_exact(cx: Ctx) -> CaseResult {
    for by_key in [false, true] {
        let q = cx.queue_named(if by_key { "bykey" } else { "queue" });
        check_long_window(&*cx.backend, &q, CASE_FILL, by_key).await?;
    }
    Ok(())
}

/// Jobs to enqueue: how many of each key (None: no key).
type Spec = Vec<(Option<&'static str>, usize)>;

/// The starts of each bucket as the case has seen them claimed (`"-"`: no key), and the due
/// jobs still waiting per key: what a claim under each limit may take.
#[derive(Default)]
struct Model {
    started: BTreeMap<String, u32>,
    due: BTreeMap<String, u32>,
}

impl Model {
    fn total(&self) -> u32 {
        self.started.values().sum()
    }

    /// What a claim of many may take under `limit`, per key.
    fn expect(&self, limit: RateLimit) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        if limit.by_key {
            for (k, due) in &self.due {
                let room = if k == "-" { *due } else { limit.jobs.saturating_sub(self.started_of(k)).min(*due) };
                if room > 0 {
                    out.insert(k.clone(), room as usize);
                }
            }
        } else {
            let room = limit.jobs.saturating_sub(self.total()).min(self.due.values().sum());
            if room > 0 {
                out.insert("*".into(), room as usize);
            }
        }
        out
    }

    fn started_of(&self, k: &str) -> u32 {
        self.started.get(k).copied().unwrap_or(0)
    }

    fn took(&mut self, got: &BTreeMap<String, usize>) {
        for (k, n) in got {
            *self.started.entry(k.clone()).or_default() += *n as u32;
            *self.due.entry(k.clone()).or_default() -= *n as u32;
        }
    }
}

/// A queue's limit changed between queue-wide and per key, four times, starts kept: every
/// claim takes what the starts already in the window leave of the bucket's limit, whichever
/// kind of limit wrote them. (The SQL backends number each bucket's starts; a change of kind
/// renumbers the queue's log for the new buckets.) The first starts alternate between keys,
/// one claim each, so that a queue-wide numbering is no per-key one.
pub async fn kind_change_keeps_the_window(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let hour = Duration::from_secs(3600);
    let w = WorkerId::random();
    let mut m = Model::default();
    let enqueue = |spec: Vec<(Option<&'static str>, usize)>| {
        let (cx, q) = (&cx, &q);
        async move { enqueue_keyed(cx, q, &spec).await }
    };
    let set = |limit: RateLimit| {
        let (cx, q) = (&cx, &q);
        async move { cx.backend.control_queue(q, QueueControl::SetRateLimit(Some(limit))).await }
    };
    let grouped = |got: &[chokaq_core::ClaimedJob], by_key: bool| -> BTreeMap<String, usize> {
        if by_key {
            per_key(got)
        } else if got.is_empty() {
            BTreeMap::new()
        } else {
            BTreeMap::from([("*".to_string(), got.len())])
        }
    };
    // Queue-wide, 5 per hour: one job at a time, keys a, b, a, b, then a key-less one.
    set(RateLimit::new(5, hour)).await?;
    for k in [Some("a"), Some("b"), Some("a"), Some("b"), None] {
        enqueue(vec![(k, 1)]).await?;
        let got = cx.claim(w, &q, 1, ClaimMode::Start).await?;
        ensure_eq!(got.len(), 1, "claim of a {k:?} job under 5 per hour");
        m.started.entry(k.unwrap_or("-").to_string()).and_modify(|n| *n += 1).or_insert(1);
    }
    enqueue(vec![(Some("a"), 1)]).await?;
    m.due.insert("a".into(), 1);
    ensure_eq!(cx.claim(w, &q, 5, ClaimMode::Start).await?.len(), 0, "claim with the 5 starts in the window");
    // (by key, jobs per hour: by key as given, queue-wide that many more than every start so
    // far, the jobs enqueued first).
    let steps: [(bool, u32, Spec); 4] = [
        (true, 3, vec![(Some("a"), 3), (Some("b"), 3), (None, 2)]),
        (false, 2, vec![]),
        (true, 6, vec![(Some("a"), 4), (Some("b"), 4)]),
        (false, 1, vec![]),
    ];
    for (i, (by_key, jobs, more)) in steps.into_iter().enumerate() {
        let limit = if by_key { RateLimit::new(jobs, hour).by_key() } else { RateLimit::new(m.total() + jobs, hour) };
        set(limit).await?;
        for (k, n) in &more {
            *m.due.entry(k.unwrap_or("-").to_string()).or_default() += *n as u32;
        }
        enqueue(more).await?;
        let want = m.expect(limit);
        let got = cx.claim(w, &q, 40, ClaimMode::Start).await?;
        let seen = grouped(&got, limit.by_key);
        ensure_eq!(seen, want, "step {}: claim under {limit:?} with the starts {:?}", i + 1, m.started);
        m.took(&per_key(&got));
        ensure!(!want.is_empty(), "step {}: the case expects every step to take something", i + 1);
        let again = cx.claim(w, &q, 40, ClaimMode::Start).await?;
        ensure_eq!(again.len(), 0, "step {}: a second claim under {limit:?}", i + 1);
    }
    Ok(())
}
