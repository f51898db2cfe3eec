-- chokaq PostgreSQL schema, version 13: concurrency keys, per-key caps and rate limits
-- (issue 25).
--
-- `concurrency_key` on every job table (a move copies it). Nullable with no default: adding it
-- rewrites no table.
ALTER TABLE {schema}.jobs_hot ADD COLUMN IF NOT EXISTS concurrency_key text NULL;
ALTER TABLE {schema}.jobs_archive ADD COLUMN IF NOT EXISTS concurrency_key text NULL;
ALTER TABLE {schema}.jobs_dlq ADD COLUMN IF NOT EXISTS concurrency_key text NULL;

-- The queue's per-key cap and rate limit (all three rate columns set, or none).
ALTER TABLE {schema}.queues
    ADD COLUMN IF NOT EXISTS key_max_workers integer NULL CHECK (key_max_workers >= 0),
    ADD COLUMN IF NOT EXISTS rate_jobs integer NULL CHECK (rate_jobs >= 1),
    ADD COLUMN IF NOT EXISTS rate_per_ms bigint NULL CHECK (rate_per_ms >= 1),
    ADD COLUMN IF NOT EXISTS rate_by_key boolean NOT NULL DEFAULT false;

-- Blocked (4): a Pending keyed job beyond its key's allowance, kept out of the claim index so
-- that a key with a long backlog at its cap costs the claim nothing (no head-of-line walk).
-- Enqueue writes it when the key already holds `key_max_workers` rows that are Pending,
-- Fetched or Processing; every move of a keyed row out of those statuses, rescue and a raised
-- or cleared cap promote Blocked rows back to Pending. Readers report it as Pending. Only an
-- index optimisation: the claim's per-key guard alone keeps the cap.
ALTER TABLE {schema}.jobs_hot DROP CONSTRAINT IF EXISTS jobs_hot_status_check;
ALTER TABLE {schema}.jobs_hot ADD CONSTRAINT jobs_hot_status_check CHECK (status IN (0, 1, 2, 3, 4));

-- The per-key counts: the claim's guard (Fetched + Processing of one key), enqueue's and the
-- promotions' (Pending + Fetched + Processing). Keyless rows are not in it (no cost to them).
CREATE INDEX IF NOT EXISTS jobs_hot_key_live_idx ON {schema}.jobs_hot (queue, concurrency_key, status)
    WHERE concurrency_key IS NOT NULL AND status IN (0, 1, 2);
-- Blocked rows per key in claim order: the promotions.
CREATE INDEX IF NOT EXISTS jobs_hot_blocked_idx ON {schema}.jobs_hot (queue, concurrency_key, priority DESC, due_at, id)
    WHERE status = 4;

-- The starts log of rate-limited queues: one row per claimed job (queue, its key, the claim's
-- now(), which is also a started claim's `started_at`). Rescue prunes what no window sees.
CREATE TABLE IF NOT EXISTS {schema}.starts (
    queue text        NOT NULL,
    ckey  text        NULL,
    stamp timestamptz NOT NULL
);
-- A per-key window's count, and a queue-wide one's.
CREATE INDEX IF NOT EXISTS starts_key_idx ON {schema}.starts (queue, ckey, stamp);
CREATE INDEX IF NOT EXISTS starts_queue_idx ON {schema}.starts (queue, stamp);
