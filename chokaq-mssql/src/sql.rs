//! Every T-SQL statement of the SQL Server backend; nothing else in the crate builds SQL text.
//!
//! The statements are `const` templates in the submodules, one per room of the crate
//! (`docs/architecture.md`): [`migrate`] (the schema objects), [`enqueue`], [`claim`] (the
//! claim and `complete_and_claim`), [`lease`] (the guarded writes of a claimed job), [`admin`]
//! (queue controls, purge, rescue, cancel, requeue), [`inspect`] (stats, `get_job`), [`list`]
//! (`list_jobs`), [`workers`], [`periodic`] and [`testing`] (test support and the conformance
//! harness's database setup). [`render`] is the one function that puts names into a template; [`Statements`] is
//! the set rendered once for the backend's schema when it connects.
//!
//! Each statement is one batch sent with `sp_executesql` (tiberius binds values as `@P1`,
//! `@P2`, …). Every batch starts by copying its parameters into named, typed variables, so the
//! statement reads on its own. Values are always bound; the only things spliced into the text
//! are names that [`chokaq_core::validate::schema_name`] accepted (so they cannot contain `]`
//! or `'`). Optional filters are static SQL over NULL-able parameters
//! (`@Queue IS NULL OR [Queue] = @Queue`).
//!
//! Ids are stored as `BINARY(16)` (the UUID v7 bytes), not `UNIQUEIDENTIFIER`: SQL Server
//! sorts `uniqueidentifier` by its last six bytes first, which would break "id order =
//! creation order" for keyset paging and the claim's tie-break. Text keys compared for
//! equality (queue, kind, idempotency key, reason) use the binary collation
//! `Latin1_General_BIN2`, so `Mail` and `mail` are different queues and keys whatever the
//! database's collation.
//!
//! Lists of ids or leases travel as ONE JSON parameter read with `OPENJSON`, so a batch of
//! any size is one round trip and never meets the 2,100-parameter limit.

use chokaq_core::{validate, Result};

mod admin;
mod claim;
mod enqueue;
mod inspect;
mod lease;
mod list;
mod migrate;
mod output;
mod periodic;
mod testing;
mod unique;
mod workers;

/// The session options every pooled connection gets once, as a plain batch (so they stick;
/// a `SET` inside a batch sent with `sp_executesql` ends with that batch): the options
/// filtered indexes need, `XACT_ABORT`, READ COMMITTED (READPAST needs it; error 650 under
/// SNAPSHOT), and a lock timeout of 5 s, so a blocked batch fails fast with
/// 1222 (its transaction rolled back by `XACT_ABORT`, the call retried) instead of holding
/// its own locks until the client's statement timeout.
pub(crate) const SESSION_SETUP: &str = "SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCK_TIMEOUT 5000;";

/// The connection health check.
pub(crate) const PING: &str = "SELECT 1 AS [Ok];";

/// The name a template is rendered for.
#[derive(Debug, Clone, Copy)]
enum Name<'a> {
    /// A schema: `{schema}` becomes `[name]`, `{schema_text}` (inside an `N'…'` literal:
    /// `SCHEMA_ID`, the app-lock resources) becomes `name`.
    Schema(&'a str),
    /// A database (the conformance harness's setup only): `{database}` becomes `[name]`,
    /// `{database_text}` becomes `name`.
    Database(&'a str),
}

/// THE substitution: the one place a name enters SQL text. The name is validated here (again)
/// so that nothing unvalidated is ever spliced.
fn render(template: &str, name: Name<'_>) -> Result<String> {
    let (key, value) = match name {
        Name::Schema(s) => ("schema", s),
        Name::Database(d) => ("database", d),
    };
    match name {
        Name::Schema(s) => validate::schema_name(s)?,
        Name::Database(d) => validate::identifier("database name", d, crate::config::MAX_DATABASE_NAME_LEN)?,
    }
    Ok(template.replace(&format!("{{{key}}}"), &format!("[{value}]")).replace(&format!("{{{key}_text}}"), value))
}

/// Every statement of the backend, rendered once for one schema.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) migrate_schema: String,
    pub(crate) migrate_locks: String,
    pub(crate) migrate_objects: String,
    pub(crate) migrate_keys: String,
    pub(crate) migrate_start_ordinals: String,
    pub(crate) migrate_lock_escalation: String,
    pub(crate) enqueue: String,
    pub(crate) claim: String,
    pub(crate) complete_and_claim: String,
    pub(crate) start: String,
    pub(crate) heartbeat: String,
    pub(crate) complete: String,
    pub(crate) fail: String,
    pub(crate) release: String,
    pub(crate) dead_letter_undecodable: String,
    pub(crate) rescue: String,
    pub(crate) cancel: String,
    pub(crate) control_queue: String,
    pub(crate) queue_settings: String,
    pub(crate) requeue_dead: String,
    pub(crate) purge_archive: String,
    pub(crate) purge_dlq: String,
    pub(crate) stats: String,
    pub(crate) get_job: String,
    pub(crate) list_hot: String,
    pub(crate) list_archive: String,
    pub(crate) list_dlq: String,
    pub(crate) db_now: String,
    pub(crate) add_starts: String,
    pub(crate) force: String,
    pub(crate) presence_many: String,
    pub(crate) kill_connections: String,
    pub(crate) drop_schema: String,
    pub(crate) migrate_workers: String,
    pub(crate) register_worker: String,
    pub(crate) deregister_worker: String,
    pub(crate) list_workers: String,
    pub(crate) prune_workers: String,
    pub(crate) throughput_all: String,
    pub(crate) throughput_queue: String,
    pub(crate) force_worker_seen: String,
    pub(crate) force_finished_at: String,
    pub(crate) schedule_register: String,
    pub(crate) schedule_get: String,
    pub(crate) schedule_list: String,
    pub(crate) schedule_set_enabled: String,
    pub(crate) schedule_mark_stale: String,
    pub(crate) enqueue_tick: String,
    pub(crate) migrate_uniques: String,
    pub(crate) enqueue_unique: String,
    pub(crate) unique_of: String,
    pub(crate) prune_uniques: String,
    pub(crate) migrate_outputs: String,
    pub(crate) record_output: String,
    pub(crate) get_output: String,
}

