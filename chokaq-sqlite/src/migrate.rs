//! The schema (idempotent DDL, appended to per version) and the migration routine.
//!
//! SQLite has no schemas inside a file: the "schema" is the database file, named `"main"` in
//! the rendered statements. Timestamps are INTEGER microseconds since the Unix epoch (they
//! sort and compare as numbers); ids and worker ids are 16-byte BLOBs (UUID v7 bytes sort by
//! creation time); payload and tags are JSON text.

use chokaq_core::{Error, ErrorKind, Result};
use sqlx::sqlite::SqliteConnection;

use crate::error::map_err;
use crate::rows::now_us;
use crate::sql::Statements;

/// The version [`MIGRATIONS`] brings a database to.
pub(crate) const SCHEMA_VERSION: i64 = 11;

/// The columns shared by the hot, archive and dead-letter tables.
macro_rules! job_columns {
    () => {
        "id BLOB NOT NULL PRIMARY KEY, \
         queue TEXT NOT NULL, \
         kind TEXT NOT NULL, \
         payload TEXT NOT NULL, \
         tags TEXT NOT NULL DEFAULT '[]', \
         idempotency_key TEXT, \
         priority INTEGER NOT NULL DEFAULT 0, \
         status INTEGER NOT NULL DEFAULT 0, \
         attempt INTEGER NOT NULL DEFAULT 0, \
         max_attempts INTEGER NOT NULL, \
         lease INTEGER, \
         worker_id BLOB, \
         heartbeat_at INTEGER, \
         scheduled_at INTEGER, \
         created_at INTEGER NOT NULL, \
         started_at INTEGER, \
         updated_at INTEGER NOT NULL, \
         last_error TEXT, \
         cancel_requested INTEGER NOT NULL DEFAULT 0, \
         created_by TEXT"
    };
}

