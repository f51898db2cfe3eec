//! `chokaq-postgres`: the PostgreSQL backend of chokaq, on sqlx.
//!
//! * Claims are one call of a plpgsql function (`<schema>.claim`): one bounded, skip-locked
//!   index seek per requested queue, and for capped queues a lock on the queue's control row
//!   followed by a count in a fresh snapshot, so `max_workers` is a strict cap.
//! * Every guarded write names the lease (fencing token) and reports lost leases per id.
//! * Every move between tables is one statement with data-modifying CTEs.
//! * Enqueue wakes idle workers with `pg_notify` on channel `<schema>_jobs`.
//!
//! See `docs/postgres.md` for the schema and the reasoning behind each statement.

mod config;
mod error;
mod list;
mod listen;
mod migrate;
mod rows;
mod sql;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
#[cfg(feature = "testing")]
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimMode, ClaimParams, ClaimedJob, DeadReason,
    Enqueued, Error, ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef,
    ListJobsParams, NewJob, PurgeParams, QueueControl, QueueName, QueueSettings, QueueStats, RequeueOutcome,
    RescueParams, RescueReport, Result, RunAt, StatsSnapshot, Timestamp, TimestampPrecision, Wakeups, WorkerId,
    ZombiePolicy, MAX_ENQUEUE_BATCH,
};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgConnection, PgPool, Row};
use uuid::Uuid;

pub use config::PgConfig;
pub use error::map_sqlx_error;
pub use migrate::{Migration, MIGRATIONS};

use error::with_retry;
use sql::Statements;

/// Deliberately broken statements for the conformance suite's "teeth" test: each switch
/// replaces one correct statement by the broken one it names, so the suite can prove it
/// catches that bug. Compiled only with the `fault-injection` feature.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Claim = a SELECT of candidates, then a separate UPDATE (no skip-locked atomicity).
    pub claim_two_statements: bool,
    /// Cap = the seed's committed-count CTE in the claim statement, no queue-row lock.
    pub cap_plain_count: bool,
    /// Complete without the `lease` condition.
    pub complete_without_lease_guard: bool,
    /// Complete's move = DELETE, then INSERT, as two autocommitted statements.
    pub move_two_autocommits: bool,
    /// Heartbeat without the `lease` condition.
    pub heartbeat_ignores_lease: bool,
}

/// The PostgreSQL backend. Cheap to clone (the pool and statements are shared).
#[derive(Clone)]
pub struct PgBackend {
    pool: PgPool,
    shared: Arc<Shared>,
    #[cfg(feature = "fault-injection")]
    faults: Faults,
}

struct Shared {
    schema: String,
    application_name: String,
    max_payload_bytes: usize,
    sql: Statements,
}

impl fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBackend")
            .field("schema", &self.shared.schema)
            .field("pool_size", &self.pool.size())
            .field("max_payload_bytes", &self.shared.max_payload_bytes)
            .finish_non_exhaustive()
    }
}

/// One job of an enqueue batch, validated and ready to bind.
struct NewRow {
    id: Uuid,
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
}

