-- chokaq PostgreSQL schema, version 16: the starts log numbered per bucket (issue 40, L7).
--
-- Before, a claim of a rate-limited queue counted its window row by row (count(*) of the
-- entries stamped after C - per): a limit of 1000000/1d made every claim read up to a million
-- index entries. Now every entry carries its ordinal `n` in its bucket under the queue's limit
-- in force: the queue's for a queue-wide limit, the key's for a limit per key (a key-less entry,
-- in no bucket of such a limit, gets 0). A claim numbers its entries after the bucket's last
-- one, under the lock that serialises the bucket's counts, so within a bucket the ordinals are
-- consecutive and grow with the stamps; a window's count is the last ordinal less the first
-- one stamped after C - per, plus one: two index probes, whatever the window holds
-- (functions.sql, claim() step 6, "The count"). A change of a limit's kind renumbers the
-- queue's log (control_queue). The entries already here are numbered now, in stamp order, for
-- the limit each queue has. No default: a claim that would log a start without its ordinal
-- fails instead of breaking the count.
ALTER TABLE {schema}.starts ADD COLUMN IF NOT EXISTS n bigint NOT NULL DEFAULT 0;
ALTER TABLE {schema}.starts ALTER COLUMN n DROP DEFAULT;
UPDATE {schema}.starts s SET n = r.n
  FROM (SELECT x.ctid AS t,
               CASE WHEN c.rate_by_key AND x.ckey IS NULL THEN 0
                    ELSE row_number() OVER (PARTITION BY x.queue, CASE WHEN c.rate_by_key THEN x.ckey END
                                            ORDER BY x.stamp)
               END AS n
          FROM {schema}.starts x
          LEFT JOIN {schema}.queues c ON c.name = x.queue) r
 WHERE s.ctid = r.t;
-- A queue-wide window's probes (its first entry after C - per; its last entry), and a key's.
CREATE INDEX IF NOT EXISTS starts_queue_n_idx ON {schema}.starts (queue, stamp, n);
CREATE INDEX IF NOT EXISTS starts_key_n_idx ON {schema}.starts (queue, ckey, stamp, n);
DROP INDEX IF EXISTS {schema}.starts_key_idx;
DROP INDEX IF EXISTS {schema}.starts_queue_idx;
