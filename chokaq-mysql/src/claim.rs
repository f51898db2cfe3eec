//! The claim: one transaction that locks due rows with `FOR UPDATE SKIP LOCKED` in priority and
//! due order and marks them with leases of its own.
//!
//! Round trips of a claim from one uncapped queue: the probe (before the transaction: the
//! clock, the control row and whether anything is due, for every queue at once), `BEGIN`, the
//! control row's share lock, the pick (whole rows), the lease reservation (on its own
//! connection), one `UPDATE` marking every picked row, `COMMIT`; the claimed jobs are the
//! picked rows as the mark changed them (the columns it sets are known), so nothing is read
//! back. An idle poll is the probe alone.
//!
//! A guarded queue (a queue cap, a per-key cap or a rate limit, issue 25) takes its control
//! row `FOR UPDATE`, so its claimers take turns, and counts after the lock, each a statement
//! of its own: the queue's active jobs (`active_count`), the starts of a queue-wide window
//! (`window_total`, entries stamped after `t - per`, later stamps too), the running jobs per
//! key (`key_running`, the non-NULL range of `jobs_hot_key_running`) and the starts per key
//! of a by-key window (`window_by_key`, for the running keys and then each key when the pick
//! first meets it). A key with nothing left is left out of the pick
//! (`claim_pick_keyed`), so it holds back no other key; the starts of a rate-limited queue go
//! to the log in the claim's transaction, stamped with the claim's time (Start mode's
//! `started_at`): for a rate-limited queue, the database clock read after its control row's
//! lock (see [`guarded_take`]). The cost, against an unguarded queue: the claims of one guarded queue are
//! serial (the control row is held from the count to the commit: one claim's round trips at
//! a time, as for a capped queue today), and a claim runs one to five more statements (the
//! counts, a rate-limited queue's clock, the log insert). An unguarded queue keeps the share lock and the plan it had; jobs without a
//! key never rewrite their `jobs_hot_key_running` entry after the insert.
//!
//! Lock order, the same for every claimer (so racing claimers cannot deadlock): the control
//! rows of the capped queues in name order (`FOR UPDATE`: claimers of a capped queue take
//! turns, and the active count that follows, a fresh READ COMMITTED snapshot, sees every claim
//! the previous holder committed), then the due Scheduled rows being promoted (in id order),
//! then job rows, which are only ever skipped, never waited for. The lease counter is bumped
//! by an autocommitted statement on a pool of its own, after the rows are locked, so its row
//! lock is held for that statement only and a re-claim of a job always gets a larger lease.
//!
//! [`complete_and_claim`] runs the complete's statements and then the claim in one
//! transaction: it holds the rows it completes (locked in id order, deleted) while it waits
//! for a capped queue's control row. No cycle: whoever holds a control row waits for nothing
//! but other control rows (in name order), Scheduled rows being promoted (never a held row)
//! and the lease counter (held by no one who waits); held rows are locked only by their lease
//! holder's writes, the cancel and the rescue, none of which takes a control row.

//! The guarded queues' counts and picks are in [`guarded`].

use chokaq_core::{
    validate, BatchOutcome, ClaimMode, ClaimParams, ClaimedJob, DeadReason, JobStatus, Lease, LeaseRef, QueueName,
    Result, WorkerId,
};
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use crate::backend::{commit, MysqlBackend, Tx};
use crate::error::{corrupt, map_err, mysql_code, Path, DUP_ENTRY};
use crate::sql::{expand, probe, shape, CHUNK};
use crate::{lease, rows};

mod guarded;
use guarded::{guarded_take, pick_keyed, Take};

/// A claim candidate: the picked row, and enough to merge per-queue lists into the global
/// order.
struct Candidate {
    row: MySqlRow,
    id: uuid::Uuid,
    priority: i64,
    due: i64,
    /// Its queue is rate limited: the start goes to the log.
    logged: bool,
    /// The limit is per key: the start is numbered in its key's bucket (else the queue's).
    by_key: bool,
}

/// A queue the probe found work in: whether it was guarded then (a queue cap, a key cap or a
/// rate limit: its claimers take turns on the control row), whether it had a key cap, and
/// whether due Scheduled rows wait for promotion.
pub(super) struct Open<'a> {
    queue: &'a QueueName,
    guarded: bool,
    keyed: bool,
    scheduled: bool,
}

/// What the probe found: the database clock and the queues worth a transaction, name order.
struct Plan<'a> {
    now: i64,
    open: Vec<Open<'a>>,
}

