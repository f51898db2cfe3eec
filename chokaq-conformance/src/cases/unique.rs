//! Unique jobs (`docs/unique.md`, issue 42): at most one job per unique key among the jobs in
//! the states that count, enforced by the database's unique index on the key, also under
//! racing enqueuers; the key by arguments (canonical JSON, or named fields), period bucket and
//! queue; a job leaving a counted state frees the key, a retried job keeps it.
//!
//! Unique keys span queues unless `by_queue`: every case puts its queue's name in the
//! payload (or sets `by_queue`), so that cases running in parallel never share a key.

use std::time::Duration;

use chokaq_core::{
    BackendExt, ClaimMode, ErrorKind, Fenced, JobId, JobTable, ListJobsParams, NewJob, QueueName, Timestamp,
    UniqueOpts, UniqueState, UniqueStates, WorkerId,
};

use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

mod race;
mod states;
use race::{batch_and_existing, race_one_row};
use states::{
    default_states_are_live, leaving_a_counted_state_frees_the_key, retried_job_keeps_its_key, succeeded_counted,
    waiting_only,
};

super::cases!(unique:
    race_one_row,
    period_boundary,
    default_states_are_live,
    succeeded_counted,
    waiting_only,
    leaving_a_counted_state_frees_the_key,
    by_args,
    by_fields,
    by_queue,
    batch_and_existing,
    retried_job_keeps_its_key,
    unique_of_shows_the_settings,
    prune_keeps_what_counts,
    bad_input,
);

/// A job of `queue` whose payload names the queue (so no other case shares its key), with
/// `extra` merged in, unique by `opts`.
pub(crate) fn ujob(cx: &Ctx, queue: &QueueName, extra: serde_json::Value, opts: UniqueOpts) -> NewJob {
    let mut payload = serde_json::json!({ "case_queue": queue.as_str() });
    if let (Some(p), serde_json::Value::Object(e)) = (payload.as_object_mut(), extra) {
        p.extend(e);
    }
    cx.job(queue).json(payload).unique(opts)
}

/// Unique by arguments, default states.
pub(crate) fn by_args_opts() -> UniqueOpts {
    UniqueOpts::new().by_args()
}

/// The rows of `queue` in the hot table.
pub(crate) async fn hot_rows(cx: &Ctx, queue: &QueueName) -> Result<usize, Failure> {
    let mut f = ListJobsParams::new(JobTable::Hot);
    f.queue = Some(queue.clone());
    f.limit = 1000;
    Ok(cx.backend.list_jobs(&f).await?.jobs.len())
}

/// Enqueues `job` and checks it was new.
pub(crate) async fn fresh(cx: &Ctx, job: NewJob, what: &str) -> Result<JobId, Failure> {
    let e = cx.backend.enqueue(job).await?;
    ensure!(!e.duplicate, "{what}: marked duplicate: {e:?}");
    Ok(e.id)
}

/// Enqueues `job` and checks it was a duplicate of `of`.
pub(crate) async fn duplicate(cx: &Ctx, job: NewJob, of: JobId, what: &str) -> CaseResult {
    let e = cx.backend.enqueue(job).await?;
    ensure!(e.duplicate && e.id == of, "{what}: expected a duplicate of {of}, got {e:?}");
    Ok(())
}

/// The start of the period bucket of `period` seconds that begins a day or more after now
/// (future buckets: jobs due there are Scheduled, and their keys stay out of the pruning of
/// ended periods that other cases may run meanwhile).
fn bucket_start_tomorrow(now: Timestamp, period: i64) -> Timestamp {
    let s = (now.timestamp() + 86_400).div_euclid(period) * period + period;
    Timestamp::from_timestamp(s, 0).unwrap_or(now)
}

