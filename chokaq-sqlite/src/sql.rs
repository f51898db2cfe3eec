//! Every SQL statement the SQLite backend sends; nothing else builds SQL text.
//!
//! Each statement is a template that names its tables `{schema}.table`. [`render`], the one
//! substitution, replaces `{schema}` with the validated, quoted schema name, and
//! [`Statements::new`] renders the whole set once, when the backend connects. The templates sit
//! by room in `sql/<room>.rs` (the room of the operations that send them, as in every backend
//! crate); the `statements!` table below names each one. SQLite has no
//! schemas inside a database file: the file is the schema, and the backend's statements name
//! it by SQLite's own name for the file a connection opened, `"main"` ([`MAIN`]): the same
//! tables the unqualified names of earlier versions reached (the backend creates no temporary
//! tables that could shadow them).
//!
//! Values always travel as bound parameters (`?1`, `?2`, ...). Optional filters are static
//! SQL with NULL-able parameters (`?2 IS NULL OR queue = ?2`), except the `list_jobs` page,
//! built per call with sea-query from only the filters given ([`list_query`]).
//! The DDL templates live in [`crate::migrate`] and are rendered here with the rest.

use chokaq_core::listing;
use chokaq_core::{validate, JobTable, Result};

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
                    migrations: crate::migrate::MIGRATIONS.iter().map(|(n, t)| (*n, render(t, &quoted))).collect(),
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

// The statements of each room, one file each (`sql/<room>.rs`), declared after the macros
// above, which their templates use.
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
mod workers;
pub(crate) use list::list_query;

