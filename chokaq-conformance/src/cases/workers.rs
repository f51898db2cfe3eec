//! Live worker processes (the workers table) and finished-jobs throughput: upsert keeps the
//! first start and moves `last_seen_at`, exact listings, deregistration, pruning of stale rows
//! only, exact per-minute counts per queue, and typed errors for bad input.
//!
//! The workers table is shared by every case of a run, so each case looks only at its own
//! worker ids; only [`prune_removes_only_stale`] ages a row, so its prune count is exact.

use std::time::Duration;

use chokaq_core::{
    BackendExt, ClaimMode, DeadReason, ErrorKind, FailAction, QueueName, ThroughputBucket, ThroughputParams, Timestamp,
    WorkerId, WorkerProcess, WorkerRegistration, MAX_HOST_LEN,
};

use crate::ctx::{CaseResult, Ctx, Failure};
use crate::{ensure, ensure_eq};

super::cases!(
    workers: register_upserts,
    list_shows_exact_rows,
    deregister_removes_the_row,
    prune_removes_only_stale,
    throughput_counts_per_minute,
    bad_input_is_rejected,
);

fn registration(queues: &[&QueueName], concurrency: u32) -> WorkerRegistration {
    WorkerRegistration {
        worker: WorkerId::random(),
        host: "host-a.example".into(),
        pid: 4242,
        queues: queues.iter().map(|q| (*q).clone()).collect(),
        concurrency,
    }
}

/// The row of `worker`, if listed.
async fn row(cx: &Ctx, worker: WorkerId) -> Result<Option<WorkerProcess>, Failure> {
    Ok(cx.backend.list_workers().await?.into_iter().find(|w| w.worker == worker))
}

/// The database's now, whole seconds (every backend stores those exactly).
async fn db_now_secs(cx: &Ctx) -> Result<Timestamp, Failure> {
    let now = cx.backend.db_now().await?;
    Ok(chrono::DateTime::from_timestamp(now.timestamp(), 0).expect("in range"))
}

/// A second registration of the same id keeps `started_at`, moves `last_seen_at` to the
/// database's now and replaces host, pid, queues and concurrency.
pub async fn register_upserts(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let mut reg = registration(&[&q], 4);
    cx.backend.register_worker(&reg).await?;
    let first = row(&cx, reg.worker).await?.ok_or("the registered worker is not listed")?;
    ensure_eq!(first.started_at, first.last_seen_at, "started_at and last_seen_at of a first registration");
    // Put last_seen_at in the past, and wait until the database clock has passed started_at.
    let past = db_now_secs(&cx).await? - chrono::Duration::minutes(5);
    ensure!(cx.backend.force_worker_seen(reg.worker, past).await?, "force_worker_seen found no row");
    cx.poll("the database clock to pass started_at", || async { Ok(cx.backend.db_now().await? > first.started_at) })
        .await?;
    let q2 = cx.queue_named("second");
    reg.queues = vec![q.clone(), q2.clone()];
    reg.concurrency = 8;
    reg.pid = 4343;
    reg.host = "host-b.example".into();
    let before = cx.backend.db_now().await?;
    cx.backend.register_worker(&reg).await?;
    let second = row(&cx, reg.worker).await?.ok_or("the re-registered worker is not listed")?;
    ensure_eq!(second.started_at, first.started_at, "started_at after a second registration");
    ensure!(
        second.last_seen_at >= before.min(first.started_at) && second.last_seen_at > past,
        "last_seen_at did not move: {:?} (forced to {past:?}, now was {before:?})",
        second.last_seen_at
    );
    ensure!(second.last_seen_at > first.started_at, "last_seen_at {:?} is not after started_at", second.last_seen_at);
    ensure_eq!(
        (second.host.as_str(), second.pid, second.queues.clone(), second.concurrency),
        ("host-b.example", 4343, vec![q.to_string(), q2.to_string()], 8),
        "(host, pid, queues, concurrency) after a second registration"
    );
    let mine = cx.backend.list_workers().await?.into_iter().filter(|w| w.worker == reg.worker).count();
    ensure_eq!(mine, 1, "rows of one worker id");
    Ok(())
}

