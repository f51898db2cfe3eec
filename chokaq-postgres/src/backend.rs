//! [`PgBackend`]: its constructors and `impl Backend`. Every statement comes from the
//! [`Statements`] set built when the backend is; this file only binds values and reads rows.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chokaq_core::listing::{self, ListArg};
use chokaq_core::{
    validate, Backend, BatchOutcome, CancelOutcome, Capabilities, ClaimMode, ClaimParams, ClaimedJob, DeadReason,
    Enqueued, Error, ErrorKind, FailAction, FailOutcome, Fenced, HeartbeatReport, JobId, JobPage, JobRecord, LeaseRef,
    ListJobsParams, NewJob, PurgeParams, PurgeTarget, QueueControl, QueueName, QueueSettings, RateLimit,
    RequeueOutcome, RescueParams, RescueReport, Result, ScheduleDef, ScheduleRow, StatsSnapshot, ThroughputBucket,
    ThroughputParams, TickOutcome, TickRequest, Timestamp, TimestampPrecision, Wakeups, WorkerId, WorkerProcess,
    WorkerRegistration, ZombiePolicy, DEFAULT_FETCHED_TIMEOUT, DEFAULT_ZOMBIE_TIMEOUT,
};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::config::PgConfig;
use crate::enqueue::Target;
use crate::error::{map_sqlx_error, with_retry};
use crate::kept::Kept;
use crate::rows::{count, error_text, pairs, sorted_claims, split};
use crate::sql::{self, Statements};
use crate::{listen, migrate, rows};

/// Largest batch of `purge`.
const MAX_PURGE_BATCH: u32 = 100_000;

/// The PostgreSQL backend. Cheap to clone (the pool and statements are shared).
#[derive(Clone)]
pub struct PgBackend {
    pub(crate) pool: PgPool,
    /// The executor every statement outside a transaction runs on: the pool's sessions, kept
    /// checked out between statements (`kept.rs`).
    pub(crate) kept: Kept,
    pub(crate) shared: Arc<Shared>,
}

/// What every clone of a backend shares.
pub(crate) struct Shared {
    pub(crate) schema: String,
    /// `chokaq:<schema>`: how `TestSupport::kill_connections` finds this backend's sessions.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) application_name: String,
    /// The NOTIFY channel (`<schema>_jobs`).
    pub(crate) channel: String,
    pub(crate) max_payload_bytes: usize,
    pub(crate) sql: Statements,
    /// Rescue calls in a row that found the rescue lock held (see [`PgBackend::note_rescue`]).
    pub(crate) rescue_skipped: AtomicU32,
    /// The one LISTEN session of this backend, fanned out to every [`Backend::wakeups`]
    /// stream (the sender of its broadcast; a new session starts when every stream is gone).
    pub(crate) wake: tokio::sync::Mutex<Option<tokio::sync::broadcast::Sender<chokaq_core::Wake>>>,
    /// The wake-ups sent after the commit (`notify.rs`), started by the first enqueue.
    pub(crate) notifier: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedSender<crate::notify::Request>>>,
}

/// After this many rescue calls in a row that found the lock held, a warning is logged (and
/// again every as many calls).
pub const RESCUE_SKIPPED_WARN: u32 = 20;

impl fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBackend")
            .field("schema", &self.shared.schema)
            .field("pool_size", &self.pool.size())
            .field("max_payload_bytes", &self.shared.max_payload_bytes)
            .finish_non_exhaustive()
    }
}

impl PgBackend {
    /// Validates the schema name, then opens a pool (sessions named `chokaq:<schema>`, their
    /// transactions at READ COMMITTED and `jit` off, whatever `default_transaction_isolation`
    /// and `jit` the server, the database or the role sets). Does not migrate: call
    /// [`Backend::migrate`].
    pub async fn connect(config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        crate::tls::check_url(&config.url)?;
        let opts =
            PgConnectOptions::from_str(&config.url).map_err(|_| Error::invalid("invalid PostgreSQL connection URL"))?;
        Self::connect_with(opts, config).await
    }

