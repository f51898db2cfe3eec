-- chokaq PostgreSQL schema, version 9: scheduled jobs cost the claim nothing, and a claim
-- locks only the rows it returns.
--
-- Scheduled (status 3) is Pending whose due time was still ahead when the row was written
-- (an enqueue with a run-at in the future, a retry's back-off, a snooze). Such rows sit outside
-- the claim index, in `jobs_hot_scheduled_idx` ordered by due time. Before it looks for
-- Pending rows, a claim promotes the due Scheduled rows of its queues to Pending (one index
-- range, `due_at <= now()`: with nothing due it reads one index page however many jobs wait
-- for tomorrow). Readers report Scheduled as Pending. A Pending row whose due time is ahead
-- (written by an older version, or forced by a test) is still never claimed early: the
-- claim keeps its `due_at <= now()` filter.
ALTER TABLE {schema}.jobs_hot DROP CONSTRAINT IF EXISTS jobs_hot_status_check;
ALTER TABLE {schema}.jobs_hot ADD CONSTRAINT jobs_hot_status_check CHECK (status IN (0, 1, 2, 3));
UPDATE {schema}.jobs_hot SET status = 3 WHERE status = 0 AND due_at > now();
CREATE INDEX jobs_hot_scheduled_idx ON {schema}.jobs_hot (queue, due_at) WHERE status = 3;

-- The claim. As in version 1 (see the comments there: uncapped queues never lock their control
-- row; a capped queue's allowance is counted under its row lock in a new statement), plus:
--
-- 1. Promotion: the due Scheduled rows of the runnable queues become Pending, at most 1,000 per
--    queue and call, skipping rows another session holds. A new statement of this function sees them.
-- 2. Quotas: with more than one queue to take from, the rows are first chosen without locking
--    (each queue's first `allow` rows in claim order, merged, the first `p_limit`), and each
--    queue then locks, skipping locked rows, only as many as it had chosen. Version 1 locked
--    up to `allow` rows in every queue to return `p_limit` in all: the rows it did not return
--    stayed locked until its commit, and other claimers skipped them. A queue whose chosen
--    rows were taken meanwhile comes back short; the loop then tops up from the queues that
--    still have rows, at most three rounds. A capped queue's allowance shrinks by its whole
--    quota each round (what it got, or less), so the loop never takes more than its cap.
CREATE OR REPLACE FUNCTION {schema}.claim(p_worker uuid, p_queues text[], p_limit integer, p_start boolean)
RETURNS SETOF {schema}.jobs_hot
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_names  text[];
    v_allow  integer[];
    v_capped text[];
    v_q      text;
    v_max    integer;
    v_paused boolean;
    v_active boolean;
    v_busy   integer;
    v_qn     text[];
    v_qk     integer[];
    v_due    boolean;
    v_open   integer;
    v_left   integer := p_limit;
    v_want   integer;
    v_got    integer;
    v_round  integer := 0;
    i        integer;
BEGIN
    SELECT coalesce(array_agg(r.q ORDER BY r.q), '{}'),
           coalesce(array_agg(CASE WHEN c.max_workers IS NULL THEN p_limit ELSE 0 END ORDER BY r.q), '{}'),
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (
               WHERE CASE WHEN c.max_workers IS NULL THEN false
                          ELSE c.max_workers > (SELECT count(*) FROM {schema}.jobs_hot h
                                                 WHERE h.queue = r.q AND h.status IN (1, 2))
                     END), '{}'),
           -- The queue's earliest Scheduled due time: one descent of the Scheduled index.
           coalesce(bool_or((SELECT min(s.due_at) FROM {schema}.jobs_hot s
                              WHERE s.status = 3 AND s.queue = r.q) <= now()), false)
      INTO v_names, v_allow, v_capped, v_due
      FROM (SELECT DISTINCT unnest(p_queues) AS q) r
      LEFT JOIN {schema}.queues c ON c.name = r.q
     WHERE c.name IS NULL OR (c.is_active AND NOT c.is_paused);

    IF cardinality(v_names) = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;

    -- Promotion (see the header), only when the first statement saw a due Scheduled row (one
    -- index probe per queue there; no statement here otherwise). Never waits: a row another
    -- session holds is skipped.
    IF v_due THEN
        -- Per queue, in due order, so the plan is the index range whatever the statistics say (a
        -- bare LIMIT let the planner prefer a sequential scan that reads every row).
        UPDATE {schema}.jobs_hot h SET status = 0
          FROM (SELECT s.id
                  FROM unnest(v_names) AS r(q)
                 CROSS JOIN LATERAL (
                       SELECT x.id FROM {schema}.jobs_hot x
                        WHERE x.status = 3 AND x.queue = r.q AND x.due_at <= now()
                        ORDER BY x.due_at
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED
                 ) s) d
         WHERE h.id = d.id AND h.status = 3;
    END IF;

    FOREACH v_q IN ARRAY v_capped LOOP
        SELECT c.max_workers, c.is_paused, c.is_active
          INTO v_max, v_paused, v_active
          FROM {schema}.queues c
         WHERE c.name = v_q
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        i := array_position(v_names, v_q);
        IF v_paused OR NOT v_active THEN
            v_allow[i] := 0;
        ELSIF v_max IS NULL THEN
            v_allow[i] := p_limit;
        ELSE
            SELECT count(*) INTO v_busy
              FROM {schema}.jobs_hot h
             WHERE h.queue = v_q AND h.status IN (1, 2);
            v_allow[i] := greatest(0, least(p_limit, v_max - v_busy));
        END IF;
    END LOOP;

    LOOP
        EXIT WHEN v_left <= 0 OR NOT coalesce(0 < ANY (v_allow), false);
        v_round := v_round + 1;

        -- How many queues may still give rows, and the last of them (plain expressions, no
        -- query: the claim path pays for every statement).
        v_open := 0;
        FOR j IN 1 .. cardinality(v_allow) LOOP
            IF v_allow[j] > 0 THEN
                v_open := v_open + 1;
                i := j;
            END IF;
        END LOOP;
        IF v_open = 1 THEN
            -- One queue: its skip-locked seek takes exactly what it returns.
            v_qn := ARRAY[v_names[i]];
            v_qk := ARRAY[least(v_allow[i], v_left)];
        ELSE
            -- Choose without locking; count what each queue contributes.
            SELECT coalesce(array_agg(t.q), '{}'), coalesce(array_agg(t.k), '{}')
              INTO v_qn, v_qk
              FROM (SELECT p.q, count(*)::integer AS k
                      FROM (SELECT r.q
                              FROM unnest(v_names, v_allow) AS r(q, allow)
                             CROSS JOIN LATERAL (
                                   SELECT h.priority, h.due_at, h.id
                                     FROM {schema}.jobs_hot h
                                    WHERE h.queue = r.q AND h.status = 0 AND h.due_at <= now()
                                    ORDER BY h.priority DESC, h.due_at, h.id
                                    LIMIT least(r.allow, v_left)
                             ) c
                             WHERE r.allow > 0
                             ORDER BY c.priority DESC, c.due_at, c.id
                             LIMIT v_left) p
                     GROUP BY p.q) t;
        END IF;
        v_want := 0;
        FOR j IN 1 .. coalesce(cardinality(v_qk), 0) LOOP
            v_want := v_want + v_qk[j];
        END LOOP;
        EXIT WHEN v_want = 0;

        -- The rows are locked in a sub-select whose ids the update finds by primary key. (A
        -- join of the update with the locked rows planned a hash join over a sequential scan
        -- of the whole table: the planner cannot see how few rows the quotas allow.)
        RETURN QUERY
        UPDATE {schema}.jobs_hot h
           SET status       = CASE WHEN p_start THEN 2 ELSE 1 END,
               attempt      = CASE WHEN p_start THEN h.attempt + 1 ELSE h.attempt END,
               started_at   = CASE WHEN p_start THEN now() ELSE h.started_at END,
               heartbeat_at = CASE WHEN p_start THEN now() ELSE h.heartbeat_at END,
               lease        = nextval('{schema}.lease_seq'),
               worker_id    = p_worker,
               updated_at   = now()
         WHERE h.id = ANY (ARRAY(
               SELECT c.id
                 FROM unnest(v_qn, v_qk) AS r(q, quota)
                CROSS JOIN LATERAL (
                      SELECT x.id
                        FROM {schema}.jobs_hot x
                       WHERE x.queue = r.q AND x.status = 0 AND x.due_at <= now()
                       ORDER BY x.priority DESC, x.due_at, x.id
                       LIMIT r.quota
                         FOR UPDATE SKIP LOCKED
                ) c))
        RETURNING h.*;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;

        -- Everything chosen was taken, or the rounds are spent: done. Else the queues that came
        -- back short have no more free rows to give; the others may top up.
        EXIT WHEN v_got = v_want OR v_round >= 3;
        FOR j IN 1 .. cardinality(v_qn) LOOP
            i := array_position(v_names, v_qn[j]);
            v_allow[i] := greatest(0, v_allow[i] - v_qk[j]);
        END LOOP;
    END LOOP;
END
$fn$;
