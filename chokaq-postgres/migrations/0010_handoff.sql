-- chokaq PostgreSQL schema, version 10: a completion hands its cap slot on without the
-- queue's row lock.
--
-- Version 1 counts a capped queue's Fetched + Processing rows under the queue's control row,
-- locked FOR UPDATE SKIP LOCKED until the claim commits; a claimer that finds the row locked
-- takes nothing from the queue in that call. With many workers sharing a cap, the worker
-- whose job just finished then found the row held by another claimer about as often as not:
-- its `complete_and_claim` freed a slot and claimed nothing, and the slot stayed empty until
-- that worker's next claim.
--
-- claim() gains two parameters, the slots the calling transaction has freed: per queue, how
-- many of its Processing rows this same transaction moved out of the hot table (only
-- complete_and_claim() passes them, computed from the rows it archived; they default to none,
-- so the claim statement `claim($1, $2, $3, $4)` is unchanged). For a capped queue:
--
-- * when the freed slots cover the whole claim (`p_limit`), the row lock is not even tried;
-- * else the row lock is tried as before; when held, the allowance is counted as before;
-- * without the row lock, the allowance is at most the freed slots, and at most the room the
--   count shows (the cap lowered below what runs gives nothing).
--
-- The cap still holds: without the row lock this transaction claims no more rows than it
-- removed from the count, so it cannot raise the count (whatever it reads); a claimer under
-- the row lock counts in a snapshot that sees this transaction's removals and claims
-- together or neither, so its own allowance stays right.
--
-- The four-parameter claim() of version 9 is dropped first: beside the new one, a call with
-- four arguments would be ambiguous. (A wrapper with the old signature cost a second function
-- call, about 45 us, on every claim.) plpgsql resolves functions by name when it runs, and
-- cached plans of the claim statement are re-planned when pg_proc changes.
DROP FUNCTION {schema}.claim(uuid, text[], integer, boolean);

CREATE FUNCTION {schema}.claim(p_worker uuid, p_queues text[], p_limit integer, p_start boolean,
                               p_freed_queues text[] DEFAULT '{}', p_freed integer[] DEFAULT '{}')
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
    v_freed  integer;
    v_locked boolean;
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
        i := array_position(v_names, v_q);
        v_freed := coalesce(p_freed[array_position(p_freed_queues, v_q)], 0);
        -- The queue's row lock, unless the slots this transaction freed cover the whole claim.
        v_locked := false;
        IF v_freed < p_limit THEN
            SELECT c.max_workers, c.is_paused, c.is_active
              INTO v_max, v_paused, v_active
              FROM {schema}.queues c
             WHERE c.name = v_q
               FOR UPDATE SKIP LOCKED;
            v_locked := FOUND;
        END IF;
        IF NOT v_locked THEN
            -- The handoff: without the row, at most the freed slots (see the header).
            CONTINUE WHEN v_freed = 0;
            SELECT c.max_workers, c.is_paused, c.is_active
              INTO v_max, v_paused, v_active
              FROM {schema}.queues c
             WHERE c.name = v_q;
            CONTINUE WHEN NOT FOUND;
        END IF;
        IF v_paused OR NOT v_active THEN
            v_allow[i] := 0;
        ELSIF v_max IS NULL THEN
            v_allow[i] := p_limit;
        ELSE
            SELECT count(*) INTO v_busy
              FROM {schema}.jobs_hot h
             WHERE h.queue = v_q AND h.status IN (1, 2);
            v_allow[i] := greatest(0, least(p_limit, v_max - v_busy));
            IF NOT v_locked THEN
                v_allow[i] := least(v_allow[i], v_freed);
            END IF;
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

-- As in version 2, plus the freed slots per queue (from the archived rows) handed to claim().
CREATE OR REPLACE FUNCTION {schema}.complete_and_claim(p_worker uuid, p_ids uuid[], p_leases bigint[],
                                                       p_queues text[], p_limit integer, p_start boolean)
RETURNS TABLE (o_done uuid[], o_job {schema}.jobs_hot)
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_done   uuid[];
    v_fqueue text[];
    v_freed  integer[];
    v_row    {schema}.jobs_hot;
    v_any    boolean := false;
BEGIN
    WITH l AS (
        SELECT h.id FROM {schema}.jobs_hot h
          JOIN unnest(p_ids, p_leases) AS u(id, lease) ON h.id = u.id AND h.lease = u.lease
         WHERE h.worker_id = p_worker AND h.status = 2
         ORDER BY h.id
           FOR UPDATE OF h
    ),
    g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*),
    ins AS (
        INSERT INTO {schema}.jobs_archive (id, queue, kind, payload, tags, idempotency_key, priority, attempt,
                                           max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at,
                                           started_at, updated_at, last_error, created_by, finished_at)
        SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.idempotency_key, g.priority, g.attempt, g.max_attempts,
               g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, g.started_at, now(),
               g.last_error, g.created_by, now()
          FROM g
        RETURNING id, queue
    ),
    per AS (SELECT ins.queue, count(*)::integer AS n FROM ins GROUP BY ins.queue)
    SELECT coalesce((SELECT array_agg(ins.id) FROM ins), '{}'),
           coalesce((SELECT array_agg(per.queue ORDER BY per.queue) FROM per), '{}'),
           coalesce((SELECT array_agg(per.n ORDER BY per.queue) FROM per), '{}')
      INTO v_done, v_fqueue, v_freed;

    FOR v_row IN SELECT * FROM {schema}.claim(p_worker, p_queues, p_limit, p_start, v_fqueue, v_freed) LOOP
        o_done := v_done;
        o_job := v_row;
        v_any := true;
        RETURN NEXT;
    END LOOP;
    IF NOT v_any THEN
        o_done := v_done;
        o_job := NULL;
        RETURN NEXT;
    END IF;
END
$fn$;
