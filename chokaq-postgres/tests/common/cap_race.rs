//! The cap binds every claim that commits after SetMaxWorkers or Pause returned: two
//! deterministic scenarios, shared by `tests/concurrency.rs` and the teeth test.
//!
//! A session that sets `chokaq.test_claim_delay_ms` makes the claim function sleep (the test
//! hook of `migrations/functions.sql`): after its first statement (`chokaq.test_claim_delay_at`
//! 'first'), or after its cap and lock steps, just before it takes rows ('take'). Each scenario
//! holds a claim there, changes the queue's settings from another session, and checks the
//! rule: a claim whose transaction is still open when the control returned must respect the
//! new settings (a cap of 1: the queue ends at most at 1 busy; a pause: it claims nothing).

use std::time::{Duration, Instant};

use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, LeaseRef, WorkerId};
use chokaq_postgres::PgBackend;
use futures::FutureExt;
use sqlx::Connection;

use super::{job, q};

/// The claim mode `Start` as the claim functions take it (`p_mode` 2).
const START: i16 = 2;

/// How long the held claim sleeps.
const HOLD_MS: u64 = 1500;

/// A claim held by the test hook, on its own connection (also `keyed_bounds.rs` and
/// `rate_race.rs`).
pub struct Delayed {
    pub conn: sqlx::PgConnection,
    pub pid: i32,
}

impl Delayed {
    /// A session whose next claim sleeps `ms` at hook point `at` (`first`, `take`, …).
    pub async fn new(ms: u64, at: &str) -> Result<Delayed, String> {
        let mut conn = sqlx::PgConnection::connect(&super::url()).await.map_err(|e| e.to_string())?;
        sqlx::query(
            "SELECT set_config('chokaq.test_claim_delay_ms', $1, false), \
                    set_config('chokaq.test_claim_delay_at', $2, false)",
        )
        .bind(ms.to_string())
        .bind(at)
        .execute(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
        let pid: i32 =
            sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut conn).await.map_err(|e| e.to_string())?;
        Ok(Delayed { conn, pid })
    }
}

/// What the held session runs: a claim, or a complete_and_claim (the handoff).
enum Call {
    Claim { worker: uuid::Uuid, queue: String, limit: i32 },
    Handoff { worker: uuid::Uuid, lease: LeaseRef, queue: String, limit: i32 },
}

/// Runs `call` in a transaction of `d`'s session: its transaction id (known before the call
/// sleeps) goes out on `xid_tx`; returns the number of rows claimed once it committed.
async fn run_held(
    mut d: Delayed,
    schema: String,
    call: Call,
    xid_tx: tokio::sync::oneshot::Sender<i64>,
) -> Result<usize, String> {
    let e = |e: sqlx::Error| e.to_string();
    let all = chokaq_postgres::all_statements(&schema).map_err(|e| e.to_string())?;
    let stmt = |name: &str| all.iter().find(|(n, _)| *n == name).map(|s| s.1.clone()).unwrap_or_default();
    sqlx::query("BEGIN").execute(&mut d.conn).await.map_err(e)?;
    let xid: i64 = sqlx::query_scalar("SELECT txid_current()").fetch_one(&mut d.conn).await.map_err(e)?;
    let _ = xid_tx.send(xid);
    let n = match call {
        Call::Claim { worker, queue, limit } => sqlx::query(&stmt("claim"))
            .bind(worker)
            .bind(vec![queue])
            .bind(limit)
            .bind(START)
            .fetch_all(&mut d.conn)
            .await
            .map_err(e)?
            .len(),
        Call::Handoff { worker, lease, queue, limit } => {
            let rows = sqlx::query(&stmt("complete_and_claim"))
                .bind(worker)
                .bind(vec![lease.id.0])
                .bind(vec![lease.lease.0])
                .bind(vec![queue])
                .bind(limit)
                .bind(START)
                .fetch_all(&mut d.conn)
                .await
                .map_err(e)?;
            let done: Vec<uuid::Uuid> = sqlx::Row::try_get(&rows[0], "o_done").map_err(e)?;
            if done != vec![lease.id.0] {
                return Err(format!("the handoff completed {done:?}, not {}", lease.id));
            }
            rows.iter()
                .filter(|r| sqlx::Row::try_get::<Option<uuid::Uuid>, _>(*r, "id").ok().flatten().is_some())
                .count()
        }
    };
    sqlx::query("COMMIT").execute(&mut d.conn).await.map_err(e)?;
    Ok(n)
}