/// The DDL of the schema, in order, as named templates (`{schema}` is rendered by
/// [`crate::sql`]). Idempotent (`IF NOT EXISTS`, `ON CONFLICT DO NOTHING`) and run inside one
/// `BEGIN IMMEDIATE` transaction. An index is created in the schema of its name and always
/// on a table of that same schema, so SQLite wants the table name of `ON` unqualified.
pub(crate) const MIGRATIONS: &[(&str, &str)] = &[
    ("migrate_jobs_hot", concat!("CREATE TABLE IF NOT EXISTS {schema}.jobs_hot (", job_columns!(), ")")),
    // The claim: per queue, Pending, by priority then due time then id.
    (
        "migrate_jobs_hot_claim",
        "CREATE INDEX IF NOT EXISTS {schema}.jobs_hot_claim ON jobs_hot \
         (queue, status, priority DESC, coalesce(scheduled_at, created_at), id)",
    ),
    // Rescue scans Fetched/Processing jobs by age.
    ("migrate_jobs_hot_status", "CREATE INDEX IF NOT EXISTS {schema}.jobs_hot_status ON jobs_hot (status, updated_at)"),
    // At most one live job per idempotency key in a queue (keys are scoped per queue; version
    // 1 had one index over the key alone, dropped below).
    (
        "migrate_jobs_hot_idem",
        "CREATE UNIQUE INDEX IF NOT EXISTS {schema}.jobs_hot_idem_queue ON jobs_hot (queue, idempotency_key) \
         WHERE idempotency_key IS NOT NULL",
    ),
    (
        "migrate_jobs_archive",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.jobs_archive (",
            job_columns!(),
            ", finished_at INTEGER NOT NULL)"
        ),
    ),
    (
        "migrate_jobs_archive_finished",
        "CREATE INDEX IF NOT EXISTS {schema}.jobs_archive_finished ON jobs_archive (finished_at)",
    ),
    (
        "migrate_jobs_dlq",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.jobs_dlq (",
            job_columns!(),
            ", finished_at INTEGER NOT NULL, reason TEXT NOT NULL)"
        ),
    ),
    ("migrate_jobs_dlq_finished", "CREATE INDEX IF NOT EXISTS {schema}.jobs_dlq_finished ON jobs_dlq (finished_at)"),
    (
        "migrate_queues",
        "CREATE TABLE IF NOT EXISTS {schema}.queues (\
         name TEXT NOT NULL PRIMARY KEY, \
         max_workers INTEGER, \
         is_paused INTEGER NOT NULL DEFAULT 0, \
         is_active INTEGER NOT NULL DEFAULT 1, \
         zombie_timeout_us INTEGER, \
         zombie_policy TEXT NOT NULL DEFAULT 'retry', \
         created_at INTEGER NOT NULL, \
         updated_at INTEGER NOT NULL)",
    ),
    // The lease counter lives here: incremented inside every claim transaction.
    (
        "migrate_counters",
        "CREATE TABLE IF NOT EXISTS {schema}.counters (name TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL)",
    ),
    (
        "migrate_lease_counter",
        "INSERT INTO {schema}.counters (name, value) VALUES ('lease', 0) ON CONFLICT (name) DO NOTHING",
    ),
    (
        "migrate_versions",
        "CREATE TABLE IF NOT EXISTS {schema}.versions (version INTEGER NOT NULL PRIMARY KEY, \
         applied_at INTEGER NOT NULL)",
    ),
    // Version 2: version 1's key index over the whole file (keys now scoped per queue).
    ("migrate_drop_global_idem", "DROP INDEX IF EXISTS {schema}.jobs_hot_idem"),
    // Version 3: periodic jobs (docs/periodic.md). Ticks are whole seconds, stored as
    // microseconds like every other time; `last_enqueued_tick` only ever grows.
    (
        "migrate_schedules",
        "CREATE TABLE IF NOT EXISTS {schema}.schedules (\
         name TEXT NOT NULL PRIMARY KEY, \
         spec TEXT NOT NULL, \
         time_zone TEXT NOT NULL, \
         group_name TEXT NOT NULL, \
         next_tick INTEGER, \
         last_enqueued_tick INTEGER, \
         enabled INTEGER NOT NULL DEFAULT 1, \
         stale INTEGER NOT NULL DEFAULT 0, \
         created_at INTEGER NOT NULL, \
         updated_at INTEGER NOT NULL)",
    ),
    // Version 4: live worker processes, one row each, upserted with every heartbeat (queues
    // as a JSON array of names), and the index throughput reads (a covering range: finish
    // time, then the queue, so no row of the table is visited).
    (
        "migrate_workers",
        "CREATE TABLE IF NOT EXISTS {schema}.workers (\
         worker_id BLOB NOT NULL PRIMARY KEY, \
         host TEXT NOT NULL, \
         pid INTEGER NOT NULL, \
         queues TEXT NOT NULL, \
         concurrency INTEGER NOT NULL, \
         started_at INTEGER NOT NULL, \
         last_seen_at INTEGER NOT NULL)",
    ),
    (
        "migrate_jobs_archive_finished_queue",
        "CREATE INDEX IF NOT EXISTS {schema}.jobs_archive_finished_queue ON jobs_archive (finished_at, queue)",
    ),
    // Version 5: a per-queue fetched timeout (the rescue's timeouts come from the database).
    // SQLite's ADD COLUMN has no IF NOT EXISTS: `run` takes "duplicate column name" from a
    // `migrate_add_column_` statement as "already there".
    ("migrate_add_column_fetched_timeout", "ALTER TABLE {schema}.queues ADD COLUMN fetched_timeout_us INTEGER"),
    // Version 6: Scheduled (status 3) is Pending whose due time was ahead when the row was
    // written (a run-at in the future, a retry's back-off, a snooze). It sits outside the claim's
    // range of `jobs_hot_claim` (status 0), so jobs waiting for tomorrow cost the claim nothing;
    // the claim promotes the due ones through this index's range on the due time. The update
    // moves the rows an older version wrote (idempotent: it finds none the second time).
    (
        "migrate_jobs_hot_scheduled",
        "CREATE INDEX IF NOT EXISTS {schema}.jobs_hot_scheduled ON jobs_hot \
         (queue, coalesce(scheduled_at, created_at)) WHERE status = 3",
    ),
    (
        "migrate_scheduled_rows",
        "UPDATE {schema}.jobs_hot SET status = 3 WHERE status = 0 \
         AND scheduled_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
    ),
    // Version 7: how often a held Fetched job (`ClaimMode::Hold`: Fetched with a heartbeat)
    // expired, its worker gone before its start was recorded; every claim returns it
    // (`ClaimedJob::expired_holds`), no count dead-letters the job; a requeue starts it again
    // at 0. Only the hot table has it: the moves
    // copy the shared columns, so it never reaches the archive or the dead letters.
    (
        "migrate_add_column_expired_holds",
        "ALTER TABLE {schema}.jobs_hot ADD COLUMN expired_holds INTEGER NOT NULL DEFAULT 0",
    ),
    // Version 8: `list_jobs` by queue or kind in id order (issue 28) reads a range of
    // (queue, id) / (kind, id) instead of sorting every row of the queue (the `(queue)` index
    // of versions 1 to 7 holds the rowid, not the id) or walking the whole table for a kind.
    // (queue, id) serves every search the `(queue)` index served, which is dropped.
    (
        "migrate_jobs_archive_queue_id",
        "CREATE INDEX IF NOT EXISTS {schema}.jobs_archive_queue_id ON jobs_archive (queue, id)",
    ),
    ("migrate_jobs_archive_kind", "CREATE INDEX IF NOT EXISTS {schema}.jobs_archive_kind ON jobs_archive (kind, id)"),
    ("migrate_jobs_dlq_queue_id", "CREATE INDEX IF NOT EXISTS {schema}.jobs_dlq_queue_id ON jobs_dlq (queue, id)"),
    ("migrate_jobs_dlq_kind", "CREATE INDEX IF NOT EXISTS {schema}.jobs_dlq_kind ON jobs_dlq (kind, id)"),
    ("migrate_drop_archive_queue", "DROP INDEX IF EXISTS {schema}.jobs_archive_queue"),
    ("migrate_drop_dlq_queue", "DROP INDEX IF EXISTS {schema}.jobs_dlq_queue"),
    // Version 9: concurrency keys and rate limits (issue 25, docs/contract.md "Keys and rate
    // limits"). The key is a column of the three job tables (the moves copy it with the rest of
    // `cols!()`); the queue's control row holds the per-key cap and the rate limit (`rate_jobs`
    // and `rate_per_ms` both NULL: no limit).
    ("migrate_add_column_hot_key", "ALTER TABLE {schema}.jobs_hot ADD COLUMN concurrency_key TEXT"),
    ("migrate_add_column_archive_key", "ALTER TABLE {schema}.jobs_archive ADD COLUMN concurrency_key TEXT"),
    ("migrate_add_column_dlq_key", "ALTER TABLE {schema}.jobs_dlq ADD COLUMN concurrency_key TEXT"),
    ("migrate_add_column_key_max_workers", "ALTER TABLE {schema}.queues ADD COLUMN key_max_workers INTEGER"),
    ("migrate_add_column_rate_jobs", "ALTER TABLE {schema}.queues ADD COLUMN rate_jobs INTEGER"),
    ("migrate_add_column_rate_per_ms", "ALTER TABLE {schema}.queues ADD COLUMN rate_per_ms INTEGER"),
    ("migrate_add_column_rate_by_key", "ALTER TABLE {schema}.queues ADD COLUMN rate_by_key INTEGER NOT NULL DEFAULT 0"),
    // The per-key running count of the claim (and the stats' busiest keys): only Fetched and
    // Processing rows with a key are in it, so its size is the keyed jobs running, whatever the
    // backlog.
    (
        "migrate_jobs_hot_key_running",
        "CREATE INDEX IF NOT EXISTS {schema}.jobs_hot_key_running ON jobs_hot (queue, concurrency_key) \
         WHERE concurrency_key IS NOT NULL AND status IN (1, 2)",
    ),
    // The starts log of rate-limited queues: one row per job a claim took, stamped with the
    // claim's time (µs; a Start claim's `started_at`). `ckey` is the job's key (NULL: none).
    // Counted by (queue, stamp) ranges, the key read from the index (covering).
    (
        "migrate_rate_starts",
        "CREATE TABLE IF NOT EXISTS {schema}.rate_starts (\
         queue TEXT NOT NULL, \
         ckey TEXT, \
         stamp INTEGER NOT NULL)",
    ),
    (
        "migrate_rate_starts_window",
        "CREATE INDEX IF NOT EXISTS {schema}.rate_starts_window ON rate_starts (queue, stamp, ckey)",
    ),
    // Version 10: the starts log numbered per bucket (issue 40, L7). `n` is an entry's ordinal
    // in its bucket under the queue's limit in force (the queue's queue-wide, its key's per key;
    // 0 for a key-less entry under a limit per key), so a window's count is the bucket's last
    // ordinal less its first one in the window, plus one: two searches of these indexes, not a
    // range counted row by row (`crate::claim`, "The count"). The entries an older version
    // logged are numbered once, by [`run`], when it upgrades a schema older than 10. The default
    // -1 is never a number: a start logged without its ordinal (by a process of an older
    // version on the same file) fails (`rate_starts_numbered`) instead of breaking the count.
    ("migrate_add_column_rate_starts_n", "ALTER TABLE {schema}.rate_starts ADD COLUMN n INTEGER NOT NULL DEFAULT -1"),
    (
        "migrate_rate_starts_numbered",
        "CREATE TRIGGER IF NOT EXISTS {schema}.rate_starts_numbered BEFORE INSERT ON rate_starts \
         WHEN NEW.n < 0 BEGIN SELECT RAISE(ABORT, 'chokaq: a start logged without its ordinal: \
         every process on this file must run a version that has schema version 10'); END",
    ),
    (
        "migrate_rate_starts_queue_n",
        "CREATE INDEX IF NOT EXISTS {schema}.rate_starts_queue_n ON rate_starts (queue, stamp, n)",
    ),
    (
        "migrate_rate_starts_key_n",
        "CREATE INDEX IF NOT EXISTS {schema}.rate_starts_key_n ON rate_starts (queue, ckey, stamp, n)",
    ),
    ("migrate_drop_rate_starts_window", "DROP INDEX IF EXISTS {schema}.rate_starts_window"),
    // Version 10: unique jobs (issue 42, docs/unique.md). One row per unique key (64 hex
    // digits of SHA-256, computed by the client): the job holding it, the states that count
    // (a bitmask), the settings as JSON, the end of the period bucket (µs). The primary key
    // holds one holder per key; the enqueue looks at the holder and takes the key over inside
    // its `BEGIN IMMEDIATE` transaction, so the single writer orders racing enqueuers. No claim
    // or move statement touches it.
    (
        "migrate_uniques",
        "CREATE TABLE IF NOT EXISTS {schema}.uniques (\
         unique_key TEXT NOT NULL PRIMARY KEY, \
         job_id BLOB NOT NULL, \
         states INTEGER NOT NULL, \
         settings TEXT NOT NULL, \
         expires_at INTEGER, \
         created_at INTEGER NOT NULL)",
    ),
    ("migrate_uniques_job", "CREATE INDEX IF NOT EXISTS {schema}.uniques_job ON uniques (job_id)"),
    // Version 11: job outputs (issue 41, docs/outputs.md): what a handler recorded, as JSON
    // text, on the job's row in each table. `record_output` writes the hot row under the
    // lease's guard; the three moves (`ARCHIVE_HELD`, `DEAD_LETTER`, `REQUEUE`) copy it. Not
    // in `cols!`: a claim or a listing never reads it.
    ("migrate_add_column_hot_output", "ALTER TABLE {schema}.jobs_hot ADD COLUMN output TEXT"),
    ("migrate_add_column_archive_output", "ALTER TABLE {schema}.jobs_archive ADD COLUMN output TEXT"),
    ("migrate_add_column_dlq_output", "ALTER TABLE {schema}.jobs_dlq ADD COLUMN output TEXT"),
];

