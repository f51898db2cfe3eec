//! The statements of retention purges, workers, throughput, periodic schedules, test support
//! and the migrator (moved out of sql.rs).

/// One batch of a purge: rows finished more than `$1` microseconds ago, filtered by the
/// NULL-able `$2` queue and `$3` kind (and on the dead-letter table `$5` reason), at most `$4`
/// of them, skipping rows a concurrent purge holds.
macro_rules! purge {
    ($table:literal, $extra:literal) => {
        concat!(
            "
DELETE FROM {schema}.",
            $table,
            " WHERE id IN (
    SELECT id FROM {schema}.",
            $table,
            "
     WHERE finished_at < now() - $1::int8 * interval '1 microsecond'
       AND ($2::text IS NULL OR queue = $2::text)
       AND ($3::text IS NULL OR kind = $3::text)",
            $extra,
            "
     LIMIT $4
       FOR UPDATE SKIP LOCKED
)"
        )
    };
}

pub(super) const PURGE_ARCHIVE: &str = purge!("jobs_archive", "");
pub(super) const PURGE_DLQ: &str = purge!("jobs_dlq", "\n       AND ($5::text IS NULL OR reason = $5::text)");

/// `$1` worker, `$2` host, `$3` pid, `$4` queues, `$5` concurrency: the first registration
/// sets `started_at`, every one sets `last_seen_at` (the database clock).
pub(super) const REGISTER_WORKER: &str = "
INSERT INTO {schema}.workers AS w (worker_id, host, pid, queues, concurrency, started_at, last_seen_at)
VALUES ($1, $2, $3, $4::text [], $5, now(), now())
ON CONFLICT (worker_id) DO UPDATE SET
    host = excluded.host,
    pid = excluded.pid,
    queues = excluded.queues,
    concurrency = excluded.concurrency,
    last_seen_at = excluded.last_seen_at";

/// `$1` worker.
pub(super) const DEREGISTER_WORKER: &str = "DELETE FROM {schema}.workers WHERE worker_id = $1";

pub(super) const LIST_WORKERS: &str = "
SELECT worker_id, host, pid, queues, concurrency, started_at, last_seen_at
  FROM {schema}.workers
 ORDER BY started_at DESC, worker_id";

/// `$1` stale after, microseconds.
pub(super) const PRUNE_WORKERS: &str = "
DELETE FROM {schema}.workers WHERE last_seen_at < now() - $1::int8 * interval '1 microsecond'";

/// Per queue and minute over the last `$1` microseconds: jobs archived as done (an index-only
/// range of `jobs_archive_finished_queue_idx`), failures dead-lettered (a range of
/// `jobs_dlq_finished_idx`; cancels left out) and failed attempts waiting for a retry (a read of
/// the hot table, which holds live jobs only). `{queue}` narrows each branch to one queue.
macro_rules! throughput {
    ($queue:literal) => {
        concat!(
            "
SELECT queue, minute, sum(finished)::int8 AS finished, sum(failed)::int8 AS failed, sum(retried)::int8 AS retried
  FROM (
    SELECT queue, date_trunc('minute', finished_at) AS minute, count(*) AS finished, 0::int8 AS failed,
           0::int8 AS retried
      FROM {schema}.jobs_archive
     WHERE finished_at >= now() - $1::int8 * interval '1 microsecond'",
            $queue,
            "
     GROUP BY 1, 2
    UNION ALL
    SELECT queue, date_trunc('minute', finished_at), 0, count(*), 0
      FROM {schema}.jobs_dlq
     WHERE finished_at >= now() - $1::int8 * interval '1 microsecond' AND reason <> 'cancelled'",
            $queue,
            "
     GROUP BY 1, 2
    UNION ALL
    SELECT queue, date_trunc('minute', updated_at), 0, 0, count(*)
      FROM {schema}.jobs_hot
     WHERE status IN (0, 3) AND attempt > 0 AND last_error IS NOT NULL
       AND updated_at >= now() - $1::int8 * interval '1 microsecond'",
            $queue,
            "
     GROUP BY 1, 2
  ) x
 GROUP BY minute, queue
 ORDER BY minute, queue"
        )
    };
}

/// Every queue.
pub(super) const THROUGHPUT_ALL: &str = throughput!("");

/// `$2` queue: the same ranges, the queue checked in the index.
pub(super) const THROUGHPUT_QUEUE: &str = throughput!(" AND queue = $2");

/// Test support: `$1` worker, `$2` last seen.
pub(super) const FORCE_WORKER_SEEN: &str = "UPDATE {schema}.workers SET last_seen_at = $2 WHERE worker_id = $1";

/// Test support: `$1` id, `$2` finish time of an archived job.
pub(super) const FORCE_FINISHED_AT: &str = "UPDATE {schema}.jobs_archive SET finished_at = $2 WHERE id = $1";
// ---- periodic jobs (the schedules table, docs/periodic.md) ----

/// Columns of a `schedules` row.
macro_rules! schedule_cols {
    () => {
        "name, spec, time_zone, group_name, next_tick, last_enqueued_tick, enabled, stale, created_at, updated_at"
    };
}

