-- chokaq PostgreSQL schema, version 15: where a keyed queue's bounded walk stopped (issue 36).
--
-- A keyed claim reads at most a budget of candidate rows (its limit times 4, plus 64) from the
-- queue's first due row, and as many again from the position the previous claim's walk stopped
-- at; it records where this second part stopped, or clears the position when it reached the
-- end of the due rows (functions.sql, key_candidates). So keys at their cap ahead of keys with
-- room cost each claim a bounded read, and the next claim continues past them. A row per keyed
-- queue that walked that far, written only by such claims and never waited for once it exists
-- (FOR UPDATE SKIP LOCKED: a claim that finds it locked leaves it to the next; only the first
-- insert of a queue's row can wait, for another claim inserting it at the same moment).
CREATE TABLE IF NOT EXISTS {schema}.key_walks (
    queue    text        PRIMARY KEY,
    priority integer     NULL,
    due_at   timestamptz NULL,
    id       uuid        NULL
);
