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

/// Test support (`TestSupport::add_starts`): the bucket's latest entry: (queue, key or NULL
/// for the queue's bucket, the same key).
pub(super) const ADD_STARTS_LAST: &str = "SELECT stamp, n FROM {schema}.starts \
     WHERE queue = ? AND (? IS NULL OR ckey = ?) ORDER BY stamp DESC, n DESC LIMIT 1";

/// Test support (`TestSupport::add_starts`): (queue, key, stamp, the last ordinal, count)
/// starts numbered after it, at most 1,000,000 (the rows of six tables of ten digits).
pub(super) const ADD_STARTS: &str = concat!(
    "INSERT INTO {schema}.starts (queue, ckey, stamp, n) \
     SELECT ?, ?, ?, ? + ROW_NUMBER() OVER (ORDER BY a.d, b.d, c.d, e.d, f.d, g.d) FROM ",
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS a, ",
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS b, ",
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS c, ",
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS e, ",
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS f, ",
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 \
     UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) AS g LIMIT ?"
);

/// Test support: this session's handler reads (rows and index entries the storage engine read).
pub(super) const HANDLER_READS: &str = "SHOW SESSION STATUS LIKE 'Handler_read%'";