/// [`chokaq_core::Backend::claim`].
pub(crate) async fn claim(b: &MysqlBackend, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
    req.validate()?;
    // A claim that finds a cap set on a queue it read as uncapped starts again (at most a few
    // times: a cap is set by an operator, not in a loop), now taking the capped path.
    for _ in 0..6 {
        if let Some(out) = b.retrying(Path::Claim, || claim_once(b, req)).await? {
            return Ok(out);
        }
    }
    Err(changing())
}

fn changing() -> chokaq_core::Error {
    chokaq_core::Error::new(chokaq_core::ErrorKind::Transient, "the queue controls kept changing during the claim")
}

/// One claim transaction; `None` when a queue's control changed under it (start again).
async fn claim_once(b: &MysqlBackend, req: &ClaimParams) -> Result<Option<Vec<ClaimedJob>>> {
    let plan = plan(b, req).await?;
    if plan.open.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let mut tx = b.begin().await?;
    match claim_in(b, &mut tx, req, &plan).await? {
        Some(out) => {
            commit(tx).await?;
            Ok(Some(out))
        }
        None => {
            // A control changed before anything was written.
            tx.rollback().await.map_err(map_err)?;
            Ok(None)
        }
    }
}

/// The probe, one statement before any transaction: the clock, and the queues (in name order)
/// that are runnable and have something due. A queue's first claim makes its control row
/// here, in autocommit, while this claim holds no lock (a plain `INSERT`: a duplicate key, when
/// another claim or a control made it first, is fine).
async fn plan<'a>(b: &MysqlBackend, req: &'a ClaimParams) -> Result<Plan<'a>> {
    let mut queues: Vec<&QueueName> = req.queues.iter().collect();
    queues.sort();
    queues.dedup();
    let sql = probe(&b.sql.claim_probe, queues.len());
    let mut q = sqlx::query(&sql);
    for (i, name) in queues.iter().enumerate() {
        q = q.bind(i as i64).bind(name.as_str()).bind(name.as_str()).bind(name.as_str());
    }
    let found = q.fetch_all(&b.pool).await.map_err(map_err)?;
    let mut now = None;
    let mut open = Vec::new();
    let mut missing = Vec::new();
    for row in &found {
        let i: i64 = row.try_get("i").map_err(map_err)?;
        let queue = *queues
            .get(usize::try_from(i).map_err(|_| corrupt("probe index"))?)
            .ok_or_else(|| corrupt("probe index"))?;
        now = Some(row.try_get::<i64, _>("now_us").map_err(map_err)?);
        let known = row.try_get::<i64, _>("known").map_err(map_err)? != 0;
        let cap: Option<i64> = row.try_get("max_workers").map_err(map_err)?;
        let keyed = row.try_get::<Option<i64>, _>("key_max_workers").map_err(map_err)?.is_some();
        let rated = row.try_get::<Option<i64>, _>("rate_jobs").map_err(map_err)?.is_some();
        let paused = row.try_get::<Option<i64>, _>("is_paused").map_err(map_err)?.unwrap_or(0) != 0;
        let active = row.try_get::<Option<i64>, _>("is_active").map_err(map_err)?.unwrap_or(1) != 0;
        let pending = row.try_get::<i64, _>("pending_due").map_err(map_err)? != 0;
        let scheduled = row.try_get::<i64, _>("scheduled_due").map_err(map_err)? != 0;
        let cap = cap.map(|m| u32::try_from(m).map_err(|_| corrupt("max_workers"))).transpose()?;
        if paused || !active || cap == Some(0) || !(pending || scheduled) {
            continue;
        }
        if !known {
            missing.push(queue);
        }
        open.push(Open { queue, guarded: cap.is_some() || keyed || rated, keyed, scheduled });
    }
    open.sort_by(|a, b| a.queue.cmp(b.queue));
    let now = now.ok_or_else(|| corrupt("the claim's probe returned no row"))?;
    for queue in missing {
        let made = sqlx::query(&b.sql.insert_queue).bind(queue.as_str()).bind(now).bind(now).execute(&b.pool).await;
        match made {
            Ok(_) => {}
            Err(e) if mysql_code(&e) == Some(DUP_ENTRY) => {}
            Err(e) => return Err(map_err(e)),
        }
    }
    Ok(Plan { now, open })
}

