//! Every SQL statement of the backend, and nothing else builds SQL text. Each is a template
//! with `{schema}` (the validated, quoted schema name) and `{channel}` (the NOTIFY channel,
//! `<schema>_jobs`), substituted by [`render`] once, when the backend is built, into a
//! [`Statements`] set; every value is a bound parameter. Optional filters of the purge are
//! NULL-able parameters (`$n::text IS NULL OR queue = $n`). The one statement assembled per call
//! is the `list_jobs` page, built with sea-query from fixed parts (`chokaq_core::listing`,
//! [`list_query`]): only the predicates of the filters given, values bound.

use chokaq_core::listing::{self, ListQuery, SqlDialect};
use chokaq_core::{validate, JobTable, ListJobsParams, Result};

use crate::migrate::{FUNCTIONS, MIGRATIONS, MIGRATION_NAMES};

/// Columns copied by a move from the hot table into the archive.
macro_rules! archive_cols {
    () => {
        "id, queue, kind, payload, tags, concurrency_key, idempotency_key, priority, attempt, max_attempts, lease, \
         worker_id, heartbeat_at, scheduled_at, created_at, started_at, updated_at, last_error, created_by, finished_at"
    };
}

/// Columns of a dead-letter row written by a move.
macro_rules! dlq_cols {
    () => {
        "id, queue, kind, payload, tags, concurrency_key, idempotency_key, priority, attempt, max_attempts, lease, \
         worker_id, heartbeat_at, scheduled_at, created_at, started_at, updated_at, created_by, finished_at, reason, error"
    };
}

/// Values for [`dlq_cols`] from a deleted hot row `g`, followed by the reason and error.
macro_rules! dlq_vals {
    () => {
        "g.id, g.queue, g.kind, g.payload, g.tags, g.concurrency_key, g.idempotency_key, g.priority, g.attempt, \
         g.max_attempts, g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, g.started_at, now(), g.created_by, now()"
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
        "g.id, g.queue, g.kind, g.payload, g.tags, g.concurrency_key, g.idempotency_key, g.priority, \
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

const ENQUEUE: &str = concat!(
    "
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int4[],
                         $8::timestamptz[], $9::int8[], $10::int4[], $11::text[], $12::text[])
        WITH ORDINALITY AS t(id, queue, kind, payload, tags, idempotency_key, priority, scheduled_at, delay_us,
                             max_attempts, created_by, ckey, ord)
),
due AS (
    SELECT i.*, CASE WHEN i.delay_us IS NULL THEN i.scheduled_at
                     ELSE now() + i.delay_us * interval '1 microsecond' END AS at
      FROM input i
),
-- The status: Scheduled (3) when due later; a due keyed job of a queue with a per-key cap is
-- Blocked (4) when its key already holds key_depth(cap) Pending, Fetched or Processing rows,
-- counting the batch's own due rows of the key before it in claim order (an index
-- optimisation only: see migration 13); else Pending (0). Keyless rows skip the window.
st AS (
    SELECT d.id, d.queue, d.kind, d.payload, d.tags, d.idempotency_key, d.priority, d.max_attempts, d.created_by,
           d.ckey, d.ord, d.at, CASE WHEN d.at > now() THEN 3 ELSE 0 END AS status
      FROM due d
     WHERE d.ckey IS NULL
        OR NOT EXISTS (SELECT 1 FROM {schema}.queues c WHERE c.name = d.queue AND c.key_max_workers IS NOT NULL)
    UNION ALL
    SELECT k.id, k.queue, k.kind, k.payload, k.tags, k.idempotency_key, k.priority, k.max_attempts, k.created_by,
           k.ckey, k.ord, k.at,
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
                                   max_attempts, scheduled_at, status, created_by)
    SELECT i.id, i.queue, i.kind, i.payload::jsonb, ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)),
           i.ckey, i.idempotency_key, i.priority, i.max_attempts, i.at, i.status, i.created_by
      FROM st i
     -- Keyed rows in one order for every batch (queue, key), so that two batches whose keys
     -- overlap wait on each other at most once and never deadlock (40P01 seen in
     -- idempotency_concurrent_overlapping_batches with the input order).
     ORDER BY i.idempotency_key IS NULL, i.queue, i.idempotency_key, i.ord
    ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue
),
xid AS (SELECT txid_current() AS x)
SELECT ins.id, (SELECT x FROM xid) AS xid FROM ins"
);

