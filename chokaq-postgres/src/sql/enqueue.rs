//! The statements of the enqueue room: the batch insert, the look-up of taken keys, and the wake-ups after the commit (`notify.rs`).

pub(super) const ENQUEUE: &str = concat!(
    "
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int4[],
                         $8::timestamptz[], $9::int8[], $10::int4[], $11::text[], $12::text[],
                         $13::text[], $14::int4[], $15::text[], $16::timestamptz[], $17::bytea[], $18::text[])
        WITH ORDINALITY AS t(id, queue, kind, payload, tags, idempotency_key, priority, scheduled_at, delay_us,
                             max_attempts, created_by, ckey, ukey, ustates, usettings, uexpires, hkey, hsettings,
                             ord)
),
-- Unique jobs (migration 17, docs/unique.md): the key row of each unique job, inserted in key
-- order (two batches whose keys overlap wait for each other at most once). A key some row
-- already holds (or a racing enqueuer inserts: ON CONFLICT waits for its commit) inserts
-- nothing, and neither does its job: the caller then looks at the holder (`unique.rs`).
ukeys AS (
    INSERT INTO {schema}.uniques (unique_key, job_id, states, settings, expires_at)
    SELECT i.ukey, i.id, i.ustates, i.usettings, i.uexpires FROM input i
     WHERE i.ukey IS NOT NULL
     ORDER BY i.ukey, i.ord
    ON CONFLICT (unique_key) DO NOTHING
    RETURNING job_id
),
due AS (
    SELECT i.*, CASE WHEN i.delay_us IS NULL THEN i.scheduled_at
                     ELSE now() + i.delay_us * interval '1 microsecond' END AS at
      FROM input i
     WHERE i.ukey IS NULL OR i.id IN (SELECT k.job_id FROM ukeys k)
),
-- The status: Scheduled (3) when due later; a due keyed job of a queue with a per-key cap is
-- Blocked (4) when its key already holds key_depth(cap) Pending, Fetched or Processing rows,
-- counting the batch's own due rows of the key before it in claim order (an index
-- optimisation only: see migration 13); else Pending (0). Keyless rows skip the window.
st AS (
    SELECT d.id, d.queue, d.kind, d.payload, d.tags, d.idempotency_key, d.priority, d.max_attempts, d.created_by,
           d.ckey, d.hkey, d.hsettings, d.ord, d.at, CASE WHEN d.at > now() THEN 3 ELSE 0 END AS status
      FROM due d
     WHERE d.ckey IS NULL
        OR NOT EXISTS (SELECT 1 FROM {schema}.queues c WHERE c.name = d.queue AND c.key_max_workers IS NOT NULL)
    UNION ALL
    SELECT k.id, k.queue, k.kind, k.payload, k.tags, k.idempotency_key, k.priority, k.max_attempts, k.created_by,
           k.ckey, k.hkey, k.hsettings, k.ord, k.at,
           CASE WHEN k.at > now() THEN 3
                WHEN k.rk > k.depth THEN 4
                WHEN ",
    key_live!("k.queue", "k.ckey", "k.depth"),
    " + k.rk - 1 >= k.depth THEN 4
                ELSE 0 END
      FROM (SELECT d.*, {schema}.key_depth(c.key_max_workers) AS depth,
                   row_number() OVER (PARTITION BY d.queue, d.ckey
                                      ORDER BY d.at > now(), d.priority DESC, d.at, d.ord) AS rk
              FROM due d JOIN {schema}.queues c ON c.name = d.queue AND c.key_max_workers IS NOT NULL
             WHERE d.ckey IS NOT NULL) k
),
ins AS (
    INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, concurrency_key, idempotency_key, priority,
                                   max_attempts, scheduled_at, status, created_by, unique_key, unique_settings)
    SELECT i.id, i.queue, i.kind, i.payload::jsonb, ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)),
           i.ckey, i.idempotency_key, i.priority, i.max_attempts, i.at, i.status, i.created_by, i.hkey, i.hsettings
      FROM st i
     -- Keyed rows in one order for every batch (queue, key), so that two batches whose keys
     -- overlap wait on each other at most once and never deadlock (40P01 seen in
     -- idempotency_concurrent_overlapping_batches with the input order); then unique keys held
     -- on the row (the default state set, migration 17), in key order.
     ORDER BY i.idempotency_key IS NULL, i.queue, i.idempotency_key, i.hkey, i.ord
    -- No conflict target: a taken idempotency key (queue, idempotency_key) or a taken unique key
    -- of a live job (jobs_hot_unique_key) inserts nothing; the caller finds which.
    ON CONFLICT DO NOTHING
    RETURNING id, queue
),
xid AS (SELECT txid_current() AS x)
SELECT ins.id, (SELECT x FROM xid) AS xid FROM ins"
);

/// The wake-ups after the commit (`notify.rs`): `$1` channel, `$2` queues.
pub(super) const NOTIFY_QUEUES: &str = "SELECT count(pg_notify($1, q.queue)) FROM unnest($2::text[]) AS q (queue)";

