//! Enqueue: one batch insert with `ON CONFLICT … DO NOTHING` and the look-up of taken keys,
//! on the backend's pool ([`Backend::enqueue_many`](chokaq_core::Backend::enqueue_many)) or in
//! the caller's transaction ([`PgBackend::enqueue_in_tx`]).

use std::collections::{HashMap, HashSet};

use chokaq_core::{
    unique_key, validate, Enqueued, Error, ErrorKind, JobId, NewJob, Result, RunAt, Timestamp, UniqueKey,
};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::{map_sqlx_error, with_retry};
use crate::kept::Kept;
use crate::rows;
use crate::unique::Resolved;
use crate::PgBackend;

/// One job of an enqueue batch, validated and ready to bind.
pub(crate) struct NewRow {
    pub(crate) id: Uuid,
    queue: String,
    kind: String,
    payload: String,
    tags: String,
    key: Option<String>,
    priority: i32,
    scheduled_at: Option<Timestamp>,
    delay_us: Option<i64>,
    max_attempts: i32,
    created_by: Option<String>,
    concurrency_key: Option<String>,
    /// The unique key (`docs/unique.md`), computed from the client's clock.
    pub(crate) unique: Option<UniqueKey>,
}

/// Where enqueue runs: on the backend's pool (each statement retried by [`with_retry`]) or on
/// the caller's connection (never retried: the caller's transaction is theirs to retry).
pub(crate) enum Target<'a> {
    Pool(&'a Kept),
    Conn(&'a mut PgConnection),
}

/// Where an input job's result comes from.
pub(crate) enum Slot {
    /// Its own row (index into the rows).
    Row(usize),
    /// An earlier input with the same idempotency key (index into the inputs).
    SameAs(usize),
}

/// A unique key's 32 bytes (the hex digits chokaq-core computed), as the hot row stores them.
fn key_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2).filter_map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()).collect()
}

impl PgBackend {
    /// Enqueues inside the caller's transaction (outbox pattern): the job exists, and its
    /// wake-up is sent, only if that transaction commits. Pass `&mut *tx`. The wake-up is
    /// not a NOTIFY inside the caller's transaction (which would serialise the application's
    /// commits): the backend sends it from its own session once it reads the transaction as
    /// committed (`txid_status`, polled from 1 ms up to 50 ms apart, for at most a minute).
    pub async fn enqueue_in_tx(&self, conn: &mut PgConnection, job: NewJob) -> Result<Enqueued> {
        let mut out = self.enqueue_many_in_tx(conn, vec![job]).await?;
        out.pop().ok_or_else(|| Error::new(ErrorKind::Other, "enqueue returned no result"))
    }

    /// [`PgBackend::enqueue_in_tx`] for many jobs (results in input order).
    pub async fn enqueue_many_in_tx(&self, conn: &mut PgConnection, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let (rows, slots) = self.prepare(jobs)?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        self.enqueue_on(Target::Conn(conn), &rows, &slots).await
    }

    /// Validates every job and resolves duplicate keys within the batch to their first
    /// occurrence.
    pub(crate) fn prepare(&self, jobs: Vec<NewJob>) -> Result<(Vec<NewRow>, Vec<Slot>)> {
        // Every job, the batch's length and its total bytes.
        validate::enqueue_batch(&jobs, self.shared.max_payload_bytes)?;
        let mut rows = Vec::with_capacity(jobs.len());
        let mut slots = Vec::with_capacity(jobs.len());
        // Keys are scoped per queue.
        let mut first_of_key: HashMap<(String, String), usize> = HashMap::new();
        // The period bucket of a unique job due now is taken from this clock (docs/unique.md).
        let now = chrono::Utc::now();
        for (i, job) in jobs.into_iter().enumerate() {
            let unique = unique_key(&job, now)?;
            if let Some(key) = &job.idempotency_key {
                let scoped = (job.queue.as_str().to_owned(), key.clone());
                if let Some(&j) = first_of_key.get(&scoped) {
                    slots.push(Slot::SameAs(j));
                    continue;
                }
                first_of_key.insert(scoped, i);
            }
            let (scheduled_at, delay_us) = match job.run_at {
                RunAt::Now => (None, None),
                RunAt::At(t) => (Some(t), None),
                RunAt::After(d) => (None, Some(rows::micros(d))),
            };
            slots.push(Slot::Row(rows.len()));
            rows.push(NewRow {
                id: JobId::new().0,
                queue: job.queue.as_str().to_owned(),
                kind: job.kind.as_str().to_owned(),
                payload: serde_json::to_string(&job.payload)?,
                tags: serde_json::to_string(&job.tags)?,
                key: job.idempotency_key,
                priority: job.priority,
                scheduled_at,
                delay_us,
                max_attempts: job.max_attempts,
                created_by: job.created_by,
                concurrency_key: job.concurrency_key,
                unique,
            });
        }
        Ok((rows, slots))
    }