/// The wake-ups after the commit (`notify.rs`): `$1` channel, `$2` queues.
const NOTIFY_QUEUES: &str = "SELECT count(pg_notify($1, q.queue)) FROM unnest($2::text[]) AS q (queue)";

/// The fate of the callers' enqueuing transactions (`notify.rs`): `$1` transaction ids.
const TX_STATUS: &str = "SELECT t.x, txid_status(t.x) FROM unnest($1::int8[]) AS t (x)";

/// The live jobs holding keys: `$1` queues, `$2` keys (pairwise); returns queue, key, id.
const LOOKUP_KEYS: &str = "SELECT h.queue, h.idempotency_key, h.id FROM {schema}.jobs_hot h \
    JOIN unnest($1::text[], $2::text[]) AS k(queue, key) ON h.queue = k.queue AND h.idempotency_key = k.key";

const CLAIM: &str = "SELECT * FROM {schema}.claim($1, $2, $3, $4)";

/// `$1` worker, `$2` ids, `$3` leases (the completions), `$4` queues, `$5` limit, `$6` mode:
/// the completed ids (`o_done`, on every row) and the claimed rows (all NULL when none).
const COMPLETE_AND_CLAIM: &str =
    "SELECT r.o_done, (r.o_job).* FROM {schema}.complete_and_claim($1, $2, $3, $4, $5, $6) r";

/// Fetched → Processing (attempt + 1). Repeatable: a Processing row this lease and worker
/// hold is reported done again and not written (its attempt is counted once).
const START: &str = concat!(
    "WITH l AS (",
    guard!("IN (1, 2)"),
    "), up AS (
        UPDATE {schema}.jobs_hot h
           SET status = 2, attempt = h.attempt + 1, started_at = now(), heartbeat_at = now(), updated_at = now()
          FROM l WHERE h.id = l.id AND l.status = 1
     )
     SELECT l.id FROM l"
);

/// Fetched (held or reserved: a heart-beaten reserved row is held from then on) or
/// Processing.
const HEARTBEAT: &str = concat!(
    "WITH l AS (",
    guard!("IN (1, 2)"),
    ") UPDATE {schema}.jobs_hot h SET heartbeat_at = now()
       FROM l WHERE h.id = l.id
     RETURNING h.id, h.cancel_requested"
);

/// Fetched → Pending (lease, worker and heartbeat cleared, attempt unchanged); a row whose
/// cancel was requested is dead-lettered `cancelled` instead (cancel is final). Both are done.
const RELEASE: &str = concat!(
    "WITH l AS (",
    guard!("= 1"),
    "), back AS (
        UPDATE {schema}.jobs_hot h SET status = 0, lease = NULL, worker_id = NULL, heartbeat_at = NULL,
                                       updated_at = now()
          FROM l WHERE h.id = l.id AND NOT l.cancel_requested
        RETURNING h.id
     ),
     g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id AND l.cancel_requested RETURNING h.*),
     ",
    promote!("g"),
    ",
     dead AS (INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", 'cancelled', coalesce(g.last_error, 'cancelled') FROM g RETURNING id)
     SELECT id FROM back UNION ALL SELECT id FROM dead"
);

