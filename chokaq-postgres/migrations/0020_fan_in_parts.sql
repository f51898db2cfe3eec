-- chokaq PostgreSQL schema, version 20: a wide fan-in and a large batch counted in parts
-- (docs/postgres.md, "Workflows and batches").
--
-- Version 19 counted every task's dependencies on its own task row: the completions of a
-- fan-in's dependencies each updated that one row and held its lock to their commit, so they
-- committed one after the other (242 tasks/s in the bench's fan-in of 10,001, beside 7,141
-- jobs/s of the plain drain). A task with more dependencies than the parts (32) now counts them
-- in parts: each edge names its part, each part row counts its edges not yet ended, and the
-- task row counts its parts not yet at zero. A completion locks one part row; only the
-- completion that takes a part to zero also locks the task row, so at most 32 completions per
-- task wait for each other there. A task with fewer dependencies keeps counting them on its
-- task row (`part` null on its edges).
ALTER TABLE {schema}.workflow_edges ADD COLUMN IF NOT EXISTS part smallint NULL;

CREATE TABLE IF NOT EXISTS {schema}.workflow_parts (
    job_id    uuid     NOT NULL,
    part      smallint NOT NULL,
    deps_left integer  NOT NULL,
    PRIMARY KEY (job_id, part)
);

-- The tasks that ended in the running transaction and whose dependents have not been counted
-- yet: written by the row trigger, read and deleted by the deferred trigger at the commit,
-- which counts them all in one call, locking parts and tasks in key order (two transactions
-- that each end several dependencies of one fan-in never wait for each other in a cycle). A
-- row lives only inside its transaction: unlogged (no WAL), and nothing is lost by a crash
-- that empties it (the transaction that wrote it is rolled back by the same crash).
CREATE UNLOGGED TABLE IF NOT EXISTS {schema}.flow_ends (
    xid    xid8    NOT NULL,
    job_id uuid    NOT NULL,
    dead   boolean NOT NULL
);
CREATE INDEX IF NOT EXISTS flow_ends_xid ON {schema}.flow_ends (xid);

-- Batches likewise: every job's end updated the batch row. A batch of more than 32 jobs now
-- counts them in 32 parts (`batch_jobs.part`, `batch_parts`); `batches.unfinished` counts
-- the jobs counted on the row (a small batch's, and every job added later) not yet ended,
-- plus the parts not yet at zero: the batch is final when it reaches zero. `dead` stays on
-- the row (a dead letter is rare; the first one fires `first_dead`); `succeeded` is no longer
-- kept: it is the total less the dead and the jobs not yet ended (a build of version 19
-- started beside this one fails on its batch statements instead of miscounting).
ALTER TABLE {schema}.batches ADD COLUMN IF NOT EXISTS unfinished integer NULL;
UPDATE {schema}.batches SET unfinished = total - succeeded - dead WHERE unfinished IS NULL;
ALTER TABLE {schema}.batches ALTER COLUMN unfinished SET NOT NULL;
ALTER TABLE {schema}.batches DROP COLUMN IF EXISTS succeeded;
ALTER TABLE {schema}.batch_jobs ADD COLUMN IF NOT EXISTS part smallint NULL;

CREATE TABLE IF NOT EXISTS {schema}.batch_parts (
    batch_id  uuid     NOT NULL REFERENCES {schema}.batches (id) ON DELETE CASCADE,
    part      smallint NOT NULL,
    jobs_left integer  NOT NULL,
    PRIMARY KEY (batch_id, part)
);