/// The claim's statements in `tx`: the control rows' locks, promotions, the pick, the leases,
/// the mark and the read-back. `None`: a queue's control changed under it (the caller ends
/// `tx` and starts again); nothing was written then.
async fn claim_in(
    b: &MysqlBackend,
    tx: &mut Tx,
    req: &ClaimParams,
    plan: &Plan<'_>,
) -> Result<Option<Vec<ClaimedJob>>> {
    // The probe's clock, read before `BEGIN`; a rate-limited queue's lock moves it to the
    // database's clock read after that lock (`guarded_take`).
    let mut now = plan.now;
    let limit = i64::from(req.limit);
    let start = req.mode == ClaimMode::Start;
    // Start and Hold set the heartbeat (the claim is the first one); Reserve clears it.
    let beat = matches!(req.mode, ClaimMode::Start | ClaimMode::Hold);
    let mut takes: Vec<Take<'_>> = Vec::with_capacity(plan.open.len());
    for o in &plan.open {
        if !o.guarded {
            // Share-lock the control row, so a control changing it waits for this claim; a
            // guard or pause set meanwhile: start again.
            let row = sqlx::query(&b.sql.share_queue)
                .bind(o.queue.as_str())
                .fetch_optional(&mut **tx)
                .await
                .map_err(map_err)?;
            let Some(row) = row else { return Ok(None) };
            let guarded = ["max_workers", "key_max_workers", "rate_jobs"]
                .iter()
                .map(|c| row.try_get::<Option<i64>, _>(*c).map(|v| v.is_some()))
                .collect::<std::result::Result<Vec<bool>, _>>()
                .map_err(map_err)?
                .contains(&true);
            let paused = row.try_get::<i64, _>("is_paused").map_err(map_err)? != 0;
            let active = row.try_get::<i64, _>("is_active").map_err(map_err)? != 0;
            if guarded || paused || !active {
                return Ok(None);
            }
            takes.push(Take {
                queue: o.queue,
                take: limit,
                scheduled: o.scheduled,
                keys: None,
                logged: false,
                by_key: false,
            });
            continue;
        }
        if let Some(t) = guarded_take(b, tx, o, limit, &mut now).await? {
            takes.push(t);
        }
    }
    let mut candidates: Vec<Candidate> = Vec::new();
    for t in takes.iter_mut() {
        if t.take <= 0 {
            continue;
        }
        if t.scheduled {
            promote(b, tx, t.queue, now).await?;
        }
        let rows = match &mut t.keys {
            Some(keys) => pick_keyed(b, tx, t.queue, now, t.take, keys).await?,
            None => {
                let pick = if b.faults.claim_read_then_update {
                    // Broken on purpose: the rows are read without a lock, then updated by id.
                    b.sql.claim_pick.replace(" FOR UPDATE SKIP LOCKED", "")
                } else {
                    b.sql.claim_pick.clone()
                };
                sqlx::query(&pick)
                    .bind(t.queue.as_str())
                    .bind(now)
                    .bind(t.take)
                    .fetch_all(&mut **tx)
                    .await
                    .map_err(map_err)?
            }
        };
        for row in rows {
            candidates.push(Candidate {
                id: row.try_get("id").map_err(map_err)?,
                priority: row.try_get::<i32, _>("priority").map_err(map_err)?.into(),
                due: row.try_get("due_at").map_err(map_err)?,
                logged: t.logged,
                by_key: t.by_key,
                row,
            });
        }
    }
    candidates.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.due.cmp(&b.due)).then(a.id.cmp(&b.id)));
    candidates.truncate(req.limit as usize);
    if candidates.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let count = i64::try_from(candidates.len()).map_err(|_| corrupt("claim size"))?;
    // The rows are locked: reserve their leases now, in a statement of its own.
    let top =
        sqlx::query(&b.sql.next_leases).bind(count).execute(&b.lease_pool).await.map_err(map_err)?.last_insert_id();
    let top = i64::try_from(top).map_err(|_| corrupt("lease counter"))?;
    let first = top - count + 1;
    let status = if start { JobStatus::Processing } else { JobStatus::Fetched };
    let mark = if b.faults.claim_read_then_update {
        // Broken on purpose: the update does not check that the row is still Pending.
        b.sql.claim_mark.replace(" AND status = 0", "")
    } else {
        b.sql.claim_mark.clone()
    };
    // One statement marks a chunk of rows, each with its lease (claim order: first, first + 1,
    // ...); the list is padded to its shape by repeating the last row.
    let mut taken = 0u64;
    for (c, chunk) in candidates.chunks(CHUNK).enumerate() {
        let n = shape(chunk.len());
        let sql = expand(&mark, n);
        let base = first + (c * CHUNK) as i64;
        let at = |i: usize| i.min(chunk.len() - 1);
        let mut q = sqlx::query(&sql).bind(i64::from(status.code())).bind(req.worker.0);
        for i in 0..n {
            q = q.bind(chunk[at(i)].id).bind(base + at(i) as i64);
        }
        q = q.bind(now).bind(i64::from(start)).bind(i64::from(start)).bind(now).bind(i64::from(beat)).bind(now);
        for i in 0..n {
            q = q.bind(chunk[at(i)].id);
        }
        taken += q.execute(&mut **tx).await.map_err(map_err)?.rows_affected();
    }
    // Every picked row is locked by this transaction and Pending: the mark changes each. (The
    // broken variant skips the check, so the suite, not this guard, has to catch it.)
    if taken != count as u64 && !b.faults.claim_read_then_update {
        return Err(corrupt(format!("claim locked {count} rows but marked {taken}")));
    }
    // The starts of rate-limited queues, stamped with the claim's time (Start mode's
    // `started_at`), in this transaction.
    // Each numbered after its bucket's last ordinal: the queue's, or its key's.
    for (by_key, log) in [(false, &b.sql.log_starts_queue), (true, &b.sql.log_starts_key)] {
        let logged: Vec<uuid::Uuid> =
            candidates.iter().filter(|c| c.logged && c.by_key == by_key).map(|c| c.id).collect();
        for chunk in logged.chunks(CHUNK) {
            let n = shape(chunk.len());
            let sql = expand(log, n);
            let mut q = sqlx::query(&sql).bind(now);
            for i in 0..n {
                q = q.bind(chunk[i.min(chunk.len() - 1)]);
            }
            q.execute(&mut **tx).await.map_err(map_err)?;
        }
    }
    let at = rows::ts(now)?;
    let mut out = Vec::with_capacity(candidates.len());
    for (i, c) in candidates.iter().enumerate() {
        let marked = rows::Marked { status, lease: Lease(first + i as i64), worker: req.worker, start, beat, now: at };
        // Each row on its own: one that cannot be decoded goes to the dead-letter table with
        // the reason, in this transaction, instead of failing its neighbours.
        match rows::claimed(&c.row, &marked) {
            Ok(job) => out.push(job),
            Err(e) => {
                let reason =
                    validate::error_text(&format!("undecodable row, dead-lettered by the claim: {}", e.message()));
                tracing::error!(job_id = %c.id, reason = %reason, "claimed row cannot be decoded: dead-lettered");
                b.dead_letter(tx, now, chokaq_core::JobId(c.id), DeadReason::Failed, Some(&reason)).await?;
            }
        }
    }
    Ok(Some(out))
}

