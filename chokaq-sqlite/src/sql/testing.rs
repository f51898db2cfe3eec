//! The statements of the testing room: `TestSupport` (feature `testing`) and the fault injection of the teeth tests (feature `fault-injection`).
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// `?1` worker, `?2` last seen.
pub(super) const FORCE_WORKER_SEEN: &str = "UPDATE {schema}.workers SET last_seen_at = ?2 WHERE worker_id = ?1";

/// `?1` id, `?2` finish time of an archived job.
pub(super) const FORCE_FINISHED_AT: &str = "UPDATE {schema}.jobs_archive SET finished_at = ?2 WHERE id = ?1";

/// Forces fields of a hot job, bypassing every guard: `?1` id, `?2` status, `?3` attempt,
/// `?4` whether to set `scheduled_at` to `?5`, `?6` whether to set `heartbeat_at` to
/// `?7`, `?8` updated at, `?9` created at (NULL = keep).
pub(super) const FORCE: &str =
    "UPDATE {schema}.jobs_hot SET status = coalesce(?2, status), attempt = coalesce(?3, attempt), \
     scheduled_at = CASE WHEN ?4 THEN ?5 ELSE scheduled_at END, \
     heartbeat_at = CASE WHEN ?6 THEN ?7 ELSE heartbeat_at END, \
     updated_at = coalesce(?8, updated_at), created_at = coalesce(?9, created_at), \
     payload = coalesce(?10, payload) WHERE id = ?1";

pub(super) const PRESENCE_HOT: &str = presence!("jobs_hot");

pub(super) const PRESENCE_ARCHIVE: &str = presence!("jobs_archive");

pub(super) const PRESENCE_DEAD: &str = presence!("jobs_dlq");

/// What is left in the database file after the drops.
pub(super) const COUNT_OBJECTS: &str = "SELECT count(*) FROM {schema}.sqlite_schema";

pub(super) const DROP_JOBS_HOT: &str = "DROP TABLE IF EXISTS {schema}.jobs_hot";

pub(super) const DROP_JOBS_ARCHIVE: &str = "DROP TABLE IF EXISTS {schema}.jobs_archive";

pub(super) const DROP_JOBS_DLQ: &str = "DROP TABLE IF EXISTS {schema}.jobs_dlq";

pub(super) const DROP_QUEUES: &str = "DROP TABLE IF EXISTS {schema}.queues";

pub(super) const DROP_COUNTERS: &str = "DROP TABLE IF EXISTS {schema}.counters";

pub(super) const DROP_VERSIONS: &str = "DROP TABLE IF EXISTS {schema}.versions";

pub(super) const DROP_WORKERS: &str = "DROP TABLE IF EXISTS {schema}.workers";

pub(super) const DROP_SCHEDULES: &str = "DROP TABLE IF EXISTS {schema}.schedules";

pub(super) const DROP_RATE_STARTS: &str = "DROP TABLE IF EXISTS {schema}.rate_starts";

pub(super) const DROP_UNIQUES: &str = "DROP TABLE IF EXISTS {schema}.uniques";

pub(super) const DROP_FAULT_KEY_SLOTS: &str = "DROP TABLE IF EXISTS {schema}.fault_key_slots";

/// The broken slot ledger (created on first use by a backend with the fault).
pub(super) const FAULT_LEDGER_CREATE: &str =
    "CREATE TABLE IF NOT EXISTS {schema}.fault_key_slots (queue TEXT NOT NULL, \
     ckey TEXT NOT NULL, used INTEGER NOT NULL, PRIMARY KEY (queue, ckey))";

/// The ledger's slots in use per key of a queue: `?1` queue.
pub(super) const FAULT_LEDGER_READ: &str = "SELECT ckey, used AS n FROM {schema}.fault_key_slots WHERE queue = ?1";

/// Adds `?3` (negative: frees) to the slots of key `?2` of queue `?1`.
pub(super) const FAULT_LEDGER_ADD: &str =
    "INSERT INTO {schema}.fault_key_slots (queue, ckey, used) VALUES (?1, ?2, ?3) \
     ON CONFLICT (queue, ckey) DO UPDATE SET used = used + excluded.used";

/// A job's queue and key, wherever it is: `?1` id.
pub(super) const FAULT_JOB_KEY: &str = "SELECT queue, concurrency_key AS ckey FROM {schema}.jobs_hot WHERE id = ?1 \
     UNION ALL SELECT queue, concurrency_key FROM {schema}.jobs_archive WHERE id = ?1 \
     UNION ALL SELECT queue, concurrency_key FROM {schema}.jobs_dlq WHERE id = ?1 LIMIT 1";

/// Test support (`TestSupport::add_starts`): the bucket's latest entry, `?1` queue, `?2` key
/// (NULL: the queue's bucket).
pub(super) const ADD_STARTS_LAST: &str = "SELECT stamp, n FROM {schema}.rate_starts \
     WHERE queue = ?1 AND (?2 IS NULL OR ckey = ?2) ORDER BY stamp DESC, n DESC LIMIT 1";

/// Test support (`TestSupport::add_starts`): `?3` starts of queue `?1`, key `?2`, stamped `?4`,
/// numbered after `?5`.
pub(super) const ADD_STARTS: &str = "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?3) \
     INSERT INTO {schema}.rate_starts (queue, ckey, stamp, n) SELECT ?1, ?2, ?4, ?5 + i FROM g";
