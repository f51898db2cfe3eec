-- chokaq PostgreSQL schema, version 14: a key's counts from smaller indexes (issue 25).
--
-- Version 13 counted a key's rows in one index of every keyed row that is Pending, Fetched or
-- Processing, on (queue, concurrency_key, status): a claim's update of a keyed row (Pending to
-- Fetched or Processing) entered it once more, and the claim's count of a key's running rows
-- descended it, the backlog's index, once per key. Now:
-- - jobs_hot_active_idx, the rows in flight (bounded by the workers' slots and look-ahead, not
--   by the backlog), has the key as its second column: the claim counts a key's Fetched and
--   Processing rows there, and a claim's update enters it as it did before (the queue-wide
--   counts read its first column);
-- - jobs_hot_key_pending_idx holds the Pending rows of keyed jobs, which a claim's update
--   leaves. Enqueue and the promotions count a key's rows in both (`key_live`, functions.sql).
-- A keyed claim enters as many indexes as a keyless one.
DROP INDEX IF EXISTS {schema}.jobs_hot_active_idx;
CREATE INDEX IF NOT EXISTS jobs_hot_active_idx ON {schema}.jobs_hot (queue, concurrency_key) WHERE status IN (1, 2);
DROP INDEX IF EXISTS {schema}.jobs_hot_key_live_idx;
CREATE INDEX IF NOT EXISTS jobs_hot_key_pending_idx ON {schema}.jobs_hot (queue, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND status = 0;
