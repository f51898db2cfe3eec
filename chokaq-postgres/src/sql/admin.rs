//! The statements of the admin room: the rescue (Fetched rows and zombies past their timeouts,
//! the Blocked sweep, the starts log's prune), the queue controls, requeue and the purge.

/// The rescue singleton: the `rescue` row of the schema's `locks` table, without waiting (one
/// instance rescues, the others return at once). Only roles with privileges on the schema can
/// take it. Returns a row when this transaction holds it.
pub(super) const RESCUE_LOCK: &str = "SELECT name FROM {schema}.locks WHERE name = 'rescue' FOR UPDATE SKIP LOCKED";

/// Expired Fetched rows. `$1` default fetched timeout in microseconds (for a queue that sets
/// none), `$2` limit, `$3` default zombie timeout in microseconds.
/// A reserved row (no heartbeat) expires at updated_at + the fetched timeout → Pending. A held
/// row (heart-beaten; its handler may be running) at heartbeat_at + the zombie timeout: a
/// requested cancel dead-letters it `cancelled`; else → Pending with expired_holds + 1, however
/// often it expired (issue 36: the job may never have run; the count goes out with its next
/// claim). Lease, worker and heartbeat cleared, attempt unchanged. Returns (released, dead).
pub(super) const RESCUE_FETCHED: &str = concat!(
    "WITH f AS (
        SELECT h.id,
               CASE WHEN h.heartbeat_at IS NULL THEN 'release'
                    WHEN h.cancel_requested THEN 'cancelled'
                    ELSE 'expire' END AS act
          FROM {schema}.jobs_hot h
          LEFT JOIN {schema}.queues q ON q.name = h.queue
         WHERE h.status = 1
           AND CASE WHEN h.heartbeat_at IS NULL
                    THEN h.updated_at < now() - coalesce(q.fetched_timeout_ms * interval '1 millisecond',
                                                         $1::int8 * interval '1 microsecond')
                    ELSE h.heartbeat_at < now() - coalesce(q.zombie_timeout_ms * interval '1 millisecond',
                                                           $3::int8 * interval '1 microsecond')
               END
         ORDER BY h.updated_at
         LIMIT $2
           FOR UPDATE OF h SKIP LOCKED
     ),
     back AS (
        UPDATE {schema}.jobs_hot h
           SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL, updated_at = now(),
               expired_holds = h.expired_holds + CASE WHEN f.act = 'expire' THEN 1 ELSE 0 END
          FROM f WHERE h.id = f.id AND f.act IN ('release', 'expire')
        RETURNING h.id
     ),
     g AS (DELETE FROM {schema}.jobs_hot h USING f WHERE h.id = f.id AND f.act = 'cancelled' RETURNING h.*),
     ",
    promote!("g"),
    ",
     dead AS (INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", 'cancelled', coalesce(g.last_error, 'cancelled') FROM g RETURNING id)
     SELECT (SELECT count(*) FROM back) AS released, (SELECT count(*) FROM dead) AS dead"
);

/// `$1` default zombie timeout in microseconds, `$2` limit. A zombie whose cancel was accepted
/// is dead-lettered as `cancelled`, whatever the policy (cancel is final).
pub(super) const RESCUE_ZOMBIES: &str = concat!(
    "WITH z AS (
        SELECT h.id,
               (h.attempt < h.max_attempts AND coalesce(q.zombie_policy, 0) = 0 AND NOT h.cancel_requested) AS retry
          FROM {schema}.jobs_hot h
          LEFT JOIN {schema}.queues q ON q.name = h.queue
         WHERE h.status = 2
           AND coalesce(h.heartbeat_at, h.updated_at)
               < now() - coalesce(q.zombie_timeout_ms * interval '1 millisecond', $1::int8 * interval '1 microsecond')
         ORDER BY h.heartbeat_at
         LIMIT $2
           FOR UPDATE OF h SKIP LOCKED
     ),
     back AS (
        UPDATE {schema}.jobs_hot h SET status = 0, lease = NULL, worker_id = NULL, updated_at = now()
          FROM z WHERE h.id = z.id AND z.retry
        RETURNING h.id
     ),
     g AS (DELETE FROM {schema}.jobs_hot h USING z WHERE h.id = z.id AND NOT z.retry RETURNING h.*),
     ",
    promote!("g"),
    ",
     dead AS (INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", CASE WHEN g.cancel_requested THEN 'cancelled' ELSE 'zombie' END,
       coalesce(g.last_error, CASE WHEN g.cancel_requested THEN 'cancelled' ELSE 'heartbeat expired' END)
       FROM g RETURNING id)
     SELECT (SELECT count(*) FROM back) AS retried, (SELECT count(*) FROM dead) AS dead"
);

