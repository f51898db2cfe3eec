-- chokaq PostgreSQL schema, version 6: periodic jobs (docs/periodic.md).
--
-- One row per schedule. `last_enqueued_tick` is the tick compare-and-set of enqueue_tick: it
-- only ever grows, and the job of a tick is inserted in the same transaction that advanced it,
-- so a tick at or before it is never enqueued again, whether its job is still hot, archived,
-- dead-lettered or purged.
CREATE TABLE IF NOT EXISTS {schema}.schedules (
    name text PRIMARY KEY,
    spec text NOT NULL,
    time_zone text NOT NULL,
    group_name text NOT NULL,
    next_tick timestamptz,
    last_enqueued_tick timestamptz,
    enabled boolean NOT NULL DEFAULT true,
    stale boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
