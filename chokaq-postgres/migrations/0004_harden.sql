-- chokaq PostgreSQL schema, version 4: hardening (issue 16).
--
-- Idempotency keys are scoped per queue: a key used on queue A does not block the same key on
-- queue B (one tenant cannot squat on another's keys). The unique index becomes
-- (queue, idempotency_key).
DROP INDEX {schema}.jobs_hot_idempotency_idx;
CREATE UNIQUE INDEX jobs_hot_idempotency_idx ON {schema}.jobs_hot (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The singleton locks (rescue, migrations) are rows of this table, locked FOR UPDATE: only
-- roles with privileges on the schema can take them, unlike advisory locks, whose keys any
-- login to the database can hold.
CREATE TABLE {schema}.locks (
    name text PRIMARY KEY
);
INSERT INTO {schema}.locks (name) VALUES ('rescue'), ('migrate');
