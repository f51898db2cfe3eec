//! The statements of the claim room: the claim.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// The claim's first statement, one branch per queue joined by `UNION ALL` ([`probe`]),
/// plain reads (no lock), sent before the transaction begins: the database clock, the
/// queue's control row (`known` 0 and NULLs when it has none yet) and whether it has a due
/// Pending (0) / Scheduled (3) job by that clock (`NOW(6)` is one value in one statement):
/// (branch index, queue, queue, queue) per queue.
pub(super) const CLAIM_PROBE: &str = concat!(
    "SELECT ? AS i, ", now_us!(), " AS now_us, q.name IS NOT NULL AS known, q.max_workers, q.is_paused, \
     q.is_active, q.key_max_workers, q.rate_jobs, EXISTS (SELECT 1 FROM {schema}.jobs_hot WHERE queue = ? AND status = 0 AND due_at <= ",
    now_us!(),
    ") AS pending_due, EXISTS (SELECT 1 FROM {schema}.jobs_hot WHERE queue = ? AND status = 3 AND due_at <= ",
    now_us!(),
    ") AS scheduled_due FROM (SELECT 1 AS one) AS d LEFT JOIN {schema}.queues AS q ON q.name = ?"
);

/// A queue's control row.
pub(super) const QUEUE_SETTINGS: &str = "SELECT max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
     fetched_timeout_us, updated_at, key_max_workers, rate_jobs, rate_per_ms, rate_by_key FROM {schema}.queues \
     WHERE name = ?";

/// Locks a guarded queue's control row (a queue cap, a key cap or a rate limit set) and
/// reads its settings as they stand now (a locking read returns the latest committed
/// version); claimers of the queue take turns here: (queue).
pub(super) const LOCK_QUEUE: &str =
    "SELECT max_workers, is_paused, is_active, key_max_workers, rate_jobs, rate_per_ms, rate_by_key \
     FROM {schema}.queues WHERE name = ? FOR UPDATE";

/// Share-locks an unguarded queue's control row, returning its guards: a control that
/// changes the row waits for the claims in flight, and a claim that starts after it reads
/// the new settings (`cap_first_set_binds_racing_claimers`): (queue).
pub(super) const SHARE_QUEUE: &str = "SELECT max_workers, is_paused, is_active, key_max_workers, rate_jobs \
     FROM {schema}.queues WHERE name = ? LOCK IN SHARE MODE";

/// Fetched + Processing jobs of a queue, read after the queue row's lock (READ COMMITTED:
/// a fresh snapshot sees every claim the previous holder committed): (queue).
pub(super) const ACTIVE_COUNT: &str = "SELECT count(*) FROM {schema}.jobs_hot WHERE queue = ? AND status IN (1, 2)";

/// Fetched + Processing jobs per concurrency key of a queue (a range of
/// `jobs_hot_key_running`, as small as the running set), read after the queue row's lock
/// like `active_count`: (queue).
pub(super) const KEY_RUNNING: &str =
    "SELECT running_key AS k, count(*) AS n FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_key_running) \
     WHERE queue = ? AND running_key IS NOT NULL GROUP BY running_key";

/// The starts a queue-wide rate window holds: every entry of the queue stamped after
/// `t - per` (later stamps count too), read after the queue row's lock: the queue's last
/// ordinal less its first one stamped after `t - per`, plus one (0 with none), two descents of
/// `starts_queue_n` whatever the window holds (issue 40, L7; `crate::claim`, "The count"):
/// (queue, queue, t - per).
pub(super) const WINDOW_TOTAL: &str = "SELECT COALESCE(\
     (SELECT n FROM {schema}.starts FORCE INDEX (starts_queue_n) WHERE queue = ? ORDER BY stamp DESC, n DESC LIMIT 1) \
     - (SELECT n FROM {schema}.starts FORCE INDEX (starts_queue_n) WHERE queue = ? AND stamp > ? \
        ORDER BY stamp, n LIMIT 1) + 1, 0) AS n";

/// The same per key, for the keys of a JSON array (entries without a key are in no key's
/// window), two descents of `starts_key_n` per key: (keys JSON, queue, queue, t - per).
pub(super) const WINDOW_BY_KEY: &str = "SELECT j.k AS k, COALESCE(\
     (SELECT s.n FROM {schema}.starts AS s FORCE INDEX (starts_key_n) WHERE s.queue = ? AND s.ckey = j.k \
      ORDER BY s.stamp DESC, s.n DESC LIMIT 1) \
     - (SELECT s.n FROM {schema}.starts AS s FORCE INDEX (starts_key_n) WHERE s.queue = ? AND s.ckey = j.k \
        AND s.stamp > ? ORDER BY s.stamp, s.n LIMIT 1) + 1, 0) AS n \
     FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) PATH '$')) AS j";

/// The due Scheduled jobs of a queue, at most 1,000 per call (a plain read of the
/// `jobs_hot_due` range): (queue, now).
pub(super) const DUE_SCHEDULED: &str = "SELECT id FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_due) \
     WHERE queue = ? AND status = 3 AND due_at <= ? ORDER BY due_at LIMIT 1000";

