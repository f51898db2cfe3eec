//! The statements of the inspect room: stats (exact and estimated) and a job by id.

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
           count(*) FILTER (WHERE status IN (0, 3, 4, 5)) AS pending,
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
pub(super) const NO_JIT: &str = "SET LOCAL jit = off";

/// A read bounded by a deadline (`bounded.rs`) runs in a transaction of its own (its statements
/// only read; `BEGIN READ ONLY` would say so, but the grammar check's parser knows no
/// transaction modes).
pub(super) const BOUNDED_BEGIN: &str = "BEGIN";

/// The bound of that transaction, in the same round trip as the session's process id (for the
/// cancel on drop): `statement_timeout` set to the time left (`$1`, e.g. `1500ms`), and `jit`
/// off (see [`NO_JIT`]), both for the transaction only (`is_local`), so the pooled session
/// returns to the pool with neither.
pub(super) const BOUNDED_SETUP: &str = "SELECT pg_backend_pid() AS pid, set_config('statement_timeout', $1, true), \
                                        set_config('jit', 'off', true)";

/// The end of a bounded read that succeeded.
pub(super) const BOUNDED_COMMIT: &str = "COMMIT";

/// Cancels the statement of a dropped bounded read (`$1`: its session's process id), sent on a
/// connection of its own while the read's session is still open.
pub(super) const BOUNDED_CANCEL: &str = "SELECT pg_cancel_backend($1)";

/// Exact stats.
pub(super) const STATS: &str =
    stats!("SELECT queue, count(*) AS archived, false AS estimated FROM {schema}.jobs_archive GROUP BY queue");

/// Stats for a dashboard: each queue's archive counted exactly up to 1,000 rows (an index-only
/// range of `jobs_archive_queue_idx`, per queue), beyond that estimated from the planner's
/// statistics: the table's live rows (`reltuples` scaled to its current size in pages, as the
/// planner does) times the queue's share in `pg_stats` (its most-common-values frequency, else
/// an even share of what the common values leave), never below 1,001. The queues are the ones
/// with an archived job in the statistics (`$1` the schema's name) or a row in the hot or dead-letter tables or the
/// control table; a queue that is only in the archive and not (yet) in `pg_stats` is missed
/// until the next ANALYZE.
pub(super) const STATS_ESTIMATED: &str = stats!(
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

/// `$1` id: the job from whichever table holds it.
pub(super) const GET_JOB: &str = concat!(
    "SELECT ",
    hot_record!("payload"),
    " FROM {schema}.jobs_hot WHERE id = $1\nUNION ALL SELECT ",
    archive_record!("payload"),
    " FROM {schema}.jobs_archive WHERE id = $1\nUNION ALL SELECT ",
    dlq_record!("payload"),
    " FROM {schema}.jobs_dlq WHERE id = $1"
);