/// Waits until the session `pid` sleeps in the claim's test hook.
async fn until_sleeping(db: &PgBackend, pid: i32) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ev: Option<String> = sqlx::query_scalar("SELECT wait_event FROM pg_stat_activity WHERE pid = $1")
            .bind(pid)
            .fetch_optional(db.pool())
            .await
            .map_err(|e| e.to_string())?
            .flatten();
        if ev.as_deref() == Some("PgSleep") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the held claim never reached its sleep".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn busy(db: &PgBackend, queue: &str) -> Result<i64, String> {
    let sql = format!("SELECT count(*) FROM \"{}\".jobs_hot WHERE queue = $1 AND status IN (1, 2)", db.schema());
    sqlx::query_scalar(&sql).bind(queue).fetch_one(db.pool()).await.map_err(|e| e.to_string())
}

/// Whether transaction `xid` was still open (`in progress`) when asked.
async fn open_tx(db: &PgBackend, xid: i64) -> Result<bool, String> {
    let st: Option<String> =
        sqlx::query_scalar("SELECT txid_status($1)").bind(xid).fetch_one(db.pool()).await.map_err(|e| e.to_string())?;
    Ok(st.as_deref() == Some("in progress"))
}

/// Scenario A: a claim (limit 2) on an uncapped queue with no control row is held after its
/// first statement (`at` 'first') or just before it takes rows ('take'); SetMaxWorkers(1) from
/// another session; claimer B claims; A commits. A claim still open when SetMaxWorkers returned
/// must see the cap: the queue ends at most at 1 busy. Returns what happened.
pub async fn uncapped_claim_in_flight(db: &PgBackend, at: &str) -> Result<String, String> {
    let queue = format!("first-cap-{at}-{:08x}", rand_u32());
    db.enqueue_many((0..6).map(|_| job(&queue)).collect()).await.map_err(|e| e.to_string())?;
    let held = Delayed::new(HOLD_MS, at).await?;
    let pid = held.pid;
    let (xid_tx, xid_rx) = tokio::sync::oneshot::channel();
    let call = Call::Claim { worker: uuid::Uuid::new_v4(), queue: queue.clone(), limit: 2 };
    let a = tokio::spawn(run_held(held, db.schema().to_string(), call, xid_tx));
    let xid = xid_rx.await.map_err(|e| e.to_string())?;
    until_sleeping(db, pid).await?;
    tokio::time::timeout(Duration::from_secs(20), db.set_max_workers(&q(&queue), Some(1)))
        .await
        .map_err(|_| "SetMaxWorkers waited 20 s".to_string())?
        .map_err(|e| e.to_string())?;
    let a_open = open_tx(db, xid).await?;
    let b = db
        .claim(&ClaimParams::new(WorkerId::random(), vec![q(&queue)], 1, ClaimMode::Start))
        .await
        .map_err(|e| e.to_string())?;
    let a_n = a.await.map_err(|e| e.to_string())??;
    let n = busy(db, &queue).await?;
    let what =
        format!("at {at}: A open when SetMaxWorkers returned: {a_open}; A claimed {a_n}, B {}, busy {n}", b.len());
    if a_open && n > 1 {
        return Err(format!(
            "cap 1 exceeded: busy {n} (A, still open when SetMaxWorkers returned, claimed {a_n}; B {})",
            b.len()
        ));
    }
    let a_before_b = b.is_empty() && n == a_n as i64;
    if !a_open && !a_before_b {
        return Err(format!("A committed first ({a_n}), B {} after the cap, busy {n}", b.len()));
    }
    Ok(what)
}

