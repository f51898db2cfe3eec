//! Every SQL statement the SQLite backend sends; nothing else builds SQL text.
//!
//! Each statement is a template that names its tables `{schema}.table`. [`render`], the one
//! substitution, replaces `{schema}` with the validated, quoted schema name, and
//! [`Statements::new`] renders the whole set once, when the backend connects. SQLite has no
//! schemas inside a database file: the file is the schema, and the backend's statements name
//! it by SQLite's own name for the file a connection opened, `"main"` ([`MAIN`]): the same
//! tables the unqualified names of earlier versions reached (the backend creates no temporary
//! tables that could shadow them).
//!
//! Values always travel as bound parameters (`?1`, `?2`, ...). Optional filters are static
//! SQL with NULL-able parameters (`?2 IS NULL OR queue = ?2`), except the `list_jobs` page,
//! built per call with sea-query from only the filters given ([`list_query`]).
//! The DDL templates live in [`crate::migrate`] and are rendered here with the rest.

use chokaq_core::listing::{self, ListQuery, SqlDialect};
use chokaq_core::{validate, JobTable, ListJobsParams, Result};

use crate::migrate;

/// The schema the backend's statements are rendered for: the database file it opened.
pub(crate) const MAIN: &str = "main";

/// Every statement the backend can send (migrations and test support included), named and
/// rendered for the SQLite schema (database) name `schema`: what the grammar check parses.
///
/// The backend itself always uses `"main"`, the database file it opened.
///
/// ```
/// let all = chokaq_sqlite::all_statements("chokaq_grammar")?;
/// assert!(all.iter().any(|(name, sql)| *name == "claim_one" && sql.contains("\"chokaq_grammar\".jobs_hot")));
/// # Ok::<(), chokaq_core::Error>(())
/// ```
pub fn all_statements(schema: &str) -> Result<Vec<(&'static str, String)>> {
    let mut all = Statements::new(schema)?.into_named();
    for table in [JobTable::Hot, JobTable::Archive, JobTable::DeadLetter] {
        for (name, p) in listing::grammar_shapes(table) {
            all.push((name, list_query(schema, &p)?.sql));
        }
    }
    Ok(all)
}

/// The schema name as a quoted identifier, after validation (so splicing it is safe).
fn quote(schema: &str) -> Result<String> {
    validate::schema_name(schema)?;
    Ok(format!("\"{schema}\""))
}

/// The one substitution: `{schema}` becomes the quoted schema name.
fn render(template: &str, quoted_schema: &str) -> String {
    template.replace("{schema}", quoted_schema)
}

/// The columns shared by the hot, archive and dead-letter tables, in one fixed order.
macro_rules! cols {
    () => {
        "id, queue, kind, payload, tags, idempotency_key, priority, status, attempt, max_attempts, lease, \
         worker_id, heartbeat_at, scheduled_at, created_at, started_at, updated_at, last_error, cancel_requested, \
         created_by, concurrency_key"
    };
}

/// A job read from one table with `finished_at` and `reason` (NULL where the table has none),
/// as `rows::record` decodes it.
macro_rules! select_job {
    (jobs_hot) => {
        concat!("SELECT ", cols!(), ", NULL AS finished_at, NULL AS reason FROM {schema}.jobs_hot")
    };
    (jobs_archive) => {
        concat!("SELECT ", cols!(), ", finished_at, NULL AS reason FROM {schema}.jobs_archive")
    };
    (jobs_dlq) => {
        concat!("SELECT ", cols!(), ", finished_at, reason FROM {schema}.jobs_dlq")
    };
}

/// The columns of a `list_jobs` page of `table`, as `rows::record` decodes them: the payload,
/// or JSON `null` in its place (`ListJobsParams::without_payloads`: none is read). The
/// statement around them is built per call with sea-query ([`list_query`]).
pub(crate) fn list_columns(table: JobTable, without_payloads: bool) -> String {
    let cols = if without_payloads { cols!().replace("payload,", "'null' AS payload,") } else { cols!().to_string() };
    let extra = match table {
        JobTable::Hot => "NULL AS finished_at, NULL AS reason",
        JobTable::Archive => "finished_at, NULL AS reason",
        JobTable::DeadLetter => "finished_at, reason",
    };
    format!("{cols}, {extra}")
}

/// The listing of `p` in `schema` (validated by the builder), rendered for SQLite: only the
/// predicates of the filters given, keyset `id > after`, a creation window also as id bounds
/// (`chokaq_core::listing`).
pub(crate) fn list_query(schema: &str, p: &ListJobsParams) -> Result<ListQuery> {
    listing::list_query(SqlDialect::Sqlite, schema, &list_columns(p.table, p.without_payloads), p)
}

