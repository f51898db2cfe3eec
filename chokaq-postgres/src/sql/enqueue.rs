//! The statements of the enqueue room: the batch insert, the look-up of taken keys, and the wake-ups after the commit (`notify.rs`).

pub(super) const ENQUEUE: &str = concat!(
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
pub(super) const NOTIFY_QUEUES: &str = "SELECT count(pg_notify($1, q.queue)) FROM unnest($2::text[]) AS q (queue)";

/// The fate of the callers' enqueuing transactions (`notify.rs`): `$1` transaction ids.
pub(super) const TX_STATUS: &str = "SELECT t.x, txid_status(t.x) FROM unnest($1::int8[]) AS t (x)";

/// The live jobs holding keys: `$1` queues, `$2` keys (pairwise); returns queue, key, id.
pub(super) const LOOKUP_KEYS: &str = "SELECT h.queue, h.idempotency_key, h.id FROM {schema}.jobs_hot h \
    JOIN unnest($1::text[], $2::text[]) AS k(queue, key) ON h.queue = k.queue AND h.idempotency_key = k.key";
