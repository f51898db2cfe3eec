//! The transaction form of the assertions on PostgreSQL (features `apptest` and `postgres`):
//! what a caller's open transaction enqueued ([`Client::enqueue_in_tx`](crate::Client::enqueue_in_tx)),
//! read on that transaction's connection, so jobs not committed yet are seen.

use chokaq_core::{JobId, JobKind, JobLocation, JobRecord, JobStatus, QueueName, Result, Timestamp};
use chokaq_postgres::{map_sqlx_error, PgBackend};
use sqlx::{PgConnection, Row};

use super::{Expect, Found, MAX_JOBS_READ};
use crate::job::Job;

impl<T: Job> Expect<T> {
    /// [`find`](Expect::find) on the connection of an open transaction: the live jobs of type
    /// `T` it can see, its own uncommitted ones included (the hot table only, whatever
    /// [`including_finished`](Expect::including_finished) says).
    ///
    /// ```no_run
    /// use chokaq::apptest::Expect;
    /// use chokaq::postgres::{map_sqlx_error, PgBackend, PgConfig};
    /// use chokaq::{Client, JobBuilder};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize)]
    /// # struct SendEmail { to: String }
    /// # impl chokaq::Job for SendEmail { const KIND: &'static str = "email.send.v1"; }
    ///
    /// # async fn demo() -> chokaq::Result<()> {
    /// let backend = PgBackend::connect(PgConfig::new("postgres://app@db/app_test")).await?;
    /// let client = Client::new(backend.clone());
    /// let mut tx = backend.pool().begin().await.map_err(map_sqlx_error)?;
    /// client.enqueue_in_tx(&mut tx, &SendEmail { to: "a@example.com".into() }).await?;
    ///
    /// let to_a = Expect::<SendEmail>::matching(|e| e.to == "a@example.com");
    /// to_a.assert_enqueued_in_tx(&backend, &mut tx).await; // seen inside the transaction
    /// assert_eq!(to_a.find_in_tx(&backend, &mut tx).await?.len(), 1);
    /// to_a.refute_enqueued(&backend).await; // not outside it before the commit
    /// tx.commit().await.map_err(map_sqlx_error)?;
    /// to_a.assert_enqueued(&backend).await;
    /// # Ok(()) }
    /// ```
    pub async fn find_in_tx(&self, backend: &PgBackend, conn: &mut PgConnection) -> Result<Vec<Found<T>>> {
        let jobs = live_jobs(backend, conn, T::KIND).await?;
        Ok(jobs.into_iter().filter_map(|r| self.decode_match(r)).collect())
    }

    /// [`assert_enqueued`](Expect::assert_enqueued) inside an open transaction.
    pub async fn assert_enqueued_in_tx(&self, backend: &PgBackend, conn: &mut PgConnection) -> Found<T> {
        self.assert_enqueued_times_in_tx(backend, conn, None).await.remove(0)
    }

    /// [`refute_enqueued`](Expect::refute_enqueued) inside an open transaction.
    pub async fn refute_enqueued_in_tx(&self, backend: &PgBackend, conn: &mut PgConnection) {
        self.assert_enqueued_times_in_tx(backend, conn, Some(0)).await;
    }

    /// [`assert_enqueued_times`](Expect::assert_enqueued_times) inside an open transaction.
    pub async fn assert_enqueued_times_in_tx(
        &self,
        backend: &PgBackend,
        conn: &mut PgConnection,
        n: impl Into<Option<usize>>,
    ) -> Vec<Found<T>> {
        let jobs = live_jobs(backend, conn, T::KIND).await.unwrap_or_else(|e| panic!("could not list the jobs: {e}"));
        self.check(jobs, n.into())
    }
}

/// The live jobs of `kind` as `conn` sees them, oldest first, at most [`MAX_JOBS_READ`]. The
/// schema is the backend's (validated when it connected, quoted here); the kind is bound.
async fn live_jobs(backend: &PgBackend, conn: &mut PgConnection, kind: &str) -> Result<Vec<JobRecord>> {
    chokaq_core::validate::schema_name(backend.schema())?;
    let sql = format!(
        "SELECT id, queue, kind, payload, tags, idempotency_key, concurrency_key, priority, status, attempt, \
         max_attempts, scheduled_at, created_at, updated_at, created_by \
         FROM \"{}\".jobs_hot WHERE kind = $1 ORDER BY id LIMIT {MAX_JOBS_READ}",
        backend.schema()
    );
    let rows = sqlx::query(&sql).bind(kind).fetch_all(conn).await.map_err(map_sqlx_error)?;
    rows.iter().map(record).collect()
}

fn record(row: &sqlx::postgres::PgRow) -> Result<JobRecord> {
    let get = map_sqlx_error;
    let status: i16 = row.try_get("status").map_err(get)?;
    let status = match status {
        1 => JobStatus::Fetched,
        2 => JobStatus::Processing,
        _ => JobStatus::Pending,
    };
    Ok(JobRecord {
        id: JobId(row.try_get("id").map_err(get)?),
        location: JobLocation::Hot(status),
        queue: QueueName::new(row.try_get::<String, _>("queue").map_err(get)?)?,
        kind: JobKind::from_stored(row.try_get::<String, _>("kind").map_err(get)?)?,
        payload: row.try_get("payload").map_err(get)?,
        tags: row.try_get("tags").map_err(get)?,
        idempotency_key: row.try_get("idempotency_key").map_err(get)?,
        concurrency_key: row.try_get("concurrency_key").map_err(get)?,
        priority: row.try_get("priority").map_err(get)?,
        attempt: row.try_get("attempt").map_err(get)?,
        max_attempts: row.try_get("max_attempts").map_err(get)?,
        lease: None,
        worker_id: None,
        scheduled_at: row.try_get::<Option<Timestamp>, _>("scheduled_at").map_err(get)?,
        created_at: row.try_get("created_at").map_err(get)?,
        started_at: None,
        heartbeat_at: None,
        updated_at: row.try_get("updated_at").map_err(get)?,
        finished_at: None,
        last_error: None,
        cancel_requested: false,
        created_by: row.try_get("created_by").map_err(get)?,
    })
}