    /// [`PgBackend::connect`] with connection options built by the caller (host, user, TLS…);
    /// `config.url` is not used. The sessions are named `chokaq:<schema>`, pinned to READ
    /// COMMITTED and run with `jit = off` (see [`PgBackend::connect`]).
    pub async fn connect_with(opts: PgConnectOptions, config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        let opts = config.session_options(opts);
        // No ping before each checkout (sqlx's default): it cost every statement a second
        // round trip. A session the server ended answers its next statement with 57P01
        // (retried by `with_retry`); a connection that broke fails that statement as
        // `Unavailable`, like a break during it would, and is discarded.
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections.max(1))
            .acquire_timeout(config.connect_timeout)
            .test_before_acquire(false)
            .connect_with(opts)
            .await
            .map_err(map_sqlx_error)?;
        Self::from_pool(pool, config)
    }

    /// Wraps an existing pool. `config.url` is not used; its other settings are.
    /// The pool's sessions must run their transactions at READ COMMITTED (the server's default):
    /// build them with `PgConnectOptions::options([("default_transaction_isolation", r"read\ committed")])`
    /// (the space escaped), or use [`PgBackend::connect_with`], which does. Add
    /// `("jit", "off")` too: a JIT-compiled claim costs milliseconds per call at a large backlog
    /// (`docs/postgres.md`, "No JIT").
    /// The test support (feature `testing`) kills only sessions whose `application_name` is
    /// `chokaq:<schema>`, as [`PgBackend::connect`] sets it.
    pub fn from_pool(pool: PgPool, config: PgConfig) -> Result<Self> {
        validate::schema_name(&config.schema)?;
        Ok(PgBackend {
            kept: Kept::new(pool.clone()),
            pool,
            shared: Arc::new(Shared {
                sql: Statements::new(&config.schema),
                application_name: config.application_name(),
                channel: sql::channel(&config.schema),
                schema: config.schema,
                max_payload_bytes: config.max_payload_bytes,
                rescue_skipped: AtomicU32::new(0),
                wake: tokio::sync::Mutex::new(None),
                notifier: std::sync::Mutex::new(None),
            }),
        })
    }

    /// The same schema, statements and settings on another pool (test support).
    #[cfg(feature = "testing")]
    pub(crate) fn on_pool(&self, pool: PgPool) -> Self {
        PgBackend { kept: Kept::new(pool.clone()), pool, shared: self.shared.clone() }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema name.
    pub fn schema(&self) -> &str {
        &self.shared.schema
    }

    pub(crate) fn sql(&self) -> &Statements {
        &self.shared.sql
    }

    /// Counts rescue calls in a row that did not run (another session held the lock) and warns
    /// every [`RESCUE_SKIPPED_WARN`] of them: a lock held for that long means a stuck instance
    /// or a session that should not hold it.
    /// Deletes finished rows in bounded batches. `locked` (maintenance): each batch runs in a
    /// transaction that holds the schema's `rescue` lock row, taken without waiting; the purge
    /// stops at the first batch that finds it held by another instance.
    async fn purge_batches(&self, req: &PurgeParams, locked: bool) -> Result<u64> {
        if req.batch_size == 0 || req.batch_size > MAX_PURGE_BATCH {
            return Err(Error::invalid(format!(
                "purge batch_size must be 1 to {MAX_PURGE_BATCH}, got {}",
                req.batch_size
            )));
        }
        if req.reason.is_some() && req.target != PurgeTarget::DeadLetter {
            return Err(Error::invalid("a reason filter applies to the dead-letter table only"));
        }
        let sql = match req.target {
            PurgeTarget::Archive => &self.sql().purge_archive,
            PurgeTarget::DeadLetter => &self.sql().purge_dlq,
        };
        let mut total = 0u64;
        for _ in 0..req.max_batches {
            let n = with_retry(|| async {
                let mut tx = self.kept.begin().await?;
                if locked && sqlx::query(&self.sql().rescue_lock).fetch_optional(&mut *tx).await?.is_none() {
                    tx.rollback().await?;
                    return Ok(None);
                }
                let q = sqlx::query(sql)
                    .bind(rows::micros(req.older_than))
                    .bind(req.queue.as_ref().map(|q| q.as_str()))
                    .bind(req.kind.as_ref().map(|k| k.as_str()))
                    .bind(i64::from(req.batch_size));
                // `$5` reason: a parameter of the dead-letter statement only.
                let q = if req.target == PurgeTarget::DeadLetter { q.bind(req.reason.map(|r| r.as_str())) } else { q };
                let n = q.execute(&mut *tx).await?.rows_affected();
                tx.commit().await?;
                Ok(Some(n))
            })
            .await?;
            let Some(n) = n else { break };
            total += n;
            if n < u64::from(req.batch_size) {
                break;
            }
        }
        Ok(total)
    }

    /// Queues the wake-ups of `queues` for after the commit: now (`xid` None: the enqueue ran
    /// on the pool and has committed), or once the caller's transaction `xid` reads as
    /// committed. Starts the notifier task on first use.
    pub(crate) fn wake_after_commit(&self, queues: Vec<String>, xid: Option<i64>) {
        let mut guard = self.shared.notifier.lock().unwrap();
        let mut req = crate::notify::Request { queues, xid };
        if let Some(tx) = guard.as_ref() {
            match tx.send(req) {
                Ok(()) => return,
                // The task ended (its runtime went away): start another.
                Err(e) => req = e.0,
            }
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let sql =
            crate::notify::Sql { notify: self.sql().notify_queues.clone(), tx_status: self.sql().tx_status.clone() };
        tokio::spawn(crate::notify::run(self.kept.clone(), self.shared.channel.clone(), sql, rx));
        let _ = tx.send(req);
        *guard = Some(tx);
    }

    fn note_rescue(&self, ran: bool) {
        if ran {
            self.shared.rescue_skipped.store(0, Ordering::Relaxed);
            return;
        }
        let n = self.shared.rescue_skipped.fetch_add(1, Ordering::Relaxed) + 1;
        if n % RESCUE_SKIPPED_WARN == 0 {
            tracing::warn!(
                schema = %self.shared.schema,
                skipped = n,
                "rescue has not run for {n} calls in a row: another session holds the schema's rescue lock \
                 (the `rescue` row of its `locks` table)"
            );
        }
    }

    /// Runs one of the guarded batch statements (`$1` worker, `$2` ids, `$3` leases) over every
    /// (id, lease) pair of the input (an id may come with several leases: the one that holds
    /// the row matches) and splits the input's ids into done and lost.
    async fn guarded(
        &self,
        op: &str,
        sql: &str,
        worker: WorkerId,
        leases: &[LeaseRef],
    ) -> Result<(Vec<Uuid>, HashSet<Uuid>)> {
        validate::lease_list(op, leases)?;
        let (ids, lease_nums) = pairs(leases);
        if ids.is_empty() {
            return Ok((ids, HashSet::new()));
        }
        let done: HashSet<Uuid> = with_retry(|| {
            sqlx::query_scalar::<_, Uuid>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&self.kept)
        })
        .await?
        .into_iter()
        .collect();
        Ok((ids, done))
    }

    /// Adds to `done` the ids of `leases` not in it that this worker already completed with a
    /// lease it names: a repeated complete reports the outcome that stands.
    async fn completed_before(&self, worker: WorkerId, leases: &[LeaseRef], done: &mut HashSet<Uuid>) -> Result<()> {
        let rest: Vec<LeaseRef> = leases.iter().filter(|l| !done.contains(&l.id.0)).copied().collect();
        if rest.is_empty() {
            return Ok(());
        }
        let (ids, lease_nums) = pairs(&rest);
        let sql = &self.sql().complete_standing;
        let found: Vec<Uuid> = with_retry(|| {
            sqlx::query_scalar::<_, Uuid>(sql).bind(worker.0).bind(&ids).bind(&lease_nums).fetch_all(&self.kept)
        })
        .await?;
        done.extend(found);
        Ok(())
    }

    /// Moves claimed rows that could not be decoded to the dead-letter table (guarded by the
    /// claim's lease), so they neither fail their batch nor come back after the fetched
    /// timeout.
    async fn dead_letter_undecodable(&self, worker: WorkerId, bad: Vec<rows::Undecodable>) -> Result<()> {
        for b in bad {
            tracing::error!(job_id = %b.id, reason = %b.reason, "claimed row cannot be decoded: dead-lettered");
            with_retry(|| {
                sqlx::query(&self.sql().dead_undecodable)
                    .bind(worker.0)
                    .bind(b.id)
                    .bind(b.lease)
                    .bind(&b.reason)
                    .fetch_optional(&self.kept)
            })
            .await?;
        }
        Ok(())
    }

    async fn set_control<T>(&self, sql: &str, queue: &QueueName, value: T) -> Result<QueueSettings>
    where
        T: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Sync + Clone,
    {
        // One transaction: the row made sure of, locked FOR UPDATE (waits for the claims that
        // read the old settings), then changed; see `CONTROL_LOCK`.
        let row = with_retry(|| async {
            let mut tx = self.kept.begin().await?;
            sqlx::query(&self.sql().control_ensure).bind(queue.as_str()).execute(&mut *tx).await?;
            sqlx::query(&self.sql().control_lock).bind(queue.as_str()).execute(&mut *tx).await?;
            let row = sqlx::query(sql).bind(queue.as_str()).bind(value.clone()).fetch_one(&mut *tx).await?;
            tx.commit().await?;
            Ok(row)
        })
        .await?;
        rows::queue_settings(&row)
    }
}

