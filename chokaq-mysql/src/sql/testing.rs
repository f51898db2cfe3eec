//! The statements of the testing room: `TestSupport` (feature `testing`) and the fault injection of the teeth tests (feature `fault-injection`).
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// (last seen, worker).
pub(super) const FORCE_WORKER_SEEN: &str = "UPDATE {schema}.workers SET last_seen_at = ? WHERE worker_id = ?";

/// (finish time, id) of an archived job.
pub(super) const FORCE_FINISHED_AT: &str = "UPDATE {schema}.jobs_archive SET finished_at = ? WHERE id = ?";

/// Forces fields of a hot job, bypassing every guard: (status or NULL, attempt or NULL,
/// set scheduled_at 0/1, scheduled_at, set heartbeat_at 0/1, heartbeat_at, updated_at or
/// NULL, created_at or NULL, payload or NULL, id).
pub(super) const FORCE: &str =
    "UPDATE {schema}.jobs_hot SET status = COALESCE(?, status), attempt = COALESCE(?, attempt), \
     scheduled_at = CASE WHEN ? = 1 THEN ? ELSE scheduled_at END, \
     heartbeat_at = CASE WHEN ? = 1 THEN ? ELSE heartbeat_at END, \
     updated_at = COALESCE(?, updated_at), created_at = COALESCE(?, created_at), \
     payload = COALESCE(?, payload) WHERE id = ?";

pub(super) const PRESENCE_HOT: &str = presence!("jobs_hot");

pub(super) const PRESENCE_ARCHIVE: &str = presence!("jobs_archive");

pub(super) const PRESENCE_DEAD: &str = presence!("jobs_dlq");

/// The isolation level of this session, as the server names it (MySQL 8 and MariaDB 11.1+).
pub(super) const ISOLATION_LEVEL: &str = "SELECT @@SESSION.transaction_isolation";

/// The same on MariaDB before 11.1.
pub(super) const ISOLATION_LEVEL_OLD: &str = "SELECT @@SESSION.tx_isolation";

/// (connection id).
pub(super) const KILL_CONNECTION: &str = "KILL CONNECTION ?";

pub(super) const DROP_SCHEMA: &str = "DROP DATABASE IF EXISTS {schema}";
