//! Batches (`docs/workflows.md`, "Batches", migration 19): the enqueue of a batch with its
//! callbacks and an addition, each one statement (on the pool or in the caller's
//! transaction), and the status. Counting each job's end and enqueueing the callbacks runs in
//! the database, in the moving statement's transaction (`functions_flows.sql`).

use chokaq_core::batch::check_jobs;
use chokaq_core::{
    Batch, BatchEvent, BatchId, BatchStatus, EnqueuedBatch, Error, ErrorKind, JobId, NewJob, Result, RunAt, Timestamp,
};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, Row};
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::enqueue::Target;
use crate::error::{map_sqlx_error, with_retry};
use crate::rows;
use crate::workflow::read_all;

/// A wide fan-in's dependencies, and a large batch's jobs, are counted in this many parts
/// (migration 20): the completions of its jobs wait for each other only when they end the same
/// part, or the last jobs of the last parts.
pub(crate) const PARTS: usize = 32;

/// Each of `n` items' part (`None` for every one when `n` is at most [`PARTS`]: counted on
/// the owner's row), and each part's number of items: item `i` in part `i % PARTS` (items added
/// one after another, claimed and ended about in that order, end different parts).
pub(crate) fn parts(n: usize) -> (Vec<Option<i16>>, Vec<i16>, Vec<i32>) {
    if n <= PARTS {
        return (vec![None; n], Vec::new(), Vec::new());
    }
    let of = (0..n).map(|i| Some((i % PARTS) as i16)).collect();
    let counts = (0..PARTS).map(|p| (n - p).div_ceil(PARTS) as i32).collect();
    (of, (0..PARTS as i16).collect(), counts)
}

/// The bound arrays of new jobs (`$1` to `$11` of the workflow and batch statements), in
/// order; the ids are chosen here.
#[derive(Default)]
pub(crate) struct JobArrays {
    pub(crate) ids: Vec<Uuid>,
    queues: Vec<String>,
    kinds: Vec<String>,
    payloads: Vec<String>,
    tags: Vec<String>,
    priorities: Vec<i32>,
    run_at: Vec<Option<Timestamp>>,
    delays: Vec<Option<i64>>,
    attempts: Vec<i32>,
    created_by: Vec<Option<String>>,
    keys: Vec<Option<String>>,
}

impl JobArrays {
    /// Every job validated (its payload against `max_payload_bytes`), then added.
    pub(crate) fn of<'a>(jobs: impl IntoIterator<Item = &'a NewJob>, max_payload_bytes: usize) -> Result<Self> {
        let mut a = JobArrays::default();
        for job in jobs {
            job.validate(max_payload_bytes)?;
            let (at, delay) = match job.run_at {
                RunAt::Now => (None, None),
                RunAt::At(t) => (Some(t), None),
                RunAt::After(d) => (None, Some(rows::micros(d))),
            };
            a.ids.push(JobId::new().0);
            a.queues.push(job.queue.as_str().to_owned());
            a.kinds.push(job.kind.as_str().to_owned());
            a.payloads.push(serde_json::to_string(&job.payload)?);
            a.tags.push(serde_json::to_string(&job.tags)?);
            a.priorities.push(job.priority);
            a.run_at.push(at);
            a.delays.push(delay);
            a.attempts.push(job.max_attempts);
            a.created_by.push(job.created_by.clone());
            a.keys.push(job.concurrency_key.clone());
        }
        Ok(a)
    }

    /// Binds the eleven arrays.
    pub(crate) fn bind<'q>(&'q self, q: Query<'q, Postgres, PgArguments>) -> Query<'q, Postgres, PgArguments> {
        q.bind(&self.ids)
            .bind(&self.queues)
            .bind(&self.kinds)
            .bind(&self.payloads)
            .bind(&self.tags)
            .bind(&self.priorities)
            .bind(&self.run_at)
            .bind(&self.delays)
            .bind(&self.attempts)
            .bind(&self.created_by)
            .bind(&self.keys)
    }
}

/// Runs `q` on the pool (retried) or on the caller's connection (never retried).
pub(crate) async fn fetch_all<'q>(
    target: &mut Target<'_>,
    q: impl Fn() -> Query<'q, Postgres, PgArguments>,
) -> Result<Vec<PgRow>> {
    match target {
        Target::Pool(pool) => with_retry(|| q().fetch_all(*pool)).await,
        Target::Conn(conn) => q().fetch_all(&mut **conn).await.map_err(map_sqlx_error),
    }
}

/// Wakes the queues of the rows written Pending (status 0), after the commit: at once on the
/// pool, once the caller's transaction commits otherwise.
pub(crate) fn wake(b: &PgBackend, rows: &[PgRow], in_tx: bool) -> Result<()> {
    let mut woken: Vec<String> = Vec::new();
    let mut xid = None;
    for r in rows {
        xid = Some(r.try_get::<i64, _>("xid").map_err(map_sqlx_error)?);
        if r.try_get::<i16, _>("status").map_err(map_sqlx_error)? == 0 {
            let queue: String = r.try_get("queue").map_err(map_sqlx_error)?;
            if !woken.contains(&queue) {
                woken.push(queue);
            }
        }
    }
    if !woken.is_empty() {
        b.wake_after_commit(woken, if in_tx { xid } else { None });
    }
    Ok(())
}