/// The due Scheduled jobs of a queue become Pending first (at most 1,000 per call), named by
/// primary key in id order: a claimer promoting the same rows waits for this one, then finds
/// them Pending already.
async fn promote(b: &MysqlBackend, tx: &mut Tx, q: &QueueName, now: i64) -> Result<()> {
    let mut due: Vec<uuid::Uuid> = sqlx::query_scalar(&b.sql.due_scheduled)
        .bind(q.as_str())
        .bind(now)
        .fetch_all(&mut **tx)
        .await
        .map_err(map_err)?;
    due.sort_unstable();
    for chunk in due.chunks(CHUNK) {
        let n = shape(chunk.len());
        let sql = expand(&b.sql.promote_many, n);
        let mut q = sqlx::query(&sql);
        for i in 0..n {
            q = q.bind(chunk[i.min(chunk.len() - 1)]);
        }
        q.execute(&mut **tx).await.map_err(map_err)?;
    }
    Ok(())
}

/// [`chokaq_core::Backend::complete_and_claim`]: the completions and the claim in one
/// transaction, so the claim's cap count (a statement of this transaction) sees the rows this
/// call just completed, and no other claimer can take the slots they freed first: the cap
/// stays strict, other transactions' completions count only once committed.
pub(crate) async fn complete_and_claim(
    b: &MysqlBackend,
    worker: WorkerId,
    leases: &[LeaseRef],
    req: &ClaimParams,
) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
    req.validate()?;
    validate::lease_list("complete_and_claim", leases)?;
    if leases.is_empty() {
        return Ok((BatchOutcome::default(), claim(b, req).await?));
    }
    let leases = lease::sorted(leases);
    let (done, jobs) = b
        .retrying(Path::Claim, || async {
            let plan = plan(b, req).await?;
            let mut tx = b.begin().await?;
            let done = lease::complete_in(b, &mut tx, worker, &leases).await?;
            let jobs = if plan.open.is_empty() { Some(Vec::new()) } else { claim_in(b, &mut tx, req, &plan).await? };
            commit(tx).await?;
            Ok((done, jobs))
        })
        .await?;
    let jobs = match jobs {
        Some(jobs) => jobs,
        // A control changed under the claim: the completions are committed; claim again.
        None => claim(b, req).await?,
    };
    Ok((BatchOutcome::merge(leases.iter().map(|l| (l.id, done.contains(&l.id.0)))), jobs))
}
