//! The migrator's own statements; the migrations themselves are `migrations/*.sql`.

pub(super) const MIGRATE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '10s'";

/// The schema's own statements (the migration scripts, the test support's drop) run under no
/// `statement_timeout`: the sessions' (`PgConfig::statement_timeout`) bounds the application's.
pub(super) const NO_STATEMENT_TIMEOUT: &str = "SET LOCAL statement_timeout = 0";

/// `$1` the lock's key (`chokaq:migrate:<schema>`).
/// Before the schema's first migration (no `locks` table yet): an advisory lock on `$1`.
pub(super) const MIGRATE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// Whether the schema's `locks` table exists (migration 4 on).
pub(super) const LOCKS_TABLE_EXISTS: &str = "SELECT to_regclass('{schema}.locks') IS NOT NULL";

/// Once the schema has its `locks` table: its `migrate` row, waited for (under the
/// migration's `lock_timeout`).
pub(super) const MIGRATE_ROW_LOCK: &str = "SELECT name FROM {schema}.locks WHERE name = 'migrate' FOR UPDATE";

pub(super) const CREATE_SCHEMA: &str = "CREATE SCHEMA IF NOT EXISTS {schema}";

pub(super) const CREATE_VERSIONS: &str = "CREATE TABLE IF NOT EXISTS {schema}.versions (version integer PRIMARY KEY, \
    name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())";

/// The versions applied.
pub(super) const CURRENT_VERSION: &str =
    "SELECT coalesce(array_agg(version ORDER BY version), '{}') FROM {schema}.versions";

/// `$1` version, `$2` name.
pub(super) const INSERT_VERSION: &str = "INSERT INTO {schema}.versions (version, name) VALUES ($1, $2)";

/// `$1` a repeatable script's name: the checksum recorded when it was last applied.
pub(super) const REPEATABLE_CHECKSUM: &str = "SELECT checksum FROM {schema}.repeatables WHERE name = $1";

/// `$1` name, `$2` checksum, `$3` the highest migration version of the build that applied it.
pub(super) const REPEATABLE_RECORD: &str = "
INSERT INTO {schema}.repeatables (name, checksum, version) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, version = excluded.version, applied_at = now()";