impl PgBackend {
    /// `SetRateLimit`, validated by the caller: the three columns in one upsert, under the
    /// same locks as [`PgBackend::set_control`].
    async fn set_rate_limit(&self, queue: &QueueName, limit: Option<RateLimit>) -> Result<QueueSettings> {
        let jobs = limit
            .map(|l| i32::try_from(l.jobs).map_err(|_| Error::invalid(format!("rate limit {} is too large", l.jobs))))
            .transpose()?;
        let per = limit.map(|l| l.per_millis());
        let by_key = limit.is_some_and(|l| l.by_key);
        let row = with_retry(|| async {
            let mut tx = self.kept.begin().await?;
            sqlx::query(&self.sql().control_ensure).bind(queue.as_str()).execute(&mut *tx).await?;
            sqlx::query(&self.sql().control_lock).bind(queue.as_str()).execute(&mut *tx).await?;
            let row = sqlx::query(&self.sql().control_rate_limit)
                .bind(queue.as_str())
                .bind(jobs)
                .bind(per)
                .bind(by_key)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(row)
        })
        .await?;
        rows::queue_settings(&row)
    }
}

/// The claim functions' `p_mode`: 0 reserve, 1 hold, 2 start (`migrations/functions.sql`).
fn mode_code(mode: ClaimMode) -> i16 {
    match mode {
        ClaimMode::Reserve => 0,
        ClaimMode::Hold => 1,
        ClaimMode::Start => 2,
    }
}