impl Statements {
    /// The statements for `schema`; an invalid schema name is `InvalidInput`.
    pub(crate) fn new(schema: &str) -> Result<Self> {
        let r = |template: &str| render(template, Name::Schema(schema));
        Ok(Statements {
            migrate_schema: r(migrate::MIGRATE_SCHEMA)?,
            migrate_locks: r(migrate::MIGRATE_LOCKS)?,
            migrate_objects: r(migrate::MIGRATE_OBJECTS)?,
            migrate_keys: r(migrate::MIGRATE_KEYS)?,
            migrate_start_ordinals: r(migrate::MIGRATE_START_ORDINALS)?,
            migrate_lock_escalation: r(migrate::MIGRATE_LOCK_ESCALATION)?,
            enqueue: r(enqueue::ENQUEUE)?,
            claim: r(&claim::claim())?,
            complete_and_claim: r(&claim::complete_and_claim())?,
            start: r(lease::START)?,
            heartbeat: r(lease::HEARTBEAT)?,
            complete: r(lease::COMPLETE)?,
            fail: r(lease::FAIL)?,
            release: r(lease::RELEASE)?,
            dead_letter_undecodable: r(lease::DEAD_LETTER_UNDECODABLE)?,
            rescue: r(admin::RESCUE)?,
            cancel: r(admin::CANCEL)?,
            control_queue: r(admin::CONTROL_QUEUE)?,
            queue_settings: r(admin::QUEUE_SETTINGS)?,
            requeue_dead: r(admin::REQUEUE_DEAD)?,
            purge_archive: r(admin::PURGE_ARCHIVE)?,
            purge_dlq: r(admin::PURGE_DLQ)?,
            stats: r(inspect::STATS)?,
            get_job: r(inspect::GET_JOB)?,
            list_hot: r(list::LIST_HOT)?,
            list_archive: r(list::LIST_ARCHIVE)?,
            list_dlq: r(list::LIST_DLQ)?,
            db_now: r(testing::DB_NOW)?,
            add_starts: r(testing::ADD_STARTS)?,
            force: r(testing::FORCE)?,
            presence_many: r(testing::PRESENCE_MANY)?,
            kill_connections: r(testing::KILL_CONNECTIONS)?,
            drop_schema: r(testing::DROP_SCHEMA)?,
            migrate_workers: r(workers::MIGRATE_WORKERS)?,
            register_worker: r(workers::REGISTER_WORKER)?,
            deregister_worker: r(workers::DEREGISTER_WORKER)?,
            list_workers: r(workers::LIST_WORKERS)?,
            prune_workers: r(workers::PRUNE_WORKERS)?,
            throughput_all: r(workers::THROUGHPUT_ALL)?,
            throughput_queue: r(workers::THROUGHPUT_QUEUE)?,
            force_worker_seen: r(workers::FORCE_WORKER_SEEN)?,
            force_finished_at: r(workers::FORCE_FINISHED_AT)?,
            schedule_register: r(periodic::SCHEDULE_REGISTER)?,
            schedule_get: r(periodic::SCHEDULE_GET)?,
            schedule_list: r(periodic::SCHEDULE_LIST)?,
            schedule_set_enabled: r(periodic::SCHEDULE_SET_ENABLED)?,
            schedule_mark_stale: r(periodic::SCHEDULE_MARK_STALE)?,
            enqueue_tick: r(&periodic::enqueue_tick())?,
            migrate_uniques: r(unique::MIGRATE_UNIQUES)?,
            enqueue_unique: r(&unique::enqueue_unique())?,
            unique_of: r(unique::UNIQUE_OF)?,
            prune_uniques: r(unique::UNIQUE_PRUNE)?,
            migrate_outputs: r(output::MIGRATE_OUTPUTS)?,
            record_output: r(output::RECORD_OUTPUT)?,
            get_output: r(output::GET_OUTPUT)?,
        })
    }

