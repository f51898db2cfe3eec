//! Wake-ups sent after the commit, outside the enqueuing transaction.
//!
//! A transaction that calls `pg_notify` takes a cluster-wide lock at its commit and holds it
//! until the commit record is flushed, so concurrent committers stop sharing WAL flushes
//! (issue 12, item 2: pgbench with 8 clients, one INSERT per transaction and a listener
//! connected fell from 8,070 to 4,280 tx/s with the notify in the same transaction). The
//! enqueue statement therefore notifies nobody; this task does it afterwards, from a pooled
//! session of its own:
//!
//! * an enqueue on the backend's pool has committed when it returns: its queues are notified
//!   at once;
//! * an enqueue inside the caller's transaction ([`PgBackend::enqueue_in_tx`]) returns the
//!   transaction's id; the task polls `txid_status` (1 ms, doubling, at most 50 ms apart) and
//!   notifies once it reads `committed`, never when it reads `aborted`, and gives up after
//!   [`GIVE_UP`] (the workers' polling picks the jobs up then).
//!
//! Requests that arrive while a NOTIFY is in flight, or less than [`MIN_GAP`] after the last
//! one, are sent together in the next one, one `pg_notify` per distinct queue: a process sends
//! at most one notification per queue per [`MIN_GAP`] however fast it enqueues, and the first
//! enqueue after a quiet spell is sent at once. Every NOTIFY is a transaction holding the
//! cluster-wide notify lock across its commit's flush; without the gap, 8 tasks enqueueing one
//! job per call sent one every 3 to 4 enqueues. A failed NOTIFY is logged and dropped: the
//! workers' polling is the fallback.
//!
//! [`PgBackend::enqueue_in_tx`]: crate::PgBackend::enqueue_in_tx

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::kept::Kept;

/// How long a caller's transaction is waited for before its wake-up is dropped.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(60);

/// The least time between two NOTIFY statements of one process (a wake-up waits at most this
/// long behind the previous one).
pub(crate) const MIN_GAP: Duration = Duration::from_millis(3);

/// One request: the queues to wake, and the enqueuing transaction when it was the caller's.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) queues: Vec<String>,
    pub(crate) xid: Option<i64>,
}

/// The two statements the task sends (`sql.rs`: `notify_queues`, `tx_status`).
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) notify: String,
    pub(crate) tx_status: String,
}

/// Runs until every sender is gone and nothing is left to send.
pub(crate) async fn run(pool: Kept, channel: String, sql: Sql, mut rx: mpsc::UnboundedReceiver<Request>) {
    let mut open = true;
    let mut ready: BTreeSet<String> = BTreeSet::new();
    // Caller transactions not known to be over: xid -> (queues, first seen).
    let mut waiting: HashMap<i64, (Vec<String>, Instant)> = HashMap::new();
    let mut backoff = Duration::from_millis(1);
    let mut last_sent: Option<Instant> = None;
    loop {
        if ready.is_empty() && waiting.is_empty() {
            if !open {
                return;
            }
            match rx.recv().await {
                Some(r) => take(r, &mut ready, &mut waiting),
                None => return,
            }
        }
        if drain(&mut rx, &mut open, &mut ready, &mut waiting) {
            backoff = Duration::from_millis(1);
        }
        if !waiting.is_empty() {
            let xids: Vec<i64> = waiting.keys().copied().collect();
            match sqlx::query_as::<_, (i64, Option<String>)>(&sql.tx_status).bind(&xids).fetch_all(&pool).await {
                Ok(rows) => {
                    for (x, status) in rows {
                        match status.as_deref() {
                            Some("committed") => {
                                if let Some((qs, _)) = waiting.remove(&x) {
                                    ready.extend(qs);
                                }
                            }
                            Some("in progress") => {}
                            // Aborted, or too old to know: no wake-up (polling covers it).
                            _ => {
                                waiting.remove(&x);
                            }
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %crate::map_sqlx_error(e), "txid_status failed; retrying"),
            }
            waiting.retain(|x, (_, since)| {
                let keep = since.elapsed() < GIVE_UP;
                if !keep {
                    tracing::debug!(xid = x, "the enqueuing transaction is still open; its wake-up is dropped");
                }
                keep
            });
        }
        if !ready.is_empty() {
            if let Some(due) = last_sent.map(|t| t + MIN_GAP).filter(|due| *due > Instant::now()) {
                // Too soon after the last NOTIFY: wait out the gap, then send everything that
                // arrived meanwhile in one statement.
                tokio::time::sleep_until(due).await;
                drain(&mut rx, &mut open, &mut ready, &mut waiting);
            }
            last_sent = Some(Instant::now());
            let queues: Vec<String> = std::mem::take(&mut ready).into_iter().collect();
            if let Err(e) = sqlx::query(&sql.notify).bind(&channel).bind(&queues).execute(&pool).await {
                tracing::debug!(error = %crate::map_sqlx_error(e), "NOTIFY failed; workers will poll");
            }
        }
        if !waiting.is_empty() {
            // Wait for the caller's commit: poll again soon, or at once when more arrives.
            tokio::select! {
                r = rx.recv(), if open => match r {
                    Some(r) => {
                        backoff = Duration::from_millis(1);
                        take(r, &mut ready, &mut waiting);
                    }
                    None => open = false,
                },
                _ = tokio::time::sleep(backoff) => {
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
            }
        }
    }
}

/// Takes every request already queued, without waiting; `open` turns false once every sender
/// is gone. Returns whether any arrived.
fn drain(
    rx: &mut mpsc::UnboundedReceiver<Request>,
    open: &mut bool,
    ready: &mut BTreeSet<String>,
    waiting: &mut HashMap<i64, (Vec<String>, Instant)>,
) -> bool {
    let mut any = false;
    while *open {
        match rx.try_recv() {
            Ok(r) => {
                any = true;
                take(r, ready, waiting);
            }
            Err(mpsc::error::TryRecvError::Empty) => break,
            Err(mpsc::error::TryRecvError::Disconnected) => *open = false,
        }
    }
    any
}

fn take(r: Request, ready: &mut BTreeSet<String>, waiting: &mut HashMap<i64, (Vec<String>, Instant)>) {
    match r.xid {
        None => ready.extend(r.queues),
        Some(x) => waiting.entry(x).or_insert_with(|| (Vec::new(), Instant::now())).0.extend(r.queues),
    }
}