/// Building a backend that runs deliberately broken statements (feature `fault-injection`,
/// for the conformance suite's teeth test only).
#[cfg(feature = "fault-injection")]
impl PgBackend {
    /// [`PgBackend::connect`], with the broken statements `faults` names in place of the
    /// correct ones.
    pub async fn connect_with_faults(config: PgConfig, faults: sql::Faults) -> Result<Self> {
        let opts =
            PgConnectOptions::from_str(&config.url).map_err(|_| Error::invalid("invalid PostgreSQL connection URL"))?;
        if faults.claim_repeatable_read {
            // After the pin in `connect_with`: the last setting of a startup option wins.
            let b = Self::connect_with(opts, config).await?;
            let opts =
                (*b.pool.connect_options()).clone().options([("default_transaction_isolation", r"repeatable\ read")]);
            let pool = PgPoolOptions::new()
                .max_connections(b.pool.options().get_max_connections())
                .connect_with(opts)
                .await
                .map_err(map_sqlx_error)?;
            return Ok(PgBackend { kept: Kept::new(pool.clone()), pool, shared: b.shared }.with_faults(faults));
        }
        Ok(Self::connect_with(opts, config).await?.with_faults(faults))
    }

    /// This backend's pool and settings with a statement set in which the broken statements
    /// `faults` names replace the correct ones (`Faults::default()`: the correct set).
    pub fn with_faults(self, faults: sql::Faults) -> Self {
        let sql = Statements::with_faults(&self.shared.schema, faults);
        let shared = Shared {
            sql,
            schema: self.shared.schema.clone(),
            application_name: self.shared.application_name.clone(),
            channel: self.shared.channel.clone(),
            max_payload_bytes: self.shared.max_payload_bytes,
            rescue_skipped: AtomicU32::new(0),
            wake: tokio::sync::Mutex::new(None),
            notifier: std::sync::Mutex::new(None),
        };
        PgBackend { pool: self.pool, kept: self.kept, shared: Arc::new(shared) }
    }
}

// `impl Backend for PgBackend`, in its own file (it uses this module's imports and private items).
mod trait_impl;
