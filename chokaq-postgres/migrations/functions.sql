-- chokaq PostgreSQL functions: every plpgsql function of the schema, in this one file.
--
-- Repeatable (Flyway's term): `migrate` applies it after the versioned migrations, under the
-- same lock and in the same transaction, whenever its checksum differs from the one recorded
-- in `repeatables` (and only by a build that knows every version the database has applied:
-- an older build leaves a newer build's functions alone). So a change of a function is a diff
-- of this file; a change of a signature or a return type (which CREATE OR REPLACE cannot make)
-- also needs a versioned migration that drops the old function first (see 0011).
--
-- `{schema}` is replaced by the validated, quoted schema name.

-- The claim: `p_mode` 0 Reserve (Fetched, heartbeat_at NULL), 1 Hold (Fetched, heartbeat_at
-- now(): the claim is its first heartbeat), 2 Start (Processing, attempt + 1, started_at and
-- heartbeat_at now()). `p_freed_queues` / `p_freed`: the slots the calling transaction freed per
-- queue (only complete_and_claim passes them, see "the handoff" below).
--
-- 1. The first statement reads the requested queues' control rows without locking: paused or
--    inactive queues are dropped, and so are queues with no work in this snapshot (no due
--    Pending or Scheduled row: nothing to take, so no lock and no write, and an empty claim stays
--    read-only); queues without a cap are noted for step 3, capped queues with room by a count in
--    this snapshot for step 4 (a stale count can only be too high here, which costs a slot for
--    one call, never the cap). It also notes due Scheduled rows.
-- 2. Promotion: the due Scheduled rows of the runnable queues become Pending, at most 1,000 per
--    queue and call, skipping rows another session holds.
-- 3. Queues the first statement saw without a cap: their control rows are created when missing
--    (`updated_at` '-infinity': no control has set anything, queue_settings reports none), then
--    locked FOR KEY SHARE and re-read. A queue paused meanwhile gives nothing; one capped
--    meanwhile is counted as in step 4. FOR KEY SHARE is compatible with every claimer's lock
--    (this one and FOR NO KEY UPDATE); it waits only for control_queue, which takes FOR UPDATE
--    before it changes a row. So a cap or a pause binds every claim that commits after the
--    control returned: a claim that read the old settings holds the row until it commits, and
--    the control waits for it; a claim that locks after the control committed reads the new
--    settings (a locking read returns the latest committed version).
-- 4. Capped queues, in name order: the control row FOR NO KEY UPDATE SKIP LOCKED (the counting
--    claimers exclude each other; one that finds the row held skips the queue for this call,
--    never waits), then the Fetched + Processing count in a NEW statement (under READ
--    COMMITTED every statement of a VOLATILE plpgsql function takes a fresh snapshot, so it
--    sees every claim committed by the previous holder of the lock). The handoff: without the
--    row (another claimer holds it, or the slots this transaction freed cover the whole claim,
--    so it is not tried), at most the freed slots and at most the room the count shows, with
--    the settings re-read under FOR KEY SHARE: this transaction claims no more rows than it
--    removed from the count, so it cannot raise it.
-- 5. Quotas: with more than one queue to take from, the rows are chosen first without locking
--    (each queue's first `allow` rows in claim order, merged, the first `p_limit`), and each
--    queue then locks, skipping locked rows, only as many as it had chosen. A queue whose rows
--    were taken meanwhile comes back short; the loop tops up from the others, at most three
--    rounds. A capped queue's allowance shrinks by its whole quota each round.
--
-- Test hook: a session that sets `chokaq.test_claim_delay_ms` sleeps that long after the first
-- statement (`chokaq.test_claim_delay_at` unset or 'first') or after the cap and lock steps,
-- just before taking rows ('take'). Only tests set it (tests/concurrency.rs); unset, it costs
-- one current_setting() call.
CREATE OR REPLACE FUNCTION {schema}.claim(p_worker uuid, p_queues text[], p_limit integer, p_mode smallint,
                                          p_freed_queues text[] DEFAULT '{}', p_freed integer[] DEFAULT '{}')
RETURNS SETOF {schema}.jobs_hot
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_names   text[];
    v_allow   integer[];
    v_open    text[];
    v_missing text[];
    v_capped  text[];
    v_q       text;
    v_max     integer;
    v_paused  boolean;
    v_active  boolean;
    v_busy    integer;
    v_qn      text[];
    v_qk      integer[];
    v_due     boolean;
    v_count   integer;
    v_left    integer := p_limit;
    v_want    integer;
    v_got     integer;
    v_round   integer := 0;
    v_freed   integer;
    v_locked  boolean;
    v_delay   text := current_setting('chokaq.test_claim_delay_ms', true);
    i         integer;
BEGIN
    IF p_mode IS NULL OR p_mode NOT IN (0, 1, 2) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'claim mode must be 0 (reserve), 1 (hold) or 2 (start), got ' || coalesce(p_mode::text, 'NULL');
    END IF;

    -- Only queues with work in this snapshot (a due Pending row, or a due Scheduled one that the
    -- promotion below makes Pending) go on to the lock steps: a queue without gives nothing in
    -- this call, so an empty claim locks nothing and writes nothing (a row lock is a write: the
    -- commit would wait for its WAL flush, five times the cost of an empty claim).
    SELECT coalesce(array_agg(r.q ORDER BY r.q), '{}'),
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (WHERE w.work AND c.max_workers IS NULL), '{}'),
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (WHERE w.work AND c.name IS NULL), '{}'),
           -- Capped with room. The CASE keeps the count from running for uncapped queues (a
           -- comparison with NULL would still run it: every Fetched and Processing row).
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (
               WHERE w.work AND CASE WHEN c.max_workers IS NULL THEN false
                                     ELSE c.max_workers > (SELECT count(*) FROM {schema}.jobs_hot h
                                                            WHERE h.queue = r.q AND h.status IN (1, 2))
                                END), '{}'),
           coalesce(bool_or(w.due), false)
      INTO v_names, v_open, v_missing, v_capped, v_due
      FROM (SELECT DISTINCT unnest(p_queues) AS q) r
      LEFT JOIN {schema}.queues c ON c.name = r.q
     CROSS JOIN LATERAL (
           -- The queue's earliest Scheduled due time: one descent of the Scheduled index; its
           -- first due Pending row: one descent of the claim index. (Not EXISTS: it drops the
           -- ORDER BY, and the planner chose a sequential scan that read 220,000 rows.)
           SELECT d.due, d.due OR (SELECT x.id FROM {schema}.jobs_hot x
                                    WHERE x.queue = r.q AND x.status = 0 AND x.due_at <= now()
                                    ORDER BY x.priority DESC, x.due_at, x.id
                                    LIMIT 1) IS NOT NULL AS work
             -- OFFSET 0: evaluated once (pulled up, the probe ran once per reference of `due`).
             FROM (SELECT coalesce((SELECT min(s.due_at) FROM {schema}.jobs_hot s
                                     WHERE s.status = 3 AND s.queue = r.q) <= now(), false) AS due
                   OFFSET 0) d
     ) w
     WHERE c.name IS NULL OR (c.is_active AND NOT c.is_paused);

    IF cardinality(v_names) = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    v_allow := array_fill(0, ARRAY[cardinality(v_names)]);

    IF nullif(v_delay, '') IS NOT NULL
       AND coalesce(nullif(current_setting('chokaq.test_claim_delay_at', true), ''), 'first') = 'first' THEN
        PERFORM pg_sleep(v_delay::numeric / 1000);
    END IF;

    -- Promotion, only when the first statement saw a due Scheduled row. Per queue, in due
    -- order, so the plan is the index range whatever the statistics say. Never waits.
    IF v_due THEN
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

    IF cardinality(v_open) = 0 AND cardinality(v_capped) = 0 THEN
        RETURN;
    END IF;

    -- Step 3: the queues seen without a cap, under FOR KEY SHARE, their settings re-read.
    IF cardinality(v_open) > 0 THEN
        IF cardinality(v_missing) > 0 THEN
            INSERT INTO {schema}.queues (name, updated_at)
            SELECT m.q, '-infinity' FROM unnest(v_missing) AS m(q) ORDER BY m.q
                ON CONFLICT (name) DO NOTHING;
        END IF;
        FOR v_q, v_max, v_paused, v_active IN
            SELECT c.name, c.max_workers, c.is_paused, c.is_active
              FROM {schema}.queues c
             WHERE c.name = ANY (v_open)
             ORDER BY c.name
               FOR KEY SHARE
        LOOP
            i := array_position(v_names, v_q);
            IF v_paused OR NOT v_active THEN
                v_allow[i] := 0;
            ELSIF v_max IS NULL THEN
                v_allow[i] := p_limit;
            ELSE
                -- Capped since the first statement: counted as a capped queue.
                v_capped := v_capped || v_q;
            END IF;
        END LOOP;
    END IF;

    -- Step 4: capped queues.
    FOREACH v_q IN ARRAY v_capped LOOP
        i := array_position(v_names, v_q);
        v_freed := coalesce(p_freed[array_position(p_freed_queues, v_q)], 0);
        v_locked := false;
        IF v_freed < p_limit THEN
            SELECT c.max_workers, c.is_paused, c.is_active
              INTO v_max, v_paused, v_active
              FROM {schema}.queues c
             WHERE c.name = v_q
               FOR NO KEY UPDATE SKIP LOCKED;
            v_locked := FOUND;
        END IF;
        IF NOT v_locked THEN
            -- The handoff: without the counting lock, at most the freed slots.
            CONTINUE WHEN v_freed = 0;
            SELECT c.max_workers, c.is_paused, c.is_active
              INTO v_max, v_paused, v_active
              FROM {schema}.queues c
             WHERE c.name = v_q
               FOR KEY SHARE;
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

    IF nullif(v_delay, '') IS NOT NULL AND current_setting('chokaq.test_claim_delay_at', true) = 'take' THEN
        PERFORM pg_sleep(v_delay::numeric / 1000);
    END IF;

    LOOP
        EXIT WHEN v_left <= 0 OR NOT coalesce(0 < ANY (v_allow), false);
        v_round := v_round + 1;

        -- How many queues may still give rows, and the last of them (plain expressions, no
        -- query: the claim path pays for every statement).
        v_count := 0;
        FOR j IN 1 .. cardinality(v_allow) LOOP
            IF v_allow[j] > 0 THEN
                v_count := v_count + 1;
                i := j;
            END IF;
        END LOOP;
        IF v_count = 1 THEN
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

        -- The rows are locked in a sub-select whose ids the update finds by primary key (a
        -- join planned a hash join over a sequential scan of the whole table).
        RETURN QUERY
        UPDATE {schema}.jobs_hot h
           SET status       = CASE WHEN p_mode = 2 THEN 2 ELSE 1 END,
               attempt      = CASE WHEN p_mode = 2 THEN h.attempt + 1 ELSE h.attempt END,
               started_at   = CASE WHEN p_mode = 2 THEN now() ELSE h.started_at END,
               heartbeat_at = CASE WHEN p_mode = 0 THEN NULL ELSE now() END,
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