/// Three registrations are listed exactly as written (queue order kept), newest start first.
pub async fn list_shows_exact_rows(cx: Ctx) -> CaseResult {
    let (a, b) = (cx.queue_named("a"), cx.queue_named("b"));
    let regs = [registration(&[&a], 1), registration(&[&b, &a], 16), registration(&[], 2)];
    for r in &regs {
        cx.backend.register_worker(r).await?;
    }
    let listed = cx.backend.list_workers().await?;
    for w in listed.windows(2) {
        ensure!(w[0].started_at >= w[1].started_at, "list_workers is not newest first: {w:?}");
    }
    let ids: Vec<WorkerId> = regs.iter().map(|r| r.worker).collect();
    let mine: Vec<&WorkerProcess> = listed.iter().filter(|w| ids.contains(&w.worker)).collect();
    ensure_eq!(mine.len(), 3, "rows of the three registered workers");
    for r in &regs {
        let w = mine.iter().find(|w| w.worker == r.worker).ok_or("a registered worker is missing")?;
        let queues: Vec<String> = r.queues.iter().map(|q| q.to_string()).collect();
        ensure_eq!(
            (w.host.as_str(), w.pid, w.queues.clone(), w.concurrency),
            (r.host.as_str(), r.pid, queues, r.concurrency),
            "row of worker {}",
            r.worker
        );
        ensure!(w.last_seen_at >= w.started_at, "last_seen_at before started_at: {w:?}");
    }
    Ok(())
}

/// Deregistration removes the row and says so; a second one finds nothing.
pub async fn deregister_removes_the_row(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let (a, b) = (registration(&[&q], 1), registration(&[&q], 1));
    cx.backend.register_worker(&a).await?;
    cx.backend.register_worker(&b).await?;
    ensure_eq!(cx.backend.deregister_worker(a.worker).await?, true, "first deregister");
    ensure_eq!(cx.backend.deregister_worker(a.worker).await?, false, "second deregister");
    ensure!(row(&cx, a.worker).await?.is_none(), "the deregistered worker is still listed");
    ensure!(row(&cx, b.worker).await?.is_some(), "the other worker is gone");
    ensure_eq!(cx.backend.deregister_worker(WorkerId::random()).await?, false, "deregister of an unknown id");
    Ok(())
}

/// Prune removes the rows not seen for longer than `stale_after`, and only those.
pub async fn prune_removes_only_stale(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let (fresh, recent, stale) = (registration(&[&q], 1), registration(&[&q], 1), registration(&[&q], 1));
    for r in [&fresh, &recent, &stale] {
        cx.backend.register_worker(r).await?;
    }
    let now = db_now_secs(&cx).await?;
    ensure!(cx.backend.force_worker_seen(recent.worker, now - chrono::Duration::minutes(5)).await?, "force recent");
    ensure!(cx.backend.force_worker_seen(stale.worker, now - chrono::Duration::hours(2)).await?, "force stale");
    let pruned = cx.backend.prune_workers(Duration::from_secs(3600)).await?;
    ensure_eq!(pruned, 1, "rows pruned (stale after 1 h)");
    ensure!(row(&cx, stale.worker).await?.is_none(), "the stale worker is still listed");
    ensure!(row(&cx, recent.worker).await?.is_some(), "the worker seen 5 minutes ago was pruned");
    ensure!(row(&cx, fresh.worker).await?.is_some(), "the fresh worker was pruned");
    ensure_eq!(cx.backend.prune_workers(Duration::from_secs(3600)).await?, 0, "a second prune");
    Ok(())
}