statements! {
    schedule_register: periodic::SCHEDULE_REGISTER,
    schedule_get: periodic::SCHEDULE_GET,
    schedule_list: periodic::SCHEDULE_LIST,
    schedule_tick: periodic::SCHEDULE_TICK,
    schedule_set_enabled: periodic::SCHEDULE_SET_ENABLED,
    schedule_mark_stale: periodic::SCHEDULE_MARK_STALE,
    begin_immediate: periodic::BEGIN_IMMEDIATE,
    newest_version: migrate::NEWEST_VERSION,
    record_version: migrate::RECORD_VERSION,
    find_by_key: enqueue::FIND_BY_KEY,
    insert_job: enqueue::INSERT_JOB,
    unique_holder: enqueue::UNIQUE_HOLDER,
    unique_take: enqueue::UNIQUE_TAKE,
    unique_of: enqueue::UNIQUE_OF,
    unique_prune: enqueue::UNIQUE_PRUNE,
    queue_settings: claim::QUEUE_SETTINGS,
    active_count: claim::ACTIVE_COUNT,
    any_due: claim::ANY_DUE,
    promote_due: claim::PROMOTE_DUE,
    claim_candidates: claim::CLAIM_CANDIDATES,
    key_running: claim::KEY_RUNNING,
    claim_candidates_keyed: claim::CLAIM_CANDIDATES_KEYED,
    rate_count_queue: claim::RATE_COUNT_QUEUE,
    rate_count_key: claim::RATE_COUNT_KEY,
    rate_log_queue: claim::RATE_LOG_QUEUE,
    rate_log_key: claim::RATE_LOG_KEY,
    next_leases: claim::NEXT_LEASES,
    claim_one: claim::CLAIM_ONE,
    start: lease::START,
    started_with: lease::STARTED_WITH,
    heartbeat: lease::HEARTBEAT,
    archive_held: lease::ARCHIVE_HELD,
    completed_with: lease::COMPLETED_WITH,
    fail_standing: lease::FAIL_STANDING,
    delete_hot: lease::DELETE_HOT,
    held_attempts: lease::HELD_ATTEMPTS,
    back_to_pending: lease::BACK_TO_PENDING,
    dead_letter: lease::DEAD_LETTER,
    release: lease::RELEASE,
    release_cancelled: lease::RELEASE_CANCELLED,
    record_output: output::RECORD_OUTPUT,
    get_output: output::GET_OUTPUT,
    rescue_fetched: admin::RESCUE_FETCHED,
    find_expired_holds: admin::FIND_EXPIRED_HOLDS,
    release_expired_hold: admin::RELEASE_EXPIRED_HOLD,
    find_zombies: admin::FIND_ZOMBIES,
    rate_prune: admin::RATE_PRUNE,
    rate_renumber: admin::RATE_RENUMBER,
    rate_number_all: admin::RATE_NUMBER_ALL,
    retry_zombie: admin::RETRY_ZOMBIE,
    hot_status: admin::HOT_STATUS,
    request_cancel: admin::REQUEST_CANCEL,
    ensure_queue: admin::ENSURE_QUEUE,
    set_paused: admin::SET_PAUSED,
    set_active: admin::SET_ACTIVE,
    set_max_workers: admin::SET_MAX_WORKERS,
    set_zombie_timeout: admin::SET_ZOMBIE_TIMEOUT,
    set_fetched_timeout: admin::SET_FETCHED_TIMEOUT,
    set_zombie_policy: admin::SET_ZOMBIE_POLICY,
    set_key_max_workers: admin::SET_KEY_MAX_WORKERS,
    set_rate_limit: admin::SET_RATE_LIMIT,
    dead_key_and_queue: admin::DEAD_KEY_AND_QUEUE,
    requeue: admin::REQUEUE,
    delete_dead: admin::DELETE_DEAD,
    purge_archive: admin::PURGE_ARCHIVE,
    purge_dead: admin::PURGE_DEAD,
    stats_hot: inspect::STATS_HOT,
    stats_lag: inspect::STATS_LAG,
    stats_archive: inspect::STATS_ARCHIVE,
    stats_dead: inspect::STATS_DEAD,
    stats_queues: inspect::STATS_QUEUES,
    stats_busiest_keys: inspect::STATS_BUSIEST_KEYS,
    get_hot: inspect::GET_HOT,
    get_archive: inspect::GET_ARCHIVE,
    get_dead: inspect::GET_DEAD,
    register_worker: workers::REGISTER_WORKER,
    deregister_worker: workers::DEREGISTER_WORKER,
    list_workers: workers::LIST_WORKERS,
    prune_workers: workers::PRUNE_WORKERS,
    throughput_all: workers::THROUGHPUT_ALL,
    throughput_queue: workers::THROUGHPUT_QUEUE,
    force_worker_seen: testing::FORCE_WORKER_SEEN,
    force_finished_at: testing::FORCE_FINISHED_AT,
    force: testing::FORCE,
    presence_hot: testing::PRESENCE_HOT,
    presence_archive: testing::PRESENCE_ARCHIVE,
    presence_dead: testing::PRESENCE_DEAD,
    count_objects: testing::COUNT_OBJECTS,
    drop_jobs_hot: testing::DROP_JOBS_HOT,
    drop_jobs_archive: testing::DROP_JOBS_ARCHIVE,
    drop_jobs_dlq: testing::DROP_JOBS_DLQ,
    drop_queues: testing::DROP_QUEUES,
    drop_counters: testing::DROP_COUNTERS,
    drop_versions: testing::DROP_VERSIONS,
    drop_workers: testing::DROP_WORKERS,
    drop_schedules: testing::DROP_SCHEDULES,
    drop_rate_starts: testing::DROP_RATE_STARTS,
    drop_uniques: testing::DROP_UNIQUES,
    drop_fault_key_slots: testing::DROP_FAULT_KEY_SLOTS,
    fault_ledger_create: testing::FAULT_LEDGER_CREATE,
    fault_ledger_read: testing::FAULT_LEDGER_READ,
    fault_ledger_add: testing::FAULT_LEDGER_ADD,
    fault_job_key: testing::FAULT_JOB_KEY,
    add_starts_last: testing::ADD_STARTS_LAST,
    add_starts: testing::ADD_STARTS,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The moves copy the hot row column for column, in `cols!()` order, with `updated_at`
    /// replaced by the move time (and, into the dead-letter table, `last_error` by the new
    /// error when there is one), then the output (issue 41).
    #[test]
    fn moves_copy_every_column_in_order() {
        let st = Statements::new(MAIN).unwrap();
        let moved = cols!().replace("updated_at", "?1");
        // A held Fetched row is archived as if started now.
        let archived = moved
            .replace("status, attempt,", "2, attempt + (status = 1),")
            .replace("started_at", "CASE WHEN status = 1 THEN ?1 ELSE started_at END");
        assert!(
            st.archive_held.contains(&format!("SELECT {archived}, ?1, output FROM \"main\".jobs_hot")),
            "{}",
            st.archive_held
        );
        let dead = moved.replace("last_error", "coalesce(?4, last_error)");
        assert!(
            st.dead_letter.contains(&format!("SELECT {dead}, ?1, ?3, output FROM \"main\".jobs_hot")),
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
