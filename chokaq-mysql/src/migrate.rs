//! The schema (idempotent DDL) and the migration routine.
//!
//! The job tables live in their own MySQL database (the "schema"), created here with
//! `utf8mb4` and the binary collation. Timestamps are BIGINT microseconds since the Unix epoch,
//! read from the database clock; ids and worker ids are BINARY(16) (UUID v7 bytes sort by
//! creation time). Text that is compared (queue, kind, idempotency key, reason, schedule names)
//! is VARBINARY: byte for byte, with no case folding and no trailing-space padding, the same on
//! MariaDB and MySQL 8 (whose binary collations differ in name and in padding). Payloads and
//! tags are JSON text, stored verbatim.

use chokaq_core::{Error, ErrorKind, Result};
use sqlx::MySqlConnection;

use crate::error::{map_err, mysql_code};
use crate::sql::Statements;

/// The version [`MIGRATIONS`] brings a database to.
pub(crate) const SCHEMA_VERSION: i64 = 4;

/// The columns shared by the hot, archive and dead-letter tables.
macro_rules! job_columns {
    () => {
        "id BINARY(16) NOT NULL, \
         queue VARBINARY(512) NOT NULL, \
         kind VARBINARY(1020) NOT NULL, \
         payload LONGTEXT NOT NULL, \
         tags TEXT NOT NULL, \
         idempotency_key VARBINARY(1020) NULL, \
         priority INT NOT NULL DEFAULT 0, \
         status TINYINT NOT NULL DEFAULT 0, \
         attempt INT NOT NULL DEFAULT 0, \
         max_attempts INT NOT NULL, \
         lease BIGINT NULL, \
         worker_id BINARY(16) NULL, \
         heartbeat_at BIGINT NULL, \
         scheduled_at BIGINT NULL, \
         created_at BIGINT NOT NULL, \
         started_at BIGINT NULL, \
         updated_at BIGINT NOT NULL, \
         last_error TEXT NULL, \
         cancel_requested TINYINT NOT NULL DEFAULT 0, \
         created_by VARBINARY(1020) NULL"
    };
}

/// Table options: InnoDB (row locks, `SKIP LOCKED`), utf8mb4 with its binary collation.
macro_rules! table_options {
    () => {
        " ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
    };
}

