-- chokaq PostgreSQL schema, version 5: heartbeats are HOT updates.
--
-- A heartbeat writes only `heartbeat_at`. With an index on that column every heartbeat added
-- an entry to every index of the hot table (0 of 1,000 heartbeat updates were HOT). The zombie
-- rescue finds Processing rows through `jobs_hot_active_idx` instead (the rows in flight, a
-- number bounded by the workers' slots and look-ahead, not by the backlog), and the table
-- leaves half of each page free, so that one heartbeat statement over every job of a page
-- (the worst case: a page of Processing jobs) finds room for each new row version beside the
-- old one; pruning on the next visit frees the old versions again. The hot table holds only
-- live jobs, so the extra space is bounded by the backlog, and claims reach rows through
-- indexes.
DROP INDEX IF EXISTS {schema}.jobs_hot_processing_idx;
ALTER TABLE {schema}.jobs_hot SET (fillfactor = 50);