/// The fate of the callers' enqueuing transactions (`notify.rs`): `$1` transaction ids.
pub(super) const TX_STATUS: &str = "SELECT t.x, txid_status(t.x) FROM unnest($1::int8[]) AS t (x)";

/// The live jobs holding keys: `$1` queues, `$2` keys (pairwise); returns queue, key, id.
pub(super) const LOOKUP_KEYS: &str = "SELECT h.queue, h.idempotency_key, h.id FROM {schema}.jobs_hot h \
    JOIN unnest($1::text[], $2::text[]) AS k(queue, key) ON h.queue = k.queue AND h.idempotency_key = k.key";

/// The holders of unique keys and where they stand: `$1` keys; returns key, holder, the table
/// it is in (`h`ot, `a`rchive, `d`ead, or null: in none), and for a hot row its status, attempt
/// and whether it is due later than now, for a dead letter its reason. One snapshot: a job
/// moves between tables in one atomic statement, so it is seen in exactly one (or none).
pub(super) const UNIQUE_HOLDERS: &str = "
SELECT u.unique_key, u.job_id,
       CASE WHEN h.id IS NOT NULL THEN 'h' WHEN a.id IS NOT NULL THEN 'a' WHEN d.id IS NOT NULL THEN 'd' END,
       h.status, h.attempt, coalesce(h.scheduled_at > now(), false), d.reason
  FROM unnest($1::text[]) AS k(key)
  JOIN {schema}.uniques u ON u.unique_key = k.key
  LEFT JOIN {schema}.jobs_hot h ON h.id = u.job_id
  LEFT JOIN {schema}.jobs_archive a ON a.id = u.job_id
  LEFT JOIN {schema}.jobs_dlq d ON d.id = u.job_id";

/// The row lock of one key before a take-over: `$1` key. The caller looks at the holder
/// again in a new statement (a new snapshot, taken after the lock was granted).
pub(super) const UNIQUE_LOCK: &str = "SELECT job_id FROM {schema}.uniques WHERE unique_key = $1 FOR UPDATE";

/// The take-over, under the row lock: `$1` key, `$2` the new job, `$3` states, `$4` settings,
/// `$5` end of the period; `$6` the holder seen under the lock (compare-and-set).
pub(super) const UNIQUE_TAKE: &str = "UPDATE {schema}.uniques SET job_id = $2, states = $3, settings = $4, \
    expires_at = $5, created_at = now() WHERE unique_key = $1 AND job_id = $6";

/// `$1` job id: the key it holds, with its settings.
pub(super) const UNIQUE_OF: &str =
    "SELECT unique_key, settings, expires_at FROM {schema}.uniques WHERE job_id = $1 ORDER BY unique_key LIMIT 1";

/// Pruning, first statement: lock at most `$1` key rows from a random point `$2` of the key
/// space on (keys are SHA-256, so uniform), wrapping around; skip rows an enqueue holds.
pub(super) const UNIQUE_PRUNE_LOCK: &str = "
SELECT u.unique_key FROM {schema}.uniques u
 WHERE u.unique_key IN (
    SELECT c.unique_key FROM (
        (SELECT unique_key FROM {schema}.uniques WHERE unique_key >= $2 ORDER BY unique_key LIMIT $1)
        UNION ALL
        (SELECT unique_key FROM {schema}.uniques WHERE unique_key < $2 ORDER BY unique_key LIMIT $1)
    ) c
    LIMIT $1)
 FOR UPDATE OF u SKIP LOCKED";

/// Pruning, second statement (a new snapshot, after the locks): deletes those of `$1` that
/// decide nothing any more (chokaq_core::prunable): the job is not hot, and the states count
/// no finished state (224 = succeeded, cancelled, discarded), or the period is over, or the
/// job is in no table.
pub(super) const UNIQUE_PRUNE: &str = "
DELETE FROM {schema}.uniques u
 WHERE u.unique_key = ANY($1::text[])
   AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_hot h WHERE h.id = u.job_id)
   AND ((u.states & 224) = 0
        OR u.expires_at <= now()
        OR (NOT EXISTS (SELECT 1 FROM {schema}.jobs_archive a WHERE a.id = u.job_id)
            AND NOT EXISTS (SELECT 1 FROM {schema}.jobs_dlq d WHERE d.id = u.job_id)))";

/// The live jobs holding unique keys on their hot row (the default state set, migration 17):
/// `$1` keys (32 bytes each); returns key (as hex), id.
pub(super) const LOOKUP_HOT_UNIQUE: &str = "SELECT encode(h.unique_key, 'hex'), h.id FROM {schema}.jobs_hot h \
    WHERE h.unique_key = ANY($1::bytea[])";

/// `$1` job id: the unique key its hot row holds and its settings (the default state set).
pub(super) const UNIQUE_OF_HOT: &str = "SELECT encode(unique_key, 'hex'), unique_settings, \
    coalesce(scheduled_at, created_at) \
    FROM {schema}.jobs_hot WHERE id = $1 AND unique_key IS NOT NULL";
