-- chokaq PostgreSQL schema, version 17: unique jobs (issue 42, docs/unique.md).
--
-- One row per unique key: the key (64 hex digits of SHA-256, computed by the client from the
-- job's kind, queue, arguments and period bucket), the job holding it, the states that count
-- for that job's settings (a bitmask, chokaq_core::UniqueStates), its settings as JSON (for
-- chokaq jobs show and the dashboard) and the end of its period bucket.
--
-- Why a table of its own and not a partial unique index on the job tables: a job's key must
-- keep deciding after the job left jobs_hot when the settings count finished states ("at most
-- one per hour" counts a succeeded job), and no index spans jobs_hot, jobs_archive and
-- jobs_dlq. The primary key on unique_key is the arbiter: enqueue inserts the key row in the
-- same statement as the job (ON CONFLICT DO NOTHING waits for a racing inserter's commit);
-- an enqueue that finds the key taken looks at the job the row names, and only when that job
-- is in none of the counted states takes the row over, under its row lock (FOR UPDATE, then a
-- new snapshot), compare-and-set. No claim, completion or rescue statement reads or writes
-- this table: the worker path is unchanged.
CREATE TABLE IF NOT EXISTS {schema}.uniques (
    unique_key text        PRIMARY KEY,
    job_id     uuid        NOT NULL,
    states     integer     NOT NULL,
    settings   text        NOT NULL,
    expires_at timestamptz NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- unique_of (chokaq jobs show, the dashboard) and the pruning's look-ups by job.
CREATE INDEX IF NOT EXISTS uniques_job_idx ON {schema}.uniques (job_id);

-- The default state set (every live state: Pending, Scheduled, Fetched, Processing, waiting
-- for a retry) means "one live job per key": a job in jobs_hot is live, a job that left it is
-- not. Such a job carries its key on its hot row, under a partial unique index, as the
-- idempotency key does: no row of the uniques table, no second statement, so a unique enqueue
-- costs about one index entry more than a plain one (the bench's enqueue_unique_vs_enqueue).
-- The key leaves with the row (the moves to jobs_archive and jobs_dlq copy named columns, not
-- these); no claim, heartbeat or move statement reads or writes the two columns, and an update
-- of the others stays a HOT update. The state set is part of the key (chokaq_core::unique_key),
-- so a key held here and a key held in the uniques table never meet.
-- The key as its 32 bytes (bytea: half the index of the 64 hex digits, compared byte for
-- byte): keys are SHA-256, so their entries land anywhere in the index, and its size is what
-- an insert pays for.
ALTER TABLE {schema}.jobs_hot ADD COLUMN IF NOT EXISTS unique_key bytea NULL;
ALTER TABLE {schema}.jobs_hot ADD COLUMN IF NOT EXISTS unique_settings text NULL;
CREATE UNIQUE INDEX IF NOT EXISTS jobs_hot_unique_key ON {schema}.jobs_hot (unique_key) WHERE unique_key IS NOT NULL;
