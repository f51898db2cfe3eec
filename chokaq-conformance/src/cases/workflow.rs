//! Workflows (`docs/workflows.md`): a task is claimable only once every dependency succeeded;
//! a graph is written whole or not at all; a failed dependency cancels its dependents
//! transitively, except those that run anyway; retries release nothing; a fan-in's dependent
//! starts once, after the last dependency's completion; cancelling a workflow reaches every
//! task not yet final. Run where the backend stores workflows
//! ([`chokaq_core::Capabilities::workflows`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    BackendExt, ClaimMode, DeadReason, ErrorKind, FailAction, Fenced, JobId, JobLocation, JobStatus, QueueControl,
    QueueName, Task, TaskState, WorkerId, Workflow, ZombiePolicy,
};

use crate::ctx::{CaseResult, Ctx, Failure, AGED};
use crate::{ensure, ensure_eq};

super::cases!(workflow:
    waits_for_every_dependency [WORKFLOWS],
    refused_graph_writes_nothing [WORKFLOWS],
    failure_cancels_dependents_transitively [WORKFLOWS],
    run_anyway_runs_after_a_failure [WORKFLOWS],
    retry_releases_nothing [WORKFLOWS],
    requeued_failure_counts_once [WORKFLOWS],
    fan_in_starts_once_after_the_last [WORKFLOWS],
    wide_fan_in_waits_for_the_last [WORKFLOWS],
    cancel_reaches_every_task_not_final [WORKFLOWS],
    across_queues_with_a_cap [WORKFLOWS],
    outputs_by_task_name [WORKFLOWS],
    rescue_releases_nothing_and_a_zombie_cascades [WORKFLOWS],
    repeated_completion_counts_once [WORKFLOWS],
);

const NONE: [&str; 0] = [];

/// Claims (start mode, up to `limit`) from `q`; the claimed ids, sorted.
async fn claim_ids(
    cx: &Ctx,
    w: WorkerId,
    q: &QueueName,
    limit: u32,
) -> Result<Vec<(JobId, chokaq_core::LeaseRef)>, Failure> {
    let got = cx.claim(w, q, limit, ClaimMode::Start).await?;
    let mut v: Vec<_> = got.iter().map(|j| (j.id, j.lease_ref())).collect();
    v.sort_by_key(|(id, _)| *id);
    Ok(v)
}

/// `a` and `b`, then `c` after both: c is not claimable until the second completes.
pub async fn waits_for_every_dependency(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf =
        Workflow::new("abc").add("a", cx.job(&q), NONE).add("b", cx.job(&q), NONE).add("c", cx.job(&q), ["a", "b"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    ensure_eq!(e.tasks.len(), 3, "tasks enqueued");
    let (a, b, c) = (e.job("a").unwrap(), e.job("b").unwrap(), e.job("c").unwrap());
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    ensure_eq!(st.task("c").map(|t| t.state), Some(TaskState::Waiting), "c before any dependency");
    ensure_eq!(st.task("a").map(|t| t.state), Some(TaskState::Pending), "a");
    let w = WorkerId::random();
    let got = claim_ids(&cx, w, &q, 10).await?;
    let mut want = vec![a, b];
    want.sort();
    ensure_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), want, "the first claim: the two roots only");
    ensure_eq!(cx.backend.complete_one(w, got[0].1).await?, Fenced::Done(()), "complete the first");
    ensure_eq!(claim_ids(&cx, w, &q, 10).await?.len(), 0, "claim after one of two dependencies");
    ensure_eq!(
        cx.backend.get_workflow(e.id).await?.and_then(|s| s.task("c").map(|t| t.state)),
        Some(TaskState::Waiting),
        "c after one of two"
    );
    ensure_eq!(cx.backend.complete_one(w, got[1].1).await?, Fenced::Done(()), "complete the second");
    let third = claim_ids(&cx, w, &q, 10).await?;
    ensure_eq!(third.iter().map(|x| x.0).collect::<Vec<_>>(), vec![c], "the claim after both");
    ensure_eq!(cx.backend.complete_one(w, third[0].1).await?, Fenced::Done(()), "complete c");
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    ensure!(st.is_final(), "every task final: {:?}", st.counts());
    ensure_eq!(st.counts().get("succeeded").copied(), Some(3), "succeeded");
    Ok(())
}

