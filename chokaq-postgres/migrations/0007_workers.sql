-- chokaq PostgreSQL schema, version 7: live worker processes, and an index for throughput.
--
-- One row per running worker process, upserted with its heartbeat (a few seconds apart),
-- deleted at graceful shutdown and by maintenance once stale. A small table with no index
-- but its key, so each heartbeat's upsert is a HOT update; pruning scans it whole.
CREATE TABLE IF NOT EXISTS {schema}.workers (
    worker_id    uuid PRIMARY KEY,
    host         text NOT NULL,
    pid          bigint NOT NULL,
    queues       text [] NOT NULL,
    concurrency  bigint NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
-- Throughput (finished jobs per queue and minute over a window) reads a range of this index
-- and nothing else (an index-only scan: 42,000 rows of the last hour out of 1,000,000 archived
-- jobs in 30 to 52 ms on a shared 2-core machine; 70 to 115 ms with a (queue, finished_at)
-- index instead, which the planner read whole). It replaces jobs_archive_finished_idx, whose
-- one column leads it, so the archive keeps its number of indexes; purge's range on
-- finished_at reads it the same way.
CREATE INDEX IF NOT EXISTS jobs_archive_finished_queue_idx ON {schema}.jobs_archive (finished_at, queue);
DROP INDEX IF EXISTS {schema}.jobs_archive_finished_idx;