/// Where enqueue runs: on the backend's pool (each statement retried by [`with_retry`]) or on
/// the caller's connection (never retried: the caller's transaction is theirs to retry).
enum Target<'a> {
    Pool(&'a PgPool),
    Conn(&'a mut PgConnection),
}

/// Where an input job's result comes from.
enum Slot {
    /// Its own row (index into the rows).
    Row(usize),
    /// An earlier input with the same idempotency key (index into the inputs).
    SameAs(usize),
}

impl PgBackend {
    /// Validates the schema name, then opens a pool (sessions named `chokaq:<schema>`). Does
    /// not migrate: call [`Backend::migrate`].
    pub async fn connect(config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        let mut opts = PgConnectOptions::from_str(&config.url)
            .map_err(|_| Error::invalid("invalid PostgreSQL connection URL"))?
            .application_name(&config.application_name());
        if let Some(t) = config.statement_timeout {
            opts = opts.options([("statement_timeout", format!("{}ms", t.as_millis().max(1)))]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.max(1))
            .acquire_timeout(config.connect_timeout)
            .connect_with(opts)
            .await
            .map_err(map_sqlx_error)?;
        Self::from_pool(pool, config)
    }

    /// Wraps an existing pool. `config.url` is not used; its other settings are.
    /// [`TestSupport::kill_connections`] finds only sessions whose `application_name` is
    /// `chokaq:<schema>`, as [`PgBackend::connect`] sets it.
    pub fn from_pool(pool: PgPool, config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        Ok(PgBackend {
            pool,
            shared: Arc::new(Shared {
                sql: Statements::new(&config.schema),
                application_name: config.application_name(),
                schema: config.schema,
                max_payload_bytes: config.max_payload_bytes,
            }),
            #[cfg(feature = "fault-injection")]
            faults: Faults::default(),
        })
    }

    /// Switches on deliberately broken statements (teeth test only).
    #[cfg(feature = "fault-injection")]
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema name.
    pub fn schema(&self) -> &str {
        &self.shared.schema
    }

    fn sql(&self) -> &Statements {
        &self.shared.sql
    }

    /// Enqueues inside the caller's transaction (outbox pattern): the job exists, and its
    /// NOTIFY is delivered, only if that transaction commits. Pass `&mut *tx`.
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
    fn prepare(&self, jobs: Vec<NewJob>) -> Result<(Vec<NewRow>, Vec<Slot>)> {
        if jobs.len() > MAX_ENQUEUE_BATCH {
            return Err(Error::invalid(format!(
                "at most {MAX_ENQUEUE_BATCH} jobs per enqueue_many, got {}",
                jobs.len()
            )));
        }
        let mut rows = Vec::with_capacity(jobs.len());
        let mut slots = Vec::with_capacity(jobs.len());
        let mut first_of_key: HashMap<String, usize> = HashMap::new();
        for (i, job) in jobs.into_iter().enumerate() {
            job.validate(self.shared.max_payload_bytes)?;
            if let Some(key) = &job.idempotency_key {
                if let Some(&j) = first_of_key.get(key) {
                    slots.push(Slot::SameAs(j));
                    continue;
                }
                first_of_key.insert(key.clone(), i);
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
            });
        }
        Ok((rows, slots))
    }

    /// The insert of `batch`: returns the ids of the rows inserted (not those whose key was
    /// taken).
    fn insert_query<'q>(
        &'q self,
        batch: &[&'q NewRow],
    ) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, Uuid, sqlx::postgres::PgArguments> {
        sqlx::query_scalar(&self.sql().enqueue)
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
    }

    /// Inserts `rows` (one statement), then resolves the keys that were taken to the live
    /// job's id (a second statement, so a new snapshot: it sees a concurrent enqueuer's
    /// committed row, which the insert waited for). A taken key whose job left the hot table
    /// before the look-up is inserted again, a bounded number of times.
    async fn enqueue_on(&self, mut target: Target<'_>, rows: &[NewRow], slots: &[Slot]) -> Result<Vec<Enqueued>> {
        let mut result: Vec<Option<Enqueued>> = vec![None; rows.len()];
        let mut todo: Vec<usize> = (0..rows.len()).collect();
        for _round in 0..10 {
            let batch: Vec<&NewRow> = todo.iter().map(|&i| &rows[i]).collect();
            let inserted: Vec<Uuid> = match &mut target {
                Target::Pool(pool) => with_retry(|| self.insert_query(&batch).fetch_all(*pool)).await?,
                Target::Conn(conn) => self.insert_query(&batch).fetch_all(&mut **conn).await.map_err(map_sqlx_error)?,
            };
            let inserted: HashSet<Uuid> = inserted.into_iter().collect();
            let mut taken = Vec::new();
            for &i in &todo {
                if inserted.contains(&rows[i].id) {
                    result[i] = Some(Enqueued { id: JobId(rows[i].id), duplicate: false });
                } else {
                    taken.push(i);
                }
            }
            todo.clear();
            if taken.is_empty() {
                break;
            }
            let keys: Vec<&str> = taken.iter().filter_map(|&i| rows[i].key.as_deref()).collect();
            let lookup = || sqlx::query_as::<_, (String, Uuid)>(&self.sql().lookup_keys).bind(&keys);
            let live: HashMap<String, Uuid> = match &mut target {
                Target::Pool(pool) => with_retry(|| lookup().fetch_all(*pool)).await?,
                Target::Conn(conn) => lookup().fetch_all(&mut **conn).await.map_err(map_sqlx_error)?,
            }
            .into_iter()
            .collect();
            for i in taken {
                match rows[i].key.as_deref().and_then(|k| live.get(k)) {
                    Some(id) => result[i] = Some(Enqueued { id: JobId(*id), duplicate: true }),
                    None => todo.push(i),
                }
            }
            if todo.is_empty() {
                break;
            }
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

    /// Runs one of the guarded batch statements (`$1` worker, `$2` ids, `$3` leases) and
    /// splits the input into done and lost.
    async fn guarded(&self, sql: &str, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let (ids, lease_nums) = dedup(leases);
        if ids.is_empty() {
            return Ok(BatchOutcome::default());
        }
        let done: HashSet<Uuid> = with_retry(|| {
            sqlx::query_scalar::<_, Uuid>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&self.pool)
        })
        .await?
        .into_iter()
        .collect();
        Ok(split(&ids, &done))
    }

    async fn set_control<T>(&self, sql: &str, queue: &QueueName, value: T) -> Result<QueueSettings>
    where
        T: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Sync + Clone,
    {
        let row =
            with_retry(|| sqlx::query(sql).bind(queue.as_str()).bind(value.clone()).fetch_one(&self.pool)).await?;
        rows::queue_settings(&row)
    }

    #[cfg(feature = "fault-injection")]
    async fn faulty_claim(&self, req: &ClaimParams, queues: &[String]) -> Result<Vec<sqlx::postgres::PgRow>> {
        let start = req.mode == ClaimMode::Start;
        if self.faults.claim_two_statements {
            let ids: Vec<Uuid> = sqlx::query_scalar(&self.sql().fault_claim_select)
                .bind(queues)
                .bind(req.limit as i64)
                .fetch_all(&self.pool)
                .await
                .map_err(map_sqlx_error)?;
            tokio::time::sleep(Duration::from_millis(2)).await;
            return sqlx::query(&self.sql().fault_claim_update)
                .bind(&ids)
                .bind(req.worker.0)
                .bind(start)
                .fetch_all(&self.pool)
                .await
                .map_err(map_sqlx_error);
        }
        sqlx::query(&self.sql().fault_claim_plain_count)
            .bind(req.worker.0)
            .bind(queues)
            .bind(req.limit as i32)
            .bind(start)
            .fetch_all(&self.pool)
            .await
            .map_err(map_sqlx_error)
    }

    #[cfg(feature = "fault-injection")]
    async fn faulty_move(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        let (ids, lease_nums) = dedup(leases);
        let rows: Vec<serde_json::Value> = sqlx::query_scalar(&self.sql().fault_move_delete)
            .bind(worker.0)
            .bind(&ids)
            .bind(&lease_nums)
            .fetch_all(&self.pool)
            .await
            .map_err(map_sqlx_error)?;
        tokio::time::sleep(Duration::from_millis(2)).await;
        let done: HashSet<Uuid> = sqlx::query_scalar(&self.sql().fault_move_insert)
            .bind(serde_json::Value::Array(rows))
            .fetch_all(&self.pool)
            .await
            .map_err(map_sqlx_error)?
            .into_iter()
            .collect();
        Ok(split(&ids, &done))
    }
}

/// Input ids and leases, first occurrence of each id kept.
fn dedup(leases: &[LeaseRef]) -> (Vec<Uuid>, Vec<i64>) {
    let mut seen = HashSet::with_capacity(leases.len());
    leases.iter().filter(|l| seen.insert(l.id)).map(|l| (l.id.0, l.lease.0)).unzip()
}

/// Every id in exactly one list, in input order.
fn split(ids: &[Uuid], done: &HashSet<Uuid>) -> BatchOutcome {
    BatchOutcome::partition(ids.iter().map(|id| JobId(*id)), |id| done.contains(&id.0))
}

/// Claimed rows in claim order (`UPDATE … RETURNING` has none): priority DESC, due ASC, id.
fn sorted_claims(rows: &[sqlx::postgres::PgRow]) -> Result<Vec<ClaimedJob>> {
    let mut jobs = rows.iter().map(rows::claimed).collect::<Result<Vec<_>>>()?;
    jobs.sort_by(|(a, ad), (b, bd)| b.priority.cmp(&a.priority).then(ad.cmp(bd)).then(a.id.cmp(&b.id)));
    Ok(jobs.into_iter().map(|(j, _)| j).collect())
}

/// An error text as stored: at most [`validate::MAX_ERROR_LEN`] bytes, no NUL.
fn error_text(s: &str) -> String {
    validate::truncate(&s.replace('\0', "\u{FFFD}"), validate::MAX_ERROR_LEN).to_owned()
}

fn count(v: i64) -> u64 {
    v.max(0) as u64
}

#[async_trait]
impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::minimal(TimestampPrecision::Microsecond).with_kill_connections(true).with_multi_process(true)
    }

    async fn migrate(&self) -> Result<()> {
        with_retry(|| migrate::migrate(&self.pool, &self.shared.schema)).await
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        let (rows, slots) = self.prepare(jobs)?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        self.enqueue_on(Target::Pool(&self.pool), &rows, &slots).await
    }

    async fn claim(&self, req: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        req.validate()?;
        let queues: Vec<String> = req.queues.iter().map(|q| q.as_str().to_owned()).collect();
        let start = req.mode == ClaimMode::Start;
        #[cfg(feature = "fault-injection")]
        if self.faults.claim_two_statements || self.faults.cap_plain_count {
            let rows = self.faulty_claim(req, &queues).await?;
            return sorted_claims(&rows);
        }
        let rows = with_retry(|| {
            sqlx::query(&self.sql().claim)
                .bind(req.worker.0)
                .bind(&queues)
                .bind(req.limit as i32)
                .bind(start)
                .fetch_all(&self.pool)
        })
        .await?;
        sorted_claims(&rows)
    }

    async fn complete_and_claim(
        &self,
        worker: WorkerId,
        leases: &[LeaseRef],
        req: &ClaimParams,
    ) -> Result<(BatchOutcome, Vec<ClaimedJob>)> {
        req.validate()?;
        #[cfg(feature = "fault-injection")]
        {
            let f = &self.faults;
            if f.claim_two_statements || f.cap_plain_count || f.move_two_autocommits || f.complete_without_lease_guard {
                // The faulty paths are separate statements: run them as the two calls.
                let done = self.complete(worker, leases).await?;
                return Ok((done, self.claim(req).await?));
            }
        }
        let (ids, lease_nums) = dedup(leases);
        let queues: Vec<String> = req.queues.iter().map(|q| q.as_str().to_owned()).collect();
        let start = req.mode == ClaimMode::Start;
        let rows = with_retry(|| {
            sqlx::query(&self.sql().complete_and_claim)
                .bind(worker.0)
                .bind(&ids)
                .bind(&lease_nums)
                .bind(&queues)
                .bind(req.limit as i32)
                .bind(start)
                .fetch_all(&self.pool)
        })
        .await?;
        let mut done: HashSet<Uuid> = HashSet::new();
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            if done.is_empty() {
                let ids: Vec<Uuid> = row.try_get("o_done").map_err(map_sqlx_error)?;
                done.extend(ids);
            }
            let id: Option<Uuid> = row.try_get("id").map_err(map_sqlx_error)?;
            if id.is_some() {
                claimed.push(row);
            }
        }
        Ok((split(&ids, &done), sorted_claims(&claimed)?))
    }

    async fn start(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.guarded(&self.sql().start, worker, leases).await
    }

    async fn heartbeat(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
        let (ids, lease_nums) = dedup(leases);
        if ids.is_empty() {
            return Ok(HeartbeatReport::default());
        }
        let sql = &self.sql().heartbeat;
        #[cfg(feature = "fault-injection")]
        let sql = if self.faults.heartbeat_ignores_lease { &self.sql().fault_heartbeat_no_lease } else { sql };
        let rows: Vec<(Uuid, bool)> = with_retry(|| {
            sqlx::query_as::<_, (Uuid, bool)>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&self.pool)
        })
        .await?;
        let held: HashMap<Uuid, bool> = rows.into_iter().collect();
        let mut report = HeartbeatReport::default();
        for id in &ids {
            match held.get(id) {
                Some(&cancel) => {
                    report.held.push(JobId(*id));
                    if cancel {
                        report.cancel_requested.push(JobId(*id));
                    }
                }
                None => report.lost.push(JobId(*id)),
            }
        }
        Ok(report)
    }

    async fn complete(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        #[cfg(feature = "fault-injection")]
        {
            if self.faults.move_two_autocommits {
                return self.faulty_move(worker, leases).await;
            }
            if self.faults.complete_without_lease_guard {
                return self.guarded(&self.sql().fault_complete_no_lease, worker, leases).await;
            }
        }
        self.guarded(&self.sql().complete, worker, leases).await
    }

    async fn fail(&self, worker: WorkerId, lease: LeaseRef, outcome: FailAction) -> Result<Fenced<FailOutcome>> {
        let (act, delay, error, reason) = match &outcome {
            FailAction::Retry { delay, error } => ("retry", *delay, Some(error_text(error)), DeadReason::Failed),
            FailAction::Snooze { delay } => ("snooze", *delay, None, DeadReason::Failed),
            FailAction::DeadLetter { reason, error } => ("dead", Duration::ZERO, Some(error_text(error)), *reason),
            FailAction::Cancelled { error } => {
                ("dead", Duration::ZERO, error.as_deref().map(error_text), DeadReason::Cancelled)
            }
        };
        let row = with_retry(|| {
            sqlx::query(&self.sql().fail)
                .bind(worker.0)
                .bind(lease.id.0)
                .bind(lease.lease.0)
                .bind(act)
                .bind(rows::micros(delay))
                .bind(error.as_deref())
                .bind(reason.as_str())
                .fetch_optional(&self.pool)
        })
        .await?;
        let Some(row) = row else { return Ok(Fenced::LeaseLost) };
        let done: String = row.try_get("act").map_err(map_sqlx_error)?;
        let at: Option<Timestamp> = row.try_get("at").map_err(map_sqlx_error)?;
        let missing = || Error::new(ErrorKind::Other, "fail: no due time returned");
        Ok(Fenced::Done(match done.as_str() {
            "retry" => FailOutcome::Retried { at: at.ok_or_else(missing)? },
            "snooze" => FailOutcome::Snoozed { until: at.ok_or_else(missing)? },
            _ => FailOutcome::DeadLettered(reason),
        }))
    }

    async fn release(&self, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
        self.guarded(&self.sql().release, worker, leases).await
    }

    async fn rescue(&self, params: &RescueParams) -> Result<RescueReport> {
        let key = format!("chokaq:rescue:{}", self.shared.schema);
        let limit = i64::from(params.limit);
        with_retry(|| async {
            let mut tx = self.pool.begin().await?;
            let got: bool = sqlx::query_scalar(sql::RESCUE_LOCK).bind(&key).fetch_one(&mut *tx).await?;
            if !got {
                tx.rollback().await?;
                return Ok(RescueReport::default());
            }
            let released = sqlx::query(&self.sql().rescue_fetched)
                .bind(rows::micros(params.fetched_timeout))
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            let (retried, dead): (i64, i64) = sqlx::query_as(&self.sql().rescue_zombies)
                .bind(rows::micros(params.default_zombie_timeout))
                .bind(limit)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(RescueReport {
                ran: true,
                fetched_released: released,
                zombies_retried: count(retried),
                zombies_dead: count(dead),
            })
        })
        .await
    }

    async fn cancel(&self, id: JobId) -> Result<CancelOutcome> {
        let (dead, requested): (i64, i64) =
            with_retry(|| sqlx::query_as(&self.sql().cancel).bind(id.0).fetch_one(&self.pool)).await?;
        Ok(if dead > 0 {
            CancelOutcome::Cancelled
        } else if requested > 0 {
            CancelOutcome::Requested
        } else {
            CancelOutcome::NotLive
        })
    }

    async fn control_queue(&self, queue: &QueueName, control: QueueControl) -> Result<QueueSettings> {
        let s = self.sql();
        match control {
            QueueControl::Pause => self.set_control(&s.control_paused, queue, true).await,
            QueueControl::Resume => self.set_control(&s.control_paused, queue, false).await,
            QueueControl::Activate => self.set_control(&s.control_active, queue, true).await,
            QueueControl::Deactivate => self.set_control(&s.control_active, queue, false).await,
            QueueControl::SetMaxWorkers(max) => {
                let max = max
                    .map(|m| i32::try_from(m).map_err(|_| Error::invalid(format!("max_workers {m} is too large"))))
                    .transpose()?;
                self.set_control(&s.control_max_workers, queue, max).await
            }
            QueueControl::SetZombieTimeout(t) => {
                let ms = t.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1));
                self.set_control(&s.control_zombie_timeout, queue, ms).await
            }
            QueueControl::SetZombiePolicy(p) => {
                let code: i16 = match p {
                    ZombiePolicy::Retry => 0,
                    ZombiePolicy::DeadLetter => 1,
                };
                self.set_control(&s.control_zombie_policy, queue, code).await
            }
        }
    }

    async fn queue_settings(&self, queue: &QueueName) -> Result<QueueSettings> {
        let row =
            with_retry(|| sqlx::query(&self.sql().queue_settings).bind(queue.as_str()).fetch_optional(&self.pool))
                .await?;
        match row {
            Some(row) => rows::queue_settings(&row),
            None => Ok(QueueSettings::default_for(queue.clone())),
        }
    }

    async fn requeue_dead(&self, id: JobId) -> Result<RequeueOutcome> {
        let (moved, _woke): (i64, i64) =
            with_retry(|| sqlx::query_as(&self.sql().requeue).bind(id.0).fetch_one(&self.pool)).await.map_err(|e| {
                if e.kind() == ErrorKind::Conflict {
                    Error::new(ErrorKind::Conflict, format!("a live job holds the idempotency key of {id}"))
                } else {
                    e
                }
            })?;
        Ok(if moved > 0 { RequeueOutcome::Requeued } else { RequeueOutcome::NotFound })
    }

    async fn purge(&self, req: &PurgeParams) -> Result<u64> {
        list::purge(&self.pool, &self.shared.schema, req).await
    }

    async fn stats(&self) -> Result<StatsSnapshot> {
        let rows = with_retry(|| sqlx::query(&self.sql().stats).fetch_all(&self.pool)).await?;
        let mut snap = StatsSnapshot::default();
        for row in &rows {
            let get_i = |c: &str| row.try_get::<i64, _>(c).map(count).map_err(map_sqlx_error);
            snap.taken_at = row.try_get("taken_at").map_err(map_sqlx_error)?;
            let Some(queue) = row.try_get::<Option<String>, _>("queue").map_err(map_sqlx_error)? else { continue };
            let q = QueueStats {
                queue,
                pending: get_i("pending")?,
                fetched: get_i("fetched")?,
                processing: get_i("processing")?,
                archived: get_i("archived")?,
                dead: get_i("dead")?,
                oldest_due_at: row.try_get("oldest_due_at").map_err(map_sqlx_error)?,
            };
            snap.pending += q.pending;
            snap.fetched += q.fetched;
            snap.processing += q.processing;
            snap.archived += q.archived;
            snap.dead += q.dead;
            snap.queues.push(q);
        }
        Ok(snap)
    }

    async fn get_job(&self, id: JobId) -> Result<Option<JobRecord>> {
        let row = with_retry(|| sqlx::query(&self.sql().get_job).bind(id.0).fetch_optional(&self.pool)).await?;
        row.as_ref().map(rows::record).transpose()
    }

    async fn list_jobs(&self, filter: &ListJobsParams) -> Result<JobPage> {
        list::list_jobs(&self.pool, &self.shared.schema, filter).await
    }

    async fn wakeups(&self) -> Result<Option<Wakeups>> {
        let channel = sql::channel(&self.shared.schema);
        let listener = with_retry(|| async {
            let mut listener = PgListener::connect_with(&self.pool).await?;
            listener.listen(&channel).await?;
            Ok(listener)
        })
        .await?;
        let (tx, rx) = tokio::sync::broadcast::channel(1024);
        tokio::spawn(listen::run(self.pool.clone(), channel, tx, listener));
        Ok(Some(Wakeups::new(rx)))
    }
}

