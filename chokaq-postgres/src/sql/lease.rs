//! The statements of the lease room: the guarded writes of a held lease.

/// Fetched → Processing (attempt + 1). Repeatable: a Processing row this lease and worker
/// hold is reported done again and not written (its attempt is counted once).
pub(super) const START: &str = concat!(
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
pub(super) const HEARTBEAT: &str = concat!(
    "WITH l AS (",
    guard!("IN (1, 2)"),
    ") UPDATE {schema}.jobs_hot h SET heartbeat_at = now()
       FROM l WHERE h.id = l.id
     RETURNING h.id, h.cancel_requested"
);

/// Fetched → Pending (lease, worker and heartbeat cleared, attempt unchanged); a row whose
/// cancel was requested is dead-lettered `cancelled` instead (cancel is final). Both are done.
pub(super) const RELEASE: &str = concat!(
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
pub(super) const COMPLETE: &str = concat!(
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
pub(super) const COMPLETE_STANDING: &str = "
SELECT a.id FROM {schema}.jobs_archive a
  JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON a.id = u.id AND a.lease = u.lease
 WHERE a.worker_id = $1";

/// `$1` worker, `$2` id, `$3` lease: the outcome a fail with this lease already wrote, if it
/// did. A retry or snooze leaves its lease on the Pending row (release, rescue and requeue clear
/// it): `at` is its due time. A dead letter keeps lease and worker: `reason`, unless rescue
/// filed it as a zombie (that lease was lost, not used).
pub(super) const FAIL_STANDING: &str = "
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
pub(super) const FAIL: &str = concat!(
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
    ") SELECT g.id, g.queue, g.kind, g.payload, g.output, g.tags, g.concurrency_key, g.idempotency_key, g.priority, l.eff,
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
