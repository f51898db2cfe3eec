//! Every SQL statement the MySQL backend sends; nothing else builds SQL text.
//!
//! Each statement is a template that names its tables `{schema}.table`. [`render`], the one
//! substitution, replaces `{schema}` with the validated, backquoted schema (database) name, and
//! [`Statements::new`] renders the whole set once, when the backend connects.
//!
//! Values always travel as bound parameters. MySQL's placeholders are positional (`?`, each one
//! its own parameter), so every statement's comment lists its parameters in order. The listing
//! statement is built per call with sea-query from only the filters given ([`list`]);
//! a representative set of its shapes is listed here. The DDL templates live in
//! [`crate::migrate`].

use chokaq_core::{validate, Result};

use crate::migrate;

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
                    migrations: migrate::MIGRATIONS.iter().map(|(n, t)| (*n, render(t, &quoted))).collect(),
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

statements! {
    // --- sessions ----------------------------------------------------------------------------
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

    // --- migrate ---------------------------------------------------------------------------
    /// The newest applied schema version.
    newest_version: "SELECT max(version) FROM {schema}.versions",
    /// (version, now).
    record_version:
        "INSERT INTO {schema}.versions (version, applied_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE version = version",

    // --- enqueue ---------------------------------------------------------------------------
    /// The live job holding an idempotency key in a queue: (queue, key).
    find_by_key: "SELECT id FROM {schema}.jobs_hot WHERE queue = ? AND idempotency_key = ?",
    /// (id, queue, kind, payload, tags, key, priority, scheduled at, now, max attempts,
    /// scheduled at, now, now, created by, concurrency key): Scheduled (3) when due later than
    /// now.
    insert_job: "INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, idempotency_key, priority, status, \
         attempt, max_attempts, scheduled_at, created_at, updated_at, created_by, concurrency_key) \
         VALUES (?, ?, ?, ?, ?, ?, ?, CASE WHEN ? > ? THEN 3 ELSE 0 END, 0, ?, ?, ?, ?, ?, ?)",

    // --- claim -----------------------------------------------------------------------------
    /// The claim's first statement, one branch per queue joined by `UNION ALL` ([`probe`]),
    /// plain reads (no lock), sent before the transaction begins: the database clock, the
    /// queue's control row (`known` 0 and NULLs when it has none yet) and whether it has a due
    /// Pending (0) / Scheduled (3) job by that clock (`NOW(6)` is one value in one statement):
    /// (branch index, queue, queue, queue) per queue.
    claim_probe: concat!(
        "SELECT ? AS i, ", now_us!(), " AS now_us, q.name IS NOT NULL AS known, q.max_workers, q.is_paused, \
         q.is_active, q.key_max_workers, q.rate_jobs, EXISTS (SELECT 1 FROM {schema}.jobs_hot WHERE queue = ? AND status = 0 AND due_at <= ",
        now_us!(),
        ") AS pending_due, EXISTS (SELECT 1 FROM {schema}.jobs_hot WHERE queue = ? AND status = 3 AND due_at <= ",
        now_us!(),
        ") AS scheduled_due FROM (SELECT 1 AS one) AS d LEFT JOIN {schema}.queues AS q ON q.name = ?"
    ),
    /// A queue's control row.
    queue_settings: "SELECT max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
         fetched_timeout_us, updated_at, key_max_workers, rate_jobs, rate_per_ms, rate_by_key FROM {schema}.queues \
         WHERE name = ?",
    /// Locks a guarded queue's control row (a queue cap, a key cap or a rate limit set) and
    /// reads its settings as they stand now (a locking read returns the latest committed
    /// version); claimers of the queue take turns here: (queue).
    lock_queue: "SELECT max_workers, is_paused, is_active, key_max_workers, rate_jobs, rate_per_ms, rate_by_key \
         FROM {schema}.queues WHERE name = ? FOR UPDATE",
    /// Share-locks an unguarded queue's control row, returning its guards: a control that
    /// changes the row waits for the claims in flight, and a claim that starts after it reads
    /// the new settings (`cap_first_set_binds_racing_claimers`): (queue).
    share_queue: "SELECT max_workers, is_paused, is_active, key_max_workers, rate_jobs \
         FROM {schema}.queues WHERE name = ? LOCK IN SHARE MODE",
    /// Fetched + Processing jobs of a queue, read after the queue row's lock (READ COMMITTED:
    /// a fresh snapshot sees every claim the previous holder committed): (queue).
    active_count: "SELECT count(*) FROM {schema}.jobs_hot WHERE queue = ? AND status IN (1, 2)",
    /// Fetched + Processing jobs per concurrency key of a queue (a range of
    /// `jobs_hot_key_running`, as small as the running set), read after the queue row's lock
    /// like `active_count`: (queue).
    key_running: "SELECT running_key AS k, count(*) AS n FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_key_running) \
         WHERE queue = ? AND running_key IS NOT NULL GROUP BY running_key",
    /// The starts a queue-wide rate window holds: every entry of the queue stamped after
    /// `t - per` (later stamps count too), read after the queue row's lock: (queue, t - per).
    window_total: "SELECT count(*) FROM {schema}.starts WHERE queue = ? AND stamp > ?",
    /// The same per key (entries without a key are not in a key's window): (queue, t - per).
    window_by_key: "SELECT ckey AS k, count(*) AS n FROM {schema}.starts WHERE queue = ? AND stamp > ? \
         AND ckey IS NOT NULL GROUP BY ckey",
    /// The due Scheduled jobs of a queue, at most 1,000 per call (a plain read of the
    /// `jobs_hot_due` range): (queue, now).
    due_scheduled: "SELECT id FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_due) \
         WHERE queue = ? AND status = 3 AND due_at <= ? ORDER BY due_at LIMIT 1000",
    /// Scheduled -> Pending for due jobs named by primary key, in id order (an update that
    /// searched for them would lock rows it scanned, and a claim skips a row locked even for a
    /// moment): (ids).
    promote_many: "UPDATE {schema}.jobs_hot FORCE INDEX (`PRIMARY`) SET status = 0 WHERE id IN ({ids}) AND status = 3",
    /// A queue's due Pending jobs in claim order, locked, skipping rows others hold, read
    /// whole (the claim returns them as marked, with no read-back): (queue, now, limit).
    claim_pick: concat!(
        "SELECT ",
        cols!(),
        ", due_at, expired_holds FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_claim) WHERE queue = ? AND status = 0 \
         AND due_at <= ? ORDER BY priority DESC, due_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
    ),
    /// `claim_pick` for a queue with a key cap or a per-key rate limit: keys that may take no
    /// more (a JSON array of them) are left out, so they hold back nobody; with keyed 0 every
    /// keyed job is (a key cap of 0); and it goes on after a cursor (the last row of the
    /// previous pick of this claim, in claim order): (queue, now, keyed 0/1, full keys JSON,
    /// cursor 0/1, priority, priority, due, due, id, limit).
    claim_pick_keyed: concat!(
        "SELECT ",
        cols!(),
        ", due_at, expired_holds FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_claim) WHERE queue = ? AND status = 0 \
         AND due_at <= ? AND (concurrency_key IS NULL OR (? = 1 AND concurrency_key NOT IN \
         (SELECT j.k FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) PATH '$')) AS j))) \
         AND (? = 0 OR priority < ? OR (priority = ? AND (due_at > ? OR (due_at = ? AND id > ?)))) \
         ORDER BY priority DESC, due_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
    ),
    /// Appends the starts of the jobs this claim took from rate-limited queues (rows it holds,
    /// marked already) to the log, stamped with the claim's time: (stamp, ids).
    log_starts: "INSERT INTO {schema}.starts (queue, ckey, stamp) SELECT queue, concurrency_key, ? \
         FROM {schema}.jobs_hot FORCE INDEX (`PRIMARY`) WHERE id IN ({ids})",
    /// Reserves (n) leases in an autocommitted statement of its own (the counter row's lock is
    /// held only for it); the driver reports the last one as the last insert id.
    next_leases: "UPDATE {schema}.counters SET value = LAST_INSERT_ID(value + ?) WHERE name = 'lease'",
    /// Claims the locked Pending jobs named, each with its own lease, in one statement:
    /// (status, worker, (id, lease) per row, now, start 0/1, start 0/1, now, beat 0/1, now,
    /// ids). Start and Hold set the first heartbeat, Reserve clears it.
    claim_mark: "UPDATE {schema}.jobs_hot FORCE INDEX (`PRIMARY`) SET status = ?, worker_id = ?, lease = CASE id {cases} END, \
         updated_at = ?, attempt = attempt + ?, started_at = CASE WHEN ? = 1 THEN ? ELSE started_at END, \
         heartbeat_at = CASE WHEN ? = 1 THEN ? ELSE NULL END WHERE id IN ({ids}) AND status = 0",

    // --- guarded lease operations ----------------------------------------------------------
    /// Locks a held (Fetched or Processing) job of this lease: (id, lease, worker).
    lock_held: "SELECT status, attempt, max_attempts, cancel_requested FROM {schema}.jobs_hot \
         WHERE id = ? AND lease = ? AND worker_id = ? AND status IN (1, 2) FOR UPDATE",
    /// Fetched -> Processing: (now, now, now, id, lease, worker).
    start: "UPDATE {schema}.jobs_hot SET status = 2, attempt = attempt + 1, started_at = ?, heartbeat_at = ?, \
         updated_at = ? WHERE id = ? AND lease = ? AND worker_id = ? AND status = 1",
    /// (now, now, id): the heartbeat of a job locked by `lock_held`.
    heartbeat: "UPDATE {schema}.jobs_hot SET heartbeat_at = ?, updated_at = ? WHERE id = ?",
    /// The set-based statements below name held rows by lease: `{ids}`, then `{pairs}` of
    /// (id, lease), then the worker. Each scans the primary key (``FORCE INDEX (`PRIMARY`)``,
    /// quoted for sqlfluff; the multi-table form of `DELETE`, the one MySQL takes index hints
    /// in): the `id IN` list is the range it scans and locks, in id order. Left to itself the
    /// optimizer may take the `(id, lease)` pairs as a range of `jobs_hot_lease`, or
    /// `status = 1` as one of `jobs_hot_status` (both seen in EXPLAIN on MariaDB 10.11), and
    /// lock in that index's order. The pairs fence by lease.
    ///
    /// Fetched -> Processing for the Fetched jobs these leases hold, in one autocommitted
    /// statement: (ids, (id, lease) pairs, worker).
    start_many: concat!(
        "UPDATE {schema}.jobs_hot FORCE INDEX (`PRIMARY`) SET status = 2, attempt = attempt + 1, started_at = ",
        now_us!(),
        ", heartbeat_at = ",
        now_us!(),
        ", updated_at = ",
        now_us!(),
        " WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) AND worker_id = ? AND status = 1"
    ),
    /// Which of these leases have their job Processing (started now or by an earlier call with
    /// the same lease): (ids, (id, lease) pairs, worker).
    started_many: "SELECT id FROM {schema}.jobs_hot FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) \
         AND worker_id = ? AND status = 2",
    /// Hot -> archive for the held jobs of these leases, locking them (`FOR UPDATE`: under
    /// READ COMMITTED the source of an `INSERT ... SELECT` is otherwise read without a lock)
    /// in id order: (ids, (id, lease) pairs, worker). A Fetched row is archived as if started
    /// now (`attempt + 1`, `started_at` now, not an earlier attempt's).
    archive_many: concat!(
        "INSERT INTO {schema}.jobs_archive (",
        cols!(),
        ", finished_at) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 2, \
         attempt + (status = 1), max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, \
         CASE WHEN status = 1 THEN ",
        now_us!(),
        " ELSE started_at END, ",
        now_us!(),
        ", last_error, cancel_requested, created_by, concurrency_key, ",
        now_us!(),
        " FROM {schema}.jobs_hot FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) \
         AND worker_id = ? AND status IN (1, 2) FOR UPDATE"
    ),
    /// Deletes the rows `archive_many` copied and locked: (ids, (id, lease) pairs, worker).
    delete_many: "DELETE h FROM {schema}.jobs_hot AS h FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) \
         AND (id, lease) IN ({pairs}) AND worker_id = ? AND status IN (1, 2)",
    /// Which of these leases this worker completed (now or by an earlier call with the same
    /// lease): (ids, (id, lease) pairs, worker).
    completed_many: "SELECT id FROM {schema}.jobs_archive FORCE INDEX (`PRIMARY`) WHERE id IN ({ids}) AND (id, lease) IN ({pairs}) \
         AND worker_id = ?",
    /// The outcome a fail with this lease already wrote: (id, lease, id, lease, worker).
    fail_standing: "SELECT scheduled_at AS at, NULL AS reason FROM {schema}.jobs_hot \
         WHERE id = ? AND lease = ? AND status IN (0, 3) AND scheduled_at IS NOT NULL \
         UNION ALL SELECT NULL AS at, reason FROM {schema}.jobs_dlq \
         WHERE id = ? AND lease = ? AND worker_id = ? AND reason <> 'zombie'",
    /// Removes a moved hot row: (id).
    delete_hot: "DELETE FROM {schema}.jobs_hot WHERE id = ?",
    /// Back to Pending (retry, snooze): (due at, now, due at, now, error or NULL, attempts to
    /// give back, id).
    back_to_pending: "UPDATE {schema}.jobs_hot SET status = CASE WHEN ? > ? THEN 3 ELSE 0 END, \
         worker_id = NULL, scheduled_at = ?, updated_at = ?, heartbeat_at = NULL, cancel_requested = 0, \
         last_error = COALESCE(?, last_error), attempt = GREATEST(attempt - ?, 0) WHERE id = ?",
    /// Hot -> dead-letter for one locked id: (now, error or NULL, now, reason, id).
    dead_letter: concat!(
        "INSERT INTO {schema}.jobs_dlq (",
        cols!(),
        ", finished_at, reason) SELECT id, queue, kind, payload, tags, idempotency_key, priority, status, attempt, \
         max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at, started_at, ?, \
         COALESCE(?, last_error), cancel_requested, created_by, concurrency_key, ?, ? FROM {schema}.jobs_hot \
         WHERE id = ?"
    ),
    /// Fetched -> Pending for a job locked by `lock_held`: (now, id).
    release: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
         updated_at = ? WHERE id = ?",

    // --- rescue ----------------------------------------------------------------------------
    /// The rescue's lock: one rescue at a time, the others return at once.
    rescue_lock: "SELECT name FROM {schema}.locks WHERE name = 'rescue' FOR UPDATE SKIP LOCKED",
    /// Expired reserved Fetched jobs (no heartbeat; the queue's fetched timeout, else the
    /// default): (now, default fetched timeout µs, limit).
    find_expired_fetched: "SELECT h.id FROM {schema}.jobs_hot AS h FORCE INDEX (jobs_hot_status) \
         WHERE h.status = 1 AND h.heartbeat_at IS NULL AND h.updated_at < ? - \
         COALESCE((SELECT q.fetched_timeout_us FROM {schema}.queues AS q WHERE q.name = h.queue), ?) \
         ORDER BY h.updated_at, h.id LIMIT ? FOR UPDATE SKIP LOCKED",
    /// (now, id).
    release_fetched: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, updated_at = ? \
         WHERE id = ?",
    /// Held Fetched jobs whose heartbeat expired by their queue's zombie timeout:
    /// (now, default zombie timeout µs, limit).
    find_expired_holds: concat!(
        "SELECT h.id, h.cancel_requested FROM {schema}.jobs_hot AS h FORCE INDEX (jobs_hot_beat) \
         WHERE h.status = 1 AND h.heartbeat_at IS NOT NULL AND h.heartbeat_at < ? - ",
        zombie_timeout!(),
        " ORDER BY h.heartbeat_at, h.id LIMIT ? FOR UPDATE SKIP LOCKED"
    ),
    /// An expired hold back to Pending, its attempt unspent, the expiry counted: (now, id).
    release_expired_hold: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, \
         heartbeat_at = NULL, expired_holds = expired_holds + 1, updated_at = ? WHERE id = ?",
    /// Processing jobs whose heartbeat expired, with their queue's policy:
    /// (now, default zombie timeout µs, limit).
    find_zombies: concat!(
        "SELECT h.id, h.attempt, h.max_attempts, h.cancel_requested, \
         COALESCE((SELECT q.zombie_policy FROM {schema}.queues AS q WHERE q.name = h.queue), 'retry') AS policy \
         FROM {schema}.jobs_hot AS h FORCE INDEX (jobs_hot_beat) WHERE h.status = 2 \
         AND COALESCE(h.heartbeat_at, h.started_at, h.updated_at) < ? - ",
        zombie_timeout!(),
        " ORDER BY h.heartbeat_at, h.id LIMIT ? FOR UPDATE SKIP LOCKED"
    ),
    /// A zombie back to Pending: (now, id).
    retry_zombie: "UPDATE {schema}.jobs_hot SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, \
         cancel_requested = 0, updated_at = ? WHERE id = ?",

    /// The queues with entries in the starts log (read by the prune before it takes each
    /// one's control row).
    starts_queues: "SELECT DISTINCT queue FROM {schema}.starts",
    /// One queue's entries no rate window can see any more, at most a batch, under the
    /// queue's control row's lock (see `admin::prune_starts`): (queue, cutoff: `now - per`
    /// read after the lock, or the largest stamp when the queue has no limit, batch size).
    prune_starts: "DELETE FROM {schema}.starts WHERE queue = ? AND stamp <= ? ORDER BY stamp LIMIT ?",

    // --- cancel ----------------------------------------------------------------------------
    /// A live job's status and whether it is held, locked: (id).
    hot_status: "SELECT status, heartbeat_at IS NOT NULL AS held FROM {schema}.jobs_hot WHERE id = ? FOR UPDATE",
    /// (now, id).
    request_cancel: "UPDATE {schema}.jobs_hot SET cancel_requested = 1, updated_at = ? WHERE id = ?",

    /// A queue's control row with the defaults, inserted by a queue's first claim in autocommit,
    /// outside its transaction (a duplicate key, when another claim or a control made it first,
    /// is fine): a plain insert holds no gap lock, and committing at once leaves no waiter to
    /// upgrade a lock after a rollback, so racing first claims of a queue cannot deadlock
    /// (`ensure_queue`'s `ON DUPLICATE KEY UPDATE` inside the claim did): (name, now, now).
    insert_queue: "INSERT INTO {schema}.queues (name, created_at, updated_at) VALUES (?, ?, ?)",

    // --- queue controls: (value, now, queue) ------------------------------------------------
    /// (name, now, now).
    ensure_queue: "INSERT INTO {schema}.queues (name, created_at, updated_at) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE name = name",
    set_paused: "UPDATE {schema}.queues SET is_paused = ?, updated_at = ? WHERE name = ?",
    set_active: "UPDATE {schema}.queues SET is_active = ?, updated_at = ? WHERE name = ?",
    set_max_workers: "UPDATE {schema}.queues SET max_workers = ?, updated_at = ? WHERE name = ?",
    set_zombie_timeout: "UPDATE {schema}.queues SET zombie_timeout_us = ?, updated_at = ? WHERE name = ?",
    set_fetched_timeout: "UPDATE {schema}.queues SET fetched_timeout_us = ?, updated_at = ? WHERE name = ?",
    set_zombie_policy: "UPDATE {schema}.queues SET zombie_policy = ?, updated_at = ? WHERE name = ?",
    set_key_max_workers: "UPDATE {schema}.queues SET key_max_workers = ?, updated_at = ? WHERE name = ?",
    /// (jobs or NULL, per ms or NULL, by key 0/1, now, queue): NULLs and 0 clear the limit.
    set_rate_limit: "UPDATE {schema}.queues SET rate_jobs = ?, rate_per_ms = ?, rate_by_key = ?, updated_at = ? \
         WHERE name = ?",

    // --- requeue ---------------------------------------------------------------------------
    /// (id), locked.
    dead_key_and_queue: "SELECT idempotency_key, queue FROM {schema}.jobs_dlq WHERE id = ? FOR UPDATE",
    /// Dead-letter -> hot, Pending with attempt 0: (now, id).
    requeue: concat!(
        "INSERT INTO {schema}.jobs_hot (",
        cols!(),
        ", expired_holds) SELECT id, queue, kind, payload, tags, idempotency_key, priority, 0, 0, \
         max_attempts, NULL, NULL, NULL, NULL, created_at, NULL, ?, last_error, 0, created_by, concurrency_key, 0 \
         FROM {schema}.jobs_dlq WHERE id = ?"
    ),
    /// (id).
    delete_dead: "DELETE FROM {schema}.jobs_dlq WHERE id = ?",

    // --- purge: (cutoff, queue, queue, kind, kind[, reason, reason], batch size) -------------
    purge_archive: "DELETE FROM {schema}.jobs_archive WHERE finished_at < ? AND (? IS NULL OR queue = ?) \
         AND (? IS NULL OR kind = ?) ORDER BY finished_at LIMIT ?",
    purge_dead: "DELETE FROM {schema}.jobs_dlq WHERE finished_at < ? AND (? IS NULL OR queue = ?) \
         AND (? IS NULL OR kind = ?) AND (? IS NULL OR reason = ?) ORDER BY finished_at LIMIT ?",

    // --- stats (one REPEATABLE READ snapshot) -----------------------------------------------
    stats_hot: "SELECT queue, status, count(*) AS n FROM {schema}.jobs_hot GROUP BY queue, status",
    /// The oldest due Pending job per queue: (now).
    stats_lag: "SELECT queue, min(due_at) AS due FROM {schema}.jobs_hot \
         WHERE status IN (0, 3) AND due_at <= ? GROUP BY queue",
    stats_archive: "SELECT queue, count(*) AS n FROM {schema}.jobs_archive GROUP BY queue",
    /// Dead letters per queue, the cancelled ones counted apart.
    stats_dead: "SELECT queue, count(*) AS n, CAST(sum(reason = 'cancelled') AS SIGNED) AS cancelled \
         FROM {schema}.jobs_dlq GROUP BY queue",
    /// Every control row: a queue with one is listed even with no job.
    stats_queues: "SELECT name, max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
         fetched_timeout_us, updated_at, key_max_workers, rate_jobs, rate_per_ms, rate_by_key FROM {schema}.queues",
    /// Fetched + Processing jobs per queue and concurrency key (the `busiest_keys`; a range of
    /// `jobs_hot_key_running` per queue).
    stats_keys: "SELECT queue, running_key AS k, count(*) AS n FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_key_running) \
         WHERE running_key IS NOT NULL GROUP BY queue, running_key",

    // --- get_job: (id) ---------------------------------------------------------------------
    get_hot: concat!(select_job!(jobs_hot), " WHERE id = ?"),
    get_archive: concat!(select_job!(jobs_archive), " WHERE id = ?"),
    get_dead: concat!(select_job!(jobs_dlq), " WHERE id = ?"),

    // --- workers and throughput -------------------------------------------------------------
    /// (worker, host, pid, queues JSON, concurrency, now, now): the first registration sets
    /// `started_at`, every one `last_seen_at`.
    register_worker: "INSERT INTO {schema}.workers \
         (worker_id, host, pid, queues, concurrency, started_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE host = VALUES(host), pid = VALUES(pid), queues = VALUES(queues), \
         concurrency = VALUES(concurrency), last_seen_at = VALUES(last_seen_at)",
    /// (worker).
    deregister_worker: "DELETE FROM {schema}.workers WHERE worker_id = ?",
    list_workers: "SELECT worker_id, host, pid, queues, concurrency, started_at, last_seen_at \
         FROM {schema}.workers ORDER BY started_at DESC, worker_id",
    /// (cutoff): rows last seen before it.
    prune_workers: "DELETE FROM {schema}.workers WHERE last_seen_at < ?",
    /// Per queue and minute: jobs archived as done (a range of `jobs_archive_finished_queue`),
    /// failures dead-lettered (cancels left out) and failed attempts waiting for a retry (the
    /// hot table): (µs per minute, since) three times.
    throughput_all: throughput!(""),
    /// As `throughput_all`, (µs per minute, since, queue) three times.
    throughput_queue: throughput!(" AND queue = ?"),

    // --- periodic jobs (the schedules table, docs/periodic.md) -----------------------------
    /// One schedule row, locked: (name).
    schedule_lock: concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = ? FOR UPDATE"),
    /// One schedule row: (name).
    schedule_get: concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = ?"),
    /// Every schedule row.
    schedule_list: concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules ORDER BY name"),
    /// (name, spec, time zone, group, next tick, now, now).
    schedule_insert: "INSERT INTO {schema}.schedules (name, spec, time_zone, group_name, next_tick, enabled, stale, \
         created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, 0, ?, ?)",
    /// Takes over an existing row: (spec, time zone, group, next tick, now, name).
    schedule_update: "UPDATE {schema}.schedules SET spec = ?, time_zone = ?, group_name = ?, \
         next_tick = COALESCE(?, next_tick), stale = 0, updated_at = ? WHERE name = ?",
    /// The tick's compare-and-set: (tick, next tick, now, name, spec, time zone, tick). One
    /// row changed when this call won the tick.
    schedule_tick: "UPDATE {schema}.schedules SET last_enqueued_tick = ?, next_tick = ?, updated_at = ? \
         WHERE name = ? AND stale = 0 AND spec = ? AND time_zone = ? \
         AND (last_enqueued_tick IS NULL OR last_enqueued_tick < ?)",
    /// Pause or resume: (enabled 0/1, now, name).
    schedule_set_enabled: "UPDATE {schema}.schedules SET enabled = ?, updated_at = ? WHERE name = ?",
    /// Marks stale the rows of a group not named in a JSON array: (now, group, names JSON).
    schedule_mark_stale: "UPDATE {schema}.schedules SET stale = 1, updated_at = ? \
         WHERE group_name = ? AND stale = 0 AND NOT JSON_CONTAINS(?, JSON_QUOTE(CONVERT(name USING utf8mb4)))",

    // --- test support (feature `testing`) --------------------------------------------------
    /// (last seen, worker).
    force_worker_seen: "UPDATE {schema}.workers SET last_seen_at = ? WHERE worker_id = ?",
    /// (finish time, id) of an archived job.
    force_finished_at: "UPDATE {schema}.jobs_archive SET finished_at = ? WHERE id = ?",
    /// Forces fields of a hot job, bypassing every guard: (status or NULL, attempt or NULL,
    /// set scheduled_at 0/1, scheduled_at, set heartbeat_at 0/1, heartbeat_at, updated_at or
    /// NULL, created_at or NULL, payload or NULL, id).
    force: "UPDATE {schema}.jobs_hot SET status = COALESCE(?, status), attempt = COALESCE(?, attempt), \
         scheduled_at = CASE WHEN ? = 1 THEN ? ELSE scheduled_at END, \
         heartbeat_at = CASE WHEN ? = 1 THEN ? ELSE heartbeat_at END, \
         updated_at = COALESCE(?, updated_at), created_at = COALESCE(?, created_at), \
         payload = COALESCE(?, payload) WHERE id = ?",
    presence_hot: presence!("jobs_hot"),
    presence_archive: presence!("jobs_archive"),
    presence_dead: presence!("jobs_dlq"),
    /// The isolation level of this session, as the server names it (MySQL 8 and MariaDB 11.1+).
    isolation_level: "SELECT @@SESSION.transaction_isolation",
    /// The same on MariaDB before 11.1.
    isolation_level_old: "SELECT @@SESSION.tx_isolation",
    /// (connection id).
    kill_connection: "KILL CONNECTION ?",
    drop_schema: "DROP DATABASE IF EXISTS {schema}",
}

pub(crate) mod list;
#[cfg(test)]
mod tests;
