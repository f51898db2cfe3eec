//! Every SQL statement of the backend, and nothing else builds SQL text. Each is a template
//! with `{schema}` (the validated, quoted schema name) and `{channel}` (the NOTIFY channel,
//! `<schema>_jobs`), substituted by [`render`] once, when the backend is built, into a
//! [`Statements`] set; every value is a bound parameter. Optional filters of the purge are
//! NULL-able parameters (`$n::text IS NULL OR queue = $n`). The one statement assembled per call
//! is the `list_jobs` page, built with sea-query from fixed parts (`chokaq_core::listing`,
//! [`list_query`]): only the predicates of the filters given, values bound.

use chokaq_core::listing;
use chokaq_core::{validate, JobTable, Result};

use crate::migrate::{FUNCTIONS, MIGRATIONS, MIGRATION_NAMES};

/// Columns copied by a move from the hot table into the archive.
macro_rules! archive_cols {
    () => {
        "id, queue, kind, payload, output, tags, concurrency_key, idempotency_key, priority, attempt, max_attempts, \
         lease, worker_id, heartbeat_at, scheduled_at, created_at, started_at, updated_at, last_error, created_by, \
         finished_at"
    };
}

/// Columns of a dead-letter row written by a move.
macro_rules! dlq_cols {
    () => {
        "id, queue, kind, payload, output, tags, concurrency_key, idempotency_key, priority, attempt, max_attempts, \
         lease, worker_id, heartbeat_at, scheduled_at, created_at, started_at, updated_at, created_by, finished_at, \
         reason, error"
    };
}

/// Values for [`dlq_cols`] from a deleted hot row `g`, followed by the reason and error.
macro_rules! dlq_vals {
    () => {
        "g.id, g.queue, g.kind, g.payload, g.output, g.tags, g.concurrency_key, g.idempotency_key, g.priority, \
         g.attempt, g.max_attempts, g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, g.started_at, now(), g.created_by, now()"
    };
}

/// Locks the hot rows whose lease the caller still holds, in id order, with their status and
/// cancel flag (read by the lock: the latest committed version).
/// `$1` worker, `$2` ids, `$3` leases; `$status` is the condition on the status the guard
/// expects (`"= 1"`, `"IN (1, 2)"`).
macro_rules! guard {
    ($status:literal) => {
        concat!(
            "SELECT h.id, h.status, h.cancel_requested FROM {schema}.jobs_hot h \
               JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON h.id = u.id AND h.lease = u.lease \
              WHERE h.worker_id = $1 AND h.status ",
            $status,
            " ORDER BY h.id FOR UPDATE OF h"
        )
    };
}

/// Values for [`archive_cols`] from a deleted hot row `g`, completed: a Fetched row is taken as
/// if it was started now (its run counts: `attempt + 1`; `started_at` now, never an earlier
/// attempt's, which a held or released row still carries: issue 36 hole 8,
/// `hold_held_outcome_records_its_own_start`).
macro_rules! archive_vals_started {
    () => {
        "g.id, g.queue, g.kind, g.payload, g.output, g.tags, g.concurrency_key, g.idempotency_key, g.priority, \
         CASE WHEN g.status = 1 THEN g.attempt + 1 ELSE g.attempt END, g.max_attempts, g.lease, g.worker_id, \
         g.heartbeat_at, g.scheduled_at, g.created_at, \
         CASE WHEN g.status = 1 THEN now() ELSE coalesce(g.started_at, now()) END, now(), g.last_error, \
         g.created_by, now()"
    };
}

/// A key's live rows, as enqueue and the promotions count them against its parking depth
/// (`$q` queue, `$k` key, `$upto` SQL expressions): its Pending rows, at most `$upto` (no count
/// needs more, and a key may hold a long Pending backlog from before its queue had a cap), plus
/// its Fetched and Processing rows. Two probes of small indexes (migration 14):
/// `jobs_hot_key_pending_idx` and `jobs_hot_active_idx`. (functions.sql's `promote_blocked`
/// writes the same count out.)
macro_rules! key_live {
    ($q:literal, $k:literal, $upto:literal) => {
        concat!(
            "((SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs_hot y WHERE y.queue = ",
            $q,
            " AND y.concurrency_key = ",
            $k,
            " AND y.status = 0 LIMIT ",
            $upto,
            ") z) + (SELECT count(*) FROM {schema}.jobs_hot y WHERE y.queue = ",
            $q,
            " AND y.concurrency_key = ",
            $k,
            " AND y.status IN (1, 2)))"
        )
    };
}