/// Fetched or Processing → archived; a Fetched row's run counts ([`archive_vals_started`]).
const COMPLETE: &str = concat!(
    "WITH l AS (",
    guard!("IN (1, 2)"),
    "), g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*),
     ",
    promote!("g"),
    "
     INSERT INTO {schema}.jobs_archive (",
    archive_cols!(),
    ") SELECT ",
    archive_vals_started!(),
    " FROM g RETURNING id"
);

/// `$1` worker, `$2` ids, `$3` leases: the ids this worker already completed with the lease
/// it names (a repeated complete, whose first reply was lost: the outcome stands).
const COMPLETE_STANDING: &str = "
SELECT a.id FROM {schema}.jobs_archive a
  JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON a.id = u.id AND a.lease = u.lease
 WHERE a.worker_id = $1";

/// `$1` worker, `$2` id, `$3` lease: the outcome a fail with this lease already wrote, if it
/// did. A retry or snooze leaves its lease on the Pending row (release, rescue and requeue clear
/// it): `at` is its due time. A dead letter keeps lease and worker: `reason`, unless rescue
/// filed it as a zombie (that lease was lost, not used).
const FAIL_STANDING: &str = "
SELECT h.scheduled_at AS at, NULL::text AS reason FROM {schema}.jobs_hot h
 WHERE h.id = $2 AND h.lease = $3 AND h.status IN (0, 3) AND h.scheduled_at IS NOT NULL
UNION ALL
SELECT NULL::timestamptz, d.reason FROM {schema}.jobs_dlq d
 WHERE d.id = $2 AND d.lease = $3 AND d.worker_id = $1 AND d.reason <> 'zombie'";

/// `$1` worker, `$2` id, `$3` lease, `$4` action (`retry`, `snooze`, `dead`), `$5` delay in
/// microseconds, `$6` error, `$7` dead-letter reason. The row is Fetched or Processing; a
/// Fetched row is taken as started first (its effective attempt `eff` is attempt + 1, and
/// started_at is set), and the rules apply to `eff`: a retry with `eff` >= max_attempts becomes
/// a dead letter (`failed`); a snooze leaves `eff - 1`; a retry or snooze of a job whose cancel
/// was requested becomes a dead letter (`cancelled`, act `cancelled`): cancel is final. One row
/// when the lease was held, none when it was lost.
const FAIL: &str = concat!(
    "WITH l AS (
        SELECT h.id, h.status AS st, h.attempt + CASE WHEN h.status = 1 THEN 1 ELSE 0 END AS eff,
               CASE WHEN $4::text IN ('retry', 'snooze') AND h.cancel_requested THEN 'cancelled'
                    WHEN $4::text = 'retry' AND h.attempt + CASE WHEN h.status = 1 THEN 1 ELSE 0 END >= h.max_attempts
                         THEN 'dead'
                    ELSE $4::text END AS act
          FROM {schema}.jobs_hot h
         WHERE h.id = $2 AND h.lease = $3 AND h.worker_id = $1 AND h.status IN (1, 2)
           FOR UPDATE
     ),
     back AS (
        UPDATE {schema}.jobs_hot h
           SET status = CASE WHEN $5::int8 > 0 THEN 3 ELSE 0 END, worker_id = NULL,
               scheduled_at = now() + $5::int8 * interval '1 microsecond',
               attempt = CASE WHEN l.act = 'snooze' THEN greatest(l.eff - 1, 0) ELSE l.eff END,
               started_at = CASE WHEN l.st = 1 THEN now() ELSE h.started_at END,
               last_error = CASE WHEN l.act = 'retry' THEN $6::text ELSE h.last_error END,
               updated_at = now()
          FROM l WHERE h.id = l.id AND l.act IN ('retry', 'snooze')
        RETURNING h.scheduled_at, h.queue, h.concurrency_key, h.status
     ),
     g AS (
        DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id AND l.act IN ('dead', 'cancelled') RETURNING h.*
     ),
     ",
    promote!(
        "(SELECT g.queue, g.concurrency_key FROM g UNION ALL
                 SELECT back.queue, back.concurrency_key FROM back WHERE back.status = 3)"
    ),
    ",
     dead AS (
        INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.concurrency_key, g.idempotency_key, g.priority, l.eff,
               g.max_attempts,
               g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at,
               CASE WHEN l.st = 1 THEN now() ELSE g.started_at END, now(), g.created_by, now(),
               CASE WHEN l.act = 'cancelled' THEN 'cancelled' WHEN $4::text = 'retry' THEN 'failed'
                    ELSE $7::text END,
               coalesce($6::text, g.last_error)
          FROM g JOIN l ON l.id = g.id
        RETURNING id
     )
     SELECT l.act, (SELECT scheduled_at FROM back) AS at, (SELECT count(*) FROM dead) AS dead FROM l"
);

/// A claimed row the backend cannot decode, to the dead-letter table as `failed` with the
/// reason: `$1` worker, `$2` id, `$3` lease (the claim's), `$4` error. Returns its id.
const DEAD_UNDECODABLE: &str = concat!(
    "WITH g AS (
        DELETE FROM {schema}.jobs_hot h
         WHERE h.id = $2 AND h.lease = $3 AND h.worker_id = $1 AND h.status IN (1, 2)
        RETURNING h.*
     ),
     ",
    promote!("g"),
    "
     INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", 'failed', $4::text FROM g RETURNING id"
);

