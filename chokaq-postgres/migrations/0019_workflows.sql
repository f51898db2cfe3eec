-- chokaq PostgreSQL schema, version 19: workflows and batches (issue 41, docs/workflows.md).
--
-- Waiting (5): a workflow task with a dependency not yet final. Outside the claim index (which
-- is `WHERE status = 0`) and outside the per-key counts (`status IN (0, 1, 2)`), so however
-- many tasks wait, a claim reads none of them. Readers report it as Pending; `get_workflow`
-- reports it as Waiting. The completion that ends its last dependency makes it Pending (or
-- Scheduled, when its own run time is later) in the same transaction (`functions_flows.sql`).
ALTER TABLE {schema}.jobs_hot DROP CONSTRAINT IF EXISTS jobs_hot_status_check;
ALTER TABLE {schema}.jobs_hot ADD CONSTRAINT jobs_hot_status_check CHECK (status IN (0, 1, 2, 3, 4, 5)) NOT VALID;
ALTER TABLE {schema}.jobs_hot VALIDATE CONSTRAINT jobs_hot_status_check;

-- True on the hot row of a workflow task that other tasks wait for, and of a batch's job: the
-- trigger that counts its end fires only for these rows (its WHEN clause), so any other job
-- pays nothing when it moves. Nullable with no default: adding it rewrites no row. No move
-- copies it: a dead letter requeued by an operator comes back without it, and its later end
-- counts nothing again (its workflow or batch counted its first end).
ALTER TABLE {schema}.jobs_hot ADD COLUMN IF NOT EXISTS hooked boolean NULL;

CREATE TABLE IF NOT EXISTS {schema}.workflows (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per task: its job, its place in the workflow (the order it was added), its name and
-- dependency names (as given), how many of its dependencies are not final yet, whether it runs
-- after a failed dependency, and whether its own end has been counted by its dependents
-- (once: a requeued dead letter that later succeeds counts nothing again).
CREATE TABLE IF NOT EXISTS {schema}.workflow_tasks (
    job_id      uuid    PRIMARY KEY,
    workflow_id uuid    NOT NULL REFERENCES {schema}.workflows (id) ON DELETE CASCADE,
    idx         integer NOT NULL,
    name        text    NOT NULL,
    deps        jsonb   NOT NULL,
    deps_left   integer NOT NULL,
    run_anyway  boolean NOT NULL,
    counted     boolean NOT NULL DEFAULT false,
    UNIQUE (workflow_id, idx)
);

-- The graph: `from_job` is a dependency of `to_job`. A completion reads its task's edges by
-- the primary key's prefix: its work is bounded by its own dependents.
CREATE TABLE IF NOT EXISTS {schema}.workflow_edges (
    from_job uuid NOT NULL,
    to_job   uuid NOT NULL,
    PRIMARY KEY (from_job, to_job)
);

-- Batches: the counts (a job's first end counted under the batch row's lock, so racing last
-- completions read the counts one after the other and exactly one reads the batch final).
CREATE TABLE IF NOT EXISTS {schema}.batches (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL,
    total      bigint      NOT NULL,
    succeeded  bigint      NOT NULL DEFAULT 0,
    dead       bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A batch's jobs, and whether each one's end has been counted (once).
CREATE TABLE IF NOT EXISTS {schema}.batch_jobs (
    job_id   uuid    PRIMARY KEY,
    batch_id uuid    NOT NULL REFERENCES {schema}.batches (id) ON DELETE CASCADE,
    counted  boolean NOT NULL DEFAULT false
);

-- A batch's callbacks: the job each one enqueues (its id chosen at the batch's enqueue), and
-- when it was enqueued (null: not yet). At most one per event; `fired_at` is set under the
-- batch row's lock, so each is enqueued once.
CREATE TABLE IF NOT EXISTS {schema}.batch_callbacks (
    batch_id        uuid        NOT NULL REFERENCES {schema}.batches (id) ON DELETE CASCADE,
    event           text        NOT NULL,
    job_id          uuid        NOT NULL,
    queue           text        NOT NULL,
    kind            text        NOT NULL,
    payload         jsonb       NOT NULL,
    tags            text[]      NOT NULL,
    concurrency_key text        NULL,
    priority        integer     NOT NULL,
    max_attempts    integer     NOT NULL,
    scheduled_at    timestamptz NULL,
    delay_us        bigint      NULL,
    created_by      text        NULL,
    fired_at        timestamptz NULL,
    PRIMARY KEY (batch_id, event)
);
