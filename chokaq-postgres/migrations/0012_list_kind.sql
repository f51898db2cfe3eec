-- list_jobs by kind in id order (issue 28): a kind filter walked the primary key and threw
-- away every row of another kind (224 ms for a page of 50 over 1,000,000 archived jobs of
-- 1,000 kinds). With (kind, id) the page is a range of this index. The queue filter has
-- (queue, id) since migration 1; a creation window is a range of the primary key (ids are
-- UUID v7). No index for tags (a text[] has no order by id) or on the hot table (every
-- claim, heartbeat and move would pay for it).
CREATE INDEX IF NOT EXISTS jobs_archive_kind_idx ON {schema}.jobs_archive (kind, id);
CREATE INDEX IF NOT EXISTS jobs_dlq_kind_idx ON {schema}.jobs_dlq (kind, id);