/// Scenario B: the handoff (complete_and_claim, whose freed slot covers its claim of 1, so it
/// takes no counting lock) is held just before it takes rows, on a queue with cap 2 and 2
/// running; Pause (`pause`) or SetMaxWorkers(1) from another session. A handoff still open when
/// the control returned must see it: under the pause it claims nothing; under the cap of 1 the
/// queue ends at most at 1 busy. Returns what happened.
pub async fn handoff_in_flight(db: &PgBackend, pause: bool) -> Result<String, String> {
    let e = |e: chokaq_core::Error| e.to_string();
    let queue = format!("handoff-{}-{:08x}", if pause { "pause" } else { "cap" }, rand_u32());
    db.enqueue_many((0..6).map(|_| job(&queue)).collect()).await.map_err(e)?;
    db.set_max_workers(&q(&queue), Some(2)).await.map_err(e)?;
    let w = WorkerId::random();
    let running = db.claim(&ClaimParams::new(w, vec![q(&queue)], 2, ClaimMode::Start)).await.map_err(e)?;
    if running.len() != 2 {
        return Err(format!("claimed {} under cap 2", running.len()));
    }
    let held = Delayed::new(HOLD_MS, "take").await?;
    let pid = held.pid;
    let (xid_tx, xid_rx) = tokio::sync::oneshot::channel();
    let call = Call::Handoff { worker: w.0, lease: running[0].lease_ref(), queue: queue.clone(), limit: 1 };
    let a = tokio::spawn(run_held(held, db.schema().to_string(), call, xid_tx));
    let xid = xid_rx.await.map_err(|e| e.to_string())?;
    until_sleeping(db, pid).await?;
    let name = q(&queue);
    let control = if pause { db.pause(&name).boxed() } else { db.set_max_workers(&name, Some(1)).boxed() };
    tokio::time::timeout(Duration::from_secs(20), control)
        .await
        .map_err(|_| "the control waited 20 s".to_string())?
        .map_err(e)?;
    let a_open = open_tx(db, xid).await?;
    let a_n = a.await.map_err(|e| e.to_string())??;
    let n = busy(db, &queue).await?;
    let what =
        format!("pause {pause}: the handoff open when the control returned: {a_open}; it claimed {a_n}, busy {n}");
    if a_open && pause && a_n != 0 {
        return Err(format!("a handoff still open when Pause returned claimed {a_n}"));
    }
    if a_open && !pause && n > 1 {
        return Err(format!(
            "cap 1 exceeded: busy {n} (the handoff, still open when SetMaxWorkers returned, claimed {a_n})"
        ));
    }
    if !a_open && (a_n, n) != (1, 2) {
        return Err(format!("the handoff committed before the control returned, claimed {a_n}, busy {n}"));
    }
    Ok(what)
}

fn rand_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

/// Issue 25, the per-key guard: key `k` of a queue with key cap 1 has two Pending jobs; claim A
/// (limit 1) is held by the test hook at `at`: 'key' (its walk has read the rows, the key is
/// not locked or counted yet) or 'take' (the key is locked and counted, its rows not yet
/// taken). Meanwhile a higher-priority job of `k` comes back (requeue_dead) and claimer B
/// claims. Whatever
/// the order, the key ends with at most 1 running job: at 'key', B takes the requeued job and A's
/// count after its lock must see it; at 'take', A holds the key's lock until it commits, so B
/// must skip the key. (A race of the conformance suite catches a count taken before the lock,
/// or a lock given up before the commit, only when a job enters the key's claim order ahead of
/// the rows a claimer counted while that claimer is between its count and its commit: most
/// runs of `keyed_race_tasks`, not all. This scenario holds the claim in that window.)
pub async fn keyed_claim_in_flight(db: &PgBackend, at: &str) -> Result<String, String> {
    let e = |e: chokaq_core::Error| e.to_string();
    let queue = format!("key-{at}-{:08x}", rand_u32());
    let keyed = |p: i32| job(&queue).priority(p).concurrency_key("k");
    // The job that comes back ahead of the others: a dead letter, requeued while A is held.
    let ahead = db.enqueue_many(vec![keyed(10)]).await.map_err(e)?[0].id;
    if db.cancel(ahead).await.map_err(e)? != chokaq_core::CancelOutcome::Cancelled {
        return Err("the job to requeue was not cancelled".into());
    }
    db.enqueue_many(vec![keyed(0), keyed(0)]).await.map_err(e)?;
    db.control_queue(&q(&queue), chokaq_core::QueueControl::SetKeyMaxWorkers(Some(1))).await.map_err(e)?;
    let held = Delayed::new(HOLD_MS, at).await?;
    let pid = held.pid;
    let (xid_tx, xid_rx) = tokio::sync::oneshot::channel();
    let call = Call::Claim { worker: uuid::Uuid::new_v4(), queue: queue.clone(), limit: 1 };
    let a = tokio::spawn(run_held(held, db.schema().to_string(), call, xid_tx));
    let xid = xid_rx.await.map_err(|e| e.to_string())?;
    until_sleeping(db, pid).await?;
    if db.requeue_dead(ahead).await.map_err(e)? != chokaq_core::RequeueOutcome::Requeued {
        return Err("the dead letter was not requeued".into());
    }
    let b = db.claim(&ClaimParams::new(WorkerId::random(), vec![q(&queue)], 1, ClaimMode::Start)).await.map_err(e)?;
    let a_open = open_tx(db, xid).await?;
    let a_n = a.await.map_err(|e| e.to_string())??;
    let n = busy(db, &queue).await?;
    let what = format!("at {at}: A open while B claimed: {a_open}; A claimed {a_n}, B {}, running {n}", b.len());
    if n > 1 {
        return Err(format!("key cap 1 exceeded: {what}"));
    }
    Ok(what)
}