impl PgBackend {
    /// [`chokaq_core::Backend::enqueue_batch`] inside the caller's transaction: the batch
    /// exists only if that transaction commits. Pass `&mut *tx`.
    pub async fn enqueue_batch_in_tx(&self, conn: &mut PgConnection, batch: &Batch) -> Result<EnqueuedBatch> {
        enqueue(self, Target::Conn(conn), batch).await.map_err(|e| e.with_operation("enqueue_batch_in_tx"))
    }
}

/// [`chokaq_core::Backend::enqueue_batch`]: checked before any round trip, then one statement.
pub(crate) async fn enqueue(b: &PgBackend, mut target: Target<'_>, batch: &Batch) -> Result<EnqueuedBatch> {
    batch.check()?;
    let max = b.shared.max_payload_bytes;
    let jobs = JobArrays::of(batch.job_list(), max)?;
    let events: Vec<&str> = batch.callbacks().iter().map(|(e, _)| e.as_str()).collect();
    let cbs = JobArrays::of(batch.callbacks().iter().map(|(_, j)| j), max)?;
    let id = BatchId::new();
    let in_tx = matches!(target, Target::Conn(_));
    let (part_of, part_no, part_jobs) = parts(jobs.ids.len());
    let unfinished = i32::try_from(if part_no.is_empty() { jobs.ids.len() } else { PARTS })
        .map_err(|_| Error::invalid("too many jobs in one batch"))?;
    let rows = fetch_all(&mut target, || {
        let q = jobs.bind(sqlx::query(&b.sql().enqueue_batch)).bind(id.0).bind(batch.name()).bind(&events);
        cbs.bind(q).bind(&part_of).bind(unfinished).bind(&part_no).bind(&part_jobs)
    })
    .await?;
    if rows.len() != jobs.ids.len() {
        return Err(Error::new(
            ErrorKind::Other,
            format!("batch enqueue wrote {} of {} jobs", rows.len(), jobs.ids.len()),
        ));
    }
    wake(b, &rows, in_tx)?;
    Ok(EnqueuedBatch { id, jobs: jobs.ids.iter().map(|&j| JobId(j)).collect() })
}

/// [`chokaq_core::Backend::add_to_batch`]: `NotFound` for an unknown batch, `Conflict` for a
/// final one (also when it becomes final before the statement's lock), nothing written then.
pub(crate) async fn add(b: &PgBackend, id: BatchId, jobs: Vec<NewJob>) -> Result<Vec<JobId>> {
    let Some(st) = get(b, id).await? else {
        return Err(Error::not_found(format!("no batch {id}")));
    };
    let final_ = || Error::new(ErrorKind::Conflict, format!("batch {id} is final: no job can be added to it"));
    if st.is_final() {
        return Err(final_());
    }
    check_jobs(&st.name, &jobs, usize::try_from(st.total).unwrap_or(usize::MAX))?;
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let a = JobArrays::of(&jobs, b.shared.max_payload_bytes)?;
    let rows = fetch_all(&mut Target::Pool(&b.kept), || a.bind(sqlx::query(&b.sql().add_to_batch)).bind(id.0)).await?;
    if rows.is_empty() {
        return Err(final_());
    }
    if rows.len() != a.ids.len() {
        return Err(Error::new(
            ErrorKind::Other,
            format!("batch addition wrote {} of {} jobs", rows.len(), a.ids.len()),
        ));
    }
    wake(b, &rows, false)?;
    Ok(a.ids.iter().map(|&j| JobId(j)).collect())
}

/// [`chokaq_core::Backend::get_batch`]: one statement.
pub(crate) async fn get(b: &PgBackend, id: BatchId) -> Result<Option<BatchStatus>> {
    let rows = read_all(b, &b.sql().get_batch, id.0).await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let count =
        |r: &PgRow, c: &str| -> Result<u64> { Ok(u64::try_from(r.try_get::<i64, _>(c).map_err(decode)?).unwrap_or(0)) };
    let mut fired = Vec::new();
    for r in &rows {
        let Some(event) = r.try_get::<Option<String>, _>("event").map_err(decode)? else { continue };
        let event = match event.as_str() {
            "finished" => BatchEvent::Finished,
            "succeeded" => BatchEvent::Succeeded,
            "first_dead" => BatchEvent::FirstDead,
            other => return Err(Error::new(ErrorKind::Other, format!("unknown batch event {other:?}"))),
        };
        fired.push((event, JobId(r.try_get("job_id").map_err(decode)?)));
    }
    Ok(Some(BatchStatus {
        id,
        name: first.try_get("name").map_err(decode)?,
        total: count(first, "total")?,
        succeeded: count(first, "succeeded")?,
        dead: count(first, "dead")?,
        fired,
    }))
}

fn decode(e: sqlx::Error) -> Error {
    Error::with_source(ErrorKind::Other, "decoding a batch row", e)
}

#[cfg(test)]
mod tests {
    use super::{parts, PARTS};

    #[test]
    fn parts_cover_every_item_once() {
        assert_eq!(parts(PARTS), (vec![None; PARTS], vec![], vec![]));
        for n in [PARTS + 1, 100, 10_000] {
            let (of, no, counts) = parts(n);
            assert_eq!((of.len(), no.len(), counts.iter().sum::<i32>() as usize), (n, PARTS, n), "n = {n}");
            for (p, &c) in counts.iter().enumerate() {
                assert_eq!(of.iter().filter(|x| **x == Some(p as i16)).count(), c as usize, "n = {n}, part {p}");
            }
        }
    }
}
