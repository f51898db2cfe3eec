//! The claim's lock rows against a real SQL Server (issue 27 items 1 to 3), each case in a
//! fresh schema, ignored with the reason where no server is reachable (`tests/common/server.rs`):
//!
//! - `old_app_lock_names_stop_nothing`: another session holding the app locks the claim and
//!   `control_queue` took before schema version 8 (`chokaq:queue:<schema>:<queue>`,
//!   `chokaq:cap:<schema>:<queue>`, any login could) stops neither; and a database user
//!   without rights on the schema cannot lock the rows that replaced them.
//! - `a_busy_cap_row_is_skipped_at_once_and_claimed_once_free`: another session holds a capped
//!   queue's cap row (as a counting claimer does): a claim neither waits (the session lock
//!   timeout is 5 s) nor takes a job of that queue, while it takes the open queue's job in the
//!   same call; once the row is free the queue is claimed again.
//! - `a_handoff_waits_for_a_counting_claimer_then_hands_its_slot_on`: with the cap row held
//!   the same way, a `complete_and_claim` that frees one slot of a full cap waits for that
//!   claimer's commit (it is seen waiting on the row) and then claims one job: the slot is
//!   handed on, never lost, and the cap holds.

mod common;

use std::process::ExitCode;
use std::time::Duration;

use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, NewJob, QueueName, WorkerId};
use chokaq_mssql::MssqlBackend;

use common::server::{self, ensure, exec, within, CaseFn, CaseResult};

fn main() -> ExitCode {
    let cases: Vec<(&'static str, CaseFn)> = vec![
        ("old_app_lock_names_stop_nothing", |u| Box::pin(old_app_lock_names_stop_nothing(u))),
        ("a_busy_cap_row_is_skipped_at_once_and_claimed_once_free", |u| {
            Box::pin(a_busy_cap_row_is_skipped_at_once_and_claimed_once_free(u))
        }),
        ("a_handoff_waits_for_a_counting_claimer_then_hands_its_slot_on", |u| {
            Box::pin(a_handoff_waits_for_a_counting_claimer_then_hands_its_slot_on(u))
        }),
    ];
    server::run_cases(cases, Vec::new())
}

fn queue(name: &str) -> QueueName {
    QueueName::new(name).expect("a valid queue name")
}

async fn enqueue(b: &MssqlBackend, q: &str, n: usize) -> CaseResult {
    let jobs: Result<Vec<NewJob>, _> =
        (0..n).map(|i| NewJob::build(q, "k").map(|j| j.json(serde_json::json!({ "i": i })))).collect();
    let jobs: Vec<NewJob> = jobs.map_err(|e: chokaq_core::Error| e.to_string())?;
    b.enqueue_many(jobs).await.map_err(|e| format!("enqueue: {e}"))?;
    Ok(())
}

fn req(w: WorkerId, queues: &[&str], limit: u32) -> ClaimParams {
    ClaimParams::new(w, queues.iter().map(|q| queue(q)).collect(), limit, ClaimMode::Start)
}

/// The rows of the cap lock of `q`, held by a transaction left open on `s` (as a counting
/// claimer holds it between its count and its commit).
async fn hold_cap_row(s: &mut server::Session, schema: &str, q: &str) -> CaseResult {
    exec(
        s,
        &format!(
            "BEGIN TRANSACTION; UPDATE [{schema}].[QueueLocks] SET [LastTakenAtUtc] = SYSUTCDATETIME() \
             WHERE [Queue] = '{q}' AND [Kind] = 1; IF @@ROWCOUNT <> 1 THROW 50000, N'no cap row', 1;"
        ),
    )
    .await
}

async fn old_app_lock_names_stop_nothing(url: String) -> CaseResult {
    let (b, schema) = server::backend(&url).await?;
    let mut other = server::session(&url).await?;
    let q = "squat";
    exec(
        &mut other,
        &format!(
            "EXEC sp_getapplock @Resource = N'chokaq:queue:{schema}:{q}', @LockMode = N'Exclusive', @LockOwner = \
             N'Session'; EXEC sp_getapplock @Resource = N'chokaq:cap:{schema}:{q}', @LockMode = N'Exclusive', \
             @LockOwner = N'Session';"
        ),
    )
    .await?;
    within("control_queue beside a squatted app lock", Duration::from_secs(3), b.set_max_workers(&queue(q), Some(2)))
        .await?
        .map_err(|e| e.to_string())?;
    enqueue(&b, q, 3).await?;
    let got =
        within("claim beside squatted app locks", Duration::from_secs(3), b.claim(&req(WorkerId::random(), &[q], 5)))
            .await?
            .map_err(|e| e.to_string())?;
    ensure(got.len() == 2, || {
        format!("claimed {} jobs of a queue capped at 2 with the old lock names held", got.len())
    })?;
    // A database user without rights on the schema cannot lock the rows.
    let user = format!("chokaq_squat_{:08x}", rand::random::<u32>());
    exec(&mut other, &format!("CREATE USER [{user}] WITHOUT LOGIN;")).await?;
    let denied = exec(
        &mut other,
        &format!(
            "EXECUTE AS USER = N'{user}'; SELECT 1 FROM [{schema}].[QueueLocks] WITH (UPDLOCK) WHERE [Queue] = '{q}';"
        ),
    )
    .await;
    exec(&mut other, &format!("IF USER_NAME() = N'{user}' REVERT; DROP USER [{user}];")).await?;
    match denied {
        Ok(()) => return Err(format!("user {user}, without rights on the schema, locked a row of QueueLocks")),
        Err(e) => ensure(e.contains("permission") || e.contains("229"), || format!("not a permission error: {e}"))?,
    }
    server::drop(&b).await
}

