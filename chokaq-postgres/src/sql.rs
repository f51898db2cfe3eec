//! Every SQL statement of the backend. `{schema}` is the validated, quoted schema name and
//! `{channel}` the NOTIFY channel (`<schema>_jobs`), both substituted once when the backend is
//! built; every value is a bound parameter.

/// Columns copied by a move from the hot table into the archive.
macro_rules! archive_cols {
    () => {
        "id, queue, kind, payload, tags, idempotency_key, priority, attempt, max_attempts, lease, worker_id, \
         heartbeat_at, scheduled_at, created_at, started_at, updated_at, last_error, created_by, finished_at"
    };
}

/// Columns of a dead-letter row written by a move.
macro_rules! dlq_cols {
    () => {
        "id, queue, kind, payload, tags, idempotency_key, priority, attempt, max_attempts, lease, worker_id, \
         heartbeat_at, scheduled_at, created_at, started_at, updated_at, created_by, finished_at, reason, error"
    };
}

/// Values for [`dlq_cols`] from a deleted hot row `g`, followed by the reason and error.
macro_rules! dlq_vals {
    () => {
        "g.id, g.queue, g.kind, g.payload, g.tags, g.idempotency_key, g.priority, g.attempt, g.max_attempts, \
         g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, g.started_at, now(), g.created_by, now()"
    };
}

/// Locks the hot rows whose lease the caller still holds, in id order. `$1` worker,
/// `$2` ids, `$3` leases; `%STATUS%` is the status the guard expects.
macro_rules! guard {
    ($status:literal) => {
        concat!(
            "SELECT h.id FROM {schema}.jobs_hot h \
               JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON h.id = u.id AND h.lease = u.lease \
              WHERE h.worker_id = $1 AND h.status = ",
            $status,
            " ORDER BY h.id FOR UPDATE OF h"
        )
    };
}

pub(crate) const ENQUEUE: &str = "
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int4[],
                         $8::timestamptz[], $9::int8[], $10::int4[], $11::text[])
        WITH ORDINALITY AS t(id, queue, kind, payload, tags, idempotency_key, priority, scheduled_at, delay_us,
                             max_attempts, created_by, ord)
),
ins AS (
    INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, idempotency_key, priority, max_attempts,
                                   scheduled_at, created_by)
    SELECT i.id, i.queue, i.kind, i.payload::jsonb, ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)),
           i.idempotency_key, i.priority, i.max_attempts,
           CASE WHEN i.delay_us IS NULL THEN i.scheduled_at ELSE now() + i.delay_us * interval '1 microsecond' END,
           i.created_by
      FROM input i
     ORDER BY i.ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue
),
woke AS (
    SELECT pg_notify('{channel}', q.queue) FROM (SELECT DISTINCT queue FROM ins) q
)
SELECT ins.id, (SELECT count(*) FROM woke) AS woke FROM ins";

pub(crate) const LOOKUP_KEYS: &str =
    "SELECT idempotency_key, id FROM {schema}.jobs_hot WHERE idempotency_key = ANY($1::text[])";

pub(crate) const CLAIM: &str = "SELECT * FROM {schema}.claim($1, $2, $3, $4)";

/// `$1` worker, `$2` ids, `$3` leases (the completions), `$4` queues, `$5` limit, `$6` start:
/// the completed ids (`o_done`, on every row) and the claimed rows (all NULL when none).
pub(crate) const COMPLETE_AND_CLAIM: &str =
    "SELECT r.o_done, (r.o_job).* FROM {schema}.complete_and_claim($1, $2, $3, $4, $5, $6) r";

pub(crate) const START: &str = concat!(
    "WITH l AS (",
    guard!("1"),
    ") UPDATE {schema}.jobs_hot h
        SET status = 2, attempt = h.attempt + 1, started_at = now(), heartbeat_at = now(), updated_at = now()
       FROM l WHERE h.id = l.id
     RETURNING h.id"
);

pub(crate) const HEARTBEAT: &str = concat!(
    "WITH l AS (",
    guard!("2"),
    ") UPDATE {schema}.jobs_hot h SET heartbeat_at = now()
       FROM l WHERE h.id = l.id
     RETURNING h.id, h.cancel_requested"
);