/// The promotion after a move, as two CTEs (`fr`, `promoted`): `$freed` names the rows the
/// statement moves out of Pending, Fetched or Processing (queue, concurrency_key); for each
/// keyed one, up to its parking depth (`key_depth(cap)`, functions.sql) less what the key still
/// holds (the statement's snapshot counts the
/// moved rows: they are added back) of the key's Blocked rows become Pending again, in claim
/// order, skipping rows another session holds. Keyless moves read nothing here. An index
/// optimisation only (migration 13): the claim's guard keeps the cap.
macro_rules! promote {
    ($freed:literal) => {
        concat!(
            "fr AS (SELECT f.queue, f.concurrency_key AS k, count(*) AS n FROM ",
            $freed,
            " f
         WHERE f.concurrency_key IS NOT NULL GROUP BY f.queue, f.concurrency_key),
     promoted AS (
        UPDATE {schema}.jobs_hot h SET status = CASE WHEN h.due_at > now() THEN 3 ELSE 0 END
           WHERE h.status = 4 AND h.id = ANY (ARRAY(SELECT x.id FROM fr LEFT JOIN {schema}.queues c ON c.name = fr.queue
                 CROSS JOIN LATERAL (
                       SELECT x.id FROM {schema}.jobs_hot x
                        WHERE x.queue = fr.queue AND x.concurrency_key = fr.k AND x.status = 4
                        ORDER BY x.priority DESC, x.due_at, x.id
                        LIMIT CASE WHEN c.key_max_workers IS NULL THEN NULL
                                   ELSE greatest(0, {schema}.key_depth(c.key_max_workers) + fr.n - ",
            key_live!("fr.queue", "fr.k", "{schema}.key_depth(c.key_max_workers) + fr.n"),
            ")
                              END
                          FOR UPDATE SKIP LOCKED) x))
     )"
        )
    };
}

/// Columns of a `queues` row. `updated_at` '-infinity' marks a row a claim created (no control
/// has set anything): it reads as none, as for a queue with no row.
macro_rules! queue_cols {
    () => {
        "name, max_workers, is_paused, is_active, zombie_timeout_ms, zombie_policy, fetched_timeout_ms, \
         key_max_workers, rate_jobs, rate_per_ms, rate_by_key, nullif(updated_at, '-infinity') AS updated_at"
    };
}

/// The projection of a [`chokaq_core::JobRecord`] from each table (same columns, same order).
macro_rules! hot_record {
    ($payload:literal) => {
        concat!(
            "'hot'::text AS loc, id, queue, kind, ",
            $payload,
            " AS payload, tags, concurrency_key, idempotency_key, priority, \
             CASE WHEN status IN (3, 4, 5) THEN 0::int2 ELSE status END AS status, \
             NULL::text AS reason, attempt, max_attempts, lease, worker_id, scheduled_at, created_at, started_at, \
             heartbeat_at, updated_at, NULL::timestamptz AS finished_at, last_error, cancel_requested, created_by"
        )
    };
}
macro_rules! archive_record {
    ($payload:literal) => {
        concat!(
            "'archive'::text AS loc, id, queue, kind, ",
            $payload,
            " AS payload, tags, concurrency_key, idempotency_key, priority, \
             NULL::int2 AS status, NULL::text AS reason, attempt, max_attempts, lease, worker_id, scheduled_at, \
             created_at, started_at, heartbeat_at, updated_at, finished_at, last_error, false AS cancel_requested, \
             created_by"
        )
    };
}
macro_rules! dlq_record {
    ($payload:literal) => {
        concat!(
            "'dead'::text AS loc, id, queue, kind, ",
            $payload,
            " AS payload, tags, concurrency_key, idempotency_key, priority, NULL::int2 AS status, \
             reason, attempt, max_attempts, lease, worker_id, scheduled_at, created_at, started_at, heartbeat_at, \
             updated_at, finished_at, error AS last_error, false AS cancel_requested, created_by"
        )
    };
}

// The statements of each room, one file each (`sql/<room>.rs`); they use the macros above
// (declared after them).
mod admin;
mod batch;
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
mod workflow;
use admin::*;
use batch::*;
use claim::*;
use enqueue::*;
use inspect::*;
use lease::*;
pub(crate) use list::list_query;
use migrate::*;
use output::*;
use periodic::*;
use testing::*;
use workers::*;
use workflow::*;