/// A cycle, an unknown dependency, a keyed task: `InvalidInput`, and the queue stays empty.
pub async fn refused_graph_writes_nothing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let bad = [
        Workflow::new("cycle").add("ok", cx.job(&q), NONE).add("a", cx.job(&q), ["b"]).add("b", cx.job(&q), ["a"]),
        Workflow::new("unknown").add("ok", cx.job(&q), NONE).add("a", cx.job(&q), ["nope"]),
        Workflow::new("keyed").add("ok", cx.job(&q), NONE).add("a", cx.job(&q).idempotency_key("k"), NONE),
    ];
    for wf in &bad {
        match cx.backend.enqueue_workflow(wf).await {
            Err(e) => ensure_eq!(e.kind(), ErrorKind::InvalidInput, "{}: {e}", wf.name()),
            Ok(e) => return Err(Failure(format!("{}: accepted as {}", wf.name(), e.id))),
        }
    }
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(s.pending + s.fetched + s.processing + s.archived + s.dead, 0, "jobs written by refused workflows");
    Ok(())
}

/// a -> b -> c and a -> d: a dead-lettered cancels b, c and d (reason `cancelled`, the last
/// error naming `a`), each once.
pub async fn failure_cancels_dependents_transitively(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf = Workflow::new("chain")
        .add("a", cx.job(&q), NONE)
        .add("b", cx.job(&q), ["a"])
        .add("c", cx.job(&q), ["b"])
        .add("d", cx.job(&q), ["a"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.id, e.job("a").unwrap(), "the only claimable task");
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
    ensure!(!cx.backend.fail(w, j.lease_ref(), dl).await?.is_lost(), "fail(dead-letter) lost its lease");
    for name in ["b", "c", "d"] {
        let r = cx.record(e.job(name).unwrap()).await?;
        ensure_eq!(r.location, JobLocation::Dead(DeadReason::Cancelled), "{name}");
        let err = r.last_error.unwrap_or_default();
        ensure!(err.contains("\"a\""), "{name}'s last error names the task that failed: {err:?}");
    }
    ensure_eq!(claim_ids(&cx, w, &q, 10).await?.len(), 0, "claimable after the cascade");
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    ensure_eq!(st.counts().get("dead").copied(), Some(4), "dead tasks");
    Ok(())
}

/// a -> b (runs anyway) -> c: a dead-lettered, b still runs, and c after it.
pub async fn run_anyway_runs_after_a_failure(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf = Workflow::new("anyway")
        .add("a", cx.job(&q), NONE)
        .task(Task::new("b", cx.job(&q)).after(["a"]).run_anyway())
        .add("c", cx.job(&q), ["b"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
    ensure!(!cx.backend.fail(w, j.lease_ref(), dl).await?.is_lost(), "fail(dead-letter)");
    let b = cx.claim_one_started(w, &q).await?;
    ensure_eq!(b.id, e.job("b").unwrap(), "b runs anyway");
    ensure_eq!(claim_ids(&cx, w, &q, 10).await?.len(), 0, "c before b ends");
    ensure_eq!(cx.backend.complete_one(w, b.lease_ref()).await?, Fenced::Done(()), "complete b");
    let c = cx.claim_one_started(w, &q).await?;
    ensure_eq!(c.id, e.job("c").unwrap(), "c after b");
    Ok(())
}

/// A dependency that fails and is retried releases nothing; its success after the retry does.
pub async fn retry_releases_nothing(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf = Workflow::new("retry").add("a", cx.job(&q).max_attempts(3), NONE).add("b", cx.job(&q), ["a"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    let retry = FailAction::Retry { delay: Duration::ZERO, error: "again".into() };
    ensure!(!cx.backend.fail(w, j.lease_ref(), retry).await?.is_lost(), "fail(retry)");
    let again = cx.claim_one_started(w, &q).await?;
    ensure_eq!(again.id, e.job("a").unwrap(), "the retried dependency, not its dependent");
    ensure_eq!(claim_ids(&cx, w, &q, 10).await?.len(), 0, "claimable while a runs again");
    ensure_eq!(cx.backend.complete_one(w, again.lease_ref()).await?, Fenced::Done(()), "complete a");
    let b = cx.claim_one_started(w, &q).await?;
    ensure_eq!(b.id, e.job("b").unwrap(), "b after a's success");
    Ok(())
}

/// a -> c (runs anyway) <- b: a dead-lettered counts once for c; requeued and completed, it
/// counts nothing again, so c still waits for b.
pub async fn requeued_failure_counts_once(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf = Workflow::new("once")
        .add("a", cx.job(&q), NONE)
        .add("b", cx.job(&q).delay(Duration::from_secs(3600)), NONE)
        .task(Task::new("c", cx.job(&q)).after(["a", "b"]).run_anyway());
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!(j.id, e.job("a").unwrap(), "a (b is due in an hour)");
    let dl = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
    ensure!(!cx.backend.fail(w, j.lease_ref(), dl).await?.is_lost(), "fail(dead-letter)");
    cx.backend.requeue_dead(j.id).await?;
    let again = cx.claim_one_started(w, &q).await?;
    ensure_eq!(again.id, j.id, "the requeued a");
    ensure_eq!(cx.backend.complete_one(w, again.lease_ref()).await?, Fenced::Done(()), "complete a");
    ensure_eq!(claim_ids(&cx, w, &q, 10).await?.len(), 0, "c while b waits (a counted twice would release it)");
    ensure_eq!(
        cx.backend.get_workflow(e.id).await?.and_then(|s| s.task("c").map(|t| t.state)),
        Some(TaskState::Waiting),
        "c"
    );
    Ok(())
}

/// One root, `n` middle tasks (`CHOKAQ_STRESS_JOBS`, at least 1,000), one fan-in; 16 claimers race: the fan-in is claimed exactly
/// once, and only once every dependency's completion was sent (counted before the call: a
/// claim that sees the last commit may run before the completer's reply is read).
pub async fn fan_in_starts_once_after_the_last(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    // At least 1,000 middle tasks (issue 41: 16 claimers over a fan-in of 1,000).
    let n = cx.stress.jobs.max(1000);
    let mut wf = Workflow::new("fan").add("root", cx.job(&q), NONE);
    for i in 0..n {
        wf = wf.add(format!("t{i}"), cx.job(&q), ["root"]);
    }
    wf = wf.add("last", cx.job(&q), (0..n).map(|i| format!("t{i}")));
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let last = e.job("last").unwrap();
    let completed = Arc::new(AtomicU64::new(0));
    let last_claims = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    let claimers = cx.stress.claimers.max(16);
    for _ in 0..claimers {
        let (cx, q, completed, last_claims) = (cx.clone(), q.clone(), completed.clone(), last_claims.clone());
        set.spawn(async move {
            let w = WorkerId::random();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while last_claims.load(Ordering::SeqCst) == 0 {
                ensure!(tokio::time::Instant::now() < deadline, "the fan-in was not claimed within 60 s");
                let got = cx.claim(w, &q, 4, ClaimMode::Start).await?;
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                for j in got {
                    if j.id == last {
                        let sent = completed.load(Ordering::SeqCst);
                        ensure_eq!(sent, n as u64 + 1, "dependency completions sent before the fan-in was claimed");
                        last_claims.fetch_add(1, Ordering::SeqCst);
                    } else {
                        completed.fetch_add(1, Ordering::SeqCst);
                    }
                    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete");
                }
            }
            Ok::<(), Failure>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.map_err(|e| Failure(format!("claimer panicked: {e}")))??;
    }
    ensure_eq!(last_claims.load(Ordering::SeqCst), 1, "claims of the fan-in");
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    ensure_eq!(st.counts().get("succeeded").copied(), Some(n + 2), "succeeded tasks");
    Ok(())
}

/// A fan-in of 100 roots (more than a backend may count in one place: PostgreSQL counts a
/// wide fan-in in parts), ended ten at a time by one batch completion each, the last root
/// alone: the fan-in is Waiting and unclaimable after 99 of 100, claimable after the 100th.
pub async fn wide_fan_in_waits_for_the_last(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let n = 100;
    let mut wf = Workflow::new("wide");
    for i in 0..n {
        wf = wf.add(format!("r{i}"), cx.job(&q), NONE);
    }
    wf = wf.add("last", cx.job(&q), (0..n).map(|i| format!("r{i}")));
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let last = e.job("last").unwrap();
    let w = WorkerId::random();
    let mut held = Vec::new();
    while held.len() < n {
        let got = claim_ids(&cx, w, &q, 50).await?;
        ensure!(!got.is_empty(), "claimed {} of {n} roots, then nothing", held.len());
        ensure!(got.iter().all(|(id, _)| *id != last), "the fan-in claimed before any root ended");
        held.extend(got);
    }
    held.sort_by_key(|(id, _)| *id);
    let (rest, final_one) = held.split_at(n - 1);
    for chunk in rest.chunks(10) {
        let leases: Vec<_> = chunk.iter().rev().map(|(_, l)| *l).collect();
        let out = cx.backend.complete(w, &leases).await?;
        ensure_eq!((out.done.len(), out.lost.len()), (chunk.len(), 0), "(done, lost) of a batch of roots");
    }
    ensure_eq!(claim_ids(&cx, w, &q, 10).await?.len(), 0, "claim after 99 of 100 roots");
    ensure_eq!(
        cx.backend.get_workflow(e.id).await?.and_then(|s| s.task("last").map(|t| t.state)),
        Some(TaskState::Waiting),
        "the fan-in after 99 of 100 roots"
    );
    ensure_eq!(cx.backend.complete_one(w, final_one[0].1).await?, Fenced::Done(()), "complete the 100th root");
    let got = claim_ids(&cx, w, &q, 10).await?;
    ensure_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), vec![last], "the claim after the 100th root");
    ensure_eq!(cx.backend.complete_one(w, got[0].1).await?, Fenced::Done(()), "complete the fan-in");
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    ensure_eq!(st.counts().get("succeeded").copied(), Some(n + 1), "succeeded");
    Ok(())
}

/// Cancelling a workflow with one task done, one running, the rest waiting: the running one
/// gets its cancel requested, the others are dead-lettered `cancelled`; the done one stays.
pub async fn cancel_reaches_every_task_not_final(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf = Workflow::new("stop")
        .add("done", cx.job(&q), NONE)
        .add("run", cx.job(&q), ["done"])
        .add("wait1", cx.job(&q), ["run"])
        .add("wait2", cx.job(&q), ["wait1"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let w = WorkerId::random();
    let d = cx.claim_one_started(w, &q).await?;
    ensure_eq!(cx.backend.complete_one(w, d.lease_ref()).await?, Fenced::Done(()), "complete done");
    let r = cx.claim_one_started(w, &q).await?;
    ensure_eq!(r.id, e.job("run").unwrap(), "run");
    ensure_eq!(cx.backend.cancel_workflow(e.id).await?, 3, "tasks not final when cancelled");
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    ensure_eq!(st.task("done").map(|t| t.state), Some(TaskState::Succeeded), "done");
    ensure_eq!(st.task("run").map(|t| t.state), Some(TaskState::Running), "run (its cancel requested)");
    ensure!(cx.record(r.id).await?.cancel_requested, "run's cancel is requested");
    for name in ["wait1", "wait2"] {
        ensure_eq!(st.task(name).map(|t| t.state), Some(TaskState::DeadLettered(DeadReason::Cancelled)), "{name}");
    }
    match cx.backend.cancel_workflow(chokaq_core::WorkflowId::new()).await {
        Err(e) => ensure_eq!(e.kind(), ErrorKind::NotFound, "cancel of an unknown workflow: {e}"),
        Ok(n) => return Err(Failure(format!("cancel of an unknown workflow reached {n}"))),
    }
    ensure_eq!(cx.backend.get_workflow(chokaq_core::WorkflowId::new()).await?, None, "an unknown workflow");
    Ok(())
}

/// Tasks in two queues, one capped at 1: the dependent in the capped queue waits for both
/// dependencies and then for the cap.
pub async fn across_queues_with_a_cap(cx: Ctx) -> CaseResult {
    let (q1, q2) = (cx.queue_named("one"), cx.queue_named("two"));
    cx.backend.set_max_workers(&q2, Some(1)).await?;
    let wf = Workflow::new("two-queues").add("a", cx.job(&q1), NONE).add("busy", cx.job(&q2), NONE).add(
        "b",
        cx.job(&q2),
        ["a"],
    );
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let w = WorkerId::random();
    let busy = cx.claim_one_started(w, &q2).await?;
    ensure_eq!(busy.id, e.job("busy").unwrap(), "busy");
    let a = cx.claim_one_started(w, &q1).await?;
    ensure_eq!(cx.backend.complete_one(w, a.lease_ref()).await?, Fenced::Done(()), "complete a");
    ensure_eq!(claim_ids(&cx, w, &q2, 10).await?.len(), 0, "b while the cap is full");
    ensure_eq!(cx.backend.complete_one(w, busy.lease_ref()).await?, Fenced::Done(()), "complete busy");
    let b = cx.claim_one_started(w, &q2).await?;
    ensure_eq!(b.id, e.job("b").unwrap(), "b once released and the cap has room");
    Ok(())
}

/// A task finds its workflow (`workflow_of`), its dependency by name in it, and that
/// dependency's recorded output; a job outside any workflow has none.
pub async fn outputs_by_task_name(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf = Workflow::new("outputs").add("fetch", cx.job(&q), NONE).add("load", cx.job(&q), ["fetch"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let plain = cx.enqueue(cx.job(&q)).await?;
    ensure_eq!(cx.backend.workflow_of(plain).await?, None, "workflow of a plain job");
    let w = WorkerId::random();
    let fetch = cx.claim_one_started(w, &q).await?;
    ensure_eq!(fetch.id, e.job("fetch").unwrap(), "fetch first");
    let out = serde_json::json!({"rows": 7});
    ensure_eq!(cx.backend.record_output(w, fetch.lease_ref(), &out).await?, Fenced::Done(()), "record");
    ensure_eq!(cx.backend.complete_one(w, fetch.lease_ref()).await?, Fenced::Done(()), "complete fetch");
    let load = cx.claim_one_started(w, &q).await?;
    ensure!(load.id == e.job("load").unwrap() || load.id == plain, "claimed {}", load.id);
    let load_id = e.job("load").unwrap();
    ensure_eq!(cx.backend.workflow_of(load_id).await?, Some(e.id), "workflow of load");
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    let me = st.task("load").ok_or_else(|| Failure("no task load".into()))?;
    ensure_eq!(me.deps.clone(), vec!["fetch".to_string()], "load's dependencies");
    let dep = st.task("fetch").ok_or_else(|| Failure("no task fetch".into()))?;
    ensure_eq!(cx.backend.get_output(dep.job).await?, Some(out), "fetch's output, by task name");
    Ok(())
}

/// a -> b. a's handler stops heart-beating (a crash of its process): rescue hands a back
/// (retry policy), b still waits; a's second run's process dies too, under a dead-letter
/// policy: a is dead-lettered `zombie` and b cancelled, naming a.
pub async fn rescue_releases_nothing_and_a_zombie_cascades(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf = Workflow::new("rescued").add("a", cx.job(&q).max_attempts(5), NONE).add("b", cx.job(&q), ["a"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let (a, b) = (e.job("a").unwrap(), e.job("b").unwrap());
    let j = cx.claim_one_started(WorkerId::random(), &q).await?;
    ensure_eq!(j.id, a, "a first");
    cx.age(a, AGED).await?;
    cx.rescue_until_at(a, JobLocation::Hot(JobStatus::Pending)).await?;
    let st = cx.backend.get_workflow(e.id).await?.ok_or_else(|| Failure("get_workflow: None".into()))?;
    ensure_eq!(st.task("b").map(|t| t.state), Some(TaskState::Waiting), "b after a's rescue");
    let again = cx.claim(WorkerId::random(), &q, 10, ClaimMode::Start).await?;
    ensure_eq!(again.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a], "claimable after the rescue: a alone");
    cx.backend.control_queue(&q, QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await?;
    cx.age(a, AGED).await?;
    cx.rescue_until_at(a, JobLocation::Dead(DeadReason::Zombie)).await?;
    let r = cx.record(b).await?;
    ensure_eq!(r.location, JobLocation::Dead(DeadReason::Cancelled), "b after a's zombie dead letter");
    let err = r.last_error.unwrap_or_default();
    ensure!(err.contains("\"a\""), "b's last error names a: {err:?}");
    Ok(())
}

/// a, b -> c. a's completion is sent twice (its first reply lost): c still waits for b, and
/// b's completion releases it once.
pub async fn repeated_completion_counts_once(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let wf =
        Workflow::new("twice").add("a", cx.job(&q), NONE).add("b", cx.job(&q), NONE).add("c", cx.job(&q), ["a", "b"]);
    let e = cx.backend.enqueue_workflow(&wf).await?;
    let w = WorkerId::random();
    let got = claim_ids(&cx, w, &q, 10).await?;
    ensure_eq!(got.len(), 2, "a and b claimed");
    let (a, b) = if got[0].0 == e.job("a").unwrap() { (got[0], got[1]) } else { (got[1], got[0]) };
    ensure_eq!(cx.backend.complete_one(w, a.1).await?, Fenced::Done(()), "complete a");
    let again = cx.backend.complete_one(w, a.1).await?;
    ensure_eq!(again, Fenced::Done(()), "a's completion sent again reports the outcome that stands");
    ensure_eq!(
        claim_ids(&cx, w, &q, 10).await?.len(),
        0,
        "c after a's completion sent twice (counted twice: released)"
    );
    ensure_eq!(cx.backend.complete_one(w, b.1).await?, Fenced::Done(()), "complete b");
    let c = claim_ids(&cx, w, &q, 10).await?;
    ensure_eq!(c.iter().map(|j| j.0).collect::<Vec<_>>(), vec![e.job("c").unwrap()], "c once after b");
    Ok(())
}
