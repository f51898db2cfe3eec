-- chokaq PostgreSQL schema, version 11: held claims, and the functions in one file.
--
-- `expired_holds`: how often a held Fetched job (ClaimMode::Hold: Fetched with a heartbeat)
-- expired, its worker gone before its start was recorded. Rescue counts it and dead-letters
-- the job as `zombie` at chokaq_core::MAX_EXPIRED_HOLDS; requeue_dead resets it. Nothing else
-- reads it. A constant default: no table rewrite.
ALTER TABLE {schema}.jobs_hot ADD COLUMN IF NOT EXISTS expired_holds integer NOT NULL DEFAULT 0;

-- From this version on, every plpgsql function lives in `functions.sql`, which `migrate`
-- applies (CREATE OR REPLACE) after the versioned migrations whenever its checksum changed;
-- this table records what was applied. Versions 1, 2, 9 and 10 keep their copies of the
-- functions: they are history, already applied to existing schemas.
CREATE TABLE IF NOT EXISTS {schema}.repeatables (
    name       text        PRIMARY KEY,
    checksum   text        NOT NULL,
    version    integer     NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- The claim mode becomes a smallint (0 reserve, 1 hold, 2 start) instead of `p_start boolean`.
-- CREATE OR REPLACE cannot change a signature: the old functions are dropped here, and
-- functions.sql creates the new ones in the same transaction. (complete_and_claim first: it
-- calls claim.) Processes of the previous version fail their claims from this commit on (the
-- function they name is gone) until they run this version.
DROP FUNCTION IF EXISTS {schema}.complete_and_claim(uuid, uuid[], bigint[], text[], integer, boolean);
DROP FUNCTION IF EXISTS {schema}.claim(uuid, text[], integer, boolean, text[], integer[]);