/// The DDL, in order, as named templates (`{schema}` is rendered by [`crate::sql`]).
/// Idempotent (`IF NOT EXISTS`); DDL commits implicitly in MySQL, so each runs on its own.
pub(crate) const MIGRATIONS: &[(&str, &str)] = &[
    ("migrate_schema", "CREATE DATABASE IF NOT EXISTS {schema} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
    // The hot table. `due_at` is the due time (`scheduled_at`, else `created_at`), a stored
    // generated column so the claim's index can order by it.
    //  - jobs_hot_claim: per queue, Pending (status 0), by priority then due time then id: the
    //    claim's `FOR UPDATE SKIP LOCKED` range;
    //  - jobs_hot_due: per queue and status by due time: the promotion of due Scheduled
    //    (status 3) rows and the "anything due?" probe;
    //  - jobs_hot_status / jobs_hot_beat: the rescue's scans by age;
    //  - jobs_hot_idem: one live job per idempotency key in a queue (NULL keys never collide);
    //  - jobs_hot_lease: the claim reads back the rows it took by their leases.
    (
        "migrate_jobs_hot",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.jobs_hot (",
            job_columns!(),
            ", expired_holds INT NOT NULL DEFAULT 0, \
             due_at BIGINT AS (COALESCE(scheduled_at, created_at)) STORED, \
             PRIMARY KEY (id), \
             KEY jobs_hot_claim (queue, status, priority DESC, due_at, id), \
             KEY jobs_hot_due (queue, status, due_at), \
             KEY jobs_hot_status (status, updated_at), \
             KEY jobs_hot_beat (status, heartbeat_at), \
             UNIQUE KEY jobs_hot_idem (queue, idempotency_key), \
             KEY jobs_hot_lease (lease), \
             KEY jobs_hot_kind (kind, id), \
             KEY jobs_hot_created (created_at, id))",
            table_options!()
        ),
    ),
    (
        "migrate_jobs_archive",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.jobs_archive (",
            job_columns!(),
            ", finished_at BIGINT NOT NULL, \
             PRIMARY KEY (id), \
             KEY jobs_archive_finished_queue (finished_at, queue), \
             KEY jobs_archive_queue (queue, id), \
             KEY jobs_archive_kind (kind, id), \
             KEY jobs_archive_created (created_at, id))",
            table_options!()
        ),
    ),
    (
        "migrate_jobs_dlq",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.jobs_dlq (",
            job_columns!(),
            ", finished_at BIGINT NOT NULL, reason VARBINARY(64) NOT NULL, \
             PRIMARY KEY (id), \
             KEY jobs_dlq_finished (finished_at), \
             KEY jobs_dlq_queue (queue, id), \
             KEY jobs_dlq_kind (kind, id), \
             KEY jobs_dlq_created (created_at, id))",
            table_options!()
        ),
    ),
    (
        "migrate_queues",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.queues (\
             name VARBINARY(512) NOT NULL, \
             max_workers BIGINT NULL, \
             is_paused TINYINT NOT NULL DEFAULT 0, \
             is_active TINYINT NOT NULL DEFAULT 1, \
             zombie_timeout_us BIGINT NULL, \
             zombie_policy VARBINARY(32) NOT NULL DEFAULT 'retry', \
             fetched_timeout_us BIGINT NULL, \
             created_at BIGINT NOT NULL, \
             updated_at BIGINT NOT NULL, \
             PRIMARY KEY (name))",
            table_options!()
        ),
    ),
    // The lease counter: a row that only grows (never rebuilt from a table at startup).
    (
        "migrate_counters",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.counters (name VARBINARY(32) NOT NULL, value BIGINT NOT NULL, \
             PRIMARY KEY (name))",
            table_options!()
        ),
    ),
    (
        "migrate_lease_counter",
        "INSERT INTO {schema}.counters (name, value) VALUES ('lease', 0) ON DUPLICATE KEY UPDATE value = value",
    ),
    // Maintenance locks: the `rescue` row is locked `FOR UPDATE SKIP LOCKED` by the one rescue
    // that runs at a time.
    (
        "migrate_locks",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.locks (name VARBINARY(32) NOT NULL, PRIMARY KEY (name))",
            table_options!()
        ),
    ),
    ("migrate_rescue_lock", "INSERT INTO {schema}.locks (name) VALUES ('rescue') ON DUPLICATE KEY UPDATE name = name"),
    (
        "migrate_versions",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.versions (version BIGINT NOT NULL, applied_at BIGINT NOT NULL, \
             PRIMARY KEY (version))",
            table_options!()
        ),
    ),
    // Periodic jobs (docs/periodic.md): ticks are whole seconds stored as microseconds.
    (
        "migrate_schedules",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.schedules (\
             name VARBINARY(800) NOT NULL, \
             spec VARBINARY(800) NOT NULL, \
             time_zone VARBINARY(256) NOT NULL, \
             group_name VARBINARY(400) NOT NULL, \
             next_tick BIGINT NULL, \
             last_enqueued_tick BIGINT NULL, \
             enabled TINYINT NOT NULL DEFAULT 1, \
             stale TINYINT NOT NULL DEFAULT 0, \
             created_at BIGINT NOT NULL, \
             updated_at BIGINT NOT NULL, \
             PRIMARY KEY (name))",
            table_options!()
        ),
    ),
    // Live worker processes, one row each (queues as a JSON array of names).
    (
        "migrate_workers",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.workers (\
             worker_id BINARY(16) NOT NULL, \
             host VARBINARY(1020) NOT NULL, \
             pid BIGINT NOT NULL, \
             queues TEXT NOT NULL, \
             concurrency BIGINT NOT NULL, \
             started_at BIGINT NOT NULL, \
             last_seen_at BIGINT NOT NULL, \
             PRIMARY KEY (worker_id))",
            table_options!()
        ),
    ),
    // Version 2 (issue 25): concurrency keys, per-key caps and rate limits. Added with
    // `ALTER TABLE` (a database of version 1 has the tables already; MySQL 8 has no
    // `ADD COLUMN IF NOT EXISTS`): `run` takes "duplicate column" (1060) and "duplicate key
    // name" (1061) from a `migrate_add_*` step as done already. Each `ALTER` is atomic.
    //  - `concurrency_key` on the three job tables, copied by every move;
    //  - `running_key`, a stored generated column: the key of a Fetched / Processing (1, 2)
    //    job, else NULL; jobs_hot_key_running (queue, running_key): the claim's per-key
    //    running counts and the stats' busiest keys read only its non-NULL range. A job
    //    without a key never changes its entry after the insert (InnoDB rewrites a secondary
    //    entry only when its columns change), so queues without keys pay no index write per
    //    claim or start for it; a keyed job changes it when it starts and stops running;
    //  - the queue control row's key cap and rate limit (`rate_by_key` 0/1).
    ("migrate_add_hot_concurrency_key", "ALTER TABLE {schema}.jobs_hot ADD COLUMN concurrency_key VARBINARY(255) NULL"),
    (
        "migrate_add_archive_concurrency_key",
        "ALTER TABLE {schema}.jobs_archive ADD COLUMN concurrency_key VARBINARY(255) NULL",
    ),
    ("migrate_add_dlq_concurrency_key", "ALTER TABLE {schema}.jobs_dlq ADD COLUMN concurrency_key VARBINARY(255) NULL"),
    (
        "migrate_add_hot_running_key",
        "ALTER TABLE {schema}.jobs_hot ADD COLUMN running_key VARBINARY(255) \
         AS (CASE WHEN status IN (1, 2) THEN concurrency_key END) STORED",
    ),
    (
        "migrate_add_hot_key_running",
        "ALTER TABLE {schema}.jobs_hot ADD INDEX jobs_hot_key_running (queue, running_key)",
    ),
    ("migrate_add_queues_key_max_workers", "ALTER TABLE {schema}.queues ADD COLUMN key_max_workers BIGINT NULL"),
    ("migrate_add_queues_rate_jobs", "ALTER TABLE {schema}.queues ADD COLUMN rate_jobs BIGINT NULL"),
    ("migrate_add_queues_rate_per_ms", "ALTER TABLE {schema}.queues ADD COLUMN rate_per_ms BIGINT NULL"),
    ("migrate_add_queues_rate_by_key", "ALTER TABLE {schema}.queues ADD COLUMN rate_by_key TINYINT NOT NULL DEFAULT 0"),
    // The starts log of rate-limited queues: one row per job a claim took (queue, its key or
    // NULL, the claim's stamp), written in the claim's transaction, pruned by rescue.
    // starts_window: a window's count per queue (`stamp > t - per`) and per key (grouped from
    // the same range, covering), and the prune.
    (
        "migrate_starts",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.starts (\
             id BIGINT NOT NULL AUTO_INCREMENT, \
             queue VARBINARY(512) NOT NULL, \
             ckey VARBINARY(255) NULL, \
             stamp BIGINT NOT NULL, \
             PRIMARY KEY (id), \
             KEY starts_window (queue, stamp, ckey))",
            table_options!()
        ),
    ),
    // Version 3 (issue 40, L7): the starts log numbered per bucket. `n` is an entry's ordinal
    // in its bucket under the queue's limit in force (the queue's queue-wide, its key's per key;
    // 0 for a key-less entry under a limit per key), so a window's count is the bucket's last
    // ordinal less its first one in the window, plus one: two descents of these indexes, not a
    // range counted row by row (`crate::claim`, "The count"). No default: a claim that would log
    // a start without its ordinal fails instead of breaking the count. The entries an older
    // version logged are numbered once by [`run`]; starts_window gives way to starts_queue_n
    // (the prune's range too).
    ("migrate_add_starts_n", "ALTER TABLE {schema}.starts ADD COLUMN n BIGINT NOT NULL"),
    ("migrate_add_starts_queue_n", "ALTER TABLE {schema}.starts ADD INDEX starts_queue_n (queue, stamp, n)"),
    ("migrate_add_starts_key_n", "ALTER TABLE {schema}.starts ADD INDEX starts_key_n (queue, ckey, stamp, n)"),
    ("migrate_drop_starts_window", "ALTER TABLE {schema}.starts DROP INDEX starts_window"),
    // Version 3 (issue 42, docs/unique.md): unique keys. One row per key (64 hex digits of
    // SHA-256, computed by the client): the job holding it, the states that count (a bitmask),
    // the settings as JSON, the end of the period bucket (µs). The primary key is the arbiter:
    // enqueue writes the key row with `INSERT ... ON DUPLICATE KEY UPDATE` (which waits for a
    // racing inserter and then holds the existing row's exclusive lock, so no shared lock is
    // upgraded later), looks at the holder in a new statement (READ COMMITTED: the latest
    // commit) and takes the row over only when the holder counts for none of its states. No
    // claim or move statement touches it. uniques_job: `unique_of` by job.
    (
        "migrate_uniques",
        concat!(
            "CREATE TABLE IF NOT EXISTS {schema}.uniques (\
             unique_key VARBINARY(64) NOT NULL, \
             job_id BINARY(16) NOT NULL, \
             states INT NOT NULL, \
             settings TEXT NOT NULL, \
             expires_at BIGINT NULL, \
             created_at BIGINT NOT NULL, \
             PRIMARY KEY (unique_key), \
             KEY uniques_job (job_id))",
            table_options!()
        ),
    ),
    // Version 4 (issue 41, docs/outputs.md): job outputs. What a handler recorded, as JSON
    // text, on the job's row in each table: `record_output` writes the hot row of a held
    // lease; the three moves (`archive_many`, `dead_letter`, `requeue`) copy it. Not in
    // `cols!`: a claim or a listing never reads it.
    ("migrate_add_hot_output", "ALTER TABLE {schema}.jobs_hot ADD COLUMN output LONGTEXT NULL"),
    ("migrate_add_archive_output", "ALTER TABLE {schema}.jobs_archive ADD COLUMN output LONGTEXT NULL"),
    ("migrate_add_dlq_output", "ALTER TABLE {schema}.jobs_dlq ADD COLUMN output LONGTEXT NULL"),
];

