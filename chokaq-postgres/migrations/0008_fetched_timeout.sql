-- chokaq PostgreSQL schema, version 8: a per-queue fetched timeout.
--
-- The rescue's timeouts come from the database: each queue's `zombie_timeout_ms` and
-- `fetched_timeout_ms`, else the contract's defaults (300 s and 60 s), never the settings of
-- whichever instance wins the maintenance lock.
ALTER TABLE {schema}.queues
    ADD COLUMN IF NOT EXISTS fetched_timeout_ms bigint NULL CHECK (fetched_timeout_ms > 0);