/// Scheduled -> Pending for due jobs named by primary key, in id order (an update that
/// searched for them would lock rows it scanned, and a claim skips a row locked even for a
/// moment): (ids).
pub(super) const PROMOTE_MANY: &str =
    "UPDATE {schema}.jobs_hot FORCE INDEX (`PRIMARY`) SET status = 0 WHERE id IN ({ids}) AND status = 3";

/// A queue's due Pending jobs in claim order, locked, skipping rows others hold, read
/// whole (the claim returns them as marked, with no read-back): (queue, now, limit).
pub(super) const CLAIM_PICK: &str = concat!(
    "SELECT ",
    cols!(),
    ", due_at, expired_holds FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_claim) WHERE queue = ? AND status = 0 \
     AND due_at <= ? ORDER BY priority DESC, due_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
);

/// `claim_pick` for a queue with a key cap or a per-key rate limit: keys that may take no
/// more (a JSON array of them) are left out, so they hold back nobody; with keyed 0 every
/// keyed job is (a key cap of 0); and it goes on after a cursor (the last row of the
/// previous pick of this claim, in claim order): (queue, now, keyed 0/1, full keys JSON,
/// cursor 0/1, priority, priority, due, due, id, limit).
pub(super) const CLAIM_PICK_KEYED: &str = concat!(
    "SELECT ",
    cols!(),
    ", due_at, expired_holds FROM {schema}.jobs_hot FORCE INDEX (jobs_hot_claim) WHERE queue = ? AND status = 0 \
     AND due_at <= ? AND (concurrency_key IS NULL OR (? = 1 AND concurrency_key NOT IN \
     (SELECT j.k FROM JSON_TABLE(?, '$[*]' COLUMNS (k VARCHAR(255) PATH '$')) AS j))) \
     AND (? = 0 OR priority < ? OR (priority = ? AND (due_at > ? OR (due_at = ? AND id > ?)))) \
     ORDER BY priority DESC, due_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
);

/// Appends the starts of the jobs this claim took from queue-wide rate-limited queues (rows it
/// holds, marked already) to the log, stamped with the claim's time, each queue's numbered after
/// its last ordinal (the probe reads the log as it was before this statement: MySQL reads a
/// table it inserts into first): (stamp, ids).
pub(super) const LOG_STARTS_QUEUE: &str = "INSERT INTO {schema}.starts (queue, ckey, stamp, n) \
     SELECT h.queue, h.concurrency_key, ?, COALESCE((SELECT s.n FROM {schema}.starts AS s FORCE INDEX (starts_queue_n) \
       WHERE s.queue = h.queue ORDER BY s.stamp DESC, s.n DESC LIMIT 1), 0) \
       + ROW_NUMBER() OVER (PARTITION BY h.queue ORDER BY h.id) \
     FROM {schema}.jobs_hot AS h FORCE INDEX (`PRIMARY`) WHERE h.id IN ({ids})";

/// The same for queues limited per key: each key's numbered after its last ordinal, key-less
/// ones 0 (in no bucket): (stamp, ids).
pub(super) const LOG_STARTS_KEY: &str = "INSERT INTO {schema}.starts (queue, ckey, stamp, n) \
     SELECT h.queue, h.concurrency_key, ?, CASE WHEN h.concurrency_key IS NULL THEN 0 ELSE \
       COALESCE((SELECT s.n FROM {schema}.starts AS s FORCE INDEX (starts_key_n) \
       WHERE s.queue = h.queue AND s.ckey = h.concurrency_key ORDER BY s.stamp DESC, s.n DESC LIMIT 1), 0) \
       + ROW_NUMBER() OVER (PARTITION BY h.queue, h.concurrency_key ORDER BY h.id) END \
     FROM {schema}.jobs_hot AS h FORCE INDEX (`PRIMARY`) WHERE h.id IN ({ids})";

/// Reserves (n) leases in an autocommitted statement of its own (the counter row's lock is
/// held only for it); the driver reports the last one as the last insert id.
pub(super) const NEXT_LEASES: &str =
    "UPDATE {schema}.counters SET value = LAST_INSERT_ID(value + ?) WHERE name = 'lease'";

/// Claims the locked Pending jobs named, each with its own lease, in one statement:
/// (status, worker, (id, lease) per row, now, start 0/1, start 0/1, now, beat 0/1, now,
/// ids). Start and Hold set the first heartbeat, Reserve clears it.
pub(super) const CLAIM_MARK: &str =
    "UPDATE {schema}.jobs_hot FORCE INDEX (`PRIMARY`) SET status = ?, worker_id = ?, lease = CASE id {cases} END, \
     updated_at = ?, attempt = attempt + ?, started_at = CASE WHEN ? = 1 THEN ? ELSE started_at END, \
     heartbeat_at = CASE WHEN ? = 1 THEN ? ELSE NULL END WHERE id IN ({ids}) AND status = 0";
