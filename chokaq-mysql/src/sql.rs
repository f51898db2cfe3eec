//! Every SQL statement the MySQL backend sends; nothing else builds SQL text.
//!
//! Each statement is a template that names its tables `{schema}.table`. [`render`], the one
//! substitution, replaces `{schema}` with the validated, backquoted schema (database) name, and
//! [`Statements::new`] renders the whole set once, when the backend connects. The templates sit
//! by room in `sql/<room>.rs` (the room of the operations that send them, as in every backend
//! crate); the `statements!` table below names each one.
//!
//! Values always travel as bound parameters. MySQL's placeholders are positional (`?`, each one
//! its own parameter), so every statement's comment lists its parameters in order. The listing
//! statement is built per call with sea-query from only the filters given ([`list`]);
//! a representative set of its shapes is listed here. The DDL templates live in
//! [`crate::migrate`].

use chokaq_core::{validate, Result};

/// Every statement the backend can send (migrations, listings and test support included),
/// named and rendered for the schema `schema`: what the grammar check parses.
///
/// ```
/// let all = chokaq_mysql::all_statements("chokaq_grammar")?;
/// assert!(all.iter().any(|(name, sql)| name == "claim_pick" && sql.contains("`chokaq_grammar`.jobs_hot")));
/// # Ok::<(), chokaq_core::Error>(())
/// ```
pub fn all_statements(schema: &str) -> Result<Vec<(String, String)>> {
    Ok(Statements::new(schema)?.into_named())
}

/// The server's own databases (any case): `migrate` must never write into them (issue 40, L8).
const MYSQL_SYSTEM_DATABASES: [&str; 4] = ["mysql", "performance_schema", "sys", "information_schema"];

/// The schema name as a quoted identifier, after validation (so splicing it is safe).
pub(crate) fn quote(schema: &str) -> Result<String> {
    validate::schema_name(schema)?;
    if MYSQL_SYSTEM_DATABASES.iter().any(|r| r.eq_ignore_ascii_case(schema)) {
        return Err(chokaq_core::Error::invalid(format!(
            "invalid schema name {schema:?}: reserved, it is the MariaDB / MySQL server's own system database \
             (reserved: {})",
            MYSQL_SYSTEM_DATABASES.join(", ")
        )));
    }
    Ok(format!("`{schema}`"))
}

/// The one substitution: `{schema}` becomes the quoted schema name.
pub(crate) fn render(template: &str, quoted_schema: &str) -> String {
    template.replace("{schema}", quoted_schema)
}

/// The database clock in microseconds, as an expression: `NOW(6)` is the time the statement
/// began, so every use of it in one statement reads the same value.
macro_rules! now_us {
    () => {
        "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"
    };
}

/// Most rows one set-based statement names (`{ids}`, `{pairs}`, `{cases}`); a longer batch
/// runs in chunks of this size, in the same transaction and in id order. Below MariaDB's
/// `in_predicate_conversion_threshold` (1,000), so an `IN` list stays a primary-key range.
pub(crate) const CHUNK: usize = 512;

/// The number of rows a set-based statement is built for: `n` rounded up to a power of two
/// (at most [`CHUNK`]), so a connection's statement cache holds a few shapes per statement,
/// not one per batch size; the list is padded by repeating its last element, which changes
/// no result (an `IN` list or a `CASE` naming a row twice matches it once).
pub(crate) fn shape(n: usize) -> usize {
    n.max(1).next_power_of_two().min(CHUNK)
}

/// Expands a set-based template for `n` rows: `{ids}` becomes `?, ?, ...`, `{pairs}` becomes
/// `(?, ?), (?, ?), ...` and `{cases}` `WHEN ? THEN ? WHEN ? THEN ? ...`, `n` of each.
pub(crate) fn expand(template: &str, n: usize) -> String {
    let list = |item: &str, sep: &str| vec![item; n.max(1)].join(sep);
    template
        .replace("{ids}", &list("?", ", "))
        .replace("{pairs}", &list("(?, ?)", ", "))
        .replace("{cases}", &list("WHEN ? THEN ?", " "))
}