async fn a_busy_cap_row_is_skipped_at_once_and_claimed_once_free(url: String) -> CaseResult {
    let (b, schema) = server::backend(&url).await?;
    let (q, open) = ("busy", "open");
    b.set_max_workers(&queue(q), Some(5)).await.map_err(|e| e.to_string())?;
    enqueue(&b, q, 2).await?;
    enqueue(&b, open, 1).await?;
    let mut other = server::session(&url).await?;
    hold_cap_row(&mut other, &schema, q).await?;
    let w = WorkerId::random();
    // The session lock timeout is 5 s: a claim that waited for the row would take that long.
    let got = within("a claim beside a busy cap row", Duration::from_secs(2), b.claim(&req(w, &[q, open], 10)))
        .await?
        .map_err(|e| e.to_string())?;
    let queues: Vec<&str> = got.iter().map(|j| j.queue.as_str()).collect();
    ensure(queues == [open], || format!("claimed from {queues:?}: the busy capped queue must be skipped"))?;
    let pending = b.stats().await.map_err(|e| e.to_string())?;
    let s = pending.queues.iter().find(|s| s.queue.as_str() == q).ok_or("no stats for the busy queue")?;
    ensure(s.pending == 2 && s.fetched + s.processing == 0, || format!("busy queue after the claim: {s:?}"))?;
    exec(&mut other, "ROLLBACK TRANSACTION;").await?;
    let got = within("a claim once the row is free", Duration::from_secs(3), b.claim(&req(w, &[q], 10)))
        .await?
        .map_err(|e| e.to_string())?;
    ensure(got.len() == 2, || format!("claimed {} of the 2 jobs once the cap row was free", got.len()))?;
    server::drop(&b).await
}

async fn a_handoff_waits_for_a_counting_claimer_then_hands_its_slot_on(url: String) -> CaseResult {
    let (b, schema) = server::backend(&url).await?;
    let q = "handoff";
    b.set_max_workers(&queue(q), Some(2)).await.map_err(|e| e.to_string())?;
    enqueue(&b, q, 3).await?;
    let w = WorkerId::random();
    let held = b.claim(&req(w, &[q], 5)).await.map_err(|e| e.to_string())?;
    ensure(held.len() == 2, || format!("claim under cap 2 took {}", held.len()))?;
    let mut other = server::session(&url).await?;
    hold_cap_row(&mut other, &schema, q).await?;
    let handoff = {
        let (b, lease, r) = (b.clone(), held[0].lease_ref(), req(w, &[q], 1));
        tokio::spawn(async move { b.complete_and_claim(w, &[lease], &r).await })
    };
    // Seen waiting on a key lock of this database (the cap row), within the lock timeout.
    let waiting = "SELECT COUNT_BIG(*) FROM sys.dm_tran_locks WHERE [resource_database_id] = DB_ID() \
                   AND [request_status] = N'WAIT' AND [resource_type] = N'KEY'";
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    while server::count(&mut other, waiting).await? == 0 {
        ensure(std::time::Instant::now() < deadline, || "the handoff was never seen waiting for the cap row".into())?;
        tokio::task::yield_now().await;
    }
    exec(&mut other, "ROLLBACK TRANSACTION;").await?;
    let (done, got) = within("the handoff once the row is free", Duration::from_secs(5), handoff)
        .await?
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    ensure(done.done == vec![held[0].id] && got.len() == 1, || format!("handoff: {done:?}, claimed {}", got.len()))?;
    let stats = b.stats().await.map_err(|e| e.to_string())?;
    let s = stats.queues.iter().find(|s| s.queue.as_str() == q).ok_or("no stats")?;
    ensure(s.fetched + s.processing == 2 && s.archived == 1, || format!("after the handoff: {s:?}"))?;
    server::drop(&b).await
}