// After the macros above, which it uses.
#[cfg(feature = "fault-injection")]
mod faults;
#[cfg(feature = "fault-injection")]
pub use faults::Faults;

/// Declares [`Statements`]: one field per statement, rendered from its template by
/// [`Statements::new`] and listed with its name by [`Statements::named`], so no statement can be
/// left out of [`all_statements`].
macro_rules! statements {
    ($($name:ident = $template:expr;)*) => {
        /// Every statement of the backend rendered for one schema, built once per backend.
        pub(crate) struct Statements {
            $(pub(crate) $name: String,)*
            /// The migration scripts of [`MIGRATIONS`], in the same order.
            pub(crate) migrations: Vec<String>,
            /// The repeatable functions script ([`FUNCTIONS`]).
            pub(crate) functions: String,
        }

        impl Statements {
            /// The statements for `schema`, which the caller has validated.
            pub(crate) fn new(schema: &str) -> Self {
                Statements {
                    $($name: render($template, schema),)*
                    migrations: MIGRATIONS.iter().map(|m| render(m.sql, schema)).collect(),
                    functions: render(FUNCTIONS, schema),
                }
            }

            /// Every statement with its name, the migration scripts last (`migration_0001_init`, …,
            /// then `functions`).
            fn named(&self) -> Vec<(&'static str, String)> {
                let mut all = vec![$((stringify!($name), self.$name.clone()),)*];
                all.extend(MIGRATION_NAMES.iter().copied().zip(self.migrations.iter().cloned()));
                all.push(("functions", self.functions.clone()));
                all
            }
        }
    };
}

statements! {
    enqueue = ENQUEUE;
    lookup_keys = LOOKUP_KEYS;
    unique_holders = UNIQUE_HOLDERS;
    lookup_hot_unique = LOOKUP_HOT_UNIQUE;
    unique_of_hot = UNIQUE_OF_HOT;
    unique_lock = UNIQUE_LOCK;
    unique_take = UNIQUE_TAKE;
    unique_of = UNIQUE_OF;
    unique_prune_lock = UNIQUE_PRUNE_LOCK;
    unique_prune = UNIQUE_PRUNE;
    claim = CLAIM;
    complete_and_claim = COMPLETE_AND_CLAIM;
    start = START;
    heartbeat = HEARTBEAT;
    release = RELEASE;
    complete = COMPLETE;
    complete_standing = COMPLETE_STANDING;
    fail = FAIL;
    fail_standing = FAIL_STANDING;
    record_output = RECORD_OUTPUT;
    get_output = GET_OUTPUT;
    dead_undecodable = DEAD_UNDECODABLE;
    cancel = CANCEL;
    rescue_lock = RESCUE_LOCK;
    rescue_fetched = RESCUE_FETCHED;
    rescue_zombies = RESCUE_ZOMBIES;
    rescue_sweep = RESCUE_SWEEP;
    rescue_prune_starts = RESCUE_PRUNE_STARTS;
    control_ensure = CONTROL_ENSURE;
    control_lock = CONTROL_LOCK;
    control_paused = CONTROL_PAUSED;
    control_active = CONTROL_ACTIVE;
    control_max_workers = CONTROL_MAX_WORKERS;
    control_zombie_timeout = CONTROL_ZOMBIE_TIMEOUT;
    control_fetched_timeout = CONTROL_FETCHED_TIMEOUT;
    control_key_max_workers = CONTROL_KEY_MAX_WORKERS;
    control_rate_renumber = CONTROL_RATE_RENUMBER;
    control_rate_limit = CONTROL_RATE_LIMIT;
    notify_queues = NOTIFY_QUEUES;
    tx_status = TX_STATUS;
    control_zombie_policy = CONTROL_ZOMBIE_POLICY;
    queue_settings = QUEUE_SETTINGS;
    requeue = REQUEUE;
    stats = STATS;
    stats_estimated = STATS_ESTIMATED;
    no_jit = NO_JIT;
    bounded_begin = BOUNDED_BEGIN;
    bounded_setup = BOUNDED_SETUP;
    bounded_commit = BOUNDED_COMMIT;
    bounded_cancel = BOUNDED_CANCEL;
    get_job = GET_JOB;
    purge_archive = PURGE_ARCHIVE;
    purge_dlq = PURGE_DLQ;
    register_worker = REGISTER_WORKER;
    deregister_worker = DEREGISTER_WORKER;
    list_workers = LIST_WORKERS;
    prune_workers = PRUNE_WORKERS;
    throughput_all = THROUGHPUT_ALL;
    throughput_queue = THROUGHPUT_QUEUE;
    force_worker_seen = FORCE_WORKER_SEEN;
    force_finished_at = FORCE_FINISHED_AT;
    migrate_lock_timeout = MIGRATE_LOCK_TIMEOUT;
    no_statement_timeout = NO_STATEMENT_TIMEOUT;
    migrate_lock = MIGRATE_LOCK;
    locks_table_exists = LOCKS_TABLE_EXISTS;
    migrate_row_lock = MIGRATE_ROW_LOCK;
    create_schema = CREATE_SCHEMA;
    create_versions = CREATE_VERSIONS;
    current_version = CURRENT_VERSION;
    insert_version = INSERT_VERSION;
    repeatable_checksum = REPEATABLE_CHECKSUM;
    repeatable_record = REPEATABLE_RECORD;
    db_now = DB_NOW;
    force = FORCE;
    add_starts_limit = ADD_STARTS_LIMIT;
    add_starts_last = ADD_STARTS_LAST;
    add_starts = ADD_STARTS;
    presence_many = PRESENCE_MANY;
    kill_connections = KILL_CONNECTIONS;
    drop_schema = DROP_SCHEMA;
    schedule_register = SCHEDULE_REGISTER;
    schedule_get = SCHEDULE_GET;
    schedule_list = SCHEDULE_LIST;
    schedule_tick = SCHEDULE_TICK;
    schedule_set_enabled = SCHEDULE_SET_ENABLED;
    schedule_mark_stale = SCHEDULE_MARK_STALE;
    rr_role_create = RR_ROLE_CREATE;
    rr_role_drop = RR_ROLE_DROP;
    session_isolation = SESSION_ISOLATION;
    enqueue_workflow = ENQUEUE_WORKFLOW;
    get_workflow = GET_WORKFLOW;
    workflow_of = WORKFLOW_OF;
    workflow_live_tasks = WORKFLOW_LIVE_TASKS;
    enqueue_batch = ENQUEUE_BATCH;
    add_to_batch = ADD_TO_BATCH;
    get_batch = GET_BATCH;
}