-- Complete and claim in one call: moves the Fetched or Processing jobs whose (id, lease) this
-- worker still holds to the archive (as the complete statement does: a Fetched job's run is
-- counted, attempt + 1, started_at kept or now()), then claims through claim() in the same
-- transaction, handing it the slots freed per queue (the rows it archived, Fetched and
-- Processing alike). Returns one row per claimed job: o_done (the ids completed; the same array
-- on every row) and o_job; a single row with o_job NULL when nothing was claimed.
CREATE OR REPLACE FUNCTION {schema}.complete_and_claim(p_worker uuid, p_ids uuid[], p_leases bigint[],
                                                       p_queues text[], p_limit integer, p_mode smallint)
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
         WHERE h.worker_id = p_worker AND h.status IN (1, 2)
         ORDER BY h.id
           FOR UPDATE OF h
    ),
    g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*),
    ins AS (
        INSERT INTO {schema}.jobs_archive (id, queue, kind, payload, tags, idempotency_key, priority, attempt,
                                           max_attempts, lease, worker_id, heartbeat_at, scheduled_at, created_at,
                                           started_at, updated_at, last_error, created_by, finished_at)
        SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.idempotency_key, g.priority,
               CASE WHEN g.status = 1 THEN g.attempt + 1 ELSE g.attempt END, g.max_attempts,
               g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at, coalesce(g.started_at, now()),
               now(), g.last_error, g.created_by, now()
          FROM g
        RETURNING id, queue
    ),
    per AS (SELECT ins.queue, count(*)::integer AS n FROM ins GROUP BY ins.queue)
    SELECT coalesce((SELECT array_agg(ins.id) FROM ins), '{}'),
           coalesce((SELECT array_agg(per.queue ORDER BY per.queue) FROM per), '{}'),
           coalesce((SELECT array_agg(per.n ORDER BY per.queue) FROM per), '{}')
      INTO v_done, v_fqueue, v_freed;

    FOR v_row IN SELECT * FROM {schema}.claim(p_worker, p_queues, p_limit, p_mode, v_fqueue, v_freed) LOOP
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