pub(crate) const RELEASE: &str = concat!(
    "WITH l AS (",
    guard!("1"),
    ") UPDATE {schema}.jobs_hot h SET status = 0, worker_id = NULL, updated_at = now()
       FROM l WHERE h.id = l.id
     RETURNING h.id"
);

pub(crate) const COMPLETE: &str = concat!(
    "WITH l AS (",
    guard!("2"),
    "), g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*)
     INSERT INTO {schema}.jobs_archive (",
    archive_cols!(),
    ") SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.idempotency_key, g.priority, g.attempt, g.max_attempts,
              g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, g.started_at, now(), g.last_error,
              g.created_by, now()
         FROM g
     RETURNING id"
);

/// `$1` worker, `$2` id, `$3` lease, `$4` action (`retry`, `snooze`, `dead`), `$5` delay in
/// microseconds, `$6` error, `$7` dead-letter reason. A retry with no attempts left becomes a
/// dead letter (`failed`). One row when the lease was held, none when it was lost.
pub(crate) const FAIL: &str = concat!(
    "WITH l AS (
        SELECT h.id,
               CASE WHEN $4::text = 'retry' AND h.attempt >= h.max_attempts THEN 'dead' ELSE $4::text END AS act
          FROM {schema}.jobs_hot h
         WHERE h.id = $2 AND h.lease = $3 AND h.worker_id = $1 AND h.status = 2
           FOR UPDATE
     ),
     back AS (
        UPDATE {schema}.jobs_hot h
           SET status = 0, worker_id = NULL,
               scheduled_at = now() + $5::int8 * interval '1 microsecond',
               attempt = CASE WHEN l.act = 'snooze' THEN greatest(h.attempt - 1, 0) ELSE h.attempt END,
               last_error = CASE WHEN l.act = 'retry' THEN $6::text ELSE h.last_error END,
               updated_at = now()
          FROM l WHERE h.id = l.id AND l.act IN ('retry', 'snooze')
        RETURNING h.scheduled_at
     ),
     g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id AND l.act = 'dead' RETURNING h.*),
     dead AS (
        INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", CASE WHEN $4::text = 'retry' THEN 'failed' ELSE $7::text END, coalesce($6::text, g.last_error) FROM g
        RETURNING id
     )
     SELECT l.act, (SELECT scheduled_at FROM back) AS at, (SELECT count(*) FROM dead) AS dead FROM l"
);

/// `$1` id. Pending/Fetched: moved to the dead-letter table; Processing: flagged.
pub(crate) const CANCEL: &str = concat!(
    "WITH l AS (SELECT h.id, h.status FROM {schema}.jobs_hot h WHERE h.id = $1 FOR UPDATE),
     g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id AND l.status IN (0, 1) RETURNING h.*),
     dead AS (INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", 'cancelled', coalesce(g.last_error, 'cancelled') FROM g RETURNING id),
     req AS (
        UPDATE {schema}.jobs_hot h SET cancel_requested = true
          FROM l WHERE h.id = l.id AND l.status = 2
        RETURNING h.id
     )
     SELECT (SELECT count(*) FROM dead) AS dead, (SELECT count(*) FROM req) AS requested"
);

pub(crate) const RESCUE_LOCK: &str = "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))";