/// The period boundary: two due times in one bucket are one job, in two buckets two.
pub async fn period_boundary(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let opts = UniqueOpts::new().by_queue().by_period(Duration::from_secs(3600));
    let t0 = bucket_start_tomorrow(cx.backend.db_now().await?, 3600);
    let at = |secs: i64| t0 + chrono::Duration::seconds(secs);
    let job = |secs: i64| cx.job(&q).unique(opts.clone()).run_at(at(secs));
    let a = fresh(&cx, job(10), "first job of bucket 0").await?;
    duplicate(&cx, job(3599), a, "last second of bucket 0").await?;
    duplicate(&cx, job(0), a, "first second of bucket 0").await?;
    let b = fresh(&cx, job(3600), "first second of bucket 1").await?;
    duplicate(&cx, job(7199), b, "last second of bucket 1").await?;
    let before = fresh(&cx, job(-1), "last second of the bucket before").await?;
    ensure!(a != b && b != before && a != before, "three buckets, three ids: {a} {b} {before}");
    ensure_eq!(hot_rows(&cx, &q).await?, 3, "rows");
    Ok(())
}

/// By arguments: another payload is another job; the same payload with its object keys in
/// another order (at every depth) is the same job.
pub async fn by_args(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let o = by_args_opts();
    let a = fresh(&cx, ujob(&cx, &q, serde_json::json!({"x": 1, "y": {"b": 2, "a": [1, 2]}}), o.clone()), "a").await?;
    let reordered = serde_json::json!({"y": {"a": [1, 2], "b": 2}, "x": 1});
    duplicate(&cx, ujob(&cx, &q, reordered, o.clone()), a, "same payload, keys in another order").await?;
    let b = fresh(&cx, ujob(&cx, &q, serde_json::json!({"x": 2, "y": {"b": 2, "a": [1, 2]}}), o.clone()), "b").await?;
    let c = fresh(&cx, ujob(&cx, &q, serde_json::json!({"x": 1, "y": {"b": 2, "a": [2, 1]}}), o), "c").await?;
    ensure!(a != b && b != c && a != c, "three payloads, three ids");
    // Without arguments, the kind alone (and here the queue) decides.
    let kind_only = UniqueOpts::new().by_queue();
    let k = fresh(&cx, cx.job(&q).json(serde_json::json!(1)).unique(kind_only.clone()), "kind only").await?;
    duplicate(&cx, cx.job(&q).json(serde_json::json!(2)).unique(kind_only), k, "kind only, another payload").await?;
    ensure_eq!(hot_rows(&cx, &q).await?, 4, "rows");
    Ok(())
}

/// By named fields: only those fields decide; a missing field is `null`.
pub async fn by_fields(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let o = UniqueOpts::new().by_fields(["case_queue", "account"]);
    let a = fresh(&cx, ujob(&cx, &q, serde_json::json!({"account": 42, "note": "a"}), o.clone()), "account 42").await?;
    let same = ujob(&cx, &q, serde_json::json!({"note": "b", "account": 42}), o.clone());
    duplicate(&cx, same, a, "account 42, another note").await?;
    fresh(&cx, ujob(&cx, &q, serde_json::json!({"account": 43, "note": "a"}), o.clone()), "account 43").await?;
    let none = fresh(&cx, ujob(&cx, &q, serde_json::json!({"note": "c"}), o.clone()), "no account").await?;
    duplicate(&cx, ujob(&cx, &q, serde_json::json!({"account": null}), o), none, "account null").await?;
    ensure_eq!(hot_rows(&cx, &q).await?, 3, "rows");
    Ok(())
}

/// By queue: with it, the same job on two queues is two jobs; without it, one (the first
/// queue's).
pub async fn by_queue(cx: Ctx) -> CaseResult {
    let (qa, qb) = (cx.queue_named("a"), cx.queue_named("b"));
    let payload = serde_json::json!({ "pair": qa.as_str() });
    let per_queue = UniqueOpts::new().by_args().by_queue();
    let a = fresh(&cx, cx.job(&qa).json(payload.clone()).unique(per_queue.clone()), "by queue, on A").await?;
    let b = fresh(&cx, cx.job(&qb).json(payload.clone()).unique(per_queue.clone()), "by queue, on B").await?;
    ensure!(a != b, "two queues, two ids");
    duplicate(&cx, cx.job(&qb).json(payload.clone()).unique(per_queue), b, "by queue, on B again").await?;
    let across = UniqueOpts::new().by_args();
    let payload = serde_json::json!({ "across": qa.as_str() });
    let c = fresh(&cx, cx.job(&qa).json(payload.clone()).unique(across.clone()), "across queues, on A").await?;
    duplicate(&cx, cx.job(&qb).json(payload).unique(across), c, "across queues, on B").await?;
    ensure_eq!((hot_rows(&cx, &qa).await?, hot_rows(&cx, &qb).await?), (2, 1), "rows of A and B");
    Ok(())
}