/// Rescue's sweep of Blocked rows (migration 13): every key with Blocked rows, promoted up to
/// its room (`promote_blocked`), so that a promotion lost to a race (an enqueue that read the
/// key at its cap while the last running job of it moved) costs latency, never a job.
pub(super) const RESCUE_SWEEP: &str = "
SELECT coalesce({schema}.promote_blocked(array_agg(k.queue), array_agg(k.concurrency_key)), 0)
  FROM (SELECT DISTINCT b.queue, b.concurrency_key FROM {schema}.jobs_hot b WHERE b.status = 4) k";

/// Rescue prunes the starts log: entries no window can see any more (older than the queue's
/// window), all entries of queues without a rate limit.
pub(super) const RESCUE_PRUNE_STARTS: &str = "
DELETE FROM {schema}.starts s
 WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues c
                    WHERE c.name = s.queue AND c.rate_per_ms IS NOT NULL
                      AND s.stamp > now() - c.rate_per_ms * interval '1 millisecond')";

/// control_queue, first: the queue's control row, created when missing (`$1` queue) with
/// `updated_at` '-infinity' (what a claim creates: no control has set anything yet). Its own
/// statement, so that the lock after it, in a new snapshot, sees a row a claim created and
/// committed meanwhile (this insert waited for that claim).
pub(super) const CONTROL_ENSURE: &str =
    "INSERT INTO {schema}.queues (name, updated_at) VALUES ($1, '-infinity') ON CONFLICT (name) DO NOTHING";

/// control_queue, second: the row FOR UPDATE (`$1` queue), which waits for every claim that
/// holds it (FOR KEY SHARE or FOR NO KEY UPDATE: each read the old settings) to commit; every
/// claim that locks it after this transaction commits reads the new settings. (The upsert's own
/// row lock would not wait for them: an update of columns outside any key takes FOR NO KEY
/// UPDATE, which FOR KEY SHARE does not conflict with.)
pub(super) const CONTROL_LOCK: &str = "SELECT name FROM {schema}.queues WHERE name = $1 FOR UPDATE";