/// `$1` fetched timeout in microseconds, `$2` limit.
pub(crate) const RESCUE_FETCHED: &str = "
WITH l AS (
    SELECT h.id FROM {schema}.jobs_hot h
     WHERE h.status = 1 AND h.updated_at < now() - $1::int8 * interval '1 microsecond'
     ORDER BY h.updated_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs_hot h SET status = 0, worker_id = NULL, updated_at = now()
  FROM l WHERE h.id = l.id
RETURNING h.id";

/// `$1` default zombie timeout in microseconds, `$2` limit.
pub(crate) const RESCUE_ZOMBIES: &str = concat!(
    "WITH z AS (
        SELECT h.id, (h.attempt < h.max_attempts AND coalesce(q.zombie_policy, 0) = 0) AS retry
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
        UPDATE {schema}.jobs_hot h SET status = 0, worker_id = NULL, updated_at = now()
          FROM z WHERE h.id = z.id AND z.retry
        RETURNING h.id
     ),
     g AS (DELETE FROM {schema}.jobs_hot h USING z WHERE h.id = z.id AND NOT z.retry RETURNING h.*),
     dead AS (INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", 'zombie', coalesce(g.last_error, 'heartbeat expired') FROM g RETURNING id)
     SELECT (SELECT count(*) FROM back) AS retried, (SELECT count(*) FROM dead) AS dead"
);

const QUEUE_COLS: &str = "name, max_workers, is_paused, is_active, zombie_timeout_ms, zombie_policy, updated_at";

/// The upsert of one control column; `%COL%` is one of a fixed list, never user input.
const CONTROL: &str = "
WITH up AS (
    INSERT INTO {schema}.queues AS c (name, %COL%) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET %COL% = EXCLUDED.%COL%, updated_at = now()
    RETURNING %QUEUE_COLS%
),
woke AS (SELECT pg_notify('{channel}', up.name) FROM up)
SELECT up.*, (SELECT count(*) FROM woke) AS woke FROM up";

pub(crate) const QUEUE_SETTINGS: &str = "SELECT %QUEUE_COLS% FROM {schema}.queues WHERE name = $1";

/// `$1` id. Moves a dead letter back to Pending, attempt 0; a live key conflict raises 23505.
pub(crate) const REQUEUE: &str = "
WITH g AS (DELETE FROM {schema}.jobs_dlq d WHERE d.id = $1 RETURNING d.*),
ins AS (
    INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, idempotency_key, priority, status, attempt,
                                   max_attempts, lease, worker_id, scheduled_at, created_at, updated_at,
                                   last_error, created_by)
    SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.idempotency_key, g.priority, 0, 0, g.max_attempts, g.lease,
           NULL, NULL, g.created_at, now(), g.error, g.created_by
      FROM g
    RETURNING id, queue
),
woke AS (SELECT pg_notify('{channel}', ins.queue) FROM ins)
SELECT (SELECT count(*) FROM ins) AS moved, (SELECT count(*) FROM woke) AS woke";

/// One statement, so one snapshot: the per-table sums always add up.
pub(crate) const STATS: &str = "
WITH h AS (
    SELECT queue,
           count(*) FILTER (WHERE status = 0) AS pending,
           count(*) FILTER (WHERE status = 1) AS fetched,
           count(*) FILTER (WHERE status = 2) AS processing,
           min(due_at) FILTER (WHERE status = 0 AND due_at <= now()) AS oldest_due_at
      FROM {schema}.jobs_hot GROUP BY queue
),
a AS (SELECT queue, count(*) AS archived FROM {schema}.jobs_archive GROUP BY queue),
d AS (SELECT queue, count(*) AS dead FROM {schema}.jobs_dlq GROUP BY queue),
q AS (
    SELECT queue, coalesce(h.pending, 0) AS pending, coalesce(h.fetched, 0) AS fetched,
           coalesce(h.processing, 0) AS processing, coalesce(a.archived, 0) AS archived,
           coalesce(d.dead, 0) AS dead, h.oldest_due_at
      FROM h FULL JOIN a USING (queue) FULL JOIN d USING (queue)
)
SELECT t.taken_at, q.* FROM (SELECT now() AS taken_at) t LEFT JOIN q ON true ORDER BY q.queue";

/// The projection of a [`chokaq_core::JobRecord`] from each table (same columns, same order).
pub(crate) const HOT_RECORD: &str = "'hot'::text AS loc, id, queue, kind, payload, tags, idempotency_key, priority, \
    status, NULL::text AS reason, attempt, max_attempts, lease, worker_id, scheduled_at, created_at, started_at, \
    heartbeat_at, updated_at, NULL::timestamptz AS finished_at, last_error, cancel_requested, created_by";