/// The claim's first statement for `n` queues: one branch of `claim_probe` per queue.
pub(crate) fn probe(template: &str, n: usize) -> String {
    vec![template; n.max(1)].join(" UNION ALL ")
}

/// The columns shared by the hot, archive and dead-letter tables, in one fixed order.
macro_rules! cols {
    () => {
        "id, queue, kind, payload, tags, idempotency_key, priority, status, attempt, max_attempts, lease, \
         worker_id, heartbeat_at, scheduled_at, created_at, started_at, updated_at, last_error, cancel_requested, \
         created_by, concurrency_key"
    };
}

/// A job read from one table with `finished_at` and `reason` (NULL where the table has none).
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

/// Per-table row counts of a set of ids: (a JSON array of the ids in hex).
macro_rules! presence {
    ($table:literal) => {
        concat!(
            "SELECT t.id, count(*) AS n FROM JSON_TABLE(?, '$[*]' COLUMNS (hex_id CHAR(32) PATH '$')) AS j \
             JOIN {schema}.",
            $table,
            " AS t ON t.id = UNHEX(j.hex_id) GROUP BY t.id"
        )
    };
}

/// The columns of a `schedules` row.
macro_rules! schedule_cols {
    () => {
        "name, spec, time_zone, group_name, next_tick, last_enqueued_tick, enabled, stale, created_at, updated_at"
    };
}

/// The time a zombie may go without a heartbeat, for the job row `h`: its queue's, else
/// (a parameter) the default.
macro_rules! zombie_timeout {
    () => {
        "COALESCE((SELECT q.zombie_timeout_us FROM {schema}.queues AS q WHERE q.name = h.queue), ?)"
    };
}

/// Declares [`Statements`] (one field per statement, plus the migrations and the listings) and
/// the list of them all, from one table of `name: template` entries, so no statement can be
/// left out of [`all_statements`].
/// Throughput per queue and minute; `$queue` narrows every branch to one queue.
macro_rules! throughput {
    ($queue:literal) => {
        concat!(
            "SELECT queue, minute, CAST(sum(finished) AS SIGNED) AS finished, CAST(sum(failed) AS SIGNED) AS failed, \
             CAST(sum(retried) AS SIGNED) AS retried FROM (\
             SELECT queue, finished_at - MOD(finished_at, ?) AS minute, count(*) AS finished, 0 AS failed, \
             0 AS retried FROM {schema}.jobs_archive WHERE finished_at >= ?",
            $queue,
            " GROUP BY minute, queue UNION ALL \
             SELECT queue, finished_at - MOD(finished_at, ?) AS minute, 0, count(*), 0 FROM {schema}.jobs_dlq \
             WHERE finished_at >= ? AND reason <> 'cancelled'",
            $queue,
            " GROUP BY minute, queue UNION ALL \
             SELECT queue, updated_at - MOD(updated_at, ?) AS minute, 0, 0, count(*) FROM {schema}.jobs_hot \
             WHERE status IN (0, 3) AND attempt > 0 AND last_error IS NOT NULL AND updated_at >= ?",
            $queue,
            " GROUP BY minute, queue) AS t GROUP BY minute, queue ORDER BY minute, queue"
        )
    };
}