/// `unique_of` names the key and the settings of the job holding it; a job that is not
/// unique, or whose enqueue was a duplicate, holds none.
pub async fn unique_of_shows_the_settings(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let opts = UniqueOpts::new()
        .by_fields(["case_queue"])
        .by_period(Duration::from_secs(60))
        .states(UniqueStates::DEFAULT.with(UniqueState::Succeeded));
    let t0 = bucket_start_tomorrow(cx.backend.db_now().await?, 60);
    let a = fresh(&cx, ujob(&cx, &q, serde_json::json!({}), opts.clone()).run_at(t0), "unique job").await?;
    let hold = cx.backend.unique_of(a).await?.ok_or_else(|| Failure("unique_of: None for a unique job".into()))?;
    ensure_eq!(hold.job_id, a, "holder");
    ensure_eq!(hold.opts, opts, "settings read back");
    ensure_eq!(hold.key.len(), 64, "key length");
    ensure!(hold.key.chars().all(|c| c.is_ascii_hexdigit()), "key is hex: {}", hold.key);
    ensure_eq!(hold.expires_at, Some(t0 + chrono::Duration::seconds(60)), "end of the period");
    let plain = fresh(&cx, cx.job(&q), "plain job").await?;
    ensure_eq!(cx.backend.unique_of(plain).await?, None, "unique_of a plain job");
    Ok(())
}

/// Pruning never deletes the key of a job that still counts: a live job's, or a succeeded
/// job's whose states count success; it deletes the key of a finished job that no longer
/// counts.
pub async fn prune_keeps_what_counts(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let w = WorkerId::random();
    let live = fresh(&cx, ujob(&cx, &q, serde_json::json!({"n": "live"}), by_args_opts()), "live").await?;
    let kept_opts = by_args_opts().states(UniqueStates::DEFAULT.with(UniqueState::Succeeded));
    let kept = fresh(&cx, ujob(&cx, &q, serde_json::json!({"n": "kept"}), kept_opts), "succeeded counts").await?;
    let done = fresh(&cx, ujob(&cx, &q, serde_json::json!({"n": "done"}), by_args_opts()), "done").await?;
    for j in cx.claim(w, &q, 3, ClaimMode::Start).await?.into_iter().filter(|j| j.id != live) {
        ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
    }
    cx.poll("the finished job's key pruned", || async {
        cx.backend.prune_uniques(1000).await?;
        Ok(cx.backend.unique_of(done).await?.is_none())
    })
    .await?;
    ensure!(cx.backend.unique_of(live).await?.is_some(), "a Processing job's key was pruned");
    ensure!(cx.backend.unique_of(kept).await?.is_some(), "a succeeded job's key was pruned though success counts");
    let err = cx.backend.prune_uniques(0).await.unwrap_err();
    ensure_eq!(err.kind(), ErrorKind::InvalidInput, "prune_uniques(0)");
    Ok(())
}

/// Bad settings are `InvalidInput` and write nothing, also inside a batch.
pub async fn bad_input(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let bad = [
        UniqueOpts::new().by_period(Duration::from_millis(1500)),
        UniqueOpts::new().by_period(Duration::ZERO),
        UniqueOpts::new().by_fields(Vec::<String>::new()),
        UniqueOpts::new().states(UniqueStates::of(&[])),
    ];
    for opts in bad {
        let batch = vec![ujob(&cx, &q, serde_json::json!({"ok": 1}), by_args_opts()), cx.job(&q).unique(opts.clone())];
        let err = cx.backend.enqueue_many(batch).await.unwrap_err();
        ensure_eq!(err.kind(), ErrorKind::InvalidInput, "settings {opts:?}");
    }
    let err = cx.backend.enqueue(cx.job(&q).json(serde_json::json!([1])).unique(UniqueOpts::new().by_fields(["a"])));
    ensure_eq!(err.await.unwrap_err().kind(), ErrorKind::InvalidInput, "fields of a non-object payload");
    ensure_eq!(hot_rows(&cx, &q).await?, 0, "rows written");
    Ok(())
}