pub(crate) const ARCHIVE_RECORD: &str = "'archive'::text AS loc, id, queue, kind, payload, tags, idempotency_key, \
    priority, NULL::int2 AS status, NULL::text AS reason, attempt, max_attempts, lease, worker_id, scheduled_at, \
    created_at, started_at, heartbeat_at, updated_at, finished_at, last_error, false AS cancel_requested, created_by";
pub(crate) const DLQ_RECORD: &str = "'dead'::text AS loc, id, queue, kind, payload, tags, idempotency_key, priority, \
    NULL::int2 AS status, reason, attempt, max_attempts, lease, worker_id, scheduled_at, created_at, started_at, \
    heartbeat_at, updated_at, finished_at, error AS last_error, false AS cancel_requested, created_by";

const GET_JOB: &str = "SELECT %HOT% FROM {schema}.jobs_hot WHERE id = $1
UNION ALL SELECT %ARCHIVE% FROM {schema}.jobs_archive WHERE id = $1
UNION ALL SELECT %DLQ% FROM {schema}.jobs_dlq WHERE id = $1";

pub(crate) const DROP_SCHEMA: &str = "DROP SCHEMA IF EXISTS {schema} CASCADE";

pub(crate) const FORCE: &str = "
UPDATE {schema}.jobs_hot SET
    status = coalesce($2::int2, status),
    attempt = coalesce($3::int4, attempt),
    scheduled_at = CASE WHEN $4::bool THEN $5::timestamptz ELSE scheduled_at END,
    heartbeat_at = CASE WHEN $6::bool THEN $7::timestamptz ELSE heartbeat_at END,
    updated_at = coalesce($8::timestamptz, updated_at),
    created_at = coalesce($9::timestamptz, created_at)
WHERE id = $1";

pub(crate) const PRESENCE_MANY: &str = "
SELECT u.id,
       (SELECT count(*) FROM {schema}.jobs_hot h WHERE h.id = u.id) AS hot,
       (SELECT count(*) FROM {schema}.jobs_archive a WHERE a.id = u.id) AS archive,
       (SELECT count(*) FROM {schema}.jobs_dlq d WHERE d.id = u.id) AS dead
  FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord)
 ORDER BY u.ord";

pub(crate) const KILL_CONNECTIONS: &str = "
SELECT count(*) FILTER (WHERE t.ok) FROM (
    SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
     WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()
) t";

// ---- deliberately broken statements for the conformance suite's teeth test ----

/// Candidates read with no lock at all; the UPDATE follows as a separate statement.
#[cfg(feature = "fault-injection")]
pub(crate) const FAULT_CLAIM_SELECT: &str = "
SELECT h.id FROM {schema}.jobs_hot h LEFT JOIN {schema}.queues c ON c.name = h.queue
 WHERE h.queue = ANY($1::text[]) AND h.status = 0 AND h.due_at <= now()
   AND (c.name IS NULL OR (c.is_active AND NOT c.is_paused))
 ORDER BY h.priority DESC, h.due_at, h.id
 LIMIT $2";

/// The UPDATE of the two-statement claim: no status check, no skip-locked.
#[cfg(feature = "fault-injection")]
pub(crate) const FAULT_CLAIM_UPDATE: &str = "
UPDATE {schema}.jobs_hot h
   SET status = CASE WHEN $3 THEN 2 ELSE 1 END,
       attempt = CASE WHEN $3 THEN h.attempt + 1 ELSE h.attempt END,
       started_at = CASE WHEN $3 THEN now() ELSE h.started_at END,
       heartbeat_at = CASE WHEN $3 THEN now() ELSE h.heartbeat_at END,
       lease = nextval('{schema}.lease_seq'), worker_id = $2, updated_at = now()
 WHERE h.id = ANY($1::uuid[])
RETURNING h.*";