    /// The insert of `batch`: returns the ids of the rows inserted (not those whose key was
    /// taken). `with_unique`: insert the unique key rows too (false for a take-over, which
    /// updated the key row itself).
    pub(crate) fn insert_query<'q>(
        &'q self,
        batch: &[&'q NewRow],
        with_unique: bool,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, (Uuid, i64), sqlx::postgres::PgArguments> {
        // A unique key of the default (live-only) state set goes on the job's row
        // (`jobs_hot_unique_key`); any other in the uniques table (migration 17).
        let u = |r: &&'q NewRow| r.unique.as_ref().filter(|k| with_unique && !k.states.is_live_only());
        let h = |r: &&'q NewRow| r.unique.as_ref().filter(|k| k.states.is_live_only());
        sqlx::query_as(&self.sql().enqueue)
            .bind(batch.iter().map(|r| r.id).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.queue.as_str()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.payload.as_str()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.tags.as_str()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.key.as_deref()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.priority).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.scheduled_at).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.delay_us).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.max_attempts).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.created_by.as_deref()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.concurrency_key.as_deref()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| u(r).map(|k| k.key.as_str())).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| u(r).map(|k| k.states.bits())).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| u(r).map(|k| k.settings.as_str())).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| u(r).and_then(|k| k.expires_at)).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| h(r).map(|k| key_bytes(&k.key))).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| h(r).map(|k| k.settings.as_str())).collect::<Vec<_>>())
    }

    /// Inserts `rows` (one statement), then resolves the keys that were taken to the live
    /// job's id (a second statement, so a new snapshot: it sees a concurrent enqueuer's
    /// committed row, which the insert waited for). A taken key whose job left the hot table
    /// before the look-up is inserted again, a bounded number of times.
    pub(crate) async fn enqueue_on(
        &self,
        mut target: Target<'_>,
        rows: &[NewRow],
        slots: &[Slot],
    ) -> Result<Vec<Enqueued>> {
        let mut result: Vec<Option<Enqueued>> = vec![None; rows.len()];
        let mut todo: Vec<usize> = (0..rows.len()).collect();
        // The queues that got a new row (to wake after the commit), and the transaction.
        let mut woken: HashSet<&str> = HashSet::new();
        let mut xid: Option<i64> = None;
        for _round in 0..10 {
            let batch: Vec<&NewRow> = todo.iter().map(|&i| &rows[i]).collect();
            let inserted: Vec<(Uuid, i64)> = match &mut target {
                Target::Pool(pool) => with_retry(|| self.insert_query(&batch, true).fetch_all(*pool)).await?,
                Target::Conn(conn) => {
                    self.insert_query(&batch, true).fetch_all(&mut **conn).await.map_err(map_sqlx_error)?
                }
            };
            xid = inserted.first().map(|r| r.1).or(xid);
            let inserted: HashSet<Uuid> = inserted.into_iter().map(|r| r.0).collect();
            let mut taken = Vec::new();
            for &i in &todo {
                if inserted.contains(&rows[i].id) {
                    woken.insert(rows[i].queue.as_str());
                    result[i] = Some(Enqueued { id: JobId(rows[i].id), duplicate: false });
                } else {
                    taken.push(i);
                }
            }
            todo.clear();
            // Unique jobs whose key a live job holds on its row (the default state set): that
            // job's id; a key freed meanwhile is inserted again, a row kept out by its
            // idempotency key goes to that key's look-up.
            let (htaken, taken): (Vec<usize>, Vec<usize>) =
                taken.into_iter().partition(|&i| rows[i].unique.as_ref().is_some_and(|k| k.states.is_live_only()));
            let mut taken = taken;
            if !htaken.is_empty() {
                let keys: Vec<Vec<u8>> =
                    htaken.iter().filter_map(|&i| rows[i].unique.as_ref().map(|k| key_bytes(&k.key))).collect();
                let q = || sqlx::query_as::<_, (String, Uuid)>(&self.sql().lookup_hot_unique).bind(&keys);
                let live: HashMap<String, Uuid> = match &mut target {
                    Target::Pool(pool) => with_retry(|| q().fetch_all(*pool)).await?,
                    Target::Conn(conn) => q().fetch_all(&mut **conn).await.map_err(map_sqlx_error)?,
                }
                .into_iter()
                .collect();
                for i in htaken {
                    match rows[i].unique.as_ref().and_then(|k| live.get(&k.key)) {
                        Some(id) => result[i] = Some(Enqueued { id: JobId(*id), duplicate: true }),
                        None if rows[i].key.is_some() => taken.push(i),
                        None => todo.push(i),
                    }
                }
            }
            // Unique jobs whose key row was taken: the holder's state decides (`unique.rs`).
            let (utaken, mut taken): (Vec<usize>, Vec<usize>) =
                taken.into_iter().partition(|&i| rows[i].unique.as_ref().is_some_and(|k| !k.states.is_live_only()));
            if !utaken.is_empty() {
                for (i, r) in self.resolve_uniques(&mut target, rows, &utaken).await? {
                    match r {
                        Resolved::Duplicate(id) => result[i] = Some(Enqueued { id, duplicate: true }),
                        Resolved::Inserted(x) => {
                            woken.insert(rows[i].queue.as_str());
                            xid = Some(x);
                            result[i] = Some(Enqueued { id: JobId(rows[i].id), duplicate: false });
                        }
                        Resolved::ByIdempotencyKey => taken.push(i),
                        Resolved::Again => todo.push(i),
                    }
                }
            }
            if taken.is_empty() {
                if todo.is_empty() {
                    break;
                }
                continue;
            }
            let (queues, keys): (Vec<&str>, Vec<&str>) =
                taken.iter().filter_map(|&i| Some((rows[i].queue.as_str(), rows[i].key.as_deref()?))).unzip();
            let lookup =
                || sqlx::query_as::<_, (String, String, Uuid)>(&self.sql().lookup_keys).bind(&queues).bind(&keys);
            let live: HashMap<(String, String), Uuid> = match &mut target {
                Target::Pool(pool) => with_retry(|| lookup().fetch_all(*pool)).await?,
                Target::Conn(conn) => lookup().fetch_all(&mut **conn).await.map_err(map_sqlx_error)?,
            }
            .into_iter()
            .map(|(q, k, id)| ((q, k), id))
            .collect();
            for i in taken {
                let scoped = rows[i].key.as_ref().map(|k| (rows[i].queue.clone(), k.clone()));
                match scoped.and_then(|k| live.get(&k)) {
                    Some(id) => result[i] = Some(Enqueued { id: JobId(*id), duplicate: true }),
                    None => todo.push(i),
                }
            }
            if todo.is_empty() {
                break;
            }
        }
        if !woken.is_empty() {
            // On the pool the insert has committed; in the caller's transaction it has not,
            // and the wake-up waits for that transaction's commit (`notify.rs`).
            let in_tx = matches!(target, Target::Conn(_));
            self.wake_after_commit(woken.into_iter().map(str::to_owned).collect(), if in_tx { xid } else { None });
        }
        if !todo.is_empty() {
            return Err(Error::new(ErrorKind::Conflict, "idempotency key kept changing hands; try again"));
        }
        let mut out: Vec<Enqueued> = Vec::with_capacity(slots.len());
        for slot in slots {
            let e = match *slot {
                Slot::Row(r) => result[r].ok_or_else(|| Error::new(ErrorKind::Other, "enqueue lost a row"))?,
                Slot::SameAs(j) => Enqueued { id: out[j].id, duplicate: true },
            };
            out.push(e);
        }
        Ok(out)
    }
}