/// FNV-1a, 64 bits: a stable short hash for identifiers derived from a schema name.
pub(crate) fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The test-support role of a schema (`TestSupport::with_repeatable_read_default`), unquoted.
pub(crate) fn rr_role(schema: &str) -> String {
    format!("chokaq_rr_{}", short_hash(schema))
}

/// The NOTIFY channel of a schema.
pub(crate) fn channel(schema: &str) -> String {
    format!("{schema}_jobs")
}

/// The one substitution: `{schema}` becomes the schema name quoted as an identifier (it is
/// validated first, so it has no quote in it; quoting keeps its case) and `{channel}` the
/// schema's NOTIFY channel.
pub(crate) fn render(template: &str, schema: &str) -> String {
    template
        .replace("{schema}", &format!("\"{schema}\""))
        .replace("{channel}", &channel(schema))
        .replace("{rr_role}", &format!("\"{}\"", rr_role(schema)))
}

/// Every statement the backend can send (the migration scripts included, each file as one
/// entry), named and rendered for `schema`: for checking them with an SQL parser.
///
/// ```
/// let all = chokaq_postgres::all_statements("jobs")?;
/// let (_, claim) = all.iter().find(|(name, _)| *name == "claim").unwrap();
/// assert_eq!(claim, r#"SELECT * FROM "jobs".claim($1, $2, $3, $4)"#);
/// # Ok::<(), chokaq_core::Error>(())
/// ```
pub fn all_statements(schema: &str) -> Result<Vec<(&'static str, String)>> {
    validate::schema_name(schema)?;
    let mut all = Statements::new(schema).named();
    for table in [JobTable::Hot, JobTable::Archive, JobTable::DeadLetter] {
        for (name, p) in listing::grammar_shapes(table) {
            all.push((name, list_query(schema, &p)?.sql));
        }
    }
    Ok(all)
}

#[cfg(test)]
mod tests;