/// The seed's committed-count cap: the count is taken in the claim statement's own snapshot,
/// with no lock on the queue row, so racing claimers fill the same gap.
#[cfg(feature = "fault-injection")]
pub(crate) const FAULT_CLAIM_PLAIN_COUNT: &str = "
WITH r AS (
    SELECT q.q,
           CASE WHEN c.max_workers IS NULL THEN $3
                ELSE greatest(0, least($3, c.max_workers - (SELECT count(*) FROM {schema}.jobs_hot a
                                                             WHERE a.queue = q.q AND a.status IN (1, 2))::int))
           END AS allow
      FROM (SELECT DISTINCT unnest($2::text[]) AS q) q
      LEFT JOIN {schema}.queues c ON c.name = q.q
     WHERE c.name IS NULL OR (c.is_active AND NOT c.is_paused)
),
cand AS (
    SELECT x.id, x.priority, x.due_at FROM r CROSS JOIN LATERAL (
        SELECT h.id, h.priority, h.due_at FROM {schema}.jobs_hot h
         WHERE h.queue = r.q AND h.status = 0 AND h.due_at <= now()
         ORDER BY h.priority DESC, h.due_at, h.id LIMIT r.allow
           FOR UPDATE SKIP LOCKED) x
),
pick AS (SELECT id FROM cand ORDER BY priority DESC, due_at, id LIMIT $3)
UPDATE {schema}.jobs_hot h
   SET status = CASE WHEN $4 THEN 2 ELSE 1 END,
       attempt = CASE WHEN $4 THEN h.attempt + 1 ELSE h.attempt END,
       started_at = CASE WHEN $4 THEN now() ELSE h.started_at END,
       heartbeat_at = CASE WHEN $4 THEN now() ELSE h.heartbeat_at END,
       lease = nextval('{schema}.lease_seq'), worker_id = $1, updated_at = now()
  FROM pick WHERE h.id = pick.id
RETURNING h.*";

/// Complete with no `lease` condition.
#[cfg(feature = "fault-injection")]
pub(crate) const FAULT_COMPLETE_NO_LEASE: &str = concat!(
    "WITH l AS (SELECT h.id FROM {schema}.jobs_hot h JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON h.id = u.id
              WHERE h.worker_id = $1 AND h.status = 2 ORDER BY h.id FOR UPDATE OF h),
     g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*)
     INSERT INTO {schema}.jobs_archive (",
    archive_cols!(),
    ") SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.idempotency_key, g.priority, g.attempt, g.max_attempts,
              g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, g.started_at, now(), g.last_error,
              g.created_by, now()
         FROM g
     RETURNING id"
);

/// First half of a complete split into two autocommitted statements: the DELETE.
#[cfg(feature = "fault-injection")]
pub(crate) const FAULT_MOVE_DELETE: &str = concat!(
    "WITH l AS (",
    guard!("2"),
    ") DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING to_jsonb(h.*)"
);

/// Second half: the INSERT, from the rows the DELETE returned.
#[cfg(feature = "fault-injection")]
pub(crate) const FAULT_MOVE_INSERT: &str = concat!(
    "INSERT INTO {schema}.jobs_archive (",
    archive_cols!(),
    ") SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.idempotency_key, g.priority, g.attempt, g.max_attempts,
              g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, g.started_at, now(), g.last_error,
              g.created_by, now()
         FROM jsonb_populate_recordset(NULL::{schema}.jobs_archive, $1::jsonb) g
     RETURNING id"
);

/// Heartbeat with no `lease` condition.
#[cfg(feature = "fault-injection")]
pub(crate) const FAULT_HEARTBEAT_NO_LEASE: &str = "
WITH l AS (SELECT h.id FROM {schema}.jobs_hot h JOIN unnest($2::uuid[], $3::int8[]) AS u(id, lease) ON h.id = u.id
            WHERE h.worker_id = $1 AND h.status = 2 ORDER BY h.id FOR UPDATE OF h)
UPDATE {schema}.jobs_hot h SET heartbeat_at = now() FROM l WHERE h.id = l.id
RETURNING h.id, h.cancel_requested";

