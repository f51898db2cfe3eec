//! The SQLite schema and the SQL text shared by several operations.
//!
//! SQLite has no schemas: the "schema" is the database file. Timestamps are INTEGER
//! microseconds since the Unix epoch (they sort and compare as numbers); ids and worker ids
//! are 16-byte BLOBs (UUID v7 bytes sort by creation time); payload and tags are JSON text.

use std::sync::LazyLock;

/// The version [`MIGRATIONS`] brings a database to.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// Columns shared by the hot, archive and dead-letter tables, in one fixed order.
pub(crate) const COLS: &str = "id, queue, kind, payload, tags, idempotency_key, priority, status, attempt, \
     max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, started_at, updated_at, last_error, \
     cancel_requested, created_by";

const JOB_COLUMNS: &str = "
    id BLOB NOT NULL PRIMARY KEY,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    idempotency_key TEXT,
    priority INTEGER NOT NULL DEFAULT 0,
    status INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    lease INTEGER,
    worker_id BLOB,
    heartbeat_at INTEGER,
    scheduled_at INTEGER,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    updated_at INTEGER NOT NULL,
    last_error TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_by TEXT";

/// The DDL, idempotent (`IF NOT EXISTS`), run inside one `BEGIN IMMEDIATE` transaction.
pub(crate) static MIGRATIONS: LazyLock<Vec<String>> = LazyLock::new(|| {
    vec![
        format!("CREATE TABLE IF NOT EXISTS jobs_hot ({JOB_COLUMNS})"),
        // The claim: per queue, Pending, by priority then due time then id.
        "CREATE INDEX IF NOT EXISTS jobs_hot_claim ON jobs_hot \
         (queue, status, priority DESC, coalesce(scheduled_at, created_at), id)"
            .to_string(),
        // Rescue scans Fetched/Processing jobs by age.
        "CREATE INDEX IF NOT EXISTS jobs_hot_status ON jobs_hot (status, updated_at)".to_string(),
        // At most one live job per idempotency key.
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_hot_idem ON jobs_hot (idempotency_key) \
         WHERE idempotency_key IS NOT NULL"
            .to_string(),
        format!("CREATE TABLE IF NOT EXISTS jobs_archive ({JOB_COLUMNS}, finished_at INTEGER NOT NULL)"),
        "CREATE INDEX IF NOT EXISTS jobs_archive_finished ON jobs_archive (finished_at)".to_string(),
        "CREATE INDEX IF NOT EXISTS jobs_archive_queue ON jobs_archive (queue)".to_string(),
        format!(
            "CREATE TABLE IF NOT EXISTS jobs_dlq ({JOB_COLUMNS}, finished_at INTEGER NOT NULL, reason TEXT NOT NULL)"
        ),
        "CREATE INDEX IF NOT EXISTS jobs_dlq_finished ON jobs_dlq (finished_at)".to_string(),
        "CREATE INDEX IF NOT EXISTS jobs_dlq_queue ON jobs_dlq (queue)".to_string(),
        "CREATE TABLE IF NOT EXISTS queues (
            name TEXT NOT NULL PRIMARY KEY,
            max_workers INTEGER,
            is_paused INTEGER NOT NULL DEFAULT 0,
            is_active INTEGER NOT NULL DEFAULT 1,
            zombie_timeout_us INTEGER,
            zombie_policy TEXT NOT NULL DEFAULT 'retry',
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )"
        .to_string(),
        // The lease counter lives here: incremented inside every claim transaction.
        "CREATE TABLE IF NOT EXISTS counters (name TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL)".to_string(),
        "INSERT INTO counters (name, value) VALUES ('lease', 0) ON CONFLICT (name) DO NOTHING".to_string(),
        "CREATE TABLE IF NOT EXISTS versions (version INTEGER NOT NULL PRIMARY KEY, applied_at INTEGER NOT NULL)"
            .to_string(),
    ]
});

/// Every table this backend creates, dropped by `drop_schema`.
pub(crate) const TABLES: &[&str] = &["jobs_hot", "jobs_archive", "jobs_dlq", "queues", "counters", "versions"];

/// `COLS` with `updated_at` replaced by the bound parameter `?1` (the move time), for
/// `INSERT ... SELECT` moves out of the hot table.
fn moved_cols() -> String {
    COLS.replace("updated_at", "?1")
}

/// Hot → archive for one held Processing lease: `?1` now, `?2` id, `?3` lease, `?4` worker.
pub(crate) static ARCHIVE_HELD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO jobs_archive ({COLS}, finished_at) SELECT {}, ?1 FROM jobs_hot \
         WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 2",
        moved_cols()
    )
});

/// Hot → dead-letter for one id: `?1` now, `?2` id, `?3` reason, `?4` error (NULL keeps
/// `last_error`).
pub(crate) static DEAD_LETTER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO jobs_dlq ({COLS}, finished_at, reason) SELECT {}, ?1, ?3 FROM jobs_hot WHERE id = ?2",
        moved_cols().replace("last_error", "coalesce(?4, last_error)")
    )
});

/// Dead-letter → hot, Pending with attempt 0: `?1` now, `?2` id.
pub(crate) static REQUEUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO jobs_hot ({COLS}) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 0, 0, \
         max_attempts, lease, NULL, NULL, NULL, created_at, NULL, ?1, last_error, 0, created_by \
         FROM jobs_dlq WHERE id = ?2"
    )
});

/// The columns of a job read from any table, with `finished_at` and `reason` (NULL for hot).
pub(crate) fn select_record(table: &str) -> String {
    match table {
        "jobs_hot" => format!("SELECT {COLS}, NULL AS finished_at, NULL AS reason FROM jobs_hot"),
        "jobs_archive" => format!("SELECT {COLS}, finished_at, NULL AS reason FROM jobs_archive"),
        _ => format!("SELECT {COLS}, finished_at, reason FROM jobs_dlq"),
    }
}
