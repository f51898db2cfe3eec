//! The statements of the workers room: the workers table and the finished-jobs throughput.

/// `$1` worker, `$2` host, `$3` pid, `$4` queues, `$5` concurrency: the first registration
/// sets `started_at`, every one sets `last_seen_at` (the database clock).
pub(super) const REGISTER_WORKER: &str = "
INSERT INTO {schema}.workers AS w (worker_id, host, pid, queues, concurrency, started_at, last_seen_at)
VALUES ($1, $2, $3, $4::text [], $5, now(), now())
ON CONFLICT (worker_id) DO UPDATE SET
    host = excluded.host,
    pid = excluded.pid,
    queues = excluded.queues,
    concurrency = excluded.concurrency,
    last_seen_at = excluded.last_seen_at";

/// `$1` worker.
pub(super) const DEREGISTER_WORKER: &str = "DELETE FROM {schema}.workers WHERE worker_id = $1";

pub(super) const LIST_WORKERS: &str = "
SELECT worker_id, host, pid, queues, concurrency, started_at, last_seen_at
  FROM {schema}.workers
 ORDER BY started_at DESC, worker_id";

/// `$1` stale after, microseconds.
pub(super) const PRUNE_WORKERS: &str = "
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
pub(super) const THROUGHPUT_ALL: &str = throughput!("");

/// `$2` queue: the same ranges, the queue checked in the index.
pub(super) const THROUGHPUT_QUEUE: &str = throughput!(" AND queue = $2");