/// `$1` id. Pending, Scheduled and reserved Fetched (no heartbeat): moved to the dead-letter
/// table. Processing and held Fetched (heart-beaten: its worker may be running it): flagged, a
/// request.
const CANCEL: &str = concat!(
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

/// The rescue singleton: the `rescue` row of the schema's `locks` table, without waiting (one
/// instance rescues, the others return at once). Only roles with privileges on the schema can
/// take it. Returns a row when this transaction holds it.
const RESCUE_LOCK: &str = "SELECT name FROM {schema}.locks WHERE name = 'rescue' FOR UPDATE SKIP LOCKED";

/// Expired Fetched rows. `$1` default fetched timeout in microseconds (for a queue that sets
/// none), `$2` limit, `$3` default zombie timeout in microseconds.
/// A reserved row (no heartbeat) expires at updated_at + the fetched timeout → Pending. A held
/// row (heart-beaten; its handler may be running) at heartbeat_at + the zombie timeout: a
/// requested cancel dead-letters it `cancelled`; else → Pending with expired_holds + 1, however
/// often it expired (issue 36: the job may never have run; the count goes out with its next
/// claim). Lease, worker and heartbeat cleared, attempt unchanged. Returns (released, dead).
const RESCUE_FETCHED: &str = concat!(
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
const RESCUE_ZOMBIES: &str = concat!(
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
const RESCUE_SWEEP: &str = "
SELECT coalesce({schema}.promote_blocked(array_agg(k.queue), array_agg(k.concurrency_key)), 0)
  FROM (SELECT DISTINCT b.queue, b.concurrency_key FROM {schema}.jobs_hot b WHERE b.status = 4) k";

/// Rescue prunes the starts log: entries no window can see any more (older than the queue's
/// window), all entries of queues without a rate limit.
const RESCUE_PRUNE_STARTS: &str = "
DELETE FROM {schema}.starts s
 WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues c
                    WHERE c.name = s.queue AND c.rate_per_ms IS NOT NULL
                      AND s.stamp > now() - c.rate_per_ms * interval '1 millisecond')";

/// control_queue, first: the queue's control row, created when missing (`$1` queue) with
/// `updated_at` '-infinity' (what a claim creates: no control has set anything yet). Its own
/// statement, so that the lock after it, in a new snapshot, sees a row a claim created and
/// committed meanwhile (this insert waited for that claim).
const CONTROL_ENSURE: &str =
    "INSERT INTO {schema}.queues (name, updated_at) VALUES ($1, '-infinity') ON CONFLICT (name) DO NOTHING";

/// control_queue, second: the row FOR UPDATE (`$1` queue), which waits for every claim that
/// holds it (FOR KEY SHARE or FOR NO KEY UPDATE: each read the old settings) to commit; every
/// claim that locks it after this transaction commits reads the new settings. (The upsert's own
/// row lock would not wait for them: an update of columns outside any key takes FOR NO KEY
/// UPDATE, which FOR KEY SHARE does not conflict with.)
const CONTROL_LOCK: &str = "SELECT name FROM {schema}.queues WHERE name = $1 FOR UPDATE";

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

const CONTROL_PAUSED: &str = control!("is_paused");
const CONTROL_ACTIVE: &str = control!("is_active");
const CONTROL_MAX_WORKERS: &str = control!("max_workers");
const CONTROL_ZOMBIE_TIMEOUT: &str = control!("zombie_timeout_ms");
const CONTROL_ZOMBIE_POLICY: &str = control!("zombie_policy");
const CONTROL_FETCHED_TIMEOUT: &str = control!("fetched_timeout_ms");

/// The per-key cap (`$1` queue, `$2` cap or NULL), and in the same statement the promotion of
/// the queue's Blocked rows the new cap leaves room for (a raised cap: per key, up to its new
/// parking depth, `key_depth(cap)`, less its Pending + Fetched + Processing rows; a cleared
/// one: all), skipping rows another
/// session holds (rescue's sweep takes those later).
const CONTROL_KEY_MAX_WORKERS: &str = concat!(
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

/// The rate limit: `$1` queue, `$2` jobs, `$3` window in milliseconds, `$4` per key (all NULL
/// and false: no limit). The starts log stays (rescue prunes it).
const CONTROL_RATE_LIMIT: &str = concat!(
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

const QUEUE_SETTINGS: &str = concat!("SELECT ", queue_cols!(), " FROM {schema}.queues WHERE name = $1");

/// `$1` id. Moves a dead letter back to Pending, attempt 0, expired_holds 0 (a fresh row); a
/// live key conflict raises 23505.
const REQUEUE: &str = "
WITH g AS (DELETE FROM {schema}.jobs_dlq d WHERE d.id = $1 RETURNING d.*),
ins AS (
    INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, concurrency_key, idempotency_key, priority, status,
                                   attempt, max_attempts, lease, worker_id, scheduled_at, created_at, updated_at,
                                   last_error, created_by, expired_holds)
    SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.concurrency_key, g.idempotency_key, g.priority, 0, 0,
           g.max_attempts, NULL, NULL, NULL, g.created_at, now(), g.error, g.created_by, 0
      FROM g
    RETURNING id, queue
),
woke AS (SELECT pg_notify('{channel}', ins.queue) FROM ins)
SELECT (SELECT count(*) FROM ins) AS moved, (SELECT count(*) FROM woke) AS woke";

/// The stats of every queue with a job or a control row, in one statement (one snapshot: the
/// per-table sums always add up). `{archived}` is the archive's per-queue counts: the exact
/// `GROUP BY` ([`STATS`]) or the estimate of [`STATS_ESTIMATED`]. A row a claim created
/// (`updated_at` '-infinity') is no control row: its queue is listed only with jobs, and
/// without settings.
macro_rules! stats {
    ($archived:literal) => {
        concat!(
            "
WITH h AS (
    SELECT queue,
           count(*) FILTER (WHERE status IN (0, 3, 4)) AS pending,
           count(*) FILTER (WHERE status = 1) AS fetched,
           count(*) FILTER (WHERE status = 2) AS processing,
           min(due_at) FILTER (WHERE status IN (0, 3, 4) AND due_at <= now()) AS oldest_due_at
      FROM {schema}.jobs_hot GROUP BY queue
),
-- The busiest keys of each queue: most Fetched + Processing first, ties by key (bytewise).
bk AS (
    SELECT queue, array_agg(k ORDER BY n DESC, k COLLATE \"C\") AS busy_keys,
           array_agg(n ORDER BY n DESC, k COLLATE \"C\") AS busy_counts
      FROM (SELECT queue, k, n, row_number() OVER (PARTITION BY queue ORDER BY n DESC, k COLLATE \"C\") AS rn
              FROM (SELECT queue, concurrency_key AS k, count(*) AS n FROM {schema}.jobs_hot
                     WHERE concurrency_key IS NOT NULL AND status IN (1, 2) GROUP BY queue, concurrency_key) x) y
     WHERE rn <= 5
     GROUP BY queue
),
a AS (",
            $archived,
            "),
d AS (
    SELECT queue, count(*) AS dead, count(*) FILTER (WHERE reason = 'cancelled') AS cancelled
      FROM {schema}.jobs_dlq GROUP BY queue
),
c AS (
    SELECT name AS queue, max_workers, is_paused, is_active, zombie_timeout_ms, zombie_policy, fetched_timeout_ms,
           key_max_workers, rate_jobs, rate_per_ms, rate_by_key, updated_at
      FROM {schema}.queues WHERE updated_at <> '-infinity'
),
q AS (
    SELECT queue, coalesce(h.pending, 0) AS pending, coalesce(h.fetched, 0) AS fetched,
           coalesce(h.processing, 0) AS processing, coalesce(a.archived, 0) AS archived,
           coalesce(a.estimated, false) AS archived_estimated, coalesce(d.dead, 0) AS dead,
           coalesce(d.cancelled, 0) AS cancelled, h.oldest_due_at, c.updated_at IS NOT NULL AS controlled,
           c.max_workers, c.is_paused, c.is_active, c.zombie_timeout_ms, c.zombie_policy, c.fetched_timeout_ms,
           c.key_max_workers, c.rate_jobs, c.rate_per_ms, c.rate_by_key, c.updated_at
      FROM h FULL JOIN a USING (queue) FULL JOIN d USING (queue) FULL JOIN c USING (queue)
)
SELECT t.taken_at, q.*, bk.busy_keys, bk.busy_counts
  FROM (SELECT now() AS taken_at) t LEFT JOIN q ON true LEFT JOIN bk ON bk.queue = q.queue
 ORDER BY q.queue"
        )
    };
}

/// Before the stats and throughput reads, in their read-only transaction: no JIT. Their
/// estimated cost (a count over the archive) passes `jit_above_cost`, and compiling the plan
/// took 2.5-3 s of a 3-4 s overview on a loaded machine (1,000,000 archived jobs); the reads
/// themselves gain nothing from it.
const NO_JIT: &str = "SET LOCAL jit = off";

/// Exact stats.
const STATS: &str =
    stats!("SELECT queue, count(*) AS archived, false AS estimated FROM {schema}.jobs_archive GROUP BY queue");

/// Stats for a dashboard: each queue's archive counted exactly up to 1,000 rows (an index-only
/// range of `jobs_archive_queue_idx`, per queue), beyond that estimated from the planner's
/// statistics: the table's live rows (`reltuples` scaled to its current size in pages, as the
/// planner does) times the queue's share in `pg_stats` (its most-common-values frequency, else
/// an even share of what the common values leave), never below 1,001. The queues are the ones
/// with an archived job in the statistics (`$1` the schema's name) or a row in the hot or dead-letter tables or the
/// control table; a queue that is only in the archive and not (yet) in `pg_stats` is missed
/// until the next ANALYZE.
const STATS_ESTIMATED: &str = stats!(
    "
    WITH names AS (
        SELECT queue FROM h UNION SELECT queue FROM {schema}.jobs_dlq
        UNION SELECT name FROM {schema}.queues
        UNION SELECT unnest(most_common_vals::text::text[]) FROM pg_stats
         WHERE schemaname = $1 AND tablename = 'jobs_archive' AND attname = 'queue'
    ),
    capped AS MATERIALIZED (
        SELECT n.queue, (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs_archive x WHERE x.queue = n.queue
                                                LIMIT 1001) l) AS n
          FROM names n
    ),
    st AS (
        SELECT most_common_vals::text::text[] AS vals, most_common_freqs AS freqs, null_frac,
               CASE WHEN n_distinct < 0 THEN NULL ELSE n_distinct END AS n_distinct
          FROM pg_stats WHERE schemaname = $1 AND tablename = 'jobs_archive' AND attname = 'queue'
    ),
    rel AS (
        SELECT CASE WHEN c.reltuples <= 0 OR c.relpages = 0 THEN 0
                    ELSE c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int8)
               END AS rows
          FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
         WHERE s.nspname = $1 AND c.relname = 'jobs_archive'
    )
    SELECT capped.queue,
           CASE WHEN capped.n <= 1000 THEN capped.n
                ELSE greatest(1001, round((SELECT rows FROM rel) * coalesce(
                    (SELECT st.freqs[array_position(st.vals, capped.queue)] FROM st
                      WHERE array_position(st.vals, capped.queue) IS NOT NULL),
                    (SELECT (1 - st.null_frac - coalesce((SELECT sum(f) FROM unnest(st.freqs) f), 0))
                            / greatest(coalesce(st.n_distinct, 1) - coalesce(cardinality(st.vals), 0), 1) FROM st),
                    0))::int8)
           END AS archived,
           capped.n > 1000 AS estimated
      FROM capped WHERE capped.n > 0"
);

/// The projection of a [`chokaq_core::JobRecord`] from each table (same columns, same order).
macro_rules! hot_record {
    ($payload:literal) => {
        concat!(
            "'hot'::text AS loc, id, queue, kind, ",
            $payload,
            " AS payload, tags, concurrency_key, idempotency_key, priority, \
             CASE WHEN status IN (3, 4) THEN 0::int2 ELSE status END AS status, \
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

/// `$1` id: the job from whichever table holds it.
const GET_JOB: &str = concat!(
    "SELECT ",
    hot_record!("payload"),
    " FROM {schema}.jobs_hot WHERE id = $1\nUNION ALL SELECT ",
    archive_record!("payload"),
    " FROM {schema}.jobs_archive WHERE id = $1\nUNION ALL SELECT ",
    dlq_record!("payload"),
    " FROM {schema}.jobs_dlq WHERE id = $1"
);

/// The columns of a `list_jobs` page of each table, with payloads or without (every payload
/// then reads as JSON `null`, and none leaves the server), as `rows::record` decodes them. The
/// statement around them is built per call with sea-query (`chokaq_core::listing`): only the
/// filters given, keyset `id > after`, `ORDER BY id`, `LIMIT`; [`all_statements`] lists a
/// representative set of its shapes for the grammar check.
pub(crate) fn list_columns(table: JobTable, without_payloads: bool) -> &'static str {
    match (table, without_payloads) {
        (JobTable::Hot, false) => hot_record!("payload"),
        (JobTable::Hot, true) => hot_record!("'null'::jsonb"),
        (JobTable::Archive, false) => archive_record!("payload"),
        (JobTable::Archive, true) => archive_record!("'null'::jsonb"),
        (JobTable::DeadLetter, false) => dlq_record!("payload"),
        (JobTable::DeadLetter, true) => dlq_record!("'null'::jsonb"),
    }
}

/// The listing of `p` in `schema` (validated), rendered for PostgreSQL.
pub(crate) fn list_query(schema: &str, p: &ListJobsParams) -> Result<ListQuery> {
    let mut q = listing::list_query(SqlDialect::Postgres, schema, list_columns(p.table, p.without_payloads), p)?;
    if p.table == JobTable::Hot && p.status == Some(chokaq_core::JobStatus::Pending) {
        q.sql = with_blocked(&q.sql)?;
    }
    Ok(q)
}

/// The Pending filter of a hot listing (`"status" IN ($a, $b)`: Pending and Scheduled, as
/// `chokaq_core::listing` renders it) with Blocked (4, migration 13) added: it reads as Pending.
fn with_blocked(sql: &str) -> Result<String> {
    const AT: &str = "\"status\" IN (";
    let start = sql
        .find(AT)
        .ok_or_else(|| chokaq_core::Error::new(chokaq_core::ErrorKind::Other, "listing: no status filter"))?;
    let close = sql[start..]
        .find(')')
        .ok_or_else(|| chokaq_core::Error::new(chokaq_core::ErrorKind::Other, "listing: status filter not closed"))?
        + start;
    Ok(format!("{}, 4{}", &sql[..close], &sql[close..]))
}

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

const PURGE_ARCHIVE: &str = purge!("jobs_archive", "");
const PURGE_DLQ: &str = purge!("jobs_dlq", "\n       AND ($5::text IS NULL OR reason = $5::text)");

/// `$1` worker, `$2` host, `$3` pid, `$4` queues, `$5` concurrency: the first registration
/// sets `started_at`, every one sets `last_seen_at` (the database clock).
const REGISTER_WORKER: &str = "
INSERT INTO {schema}.workers AS w (worker_id, host, pid, queues, concurrency, started_at, last_seen_at)
VALUES ($1, $2, $3, $4::text [], $5, now(), now())
ON CONFLICT (worker_id) DO UPDATE SET
    host = excluded.host,
    pid = excluded.pid,
    queues = excluded.queues,
    concurrency = excluded.concurrency,
    last_seen_at = excluded.last_seen_at";

/// `$1` worker.
const DEREGISTER_WORKER: &str = "DELETE FROM {schema}.workers WHERE worker_id = $1";

const LIST_WORKERS: &str = "
SELECT worker_id, host, pid, queues, concurrency, started_at, last_seen_at
  FROM {schema}.workers
 ORDER BY started_at DESC, worker_id";

/// `$1` stale after, microseconds.
const PRUNE_WORKERS: &str = "
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
const THROUGHPUT_ALL: &str = throughput!("");

/// `$2` queue: the same ranges, the queue checked in the index.
const THROUGHPUT_QUEUE: &str = throughput!(" AND queue = $2");

/// Test support: `$1` worker, `$2` last seen.
const FORCE_WORKER_SEEN: &str = "UPDATE {schema}.workers SET last_seen_at = $2 WHERE worker_id = $1";

/// Test support: `$1` id, `$2` finish time of an archived job.
const FORCE_FINISHED_AT: &str = "UPDATE {schema}.jobs_archive SET finished_at = $2 WHERE id = $1";
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
const SCHEDULE_REGISTER: &str = concat!(
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
const SCHEDULE_GET: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = $1");

/// Every schedule row.
const SCHEDULE_LIST: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules ORDER BY name");

/// The tick's compare-and-set: `$1` name, `$2` tick, `$3` next tick, `$4` spec, `$5` time
/// zone. A concurrent winner's update makes this one re-check its WHERE on the new row version
/// (READ COMMITTED) or fail with a serialization error (stricter levels; retried): either way
/// it matches no row. Returns `enabled` when this call won the tick.
const SCHEDULE_TICK: &str = "
UPDATE {schema}.schedules
   SET last_enqueued_tick = $2, next_tick = $3, updated_at = now()
 WHERE name = $1 AND NOT stale AND spec = $4 AND time_zone = $5
   AND (last_enqueued_tick IS NULL OR last_enqueued_tick < $2)
RETURNING enabled";

/// Pause or resume: `$1` name, `$2` enabled.
const SCHEDULE_SET_ENABLED: &str = concat!(
    "UPDATE {schema}.schedules SET enabled = $2, updated_at = now() WHERE name = $1 RETURNING ",
    schedule_cols!()
);

/// Marks stale the rows of group `$1` not named in `$2`.
const SCHEDULE_MARK_STALE: &str = "
UPDATE {schema}.schedules SET stale = true, updated_at = now()
 WHERE group_name = $1 AND NOT stale AND NOT (name = ANY($2::text[]))";

const DROP_SCHEMA: &str = "DROP SCHEMA IF EXISTS {schema} CASCADE";

/// Test support: the role whose default isolation is REPEATABLE READ, with what the backend
/// needs on the schema (`TestSupport::with_repeatable_read_default`).
const RR_ROLE_CREATE: &str = "CREATE ROLE {rr_role} LOGIN;
ALTER ROLE {rr_role} SET default_transaction_isolation = 'repeatable read';
GRANT USAGE ON SCHEMA {schema} TO {rr_role};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {rr_role};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {rr_role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {rr_role}";

/// Test support: the isolation level of a session's transactions.
const SESSION_ISOLATION: &str = "SELECT current_setting('transaction_isolation')";

/// Test support: drops that role (after the schema, which held its only privileges).
const RR_ROLE_DROP: &str = "DROP ROLE IF EXISTS {rr_role}";

const FORCE: &str = "
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

const PRESENCE_MANY: &str = "
SELECT u.id,
       (SELECT count(*) FROM {schema}.jobs_hot h WHERE h.id = u.id) AS hot,
       (SELECT count(*) FROM {schema}.jobs_archive a WHERE a.id = u.id) AS archive,
       (SELECT count(*) FROM {schema}.jobs_dlq d WHERE d.id = u.id) AS dead
  FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)
 ORDER BY u.ord";

const KILL_CONNECTIONS: &str = "
SELECT count(*) FILTER (WHERE t.ok) FROM (
    SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
     WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()
) t";

const DB_NOW: &str = "SELECT now()";

// ---- the migrator's own statements; the migrations themselves are `migrations/*.sql` ----

const MIGRATE_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '10s'";

/// `$1` the lock's key (`chokaq:migrate:<schema>`).
/// Before the schema's first migration (no `locks` table yet): an advisory lock on `$1`.
const MIGRATE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// Whether the schema's `locks` table exists (migration 4 on).
const LOCKS_TABLE_EXISTS: &str = "SELECT to_regclass('{schema}.locks') IS NOT NULL";

/// Once the schema has its `locks` table: its `migrate` row, waited for (under the
/// migration's `lock_timeout`).
const MIGRATE_ROW_LOCK: &str = "SELECT name FROM {schema}.locks WHERE name = 'migrate' FOR UPDATE";

const CREATE_SCHEMA: &str = "CREATE SCHEMA IF NOT EXISTS {schema}";

const CREATE_VERSIONS: &str = "CREATE TABLE IF NOT EXISTS {schema}.versions (version integer PRIMARY KEY, \
    name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())";

/// The versions applied.
const CURRENT_VERSION: &str = "SELECT coalesce(array_agg(version ORDER BY version), '{}') FROM {schema}.versions";

/// `$1` version, `$2` name.
const INSERT_VERSION: &str = "INSERT INTO {schema}.versions (version, name) VALUES ($1, $2)";

/// `$1` a repeatable script's name: the checksum recorded when it was last applied.
const REPEATABLE_CHECKSUM: &str = "SELECT checksum FROM {schema}.repeatables WHERE name = $1";

/// `$1` name, `$2` checksum, `$3` the highest migration version of the build that applied it.
const REPEATABLE_RECORD: &str = "
INSERT INTO {schema}.repeatables (name, checksum, version) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, version = excluded.version, applied_at = now()";

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
    claim = CLAIM;
    complete_and_claim = COMPLETE_AND_CLAIM;
    start = START;
    heartbeat = HEARTBEAT;
    release = RELEASE;
    complete = COMPLETE;
    complete_standing = COMPLETE_STANDING;
    fail = FAIL;
    fail_standing = FAIL_STANDING;
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
    control_rate_limit = CONTROL_RATE_LIMIT;
    notify_queues = NOTIFY_QUEUES;
    tx_status = TX_STATUS;
    control_zombie_policy = CONTROL_ZOMBIE_POLICY;
    queue_settings = QUEUE_SETTINGS;
    requeue = REQUEUE;
    stats = STATS;
    stats_estimated = STATS_ESTIMATED;
    no_jit = NO_JIT;
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
