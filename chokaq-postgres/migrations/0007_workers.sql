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
-- Throughput of one queue (finished jobs per minute) reads a range of this index; the
-- throughput of every queue reads a range of jobs_archive_finished_idx.
CREATE INDEX IF NOT EXISTS jobs_archive_queue_finished_idx ON {schema}.jobs_archive (queue, finished_at);