macro_rules! statements {
    ($( $(#[doc = $doc:literal])* $name:ident: $template:expr, )*) => {
        /// Every statement of the backend, rendered for one schema, built once at connect.
        pub(crate) struct Statements {
            /// The DDL of [`crate::migrate::MIGRATIONS`], in order, with their names.
            pub(crate) migrations: Vec<(&'static str, String)>,
            /// The listing statement's builder ([`list`]).
            pub(crate) lists: list::Lists,
            $( $(#[doc = $doc])* pub(crate) $name: String, )*
        }

        impl Statements {
            /// Renders every template for `schema` (validated first).
            pub(crate) fn new(schema: &str) -> Result<Self> {
                let quoted = quote(schema)?;
                Ok(Statements {
                    migrations: crate::migrate::MIGRATIONS.iter().map(|(n, t)| (*n, render(t, &quoted))).collect(),
                    lists: list::Lists::new(schema),
                    $( $name: render($template, &quoted), )*
                })
            }

            /// Every statement, migrations first, then the fixed ones, then the listings.
            fn into_named(self) -> Vec<(String, String)> {
                let mut all: Vec<(String, String)> =
                    self.migrations.into_iter().map(|(n, s)| (n.to_string(), s)).collect();
                $( all.push((stringify!($name).to_string(), self.$name)); )*
                // The set-based templates as sent for two rows (two queues for the probe).
                for (name, sql) in &mut all {
                    *sql = if name == "claim_probe" { probe(sql, 2) } else { expand(sql, 2) };
                }
                all.extend(self.lists.into_named());
                all
            }
        }
    };
}

// The statements of each room, one file each (`sql/<room>.rs`), declared after the macros
// above, which their templates use.
mod admin;
mod claim;
mod enqueue;
mod inspect;
mod lease;
mod migrate;
mod output;
mod periodic;
mod testing;
mod workers;

statements! {
    /// Run by every session the backend opens: READ COMMITTED (InnoDB's default is REPEATABLE
    /// READ, whose snapshot would hide claims committed meanwhile from the cap count and whose
    /// gap locks make racing writers deadlock).
    session_isolation: "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    /// The database clock in microseconds since the epoch (sessions run at UTC).
    db_now: "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us",
    /// This session's id, for `kill_connections`.
    connection_id: "SELECT CONNECTION_ID()",
    /// Begins a reader's transaction: one snapshot for every statement of it (the level set
    /// applies to this transaction only; plain reads take no locks at any level).
    read_snapshot: "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION",
    /// A read bounded by a deadline (`bounded.rs`): its session's id (for the kill on drop) and
    /// the server's version (MariaDB or MySQL: which time limit to set), in one round trip.
    bounded_setup: "SELECT CONNECTION_ID() AS id, VERSION() AS version",
    /// MariaDB's limit on every statement of the session, in seconds (`?`: the time left).
    bounded_limit_mariadb: "SET SESSION max_statement_time = ?",
    /// MySQL 8's limit on the session's read-only SELECTs, in milliseconds.
    bounded_limit_mysql: "SET SESSION max_execution_time = ?",
    /// Back to the server's default before the session returns to the pool.
    bounded_reset_mariadb: "SET SESSION max_statement_time = DEFAULT",
    bounded_reset_mysql: "SET SESSION max_execution_time = DEFAULT",
    /// Stops the statement of a dropped bounded read (`?`: its session's id), sent on a
    /// connection of its own while the read's session is still open.
    bounded_kill: "KILL QUERY ?",
    newest_version: migrate::NEWEST_VERSION,
    record_version: migrate::RECORD_VERSION,
    find_by_key: enqueue::FIND_BY_KEY,
    insert_job: enqueue::INSERT_JOB,
    unique_claim_key: enqueue::UNIQUE_CLAIM_KEY,
    unique_holder: enqueue::UNIQUE_HOLDER,
    unique_take: enqueue::UNIQUE_TAKE,
    unique_of: enqueue::UNIQUE_OF,
    unique_prune_from: enqueue::UNIQUE_PRUNE_FROM,
    unique_prune_wrap: enqueue::UNIQUE_PRUNE_WRAP,
    unique_prune: enqueue::UNIQUE_PRUNE,
    claim_probe: claim::CLAIM_PROBE,
    queue_settings: claim::QUEUE_SETTINGS,
    lock_queue: claim::LOCK_QUEUE,
    share_queue: claim::SHARE_QUEUE,
    active_count: claim::ACTIVE_COUNT,
    key_running: claim::KEY_RUNNING,
    window_total: claim::WINDOW_TOTAL,
    window_by_key: claim::WINDOW_BY_KEY,
    due_scheduled: claim::DUE_SCHEDULED,
    promote_many: claim::PROMOTE_MANY,
    claim_pick: claim::CLAIM_PICK,
    claim_pick_keyed: claim::CLAIM_PICK_KEYED,
    log_starts_queue: claim::LOG_STARTS_QUEUE,
    log_starts_key: claim::LOG_STARTS_KEY,
    next_leases: claim::NEXT_LEASES,
    claim_mark: claim::CLAIM_MARK,
    lock_held: lease::LOCK_HELD,
    record_output: output::RECORD_OUTPUT,
    get_output: output::GET_OUTPUT,
    start: lease::START,
    heartbeat: lease::HEARTBEAT,
    start_many: lease::START_MANY,
    started_many: lease::STARTED_MANY,
    archive_many: lease::ARCHIVE_MANY,
    delete_many: lease::DELETE_MANY,
    completed_many: lease::COMPLETED_MANY,
    fail_standing: lease::FAIL_STANDING,
    delete_hot: lease::DELETE_HOT,
    back_to_pending: lease::BACK_TO_PENDING,
    dead_letter: lease::DEAD_LETTER,
    release: lease::RELEASE,
    rescue_lock: admin::RESCUE_LOCK,
    find_expired_fetched: admin::FIND_EXPIRED_FETCHED,
    release_fetched: admin::RELEASE_FETCHED,
    find_expired_holds: admin::FIND_EXPIRED_HOLDS,
    release_expired_hold: admin::RELEASE_EXPIRED_HOLD,
    find_zombies: admin::FIND_ZOMBIES,
    retry_zombie: admin::RETRY_ZOMBIE,
    starts_queues: admin::STARTS_QUEUES,
    prune_starts: admin::PRUNE_STARTS,
    renumber_starts: admin::RENUMBER_STARTS,
    number_all_starts: admin::NUMBER_ALL_STARTS,
    hot_status: admin::HOT_STATUS,
    request_cancel: admin::REQUEST_CANCEL,
    insert_queue: admin::INSERT_QUEUE,
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
    stats_keys: inspect::STATS_KEYS,
    get_hot: inspect::GET_HOT,
    get_archive: inspect::GET_ARCHIVE,
    get_dead: inspect::GET_DEAD,
    register_worker: workers::REGISTER_WORKER,
    deregister_worker: workers::DEREGISTER_WORKER,
    list_workers: workers::LIST_WORKERS,
    prune_workers: workers::PRUNE_WORKERS,
    throughput_all: workers::THROUGHPUT_ALL,
    throughput_queue: workers::THROUGHPUT_QUEUE,
    schedule_lock: periodic::SCHEDULE_LOCK,
    schedule_get: periodic::SCHEDULE_GET,
    schedule_list: periodic::SCHEDULE_LIST,
    schedule_insert: periodic::SCHEDULE_INSERT,
    schedule_update: periodic::SCHEDULE_UPDATE,
    schedule_tick: periodic::SCHEDULE_TICK,
    schedule_set_enabled: periodic::SCHEDULE_SET_ENABLED,
    schedule_mark_stale: periodic::SCHEDULE_MARK_STALE,
    force_worker_seen: testing::FORCE_WORKER_SEEN,
    force_finished_at: testing::FORCE_FINISHED_AT,
    force: testing::FORCE,
    add_starts_last: testing::ADD_STARTS_LAST,
    add_starts: testing::ADD_STARTS,
    handler_reads: testing::HANDLER_READS,
    presence_hot: testing::PRESENCE_HOT,
    presence_archive: testing::PRESENCE_ARCHIVE,
    presence_dead: testing::PRESENCE_DEAD,
    isolation_level: testing::ISOLATION_LEVEL,
    isolation_level_old: testing::ISOLATION_LEVEL_OLD,
    kill_connection: testing::KILL_CONNECTION,
    drop_schema: testing::DROP_SCHEMA,
}

pub(crate) mod list;
#[cfg(test)]
mod tests;