/// The statements with the schema and channel substituted, built once per backend.
#[derive(Debug)]
pub(crate) struct Statements {
    pub enqueue: String,
    pub lookup_keys: String,
    pub claim: String,
    pub complete_and_claim: String,
    pub start: String,
    pub heartbeat: String,
    pub release: String,
    pub complete: String,
    pub fail: String,
    pub cancel: String,
    pub rescue_fetched: String,
    pub rescue_zombies: String,
    pub control_paused: String,
    pub control_active: String,
    pub control_max_workers: String,
    pub control_zombie_timeout: String,
    pub control_zombie_policy: String,
    pub queue_settings: String,
    pub requeue: String,
    pub stats: String,
    pub get_job: String,
    pub drop_schema: String,
    pub force: String,
    pub presence_many: String,
    #[cfg(feature = "fault-injection")]
    pub fault_claim_select: String,
    #[cfg(feature = "fault-injection")]
    pub fault_claim_update: String,
    #[cfg(feature = "fault-injection")]
    pub fault_claim_plain_count: String,
    #[cfg(feature = "fault-injection")]
    pub fault_complete_no_lease: String,
    #[cfg(feature = "fault-injection")]
    pub fault_move_delete: String,
    #[cfg(feature = "fault-injection")]
    pub fault_move_insert: String,
    #[cfg(feature = "fault-injection")]
    pub fault_heartbeat_no_lease: String,
}

/// `"schema"`: the schema name quoted as an identifier (it is validated first, so it has no
/// quote in it; quoting keeps its case).
pub(crate) fn quoted(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// The NOTIFY channel of a schema.
pub(crate) fn channel(schema: &str) -> String {
    format!("{schema}_jobs")
}

pub(crate) fn render(template: &str, schema: &str) -> String {
    template.replace("{schema}", &quoted(schema)).replace("{channel}", &channel(schema))
}

impl Statements {
    pub(crate) fn new(schema: &str) -> Self {
        let r = |t: &str| render(t, schema);
        let control = |col: &str| r(&CONTROL.replace("%COL%", col).replace("%QUEUE_COLS%", QUEUE_COLS));
        Statements {
            enqueue: r(ENQUEUE),
            lookup_keys: r(LOOKUP_KEYS),
            claim: r(CLAIM),
            complete_and_claim: r(COMPLETE_AND_CLAIM),
            start: r(START),
            heartbeat: r(HEARTBEAT),
            release: r(RELEASE),
            complete: r(COMPLETE),
            fail: r(FAIL),
            cancel: r(CANCEL),
            rescue_fetched: r(RESCUE_FETCHED),
            rescue_zombies: r(RESCUE_ZOMBIES),
            control_paused: control("is_paused"),
            control_active: control("is_active"),
            control_max_workers: control("max_workers"),
            control_zombie_timeout: control("zombie_timeout_ms"),
            control_zombie_policy: control("zombie_policy"),
            queue_settings: r(&QUEUE_SETTINGS.replace("%QUEUE_COLS%", QUEUE_COLS)),
            requeue: r(REQUEUE),
            stats: r(STATS),
            get_job: r(&GET_JOB
                .replace("%HOT%", HOT_RECORD)
                .replace("%ARCHIVE%", ARCHIVE_RECORD)
                .replace("%DLQ%", DLQ_RECORD)),
            drop_schema: r(DROP_SCHEMA),
            force: r(FORCE),
            presence_many: r(PRESENCE_MANY),
            #[cfg(feature = "fault-injection")]
            fault_claim_select: r(FAULT_CLAIM_SELECT),
            #[cfg(feature = "fault-injection")]
            fault_claim_update: r(FAULT_CLAIM_UPDATE),
            #[cfg(feature = "fault-injection")]
            fault_claim_plain_count: r(FAULT_CLAIM_PLAIN_COUNT),
            #[cfg(feature = "fault-injection")]
            fault_complete_no_lease: r(FAULT_COMPLETE_NO_LEASE),
            #[cfg(feature = "fault-injection")]
            fault_move_delete: r(FAULT_MOVE_DELETE),
            #[cfg(feature = "fault-injection")]
            fault_move_insert: r(FAULT_MOVE_INSERT),
            #[cfg(feature = "fault-injection")]
            fault_heartbeat_no_lease: r(FAULT_HEARTBEAT_NO_LEASE),
        }
    }
}