/// Issue 25, where the keyed read starts: a claim (limit 1) of a key-capped queue is held after
/// its first statement, which found job `first` (key a) as the queue's first due row; meanwhile
/// a higher-priority job of another key is enqueued, ahead of it. The held claim's read starts
/// at `first`, so it takes `first`, and the next claim takes the new job: nothing is lost, the
/// new job waits one claim (docs/contract.md, "No head-of-line blocking").
pub async fn keyed_read_starts_at_first_row(db: &PgBackend) -> Result<String, String> {
    let e = |e: chokaq_core::Error| e.to_string();
    let queue = format!("key-start-{:08x}", rand_u32());
    db.control_queue(&q(&queue), chokaq_core::QueueControl::SetKeyMaxWorkers(Some(1))).await.map_err(e)?;
    let first = db.enqueue_many(vec![job(&queue).concurrency_key("a")]).await.map_err(e)?[0].id;
    let held = Delayed::new(HOLD_MS, "first").await?;
    let pid = held.pid;
    let (xid_tx, xid_rx) = tokio::sync::oneshot::channel();
    let call = Call::Claim { worker: uuid::Uuid::new_v4(), queue: queue.clone(), limit: 1 };
    let a = tokio::spawn(run_held(held, db.schema().to_string(), call, xid_tx));
    xid_rx.await.map_err(|e| e.to_string())?;
    until_sleeping(db, pid).await?;
    let ahead = db.enqueue_many(vec![job(&queue).priority(10).concurrency_key("b")]).await.map_err(e)?[0].id;
    let a_n = a.await.map_err(|e| e.to_string())??;
    let location = |id| async move { db.get_job(id).await.map_err(e).map(|r| r.map(|r| r.location)) };
    let (first_at, ahead_at) = (location(first).await?, location(ahead).await?);
    let b = db.claim(&ClaimParams::new(WorkerId::random(), vec![q(&queue)], 1, ClaimMode::Start)).await.map_err(e)?;
    let b_ids: Vec<_> = b.iter().map(|j| j.id).collect();
    let what = format!("A claimed {a_n}: first {first_at:?}, the job ahead {ahead_at:?}; then B claimed {b_ids:?}");
    let processing = Some(chokaq_core::JobLocation::Hot(chokaq_core::JobStatus::Processing));
    let pending = Some(chokaq_core::JobLocation::Hot(chokaq_core::JobStatus::Pending));
    if a_n != 1 || first_at != processing || ahead_at != pending || b_ids != vec![ahead] {
        return Err(format!("expected A to take the first row it saw and B the job ahead: {what}"));
    }
    Ok(what)
}