/// Upsert by name: `$1` name, `$2` spec, `$3` time zone, `$4` group, `$5` next tick, `$6`
/// replace. An existing row is updated (and returned) only if it holds the same definition,
/// is stale, or `$6`; otherwise nothing is returned (a conflict).
pub(super) const SCHEDULE_REGISTER: &str = concat!(
    "
INSERT INTO {schema}.schedules AS s (name, spec, time_zone, group_name, next_tick)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE
   SET spec = excluded.spec, time_zone = excluded.time_zone, group_name = excluded.group_name,
       next_tick = coalesce(excluded.next_tick, s.next_tick), stale = false, updated_at = now()
 WHERE (s.spec = excluded.spec AND s.time_zone = excluded.time_zone AND s.group_name = excluded.group_name)
    OR s.stale OR $6::bool
RETURNING ",
    schedule_cols!()
);

/// One schedule row: `$1` name.
pub(super) const SCHEDULE_GET: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = $1");

/// Every schedule row.
pub(super) const SCHEDULE_LIST: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules ORDER BY name");

/// The tick's compare-and-set: `$1` name, `$2` tick, `$3` next tick, `$4` spec, `$5` time
/// zone. A concurrent winner's update makes this one re-check its WHERE on the new row version
/// (READ COMMITTED) or fail with a serialization error (stricter levels; retried): either way
/// it matches no row. Returns `enabled` when this call won the tick.
pub(super) const SCHEDULE_TICK: &str = "
UPDATE {schema}.schedules
   SET last_enqueued_tick = $2, next_tick = $3, updated_at = now()
 WHERE name = $1 AND NOT stale AND spec = $4 AND time_zone = $5
   AND (last_enqueued_tick IS NULL OR last_enqueued_tick < $2)
RETURNING enabled";

/// Pause or resume: `$1` name, `$2` enabled.
pub(super) const SCHEDULE_SET_ENABLED: &str = concat!(
    "UPDATE {schema}.schedules SET enabled = $2, updated_at = now() WHERE name = $1 RETURNING ",
    schedule_cols!()
);

/// Marks stale the rows of group `$1` not named in `$2`.
pub(super) const SCHEDULE_MARK_STALE: &str = "
UPDATE {schema}.schedules SET stale = true, updated_at = now()
 WHERE group_name = $1 AND NOT stale AND NOT (name = ANY($2::text[]))";

pub(super) const DROP_SCHEMA: &str = "DROP SCHEMA IF EXISTS {schema} CASCADE";

/// Test support: the role whose default isolation is REPEATABLE READ, with what the backend
/// needs on the schema (`TestSupport::with_repeatable_read_default`).
pub(super) const RR_ROLE_CREATE: &str = "CREATE ROLE {rr_role} LOGIN;
ALTER ROLE {rr_role} SET default_transaction_isolation = 'repeatable read';
GRANT USAGE ON SCHEMA {schema} TO {rr_role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {rr_role};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {rr_role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {rr_role}";

/// Test support: the isolation level of a session's transactions.
pub(super) const SESSION_ISOLATION: &str = "SELECT current_setting('transaction_isolation')";

/// Test support: drops that role (after the schema, which held its only privileges).
pub(super) const RR_ROLE_DROP: &str = "DROP ROLE IF EXISTS {rr_role}";

pub(super) const FORCE: &str = "
UPDATE {schema}.jobs_hot SET
    status = CASE WHEN coalesce($2::int2, status) NOT IN (0, 3) THEN coalesce($2::int2, status)
                  WHEN coalesce(CASE WHEN $4::bool THEN $5::timestamptz ELSE scheduled_at END,
                                $9::timestamptz, created_at) > now() THEN 3
                  ELSE 0 END,
    attempt = coalesce($3::int4, attempt),
    scheduled_at = CASE WHEN $4::bool THEN $5::timestamptz ELSE scheduled_at END,
    heartbeat_at = CASE WHEN $6::bool THEN $7::timestamptz ELSE heartbeat_at END,
    updated_at = coalesce($8::timestamptz, updated_at),
    created_at = coalesce($9::timestamptz, created_at),
    payload = coalesce($10::text::jsonb, payload)
WHERE id = $1";

pub(super) const PRESENCE_MANY: &str = "
SELECT u.id,
       (SELECT count(*) FROM {schema}.jobs_hot h WHERE h.id = u.id) AS hot,
       (SELECT count(*) FROM {schema}.jobs_archive a WHERE a.id = u.id) AS archive,
       (SELECT count(*) FROM {schema}.jobs_dlq d WHERE d.id = u.id) AS dead
  FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)
 ORDER BY u.ord";

pub(super) const KILL_CONNECTIONS: &str = "
SELECT count(*) FILTER (WHERE t.ok) FROM (
    SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
     WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()
) t";

pub(super) const DB_NOW: &str = "SELECT now()";

// ---- the migrator's own statements; the migrations themselves are `migrations/*.sql` ----

pub(super) const MIGRATE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '10s'";

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