/// Throughput per queue and minute: `?1` since, `?2` microseconds per minute; `$queue` narrows
/// every branch to one queue.
macro_rules! throughput {
    ($queue:literal) => {
        concat!(
            "SELECT queue, minute, sum(finished) AS finished, sum(failed) AS failed, sum(retried) AS retried FROM (\
             SELECT queue, finished_at - finished_at % ?2 AS minute, count(*) AS finished, 0 AS failed, 0 AS retried \
             FROM {schema}.jobs_archive WHERE finished_at >= ?1",
            $queue,
            " GROUP BY 2, 1 UNION ALL \
             SELECT queue, finished_at - finished_at % ?2, 0, count(*), 0 FROM {schema}.jobs_dlq \
             WHERE finished_at >= ?1 AND reason <> 'cancelled'",
            $queue,
            " GROUP BY 2, 1 UNION ALL \
             SELECT queue, updated_at - updated_at % ?2, 0, 0, count(*) FROM {schema}.jobs_hot \
             WHERE status IN (0, 3) AND attempt > 0 AND last_error IS NOT NULL AND updated_at >= ?1",
            $queue,
            " GROUP BY 2, 1) GROUP BY minute, queue ORDER BY minute, queue"
        )
    };
}

/// Per-table row counts of a set of ids: `?1` a JSON array of the ids in hex.
macro_rules! presence {
    ($table:literal) => {
        concat!(
            "SELECT id, count(*) AS n FROM {schema}.",
            $table,
            " WHERE id IN (SELECT unhex(value) FROM json_each(?1)) GROUP BY id"
        )
    };
}