/// control_queue, last: the upsert of one control column (`$1` queue, `$2` value); the column
/// is one of a fixed list, never input.
macro_rules! control {
    ($col:literal) => {
        concat!(
            "
WITH up AS (
    INSERT INTO {schema}.queues AS c (name, ",
            $col,
            ") VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET ",
            $col,
            " = EXCLUDED.",
            $col,
            ", updated_at = now()
    RETURNING ",
            queue_cols!(),
            "
),
woke AS (SELECT pg_notify('{channel}', up.name) FROM up)
SELECT up.*, (SELECT count(*) FROM woke) AS woke FROM up"
        )
    };
}

pub(super) const CONTROL_PAUSED: &str = control!("is_paused");
pub(super) const CONTROL_ACTIVE: &str = control!("is_active");
pub(super) const CONTROL_MAX_WORKERS: &str = control!("max_workers");
pub(super) const CONTROL_ZOMBIE_TIMEOUT: &str = control!("zombie_timeout_ms");
pub(super) const CONTROL_ZOMBIE_POLICY: &str = control!("zombie_policy");
pub(super) const CONTROL_FETCHED_TIMEOUT: &str = control!("fetched_timeout_ms");

/// The per-key cap (`$1` queue, `$2` cap or NULL), and in the same statement the promotion of
/// the queue's Blocked rows the new cap leaves room for (a raised cap: per key, up to its new
/// parking depth, `key_depth(cap)`, less its Pending + Fetched + Processing rows; a cleared
/// one: all), skipping rows another
/// session holds (rescue's sweep takes those later).
pub(super) const CONTROL_KEY_MAX_WORKERS: &str = concat!(
    "
WITH up AS (
    INSERT INTO {schema}.queues AS c (name, key_max_workers) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET key_max_workers = EXCLUDED.key_max_workers, updated_at = now()
    RETURNING ",
    queue_cols!(),
    "
),
woke AS (SELECT pg_notify('{channel}', up.name) FROM up),
k AS (SELECT DISTINCT b.concurrency_key AS k FROM {schema}.jobs_hot b WHERE b.queue = $1 AND b.status = 4),
promoted AS (
    UPDATE {schema}.jobs_hot h SET status = CASE WHEN h.due_at > now() THEN 3 ELSE 0 END
       WHERE h.status = 4 AND h.id = ANY (ARRAY(SELECT x.id FROM k CROSS JOIN LATERAL (
                   SELECT x.id FROM {schema}.jobs_hot x
                    WHERE x.queue = $1 AND x.concurrency_key = k.k AND x.status = 4
                    ORDER BY x.priority DESC, x.due_at, x.id
                    LIMIT CASE WHEN $2::int4 IS NULL THEN NULL
                               ELSE greatest(0, {schema}.key_depth($2::int4)
                                                - ",
    key_live!("$1", "k.k", "{schema}.key_depth($2::int4)"),
    ")
                          END
                      FOR UPDATE SKIP LOCKED) x))
)
SELECT up.*, (SELECT count(*) FROM woke) AS woke FROM up"
);

/// A new rate limit's starts log (issue 40, L7), before the limit is written, under the control
/// row's FOR UPDATE (which waits for every claim of the queue): when the limit's kind changes
/// (queue-wide / per key, or a limit set where there was none), the queue's entries are
/// numbered again in stamp order for the new buckets (the queue; or each key, key-less entries
/// 0), as the claims number them (functions.sql, claim() step 6, "The count"). The same kind
/// keeps its numbers. `$1` queue, `$2` the new limit's jobs (NULL: cleared, nothing to do),
/// `$3` per key.
pub(super) const CONTROL_RATE_RENUMBER: &str = "
UPDATE {schema}.starts s SET n = r.n
  FROM (SELECT x.ctid AS t,
               CASE WHEN $3::bool AND x.ckey IS NULL THEN 0
                    ELSE row_number() OVER (PARTITION BY CASE WHEN $3::bool THEN x.ckey END ORDER BY x.stamp)
               END AS n
          FROM {schema}.starts x
         WHERE x.queue = $1 AND $2::int4 IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM {schema}.queues c
                            WHERE c.name = $1 AND c.rate_jobs IS NOT NULL AND c.rate_by_key = $3::bool)) r
 WHERE s.ctid = r.t AND s.n <> r.n";

/// The rate limit: `$1` queue, `$2` jobs, `$3` window in milliseconds, `$4` per key (all NULL
/// and false: no limit). The starts log stays (rescue prunes it).
pub(super) const CONTROL_RATE_LIMIT: &str = concat!(
    "
WITH up AS (
    INSERT INTO {schema}.queues AS c (name, rate_jobs, rate_per_ms, rate_by_key) VALUES ($1, $2, $3, $4)
    ON CONFLICT (name) DO UPDATE SET rate_jobs = EXCLUDED.rate_jobs, rate_per_ms = EXCLUDED.rate_per_ms,
                                     rate_by_key = EXCLUDED.rate_by_key, updated_at = now()
    RETURNING ",
    queue_cols!(),
    "
),
woke AS (SELECT pg_notify('{channel}', up.name) FROM up)
SELECT up.*, (SELECT count(*) FROM woke) AS woke FROM up"
);

pub(super) const QUEUE_SETTINGS: &str = concat!("SELECT ", queue_cols!(), " FROM {schema}.queues WHERE name = $1");

/// `$1` id. Moves a dead letter back to Pending, attempt 0, expired_holds 0 (a fresh row); a
/// live key conflict raises 23505.
pub(super) const REQUEUE: &str = "
WITH g AS (DELETE FROM {schema}.jobs_dlq d WHERE d.id = $1 RETURNING d.*),
ins AS (
    INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, output, tags, concurrency_key, idempotency_key, priority,
                                   status, attempt, max_attempts, lease, worker_id, scheduled_at, created_at,
                                   updated_at, last_error, created_by, expired_holds)
    SELECT g.id, g.queue, g.kind, g.payload, g.output, g.tags, g.concurrency_key, g.idempotency_key, g.priority, 0, 0,
           g.max_attempts, NULL, NULL, NULL, g.created_at, now(), g.error, g.created_by, 0
      FROM g
    RETURNING id, queue
),
woke AS (SELECT pg_notify('{channel}', ins.queue) FROM ins)
SELECT (SELECT count(*) FROM ins) AS moved, (SELECT count(*) FROM woke) AS woke";

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

/// `$1` id. Pending, Scheduled and reserved Fetched (no heartbeat): moved to the dead-letter
/// table. Processing and held Fetched (heart-beaten: its worker may be running it): flagged, a
/// request.
pub(super) const CANCEL: &str = concat!(
    "WITH l AS (
        SELECT h.id, (h.status = 2 OR (h.status = 1 AND h.heartbeat_at IS NOT NULL)) AS running
          FROM {schema}.jobs_hot h WHERE h.id = $1 FOR UPDATE
     ),
     g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id AND NOT l.running RETURNING h.*),
     ",
    promote!("(SELECT g.queue, g.concurrency_key FROM g WHERE g.status IN (0, 1, 2))"),
    ",
     dead AS (INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", 'cancelled', coalesce(g.last_error, 'cancelled') FROM g RETURNING id),
     req AS (
        UPDATE {schema}.jobs_hot h SET cancel_requested = true
          FROM l WHERE h.id = l.id AND l.running
        RETURNING h.id
     )
     SELECT (SELECT count(*) FROM dead) AS dead, (SELECT count(*) FROM req) AS requested"
);