/// Throughput counts the archived jobs of each minute exactly, per queue; dead letters, jobs
/// outside the window and other queues (when one is asked for) are left out.
pub async fn throughput_counts_per_minute(cx: Ctx) -> CaseResult {
    let (q, other) = (cx.queue(), cx.queue_named("other"));
    let w = WorkerId::random();
    let ids = cx.enqueue_n(&q, 5).await?;
    cx.enqueue_n(&other, 1).await?;
    let mut done = Vec::new();
    for _ in 0..4 {
        let j = cx.claim_one_started(w, &q).await?;
        cx.backend.complete_one(w, j.lease_ref()).await?.done().ok_or("complete lost")?;
        done.push(j.id);
    }
    let dead = cx.claim_one_started(w, &q).await?;
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "x".into() };
    cx.backend.fail(w, dead.lease_ref(), dl).await?.done().ok_or("fail lost")?;
    let o = cx.claim(w, &other, 1, ClaimMode::Start).await?;
    ensure_eq!(o.len(), 1, "claim from the other queue");
    cx.backend.complete_one(w, o[0].lease_ref()).await?.done().ok_or("complete lost")?;
    ensure_eq!(ids.len(), 5, "enqueued");

    let now = db_now_secs(&cx).await?;
    let minute = |ago: i64| {
        let t = now - chrono::Duration::minutes(ago);
        chrono::DateTime::from_timestamp(t.timestamp() - t.timestamp().rem_euclid(60), 0).expect("in range")
    };
    let (m10, m5) = (minute(10), minute(5));
    let at = |m: Timestamp, s: i64| m + chrono::Duration::seconds(s);
    for (id, t) in [(done[0], at(m10, 1)), (done[1], at(m10, 59)), (done[2], at(m5, 30)), (done[3], minute(120))] {
        ensure!(cx.backend.force_finished_at(id, t).await?, "force_finished_at({id}) found no archived row");
    }
    ensure!(cx.backend.force_finished_at(o[0].id, at(m5, 1)).await?, "force_finished_at of the other queue's job");

    // The dead letter counts as failed in the current minute: the buckets of jobs done here.
    let done_only = |v: Vec<ThroughputBucket>| v.into_iter().filter(|b| b.finished > 0).collect::<Vec<_>>();
    let one = done_only(
        cx.backend.throughput(&ThroughputParams { window: Duration::from_secs(3600), queue: Some(q.clone()) }).await?,
    );
    let expect = vec![done_in(q.to_string(), m10, 2), done_in(q.to_string(), m5, 1)];
    ensure_eq!(one, expect, "throughput of {q} over the last hour");

    let all = cx.backend.throughput(&ThroughputParams::last_hour()).await?;
    let mine: Vec<ThroughputBucket> =
        done_only(all.iter().filter(|b| b.queue == q.as_str() || b.queue == other.as_str()).cloned().collect());
    let mut expect_all =
        vec![done_in(q.to_string(), m10, 2), done_in(other.to_string(), m5, 1), done_in(q.to_string(), m5, 1)];
    expect_all.sort_by(|a, b| a.minute.cmp(&b.minute).then_with(|| a.queue.cmp(&b.queue)));
    ensure_eq!(mine, expect_all, "throughput of every queue over the last hour (these two queues)");
    for w in all.windows(2) {
        ensure!(
            (w[0].minute, &w[0].queue) < (w[1].minute, &w[1].queue),
            "throughput is not ordered by (minute, queue): {w:?}"
        );
    }

    let three_hours = ThroughputParams { window: Duration::from_secs(3 * 3600), queue: Some(q.clone()) };
    let total: u64 = cx.backend.throughput(&three_hours).await?.iter().map(|b| b.finished).sum();
    ensure_eq!(total, 4, "jobs of {q} finished in the last three hours");
    Ok(())
}

/// A host name over the limit, or with a control character, and a window of zero or over a
/// day are typed `InvalidInput` errors that write nothing.
pub async fn bad_input_is_rejected(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let mut long = registration(&[&q], 1);
    long.host = "h".repeat(MAX_HOST_LEN + 1);
    let mut control = registration(&[&q], 1);
    control.host = "host\u{0}a".into();
    for (what, reg) in [("a host over the limit", &long), ("a host with a NUL", &control)] {
        match cx.backend.register_worker(reg).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "register_worker with {what} ({e})"),
            Ok(()) => return Err(format!("register_worker with {what} was accepted").into()),
        }
        ensure!(row(&cx, reg.worker).await?.is_none(), "register_worker with {what} wrote a row");
    }
    let mut exact = registration(&[&q], 1);
    exact.host = "h".repeat(MAX_HOST_LEN);
    cx.backend.register_worker(&exact).await?;
    ensure_eq!(row(&cx, exact.worker).await?.map(|w| w.host.len()), Some(MAX_HOST_LEN), "a host of exactly the limit");
    for window in [Duration::ZERO, chokaq_core::MAX_THROUGHPUT_WINDOW + Duration::from_secs(1)] {
        match cx.backend.throughput(&ThroughputParams { window, queue: None }).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "throughput over {window:?} ({e})"),
            Ok(b) => return Err(format!("throughput over {window:?} returned {} buckets", b.len()).into()),
        }
    }
    Ok(())
}

/// A bucket of `n` jobs done, none failed or retried.
fn done_in(queue: String, minute: Timestamp, n: u64) -> ThroughputBucket {
    ThroughputBucket { queue, minute, finished: n, failed: 0, retried: 0 }
}