/// Declares [`Statements`] (one field per statement, plus the migrations) and the list of
/// them all, from one table of `name: template` entries, so no statement can be left out of
/// [`all_statements`].
macro_rules! statements {
    ($( $(#[doc = $doc:literal])* $name:ident: $template:expr, )*) => {
        /// Every statement of the backend, rendered for one schema, built once at connect.
        pub(crate) struct Statements {
            /// The DDL of [`crate::migrate::MIGRATIONS`], in order, with their names.
            pub(crate) migrations: Vec<(&'static str, String)>,
            $( $(#[doc = $doc])* pub(crate) $name: String, )*
        }

        impl Statements {
            /// Renders every template for `schema` (validated first).
            pub(crate) fn new(schema: &str) -> Result<Self> {
                let quoted = quote(schema)?;
                Ok(Statements {
                    migrations: migrate::MIGRATIONS.iter().map(|(n, t)| (*n, render(t, &quoted))).collect(),
                    $( $name: render($template, &quoted), )*
                })
            }

            /// Every statement, migrations first, with its name.
            fn into_named(self) -> Vec<(&'static str, String)> {
                let mut all = self.migrations;
                $( all.push((stringify!($name), self.$name)); )*
                all
            }
        }
    };
}

/// The columns of a `schedules` row.
macro_rules! schedule_cols {
    () => {
        "name, spec, time_zone, group_name, next_tick, last_enqueued_tick, enabled, stale, created_at, updated_at"
    };
}

statements! {
    // --- periodic jobs (the schedules table, docs/periodic.md) -----------------------------
    /// Upsert by name: `?1` name, `?2` spec, `?3` time zone, `?4` group, `?5` next tick, `?6`
    /// now, `?7` 1 to replace. An existing row is updated (and returned) only if it holds the
    /// same definition, is stale, or `?7` is 1; otherwise nothing is returned (a conflict).
    schedule_register: concat!(
        "INSERT INTO {schema}.schedules (name, spec, time_zone, group_name, next_tick, enabled, stale, \
         created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, 1, 0, ?6, ?6) \
         ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, time_zone = excluded.time_zone, \
         group_name = excluded.group_name, next_tick = coalesce(excluded.next_tick, next_tick), stale = 0, \
         updated_at = excluded.updated_at \
         WHERE (spec = excluded.spec AND time_zone = excluded.time_zone AND group_name = excluded.group_name) \
         OR stale = 1 OR ?7 = 1 RETURNING ",
        schedule_cols!()
    ),
    /// One schedule row: `?1` name.
    schedule_get: concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = ?1"),
    /// Every schedule row.
    schedule_list: concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules ORDER BY name"),
    /// The tick's compare-and-set: `?1` name, `?2` tick, `?3` next tick, `?4` now, `?5` spec,
    /// `?6` time zone. Returns `enabled` when this call won the tick.
    schedule_tick: "UPDATE {schema}.schedules SET last_enqueued_tick = ?2, next_tick = ?3, updated_at = ?4 \
         WHERE name = ?1 AND stale = 0 AND spec = ?5 AND time_zone = ?6 \
         AND (last_enqueued_tick IS NULL OR last_enqueued_tick < ?2) RETURNING enabled",
    /// Pause or resume: `?1` name, `?2` enabled (0/1), `?3` now.
    schedule_set_enabled: concat!(
        "UPDATE {schema}.schedules SET enabled = ?2, updated_at = ?3 WHERE name = ?1 RETURNING ",
        schedule_cols!()
    ),
    /// Marks stale the rows of group `?1` not named in the JSON array `?2`: `?3` now.
    schedule_mark_stale: "UPDATE {schema}.schedules SET stale = 1, updated_at = ?3 \
         WHERE group_name = ?1 AND stale = 0 AND name NOT IN (SELECT value FROM json_each(?2))",

    /// Opens every write transaction: takes the write lock before the first read.
    begin_immediate: "BEGIN IMMEDIATE",

    // --- migrate ---------------------------------------------------------------------------
    /// The newest applied schema version.
    newest_version: "SELECT max(version) FROM {schema}.versions",
    /// `?1` version, `?2` now.
    record_version:
        "INSERT INTO {schema}.versions (version, applied_at) VALUES (?1, ?2) ON CONFLICT (version) DO NOTHING",

    // --- enqueue ---------------------------------------------------------------------------
    /// The live job holding an idempotency key in a queue (keys are scoped per queue): `?1`
    /// queue, `?2` key.
    find_by_key: "SELECT id FROM {schema}.jobs_hot WHERE queue = ?1 AND idempotency_key = ?2",
    /// `?1` id, `?2` queue, `?3` kind, `?4` payload, `?5` tags, `?6` key, `?7` priority,
    /// `?8` max attempts, `?9` scheduled at, `?10` now, `?11` created by, `?12` concurrency key.
    insert_job: "INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, idempotency_key, priority, status, \
         attempt, max_attempts, scheduled_at, created_at, updated_at, created_by, concurrency_key) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, CASE WHEN ?9 > ?10 THEN 3 ELSE 0 END, 0, ?8, ?9, ?10, ?10, ?11, ?12)",

    // --- claim -----------------------------------------------------------------------------
    /// A queue's control row: `?1` name.
    queue_settings: "SELECT max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
         fetched_timeout_us, key_max_workers, rate_jobs, rate_per_ms, rate_by_key, updated_at \
         FROM {schema}.queues WHERE name = ?1",
    /// Fetched + Processing jobs of a queue: `?1` queue.
    active_count: "SELECT count(*) FROM {schema}.jobs_hot WHERE queue = ?1 AND status IN (1, 2)",
    /// Whether a queue has a due Pending or Scheduled job: `?1` queue, `?2` now.
    any_due: "SELECT 1 FROM {schema}.jobs_hot WHERE queue = ?1 AND status = 0 \
         AND coalesce(scheduled_at, created_at) <= ?2 \
         UNION ALL SELECT 1 FROM {schema}.jobs_hot WHERE queue = ?1 AND status = 3 \
         AND coalesce(scheduled_at, created_at) <= ?2 LIMIT 1",
    /// Scheduled -> Pending for the due jobs of a queue (the claim's promotion; the range of
    /// `jobs_hot_scheduled`): `?1` queue, `?2` now.
    promote_due: "UPDATE {schema}.jobs_hot SET status = 0 WHERE id IN (SELECT id FROM {schema}.jobs_hot \
         WHERE queue = ?1 AND status = 3 AND coalesce(scheduled_at, created_at) <= ?2 LIMIT 1000)",
    /// A queue's due Pending jobs in claim order: `?1` queue, `?2` now, `?3` limit.
    claim_candidates: "SELECT id, priority, coalesce(scheduled_at, created_at) AS due FROM {schema}.jobs_hot \
         WHERE queue = ?1 AND status = 0 AND coalesce(scheduled_at, created_at) <= ?2 \
         ORDER BY priority DESC, coalesce(scheduled_at, created_at) ASC, id ASC LIMIT ?3",
    /// Fetched + Processing jobs per key of a queue (keys with none are absent): `?1` queue. The
    /// range of `jobs_hot_key_running`: as many rows as keyed jobs running.
    key_running: "SELECT concurrency_key AS ckey, count(*) AS n FROM {schema}.jobs_hot \
         WHERE queue = ?1 AND concurrency_key IS NOT NULL AND status IN (1, 2) GROUP BY concurrency_key",
    /// A page of a keyed or rate-limited queue's due Pending jobs in claim order, after a
    /// position and without the keys that may take nothing more: `?1` queue, `?2` now, `?3` 1
    /// when no keyed job may be taken (a key cap of 0), `?4` the excluded keys (a JSON array),
    /// `?5`/`?6`/`?7` the priority, due time and id of the last row of the previous page (NULL
    /// on the first), `?8` the page size.
    claim_candidates_keyed: "SELECT id, priority, coalesce(scheduled_at, created_at) AS due, \
         concurrency_key AS ckey FROM {schema}.jobs_hot \
         WHERE queue = ?1 AND status = 0 AND coalesce(scheduled_at, created_at) <= ?2 \
         AND (concurrency_key IS NULL OR (?3 = 0 AND concurrency_key NOT IN (SELECT value FROM json_each(?4)))) \
         AND (?5 IS NULL OR priority < ?5 OR (priority = ?5 AND (coalesce(scheduled_at, created_at) > ?6 \
           OR (coalesce(scheduled_at, created_at) = ?6 AND id > ?7)))) \
         ORDER BY priority DESC, coalesce(scheduled_at, created_at) ASC, id ASC LIMIT ?8",
    /// Starts of a queue stamped after `?2` (its window's start): `?1` queue.
    rate_count_queue: "SELECT count(*) FROM {schema}.rate_starts WHERE queue = ?1 AND stamp > ?2",
    /// Starts per key of a queue stamped after `?2`: `?1` queue (a covering range of
    /// `rate_starts_window`).
    rate_count_keys: "SELECT ckey, count(*) AS n FROM {schema}.rate_starts \
         WHERE queue = ?1 AND stamp > ?2 AND ckey IS NOT NULL GROUP BY ckey",
    /// Logs one start: `?1` queue, `?2` key, `?3` stamp (the claim's now).
    rate_log: "INSERT INTO {schema}.rate_starts (queue, ckey, stamp) VALUES (?1, ?2, ?3)",
    /// Reserves `?1` leases; returns the last one.
    next_leases: "UPDATE {schema}.counters SET value = value + ?1 WHERE name = 'lease' RETURNING value",
    /// Claims one Pending job: `?1` status, `?2` worker, `?3` lease, `?4` now, `?5` 1 when
    /// starting at once (else 0), `?6` id, `?7` 1 when the claim is the job's first heartbeat
    /// (start and hold), else 0: a reserved job has none (set NULL, whatever an earlier run
    /// left).
    claim_one: concat!(
        "UPDATE {schema}.jobs_hot SET status = ?1, worker_id = ?2, lease = ?3, updated_at = ?4, \
         attempt = attempt + ?5, \
         started_at = CASE WHEN ?5 = 1 THEN ?4 ELSE started_at END, \
         heartbeat_at = CASE WHEN ?7 = 1 THEN ?4 ELSE NULL END \
         WHERE id = ?6 AND status = 0 RETURNING ",
        cols!(),
        ", expired_holds"
    ),

    // --- guarded lease operations ----------------------------------------------------------
    /// Fetched -> Processing: `?1` now, `?2` id, `?3` lease, `?4` worker. Also what `fail` does
    /// first to a held Fetched row (its run counts before the outcome).
    start: "UPDATE {schema}.jobs_hot SET status = 2, attempt = attempt + 1, started_at = ?1, heartbeat_at = ?1, \
         updated_at = ?1 WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 1",
    /// Whether this lease already started the job (a repeated start is done again and writes
    /// nothing): `?1` id, `?2` lease, `?3` worker.
    started_with: "SELECT 1 FROM {schema}.jobs_hot WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND status = 2",
    /// A held Fetched or Processing job: `?1` now, `?2` id, `?3` lease, `?4` worker.
    heartbeat: "UPDATE {schema}.jobs_hot SET heartbeat_at = ?1, updated_at = ?1 \
         WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status IN (1, 2) RETURNING cancel_requested",
    /// Hot -> archive for one held Fetched or Processing lease: `?1` now, `?2` id, `?3` lease,
    /// `?4` worker. The columns are the hot row's with `updated_at` set to the move time; a
    /// Fetched row is archived as if started now (its run counts: `attempt + 1`, `started_at`
    /// now, not an earlier attempt's, status Processing).
    archive_held: concat!(
        "INSERT INTO {schema}.jobs_archive (",
        cols!(),
        ", finished_at) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 2, \
         attempt + (status = 1), max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, \
         CASE WHEN status = 1 THEN ?1 ELSE started_at END, ?1, last_error, cancel_requested, created_by, \
         concurrency_key, ?1 \
         FROM {schema}.jobs_hot \
         WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status IN (1, 2)"
    ),
    /// Whether this worker already completed the job with this lease (a repeated complete: the
    /// outcome stands): `?1` id, `?2` lease, `?3` worker.
    completed_with: "SELECT 1 FROM {schema}.jobs_archive WHERE id = ?1 AND lease = ?2 AND worker_id = ?3",
    /// The outcome a fail with this lease already wrote, if it did: a retry or snooze leaves its
    /// lease on the Pending row (`at`, its due time; release, rescue and requeue clear the
    /// lease); a dead letter keeps lease and worker (`reason`; not a zombie rescue filed, whose
    /// lease was lost): `?1` id, `?2` lease, `?3` worker.
    fail_standing: "SELECT scheduled_at AS at, NULL AS reason FROM {schema}.jobs_hot \
         WHERE id = ?1 AND lease = ?2 AND status IN (0, 3) AND scheduled_at IS NOT NULL \
         UNION ALL SELECT NULL, reason FROM {schema}.jobs_dlq \
         WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND reason <> 'zombie'",
    /// Removes a moved hot row: `?1` id.
    delete_hot: "DELETE FROM {schema}.jobs_hot WHERE id = ?1",
    /// The state of a held Fetched or Processing lease: `?1` id, `?2` lease, `?3` worker.
    held_attempts: "SELECT status, attempt, max_attempts, cancel_requested FROM {schema}.jobs_hot \
         WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND status IN (1, 2)",
    /// Back to Pending (retry, snooze): `?1` due at, `?2` now, `?3` error (NULL keeps the
    /// last one), `?4` attempts to give back, `?5` id.
    back_to_pending: "UPDATE {schema}.jobs_hot SET status = CASE WHEN ?1 > ?2 THEN 3 ELSE 0 END, \
         worker_id = NULL, scheduled_at = ?1, \
         updated_at = ?2, heartbeat_at = NULL, cancel_requested = 0, last_error = coalesce(?3, last_error), \
         attempt = max(attempt - ?4, 0) WHERE id = ?5",
    /// Hot -> dead-letter for one id: `?1` now, `?2` id, `?3` reason, `?4` error (NULL keeps
    /// `last_error`). The columns are the hot row's with `updated_at` set to the move time.
    dead_letter: concat!(
        "INSERT INTO {schema}.jobs_dlq (",
        cols!(),
        ", finished_at, reason) SELECT id, queue, kind, payload, tags, idempotency_key, priority, status, attempt, \
         max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, started_at, ?1, \
         coalesce(?4, last_error), cancel_requested, created_by, concurrency_key, ?1, ?3 FROM {schema}.jobs_hot \
         WHERE id = ?2"
    ),
    /// Fetched -> Pending, unless a cancel was requested (see `release_cancelled`): `?1` now,
    /// `?2` id, `?3` lease, `?4` worker.
    release: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
         updated_at = ?1 \
         WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status = 1 AND cancel_requested = 0 RETURNING queue",
    /// A held Fetched lease whose job has a cancel request (released: dead-lettered
    /// `cancelled`, never put back): `?1` id, `?2` lease, `?3` worker.
    release_cancelled: "SELECT 1 FROM {schema}.jobs_hot \
         WHERE id = ?1 AND lease = ?2 AND worker_id = ?3 AND status = 1 AND cancel_requested = 1",

    // --- rescue ----------------------------------------------------------------------------
    /// Releases expired reserved Fetched jobs (no heartbeat; each queue's fetched timeout, else
    /// the default): `?1` now, `?2` default fetched timeout (µs), `?3` limit.
    rescue_fetched: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, updated_at = ?1 \
         WHERE id IN \
         (SELECT h.id FROM {schema}.jobs_hot h LEFT JOIN {schema}.queues q ON q.name = h.queue \
          WHERE h.status = 1 AND h.heartbeat_at IS NULL AND h.updated_at < ?1 - coalesce(q.fetched_timeout_us, ?2) \
          ORDER BY h.updated_at, h.id LIMIT ?3) \
         RETURNING queue",
    /// Held Fetched jobs (a heartbeat) whose heartbeat expired by their queue's zombie timeout
    /// (their handler may be running; the fetched timeout does not apply): `?1` now, `?2`
    /// default zombie timeout (µs), `?3` limit.
    find_expired_holds: "SELECT h.id, h.queue, h.cancel_requested \
         FROM {schema}.jobs_hot h LEFT JOIN {schema}.queues q ON q.name = h.queue \
         WHERE h.status = 1 AND h.heartbeat_at IS NOT NULL \
           AND h.heartbeat_at < ?1 - coalesce(q.zombie_timeout_us, ?2) \
         ORDER BY h.heartbeat_at, h.id LIMIT ?3",
    /// An expired hold back to Pending, its attempt unspent, the expiry counted: `?1` now,
    /// `?2` id.
    release_expired_hold: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, \
         heartbeat_at = NULL, expired_holds = expired_holds + 1, updated_at = ?1 WHERE id = ?2 AND status = 1",
    /// Processing jobs whose heartbeat expired, with their queue's policy: `?1` now, `?2`
    /// default zombie timeout, `?3` limit.
    find_zombies: "SELECT h.id, h.queue, h.attempt, h.max_attempts, h.cancel_requested, \
         coalesce(q.zombie_policy, 'retry') AS policy \
         FROM {schema}.jobs_hot h LEFT JOIN {schema}.queues q ON q.name = h.queue \
         WHERE h.status = 2 \
           AND coalesce(h.heartbeat_at, h.started_at, h.updated_at) < ?1 - coalesce(q.zombie_timeout_us, ?2) \
         ORDER BY h.id LIMIT ?3",
    /// The starts log keeps what a rate window can still see: entries of queues without a limit
    /// go, and those stamped at or before their queue's window start: `?1` now.
    rate_prune: "DELETE FROM {schema}.rate_starts WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues q \
         WHERE q.name = rate_starts.queue AND q.rate_jobs IS NOT NULL AND q.rate_per_ms IS NOT NULL \
         AND rate_starts.stamp > ?1 - q.rate_per_ms * 1000)",
    /// A zombie back to Pending: `?1` now, `?2` id.
    retry_zombie: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
         cancel_requested = 0, updated_at = ?1 WHERE id = ?2",

    // --- cancel ----------------------------------------------------------------------------
    /// A live job's status and whether it is held (Fetched with a heartbeat): `?1` id.
    hot_status: "SELECT status, heartbeat_at IS NOT NULL AS held FROM {schema}.jobs_hot WHERE id = ?1",
    /// `?1` now, `?2` id.
    request_cancel: "UPDATE {schema}.jobs_hot SET cancel_requested = 1, updated_at = ?1 WHERE id = ?2",

    // --- queue controls: `?1` value, `?2` now, `?3` queue ------------------------------------
    /// `?1` name, `?2` now.
    ensure_queue: "INSERT INTO {schema}.queues (name, created_at, updated_at) VALUES (?1, ?2, ?2) \
         ON CONFLICT (name) DO NOTHING",
    set_paused: "UPDATE {schema}.queues SET is_paused = ?1, updated_at = ?2 WHERE name = ?3",
    set_active: "UPDATE {schema}.queues SET is_active = ?1, updated_at = ?2 WHERE name = ?3",
    set_max_workers: "UPDATE {schema}.queues SET max_workers = ?1, updated_at = ?2 WHERE name = ?3",
    set_zombie_timeout: "UPDATE {schema}.queues SET zombie_timeout_us = ?1, updated_at = ?2 WHERE name = ?3",
    set_fetched_timeout: "UPDATE {schema}.queues SET fetched_timeout_us = ?1, updated_at = ?2 WHERE name = ?3",
    set_zombie_policy: "UPDATE {schema}.queues SET zombie_policy = ?1, updated_at = ?2 WHERE name = ?3",
    set_key_max_workers: "UPDATE {schema}.queues SET key_max_workers = ?1, updated_at = ?2 WHERE name = ?3",
    /// `?1` jobs, `?2` period (ms), `?3` by key (0/1), `?4` now, `?5` queue: all NULL clears
    /// the limit (`rate_by_key` back to 0).
    set_rate_limit: "UPDATE {schema}.queues SET rate_jobs = ?1, rate_per_ms = ?2, rate_by_key = coalesce(?3, 0), \
         updated_at = ?4 WHERE name = ?5",

    // --- requeue ---------------------------------------------------------------------------
    /// `?1` id.
    dead_key_and_queue: "SELECT idempotency_key, queue FROM {schema}.jobs_dlq WHERE id = ?1",
    /// Dead-letter -> hot, Pending with attempt 0 and no expired holds (a fresh row): `?1` now,
    /// `?2` id.
    requeue: concat!(
        "INSERT INTO {schema}.jobs_hot (",
        cols!(),
        ", expired_holds) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 0, 0, \
         max_attempts, NULL, NULL, NULL, NULL, created_at, NULL, ?1, last_error, 0, created_by, concurrency_key, 0 \
         FROM {schema}.jobs_dlq WHERE id = ?2"
    ),
    /// `?1` id.
    delete_dead: "DELETE FROM {schema}.jobs_dlq WHERE id = ?1",

    // --- purge: `?1` cutoff, `?2` queue and `?3` kind (NULL = any), `?4` batch size ----------
    purge_archive: "DELETE FROM {schema}.jobs_archive WHERE id IN (SELECT id FROM {schema}.jobs_archive \
         WHERE finished_at < ?1 AND (?2 IS NULL OR queue = ?2) AND (?3 IS NULL OR kind = ?3) \
         ORDER BY finished_at LIMIT ?4)",
    /// As `purge_archive`, plus `?5` reason (NULL = any).
    purge_dead: "DELETE FROM {schema}.jobs_dlq WHERE id IN (SELECT id FROM {schema}.jobs_dlq \
         WHERE finished_at < ?1 AND (?2 IS NULL OR queue = ?2) AND (?3 IS NULL OR kind = ?3) \
         AND (?5 IS NULL OR reason = ?5) ORDER BY finished_at LIMIT ?4)",

    // --- stats -----------------------------------------------------------------------------
    stats_hot: "SELECT queue, status, count(*) AS n FROM {schema}.jobs_hot GROUP BY queue, status",
    /// The oldest due Pending job per queue: `?1` now.
    stats_lag: "SELECT queue, min(coalesce(scheduled_at, created_at)) AS due FROM {schema}.jobs_hot \
         WHERE status IN (0, 3) AND coalesce(scheduled_at, created_at) <= ?1 GROUP BY queue",
    stats_archive: "SELECT queue, count(*) AS n FROM {schema}.jobs_archive GROUP BY queue",
    stats_dead: "SELECT queue, count(*) AS n, sum(reason = 'cancelled') AS cancelled FROM {schema}.jobs_dlq \
         GROUP BY queue",
    /// Every control row.
    stats_queues: "SELECT name, max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
         fetched_timeout_us, key_max_workers, rate_jobs, rate_per_ms, rate_by_key, updated_at FROM {schema}.queues",
    /// The keys with the most Fetched + Processing jobs of each queue (at most `?1` per queue),
    /// most running first, ties by key: the range of `jobs_hot_key_running`.
    stats_busiest_keys: "SELECT queue, ckey, n FROM (SELECT queue, concurrency_key AS ckey, count(*) AS n, \
         row_number() OVER (PARTITION BY queue ORDER BY count(*) DESC, concurrency_key) AS rn \
         FROM {schema}.jobs_hot WHERE concurrency_key IS NOT NULL AND status IN (1, 2) \
         GROUP BY queue, concurrency_key) WHERE rn <= ?1 ORDER BY queue, rn",

    // --- get_job: `?1` id ------------------------------------------------------------------
    get_hot: concat!(select_job!(jobs_hot), " WHERE id = ?1"),
    get_archive: concat!(select_job!(jobs_archive), " WHERE id = ?1"),
    get_dead: concat!(select_job!(jobs_dlq), " WHERE id = ?1"),


    // --- workers and throughput -------------------------------------------------------------
    /// `?1` worker, `?2` host, `?3` pid, `?4` queues (JSON), `?5` concurrency, `?6` now: the
    /// first registration sets `started_at`, every one `last_seen_at`.
    register_worker: "INSERT INTO {schema}.workers \
         (worker_id, host, pid, queues, concurrency, started_at, last_seen_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) \
         ON CONFLICT (worker_id) DO UPDATE SET host = excluded.host, pid = excluded.pid, \
         queues = excluded.queues, concurrency = excluded.concurrency, last_seen_at = excluded.last_seen_at",
    /// `?1` worker.
    deregister_worker: "DELETE FROM {schema}.workers WHERE worker_id = ?1",
    list_workers: "SELECT worker_id, host, pid, queues, concurrency, started_at, last_seen_at \
         FROM {schema}.workers ORDER BY started_at DESC, worker_id",
    /// `?1` cutoff: rows last seen before it.
    prune_workers: "DELETE FROM {schema}.workers WHERE last_seen_at < ?1",
    /// `?1` since, `?2` microseconds per minute: per queue and minute, jobs archived as done (a
    /// covering range of `jobs_archive_finished_queue`), failures dead-lettered (cancels left
    /// out) and failed attempts waiting for a retry (the hot table: live jobs only).
    throughput_all: throughput!(""),
    /// As `throughput_all` for queue `?3`.
    throughput_queue: throughput!(" AND queue = ?3"),

    // --- test support (feature `testing`) --------------------------------------------------
    /// `?1` worker, `?2` last seen.
    force_worker_seen: "UPDATE {schema}.workers SET last_seen_at = ?2 WHERE worker_id = ?1",
    /// `?1` id, `?2` finish time of an archived job.
    force_finished_at: "UPDATE {schema}.jobs_archive SET finished_at = ?2 WHERE id = ?1",
    /// Forces fields of a hot job, bypassing every guard: `?1` id, `?2` status, `?3` attempt,
    /// `?4` whether to set `scheduled_at` to `?5`, `?6` whether to set `heartbeat_at` to
    /// `?7`, `?8` updated at, `?9` created at (NULL = keep).
    force: "UPDATE {schema}.jobs_hot SET status = coalesce(?2, status), attempt = coalesce(?3, attempt), \
         scheduled_at = CASE WHEN ?4 THEN ?5 ELSE scheduled_at END, \
         heartbeat_at = CASE WHEN ?6 THEN ?7 ELSE heartbeat_at END, \
         updated_at = coalesce(?8, updated_at), created_at = coalesce(?9, created_at), \
         payload = coalesce(?10, payload) WHERE id = ?1",
    presence_hot: presence!("jobs_hot"),
    presence_archive: presence!("jobs_archive"),
    presence_dead: presence!("jobs_dlq"),
    /// What is left in the database file after the drops.
    count_objects: "SELECT count(*) FROM {schema}.sqlite_schema",
    drop_jobs_hot: "DROP TABLE IF EXISTS {schema}.jobs_hot",
    drop_jobs_archive: "DROP TABLE IF EXISTS {schema}.jobs_archive",
    drop_jobs_dlq: "DROP TABLE IF EXISTS {schema}.jobs_dlq",
    drop_queues: "DROP TABLE IF EXISTS {schema}.queues",
    drop_counters: "DROP TABLE IF EXISTS {schema}.counters",
    drop_versions: "DROP TABLE IF EXISTS {schema}.versions",
    drop_workers: "DROP TABLE IF EXISTS {schema}.workers",
    drop_schedules: "DROP TABLE IF EXISTS {schema}.schedules",
    drop_rate_starts: "DROP TABLE IF EXISTS {schema}.rate_starts",
    drop_fault_key_slots: "DROP TABLE IF EXISTS {schema}.fault_key_slots",

    // --- fault injection (feature `fault-injection`, `Faults::key_slot_double_free`) -------
    /// The broken slot ledger (created on first use by a backend with the fault).
    fault_ledger_create: "CREATE TABLE IF NOT EXISTS {schema}.fault_key_slots (queue TEXT NOT NULL, \
         ckey TEXT NOT NULL, used INTEGER NOT NULL, PRIMARY KEY (queue, ckey))",
    /// The ledger's slots in use per key of a queue: `?1` queue.
    fault_ledger_read: "SELECT ckey, used AS n FROM {schema}.fault_key_slots WHERE queue = ?1",
    /// Adds `?3` (negative: frees) to the slots of key `?2` of queue `?1`.
    fault_ledger_add: "INSERT INTO {schema}.fault_key_slots (queue, ckey, used) VALUES (?1, ?2, ?3) \
         ON CONFLICT (queue, ckey) DO UPDATE SET used = used + excluded.used",
    /// A job's queue and key, wherever it is: `?1` id.
    fault_job_key: "SELECT queue, concurrency_key AS ckey FROM {schema}.jobs_hot WHERE id = ?1 \
         UNION ALL SELECT queue, concurrency_key FROM {schema}.jobs_archive WHERE id = ?1 \
         UNION ALL SELECT queue, concurrency_key FROM {schema}.jobs_dlq WHERE id = ?1 LIMIT 1",
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The moves copy the hot row column for column, in `cols!()` order, with `updated_at`
    /// replaced by the move time (and, into the dead-letter table, `last_error` by the new
    /// error when there is one).
    #[test]
    fn moves_copy_every_column_in_order() {
        let st = Statements::new(MAIN).unwrap();
        let moved = cols!().replace("updated_at", "?1");
        // A held Fetched row is archived as if started now.
        let archived = moved
            .replace("status, attempt,", "2, attempt + (status = 1),")
            .replace("started_at", "CASE WHEN status = 1 THEN ?1 ELSE started_at END");
        assert!(
            st.archive_held.contains(&format!("SELECT {archived}, ?1 FROM \"main\".jobs_hot")),
            "{}",
            st.archive_held
        );
        let dead = moved.replace("last_error", "coalesce(?4, last_error)");
        assert!(
            st.dead_letter.contains(&format!("SELECT {dead}, ?1, ?3 FROM \"main\".jobs_hot")),
            "{}",
            st.dead_letter
        );
    }

    #[test]
    fn every_table_is_qualified_and_the_schema_is_validated() {
        let all = all_statements("chokaq_grammar").unwrap();
        for (name, sql) in &all {
            assert!(!sql.contains("{schema}"), "{name}: {sql}");
            if *name != "begin_immediate" {
                assert!(sql.contains("\"chokaq_grammar\"."), "{name}: {sql}");
            }
        }
        let mut names: Vec<_> = all.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "names are unique");
        for bad in ["", "a;b", "x\"y", "1a"] {
            assert!(all_statements(bad).is_err(), "{bad}");
        }
    }
}