    /// `(name, sql)` for every statement, the session setup and the health check included.
    fn all(&self) -> Result<Vec<(&'static str, String)>> {
        Ok(vec![
            ("session_setup", SESSION_SETUP.to_string()),
            ("ping", PING.to_string()),
            ("migrate_schema", self.migrate_schema.clone()),
            ("migrate_locks", self.migrate_locks.clone()),
            ("migrate_objects", self.migrate_objects.clone()),
            ("migrate_keys", self.migrate_keys.clone()),
            ("migrate_start_ordinals", self.migrate_start_ordinals.clone()),
            ("migrate_lock_escalation", self.migrate_lock_escalation.clone()),
            ("enqueue", self.enqueue.clone()),
            ("claim", self.claim.clone()),
            ("complete_and_claim", self.complete_and_claim.clone()),
            ("start", self.start.clone()),
            ("heartbeat", self.heartbeat.clone()),
            ("complete", self.complete.clone()),
            ("fail", self.fail.clone()),
            ("release", self.release.clone()),
            ("dead_letter_undecodable", self.dead_letter_undecodable.clone()),
            ("rescue", self.rescue.clone()),
            ("cancel", self.cancel.clone()),
            ("control_queue", self.control_queue.clone()),
            ("queue_settings", self.queue_settings.clone()),
            ("requeue_dead", self.requeue_dead.clone()),
            ("purge_archive", self.purge_archive.clone()),
            ("purge_dlq", self.purge_dlq.clone()),
            ("stats", self.stats.clone()),
            ("get_job", self.get_job.clone()),
            ("list_hot", self.list_hot.clone()),
            ("list_archive", self.list_archive.clone()),
            ("list_dlq", self.list_dlq.clone()),
            ("db_now", self.db_now.clone()),
            ("add_starts", self.add_starts.clone()),
            ("force", self.force.clone()),
            ("presence_many", self.presence_many.clone()),
            ("kill_connections", self.kill_connections.clone()),
            ("drop_schema", self.drop_schema.clone()),
            ("migrate_workers", self.migrate_workers.clone()),
            ("register_worker", self.register_worker.clone()),
            ("deregister_worker", self.deregister_worker.clone()),
            ("list_workers", self.list_workers.clone()),
            ("prune_workers", self.prune_workers.clone()),
            ("throughput_all", self.throughput_all.clone()),
            ("throughput_queue", self.throughput_queue.clone()),
            ("force_worker_seen", self.force_worker_seen.clone()),
            ("force_finished_at", self.force_finished_at.clone()),
            ("schedule_register", self.schedule_register.clone()),
            ("schedule_get", self.schedule_get.clone()),
            ("schedule_list", self.schedule_list.clone()),
            ("schedule_set_enabled", self.schedule_set_enabled.clone()),
            ("schedule_mark_stale", self.schedule_mark_stale.clone()),
            ("enqueue_tick", self.enqueue_tick.clone()),
            ("migrate_uniques", self.migrate_uniques.clone()),
            ("enqueue_unique", self.enqueue_unique.clone()),
            ("unique_of", self.unique_of.clone()),
            ("prune_uniques", self.prune_uniques.clone()),
            ("migrate_outputs", self.migrate_outputs.clone()),
            ("record_output", self.record_output.clone()),
            ("get_output", self.get_output.clone()),
            ("ensure_test_database", ensure_test_database("chokaq_conformance_rcsi_on")?),
        ])
    }
}

/// The conformance harness's database setup for database `db` (see
/// [`crate::MssqlBackend::ensure_database`]); an invalid name is `InvalidInput`.
pub(crate) fn ensure_test_database(db: &str) -> Result<String> {
    render(testing::ENSURE_TEST_DATABASE, Name::Database(db))
}

/// Every statement the backend can send, as `(name, sql)`, rendered for `schema`: the
/// migration batches, every operation, the test support and the session setup. The
/// sqlfluff grammar check (`tests/grammar.rs`) parses each one.
///
/// An invalid schema name is an [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind) error
/// (nothing unvalidated is ever spliced).
///
/// ```
/// let all = chokaq_mssql::all_statements("chokaq")?;
/// assert!(all.iter().any(|(name, sql)| *name == "claim" && sql.contains("[chokaq].[JobsHot]")));
/// assert!(chokaq_mssql::all_statements("bad]name").is_err());
/// # Ok::<(), chokaq_core::Error>(())
/// ```
pub fn all_statements(schema: &str) -> Result<Vec<(&'static str, String)>> {
    Statements::new(schema)?.all()
}

#[cfg(test)]
mod tests;