/// Applies [`MIGRATIONS`] on `conn` (inside the caller's write transaction), refuses a
/// database whose schema is newer than this library, and records the version.
pub(crate) async fn run(conn: &mut SqliteConnection, sql: &Statements) -> Result<()> {
    for (name, ddl) in &sql.migrations {
        match sqlx::query(ddl).execute(&mut *conn).await {
            Ok(_) => {}
            Err(e) if name.starts_with("migrate_add_column_") && e.to_string().contains("duplicate column name") => {}
            Err(e) => return Err(map_err(e)),
        }
    }
    let newest: Option<i64> = sqlx::query_scalar(&sql.newest_version).fetch_one(&mut *conn).await.map_err(map_err)?;
    if newest.is_none_or(|v| v < 10) {
        // Version 10: the starts an older version logged get their ordinals (once).
        sqlx::query(&sql.rate_number_all).execute(&mut *conn).await.map_err(map_err)?;
    }
    if newest.is_some_and(|v| v > SCHEMA_VERSION) {
        return Err(Error::new(
            ErrorKind::Other,
            format!(
                "sqlite: the database schema is version {}, newer than this library's {}",
                newest.unwrap_or_default(),
                SCHEMA_VERSION
            ),
        ));
    }
    sqlx::query(&sql.record_version).bind(SCHEMA_VERSION).bind(now_us()).execute(&mut *conn).await.map_err(map_err)?;
    Ok(())
}
