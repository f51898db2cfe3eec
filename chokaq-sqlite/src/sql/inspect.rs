//! The statements of the inspect room: stats and `get_job`.
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

pub(super) const STATS_HOT: &str = "SELECT queue, status, count(*) AS n FROM {schema}.jobs_hot GROUP BY queue, status";

/// The oldest due Pending job per queue: `?1` now.
pub(super) const STATS_LAG: &str =
    "SELECT queue, min(coalesce(scheduled_at, created_at)) AS due FROM {schema}.jobs_hot \
     WHERE status IN (0, 3) AND coalesce(scheduled_at, created_at) <= ?1 GROUP BY queue";

pub(super) const STATS_ARCHIVE: &str = "SELECT queue, count(*) AS n FROM {schema}.jobs_archive GROUP BY queue";

pub(super) const STATS_DEAD: &str =
    "SELECT queue, count(*) AS n, sum(reason = 'cancelled') AS cancelled FROM {schema}.jobs_dlq \
     GROUP BY queue";

/// Every control row.
pub(super) const STATS_QUEUES: &str =
    "SELECT name, max_workers, is_paused, is_active, zombie_timeout_us, zombie_policy, \
     fetched_timeout_us, key_max_workers, rate_jobs, rate_per_ms, rate_by_key, updated_at FROM {schema}.queues";

/// The keys with the most Fetched + Processing jobs of each queue (at most `?1` per queue),
/// most running first, ties by key: the range of `jobs_hot_key_running`.
pub(super) const STATS_BUSIEST_KEYS: &str =
    "SELECT queue, ckey, n FROM (SELECT queue, concurrency_key AS ckey, count(*) AS n, \
     row_number() OVER (PARTITION BY queue ORDER BY count(*) DESC, concurrency_key) AS rn \
     FROM {schema}.jobs_hot WHERE concurrency_key IS NOT NULL AND status IN (1, 2) \
     GROUP BY queue, concurrency_key) WHERE rn <= ?1 ORDER BY queue, rn";

pub(super) const GET_HOT: &str = concat!(select_job!(jobs_hot), " WHERE id = ?1");

pub(super) const GET_ARCHIVE: &str = concat!(select_job!(jobs_archive), " WHERE id = ?1");

pub(super) const GET_DEAD: &str = concat!(select_job!(jobs_dlq), " WHERE id = ?1");