#[cfg(feature = "testing")]
#[async_trait]
impl TestSupport for PgBackend {
    async fn db_now(&self) -> Result<Timestamp> {
        with_retry(|| sqlx::query_scalar("SELECT now()").fetch_one(&self.pool)).await
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        let n = with_retry(|| {
            sqlx::query(&self.sql().force)
                .bind(id.0)
                .bind(patch.status.map(|s| s.code()))
                .bind(patch.attempt)
                .bind(patch.scheduled_at.is_some())
                .bind(patch.scheduled_at.flatten())
                .bind(patch.heartbeat_at.is_some())
                .bind(patch.heartbeat_at.flatten())
                .bind(patch.updated_at)
                .bind(patch.created_at)
                .execute(&self.pool)
        })
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        Ok(self.presence_many(&[id]).await?.pop().map(|(_, p)| p).unwrap_or_default())
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
        let rows: Vec<(Uuid, i64, i64, i64)> =
            with_retry(|| sqlx::query_as(&self.sql().presence_many).bind(&ids).fetch_all(&self.pool)).await?;
        Ok(rows
            .into_iter()
            .map(|(id, h, a, d)| (JobId(id), Presence { hot: h as u32, archive: a as u32, dead: d as u32 }))
            .collect())
    }

    async fn kill_connections(&self) -> Result<u64> {
        let n: i64 = with_retry(|| {
            sqlx::query_scalar(sql::KILL_CONNECTIONS).bind(&self.shared.application_name).fetch_one(&self.pool)
        })
        .await?;
        Ok(count(n))
    }

    async fn drop_schema(&self) -> Result<()> {
        with_retry(|| sqlx::query(&self.sql().drop_schema).execute(&self.pool)).await?;
        Ok(())
    }
}