/// "Duplicate column name" and "duplicate key name": a `migrate_add_*` step applied already.
const DUP_FIELDNAME: u16 = 1060;
const DUP_KEYNAME: u16 = 1061;
/// "Can't DROP ...; check that it exists": a `migrate_drop_*` step applied already.
const CANT_DROP: u16 = 1091;

/// Applies [`MIGRATIONS`] on `conn`, refuses a database whose schema is newer than this
/// library, and records the version.
pub(crate) async fn run(conn: &mut MySqlConnection, sql: &Statements, now: i64) -> Result<()> {
    for (name, ddl) in &sql.migrations {
        match sqlx::query(ddl).execute(&mut *conn).await {
            Ok(_) => {}
            Err(e)
                if name.starts_with("migrate_add_") && matches!(mysql_code(&e), Some(DUP_FIELDNAME | DUP_KEYNAME)) => {}
            Err(e) if name.starts_with("migrate_drop_") && mysql_code(&e) == Some(CANT_DROP) => {}
            Err(e) => return Err(map_err(e)),
        }
    }
    let newest: Option<i64> = sqlx::query_scalar(&sql.newest_version).fetch_one(&mut *conn).await.map_err(map_err)?;
    if newest.is_none_or(|v| v < 3) {
        // Version 3: the starts an older version logged get their ordinals (once).
        sqlx::query(&sql.number_all_starts).execute(&mut *conn).await.map_err(map_err)?;
    }
    if newest.is_some_and(|v| v > SCHEMA_VERSION) {
        return Err(Error::new(
            ErrorKind::Other,
            format!(
                "mysql: the database schema is version {}, newer than this library's {}",
                newest.unwrap_or_default(),
                SCHEMA_VERSION
            ),
        ));
    }
    sqlx::query(&sql.record_version).bind(SCHEMA_VERSION).bind(now).execute(&mut *conn).await.map_err(map_err)?;
    Ok(())
}
