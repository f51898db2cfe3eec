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

-- The parking depth of a key (migration 13's Blocked rows): a due keyed job of a queue with a
-- per-key cap is stored Blocked when its key already holds this many Pending, Fetched or
-- Processing rows, and the promotions fill a key back up to it. Blocked keeps a long backlog of
-- one key out of the claim index (no claim walks it); every Blocked row is written twice
-- (inserted, then promoted by an update that enters three indexes: about 20 µs a job in the
-- bench's keyed drain). The cap plus 128: a key with a backlog of up to 128 jobs beyond what
-- it may run never parks, and a key at its cap costs a claim that meets it at most 128 more
-- index entries read (the walk's next round skips the key). Only an index optimisation: the
-- claim's per-key guard alone keeps the cap.
CREATE OR REPLACE FUNCTION {schema}.key_depth(p_cap integer)
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $fn$
    SELECT p_cap + 128
$fn$;

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
-- 6. Keys and rate limits (issue 25). A queue with a per-key cap or a per-key rate limit is
--    "keyed": its rows come from key_candidates() below (a walk in claim order under per-key
--    locks, each key counted in a fresh statement after its lock; its read starts at the first
--    due Pending row the first statement found, so a row made Pending ahead of that one after
--    the first statement waits for the next claim), merged with the other
--    queues' rows in claim order, and locked by id, skipping locked rows; keyed queues do not
--    top up. A queue-wide rate limit is counted like a cap: under the control row FOR NO KEY
--    UPDATE SKIP LOCKED, the starts log counted in a new statement (`jobs` less the entries
--    stamped after C - per, later stamps too), with no lock-free handoff. Every claim of a
--    rate-limited queue appends one starts entry per job, stamped S (a started job's
--    started_at is S too), in this transaction.
--    The clocks (issue 36 hole 4): C is clock_timestamp() read INSIDE each count statement
--    (an InitPlan, evaluated during the statement's execution, so after its snapshot was
--    taken, and after the lock that serialises the queue's or the key's counts); S is
--    clock_timestamp() read after every count of the claim (S >= every C, S <= the commit).
--    Never the transaction's now(): a claim held between its start and its count would count a
--    window that ended long ago, and the rescue's prune (entries stamped <= its own now() -
--    per) deletes entries that window still holds (6 starts in one window of a limit of 3,
--    tests/rate_race.rs). With C read after the snapshot, a prune whose deletes the count
--    cannot see committed before that snapshot, so its now() < C and every entry it deleted is
--    stamped <= C - per: outside the window counted. The prune needs no lock and no margin.
--    Queues with neither setting keep the plan above, statement for statement.
--
-- Plans: `plan_cache_mode = force_generic_plan` (claim() and key_candidates()). PL/pgSQL
-- replanned several of their statements on every call (a custom plan for each set of
-- parameters): measured with pg_stat_statements (track all, track_planning) in the bench's keyed
-- drain, 1.25 ms of planning per keyed claim of ~31 (the first statement 0.53 ms, the
-- update 0.19, the candidate read 0.24, the room statement 0.25) and 0.15 ms per plain one
-- (the update). Their generic plans are the same index paths.
--
-- Test hook: a session that sets `chokaq.test_claim_delay_ms` sleeps that long after the first
-- statement (`chokaq.test_claim_delay_at` unset or 'first') or after the cap and lock steps,
-- just before taking rows ('take'). Only tests set it (tests/concurrency.rs); unset, it costs
-- one current_setting() call.
CREATE OR REPLACE FUNCTION {schema}.claim(p_worker uuid, p_queues text[], p_limit integer, p_mode smallint,
                                          p_freed_queues text[] DEFAULT '{}', p_freed integer[] DEFAULT '{}')
RETURNS SETOF {schema}.jobs_hot
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
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
    v_ratedq  text[];
    v_km      integer;
    v_rj      integer;
    v_rp      bigint;
    v_rb      boolean;
    v_kcap    integer[];
    v_rjobs   integer[];
    v_rper    bigint[];
    v_rbykey  boolean[];
    v_logq    text[] := '{}';
    v_stamp   timestamptz;
    v_kids    uuid[] := '{}';
    v_kpick   uuid[] := '{}';
    v_kq      text[] := '{}';
    v_ka      integer[] := '{}';
    v_kc      integer[] := '{}';
    v_kr      integer[] := '{}';
    v_kp      bigint[] := '{}';
    v_qlist   text[];
    v_fp      integer[];
    v_fd      timestamptz[];
    v_fi      uuid[];
    v_kfp     integer[] := '{}';
    v_kfd     timestamptz[] := '{}';
    v_kfi     uuid[] := '{}';
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
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (
               WHERE w.work AND c.max_workers IS NULL AND (c.rate_jobs IS NULL OR c.rate_by_key)), '{}'),
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (WHERE w.work AND c.name IS NULL), '{}'),
           -- Capped with room, or rate-limited queue-wide. The CASE keeps the count from running
           -- for uncapped queues (a comparison with NULL would still run it: every Fetched and
           -- Processing row).
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (
               WHERE w.work AND CASE WHEN c.max_workers IS NULL THEN c.rate_jobs IS NOT NULL AND NOT c.rate_by_key
                                     ELSE c.max_workers > (SELECT count(*) FROM {schema}.jobs_hot h
                                                            WHERE h.queue = r.q AND h.status IN (1, 2))
                                END), '{}'),
           coalesce(bool_or(w.due), false),
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (WHERE c.rate_jobs IS NOT NULL AND NOT c.rate_by_key), '{}'),
           -- Where each queue's first due Pending row stands in claim order (NULL: none): the
           -- keyed read starts there (step 6).
           coalesce(array_agg(w.fp ORDER BY r.q), '{}'),
           coalesce(array_agg(w.fd ORDER BY r.q), '{}'),
           coalesce(array_agg(w.fi ORDER BY r.q), '{}')
      INTO v_names, v_open, v_missing, v_capped, v_due, v_ratedq, v_fp, v_fd, v_fi
      FROM (SELECT DISTINCT unnest(p_queues) AS q) r
      LEFT JOIN {schema}.queues c ON c.name = r.q
     CROSS JOIN LATERAL (
           -- The queue's earliest Scheduled due time: one descent of the Scheduled index; its
           -- first due Pending row: one descent of the claim index. (Not EXISTS: it drops the
           -- ORDER BY, and the planner chose a sequential scan that read 220,000 rows.)
           SELECT d.due, d.due OR f.id IS NOT NULL AS work, f.priority AS fp, f.due_at AS fd, f.id AS fi
             -- OFFSET 0: evaluated once (pulled up, the probe ran once per reference of `due`).
             FROM (SELECT coalesce((SELECT min(s.due_at) FROM {schema}.jobs_hot s
                                     WHERE s.status = 3 AND s.queue = r.q) <= now(), false) AS due
                   OFFSET 0) d
             LEFT JOIN LATERAL (
                   SELECT x.priority, x.due_at, x.id FROM {schema}.jobs_hot x
                    WHERE x.queue = r.q AND x.status = 0 AND x.due_at <= now()
                    ORDER BY x.priority DESC, x.due_at, x.id
                    LIMIT 1) f ON true
           -- OFFSET 0 again: `work` is read by four FILTERs; pulled up, its probe ran four times
           -- per queue (auto_explain: four SubPlans of the claim index, each walking the same
           -- entries of rows claimed since the last VACUUM: 746 buffers each late in a drain).
           OFFSET 0
     ) w
     WHERE c.name IS NULL OR (c.is_active AND NOT c.is_paused);

    IF cardinality(v_names) = 0 OR p_limit <= 0 THEN
        RETURN;
    END IF;
    v_allow := array_fill(0, ARRAY[cardinality(v_names)]);
    v_kcap := array_fill(NULL::integer, ARRAY[cardinality(v_names)]);
    v_rjobs := array_fill(NULL::integer, ARRAY[cardinality(v_names)]);
    v_rper := array_fill(NULL::bigint, ARRAY[cardinality(v_names)]);
    v_rbykey := array_fill(false, ARRAY[cardinality(v_names)]);

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
        FOR v_q, v_max, v_paused, v_active, v_km, v_rj, v_rp, v_rb IN
            SELECT c.name, c.max_workers, c.is_paused, c.is_active, c.key_max_workers, c.rate_jobs, c.rate_per_ms,
                   c.rate_by_key
              FROM {schema}.queues c
             WHERE c.name = ANY (v_open)
             ORDER BY c.name
               FOR KEY SHARE
        LOOP
            i := array_position(v_names, v_q);
            IF v_paused OR NOT v_active THEN
                v_allow[i] := 0;
            ELSIF v_max IS NULL AND (v_rj IS NULL OR v_rb) THEN
                v_allow[i] := p_limit;
                v_kcap[i] := v_km;
                v_rjobs[i] := v_rj;
                v_rper[i] := v_rp;
                v_rbykey[i] := v_rb;
            ELSE
                -- Capped (or rate-limited queue-wide) since the first statement: counted as a
                -- capped queue.
                v_capped := v_capped || v_q;
            END IF;
        END LOOP;
    END IF;

    -- Step 4: capped queues.
    FOREACH v_q IN ARRAY v_capped LOOP
        i := array_position(v_names, v_q);
        v_freed := coalesce(p_freed[array_position(p_freed_queues, v_q)], 0);
        v_locked := false;
        -- A queue-wide rate limit has no lock-free handoff: its window is counted under the row.
        IF v_freed < p_limit OR v_q = ANY (v_ratedq) THEN
            SELECT c.max_workers, c.is_paused, c.is_active, c.key_max_workers, c.rate_jobs, c.rate_per_ms,
                   c.rate_by_key
              INTO v_max, v_paused, v_active, v_km, v_rj, v_rp, v_rb
              FROM {schema}.queues c
             WHERE c.name = v_q
               FOR NO KEY UPDATE SKIP LOCKED;
            v_locked := FOUND;
        END IF;
        IF NOT v_locked THEN
            -- The handoff: without the counting lock, at most the freed slots.
            CONTINUE WHEN v_freed = 0 OR v_q = ANY (v_ratedq);
            SELECT c.max_workers, c.is_paused, c.is_active, c.key_max_workers, c.rate_jobs, c.rate_per_ms,
                   c.rate_by_key
              INTO v_max, v_paused, v_active, v_km, v_rj, v_rp, v_rb
              FROM {schema}.queues c
             WHERE c.name = v_q
               FOR KEY SHARE;
            CONTINUE WHEN NOT FOUND;
            -- Rate-limited queue-wide since the first statement: nothing without the row.
            CONTINUE WHEN v_rj IS NOT NULL AND NOT v_rb;
        END IF;
        IF v_paused OR NOT v_active THEN
            v_allow[i] := 0;
        ELSE
            v_allow[i] := p_limit;
            v_kcap[i] := v_km;
            v_rjobs[i] := v_rj;
            v_rper[i] := v_rp;
            v_rbykey[i] := v_rb;
            IF v_max IS NOT NULL THEN
                SELECT count(*) INTO v_busy
                  FROM {schema}.jobs_hot h
                 WHERE h.queue = v_q AND h.status IN (1, 2);
                v_allow[i] := greatest(0, least(p_limit, v_max - v_busy));
                IF NOT v_locked THEN
                    v_allow[i] := least(v_allow[i], v_freed);
                END IF;
            END IF;
            IF v_rj IS NOT NULL AND NOT v_rb THEN
                -- The queue's window, in a new statement under the row: every start the
                -- previous holder committed is in it.
                SELECT count(*) INTO v_busy
                  FROM {schema}.starts s
                 WHERE s.queue = v_q AND s.stamp > (SELECT clock_timestamp()) - v_rp * interval '1 millisecond';
                v_allow[i] := greatest(0, least(v_allow[i], v_rj - v_busy));
            END IF;
        END IF;
    END LOOP;

    -- Keyed queues (a per-key cap, or a rate limit per key): their candidates, walked once,
    -- all keyed queues together, under per-key locks; their allowance is spent here (no
    -- top-up rounds for them).
    v_kq := '{}';
    FOR j IN 1 .. cardinality(v_names) LOOP
        IF v_rjobs[j] IS NOT NULL THEN
            v_logq := v_logq || v_names[j];
        END IF;
        IF v_allow[j] > 0 AND (v_kcap[j] IS NOT NULL OR (v_rjobs[j] IS NOT NULL AND v_rbykey[j])) THEN
            v_kq := v_kq || v_names[j];
            v_ka := v_ka || least(v_allow[j], p_limit);
            v_kc := v_kc || v_kcap[j];
            v_kr := v_kr || CASE WHEN v_rbykey[j] THEN v_rjobs[j] END;
            v_kp := v_kp || CASE WHEN v_rbykey[j] THEN v_rper[j] END;
            v_kfp := v_kfp || v_fp[j];
            v_kfd := v_kfd || v_fd[j];
            v_kfi := v_kfi || v_fi[j];
            v_allow[j] := 0;
        END IF;
    END LOOP;
    -- The keyed reads start at the first statement's first rows, unless the promotion may have
    -- put due rows ahead of them (a NULL start priority: no start).
    IF v_due THEN
        v_kfp := '{}';
    END IF;
    IF cardinality(v_kq) > 0 THEN
        v_kids := {schema}.key_candidates(v_kq, v_ka, v_kc, v_kr, v_kp, p_limit, v_kfp, v_kfd, v_kfi);
    END IF;

    IF nullif(v_delay, '') IS NOT NULL AND current_setting('chokaq.test_claim_delay_at', true) = 'take' THEN
        PERFORM pg_sleep(v_delay::numeric / 1000);
    END IF;
    -- The stamp of this claim's starts (and its started jobs' started_at), read after every
    -- count (step 6, "The clocks").
    IF cardinality(v_logq) > 0 THEN
        v_stamp := clock_timestamp();
    END IF;

    LOOP
        EXIT WHEN v_left <= 0 OR (NOT coalesce(0 < ANY (v_allow), false) AND cardinality(v_kids) = 0);
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
        IF cardinality(v_kids) > 0 AND v_count = 0 THEN
            -- Keyed queues only: key_candidates' rows (never more than the claim's limit) are
            -- the picks, with no merge to read.
            v_kpick := v_kids;
            v_kids := '{}';
            v_qn := '{}';
            v_qk := '{}';
        ELSIF cardinality(v_kids) > 0 THEN
            -- Keyed candidates: merged with the other queues' first rows in claim order.
            SELECT coalesce(array_agg(p.id) FILTER (WHERE p.keyed), '{}'),
                   coalesce(array_agg(p.q) FILTER (WHERE NOT p.keyed), '{}')
              INTO v_kpick, v_qlist
              FROM (SELECT u.q, u.id, u.keyed
                      FROM (SELECT r.q, c.priority, c.due_at, c.id, false AS keyed
                              FROM unnest(v_names, v_allow) AS r(q, allow)
                             CROSS JOIN LATERAL (
                                   SELECT h.priority, h.due_at, h.id
                                     FROM {schema}.jobs_hot h
                                    WHERE h.queue = r.q AND h.status = 0 AND h.due_at <= now()
                                    ORDER BY h.priority DESC, h.due_at, h.id
                                    LIMIT least(r.allow, v_left)
                             ) c
                             WHERE r.allow > 0
                            UNION ALL
                            SELECT k.queue, k.priority, k.due_at, k.id, true
                              FROM {schema}.jobs_hot k
                             WHERE k.id = ANY (v_kids)) u
                     ORDER BY u.priority DESC, u.due_at, u.id
                     LIMIT v_left) p;
            v_kids := '{}';
            SELECT coalesce(array_agg(t.q), '{}'), coalesce(array_agg(t.k), '{}')
              INTO v_qn, v_qk
              FROM (SELECT x.q, count(*)::integer AS k FROM unnest(v_qlist) AS x(q) GROUP BY x.q) t;
        ELSIF v_count = 1 THEN
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
        v_want := cardinality(v_kpick);
        FOR j IN 1 .. coalesce(cardinality(v_qk), 0) LOOP
            v_want := v_want + v_qk[j];
        END LOOP;
        EXIT WHEN v_want = 0;

        IF cardinality(v_logq) > 0 THEN
            -- The starts of rate-limited queues logged with the claim's stamp, in the same
            -- statement (a CTE, whose start-up and copy of the rows no other claim pays for).
            RETURN QUERY
            WITH u AS (
                UPDATE {schema}.jobs_hot h
                   SET status       = CASE WHEN p_mode = 2 THEN 2 ELSE 1 END,
                       attempt      = CASE WHEN p_mode = 2 THEN h.attempt + 1 ELSE h.attempt END,
                       started_at   = CASE WHEN p_mode = 2 THEN v_stamp ELSE h.started_at END,
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
                        ) c) || ARRAY(
                       SELECT x.id
                         FROM {schema}.jobs_hot x
                        WHERE x.id = ANY (v_kpick) AND x.status = 0 AND x.due_at <= now()
                          FOR UPDATE SKIP LOCKED))
                RETURNING h.*
            ),
            lg AS (
                INSERT INTO {schema}.starts (queue, ckey, stamp)
                SELECT u.queue, u.concurrency_key, v_stamp FROM u WHERE u.queue = ANY (v_logq)
            )
            SELECT * FROM u;
        ELSE
            -- The rows are locked in a sub-select whose ids the update finds by primary key (a
            -- join planned a hash join over a sequential scan of the whole table); keyed picks
            -- are locked by id (a row taken meanwhile is skipped).
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
                    ) c) || ARRAY(
                   SELECT x.id
                     FROM {schema}.jobs_hot x
                    WHERE x.id = ANY (v_kpick) AND x.status = 0 AND x.due_at <= now()
                      FOR UPDATE SKIP LOCKED))
            RETURNING h.*;
        END IF;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        v_kpick := '{}';

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

-- The candidates of a keyed queue (claim() step 6): at most `p_allow` Pending due rows of
-- `p_queue` in claim order, each key taking at most what its limits leave. A keyless row is
-- bound by neither per-key limit. A key met for the first time: its per-key lock, taken
-- without waiting (an advisory transaction lock on a hash of schema, queue and key; held
-- by another claimer: the key is skipped for this call; a hash collision only makes a claimer
-- skip a key), then its Fetched + Processing count and, with a rate limit per key, its starts
-- in the window, each in a NEW statement (a fresh snapshot under READ COMMITTED: it sees
-- every claim the previous holder of the lock committed). The lock is held until the claim
-- commits, so no other claimer counts the key before the rows taken here are visible. The
-- walk takes the candidate rows in claim order while their queue and key have room (as the
-- memory backend does), and claim() locks them by id, skipping a row another claimer took
-- meanwhile: such a race makes the claim come back short, never takes a key over its room
-- (the room was counted after the lock, whichever rows fill it).
--
-- Bounds (issue 36 hole 7): a claim's locks, reads and time are bounded by its limit, never by
-- the number of keys. Before, a claim took one advisory lock per key it met and walked in
-- rounds that doubled until it had filled its limit or met every key: one claim of 1,000 over
-- 1,200 keys held 1,004 locks, and a few such claims, or one claim past 15,000 keys at cap 0,
-- filled the server's shared lock table (max_locks_per_transaction x max_connections, 6,400 by
-- default, for every session of the server: 53200 "out of shared memory"); 10,000 full keys at
-- cap 1 took 5.2 s a claim to return nothing. Now:
-- - Locks: a key's lock is its queue's stripe (`key_lock`: one of 64 per queue, by a hash of
--   the key), so a claim holds at most 64 advisory locks; two keys of one stripe exclude each
--   other's claimers as one key would (a claimer that finds the stripe held skips the key for
--   this call, as before). A key of a queue at a key cap of 0 is full without a lock or count.
-- - Reads: at most a budget of candidate rows, 4 x limit + 64, from the queue's first due row
--   (part 1), and when that budget is spent without filling the limit, as many again (part 2)
--   from where the previous claim's part 2 stopped (`key_walks`, migration 15) if that lies
--   further on; part 2 records where it stopped, or clears the position when it reached the
--   end of the due rows (the next part 2 starts over). So keys at their cap ahead of keys with
--   room never hold those back for good: each claim moves the position on by up to a budget,
--   and a key with room is reached within (rows ahead / budget) claims. The rows of keys found
--   full are skipped inside the read (each such key at most its parking depth of Pending rows,
--   `key_depth`), and so are the rows already taken.
CREATE OR REPLACE FUNCTION {schema}.key_lock(p_queue text, p_key text)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $fn$
    SELECT hashtextextended('{schema}' || chr(31) || p_queue || chr(31) || (hashtextextended(p_key, 25) & 63)::text, 25)
$fn$;

DROP FUNCTION IF EXISTS {schema}.key_candidates(text, integer, integer, integer, bigint);
DROP FUNCTION IF EXISTS {schema}.key_candidates(text[], integer[], integer[], integer[], bigint[], integer);
CREATE OR REPLACE FUNCTION {schema}.key_candidates(p_queues text[], p_allows integer[], p_kcaps integer[],
                                                   p_rates integer[], p_pers bigint[], p_limit integer,
                                                   p_fps integer[], p_fds timestamptz[], p_fis uuid[])
RETURNS uuid[]
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_ids   uuid[] := '{}';
    v_left  integer[] := p_allows;
    v_room  integer[] := '{}';
    v_got   integer := 0;
    v_delay text := current_setting('chokaq.test_claim_delay_ms', true);
    v_tids  uuid[] := '{}';
    v_full  text[] := '{}';
    v_cq    text[];
    v_cid   uuid[];
    v_cck   text[];
    v_nq    text[];
    v_nk    text[];
    v_nlock boolean[];
    v_nroom integer[];
    v_pqk   text[] := '{}';
    -- The same as jsonb objects, rebuilt once a round (a look-up is a binary search, where
    -- `= ANY` and array_position compare with every element: with thousands of keys met, the
    -- walk was quadratic): each key met (queue, chr(31), key) to its index in v_pqk, and the
    -- keys found full.
    v_pmap  jsonb := '{}';
    v_fmap  jsonb := '{}';
    v_fn    integer := 0;
    v_cp    integer[];
    v_cd    timestamptz[];
    -- Where each queue's read starts, in claim order (priority descending, then due time and
    -- id): the first due Pending row claim()'s first statement found (so no read walks again the
    -- index entries of the rows claimed before it, which stay in the claim index until VACUUM),
    -- or, without one (a NULL priority), the start of the index.
    v_sp    integer[] := p_fps;
    v_sd    timestamptz[] := p_fds;
    v_si    uuid[] := p_fis;
    v_m     integer;
    v_round integer := 0;
    -- The bounds: rows read in this part (v_read) against the budget; the part (1 from the
    -- first due row, 2 from the queues' walk positions) and its round.
    v_budget integer := 4 * p_limit + 64;
    v_read  integer := 0;
    v_part  integer := 1;
    v_pround integer := 0;
    v_save  boolean := false;
    v_wrap  boolean := false;
    v_wp    integer;
    v_wd    timestamptz;
    v_wi    uuid;
    qi      integer;
    j       integer;
    k       integer;
BEGIN
    IF p_limit <= 0 THEN
        RETURN v_ids;
    END IF;
    -- One start per queue, in the queues' order (an element assigned past the end of an empty
    -- array would not line up with its queue).
    IF coalesce(cardinality(v_sp), 0) <> cardinality(p_queues) THEN
        v_sp := array_fill(NULL::integer, ARRAY[cardinality(p_queues)]);
        v_sd := array_fill(NULL::timestamptz, ARRAY[cardinality(p_queues)]);
        v_si := array_fill(NULL::uuid, ARRAY[cardinality(p_queues)]);
    END IF;
    LOOP
        v_round := v_round + 1;
        v_pround := v_pround + 1;
        -- A part's round 1 reads a little more than the claim needs; each further round twice
        -- as much (rows of keys found full and rows already taken are left out by the query),
        -- never past the part's budget.
        v_m := least(CASE WHEN v_pround = 1 THEN p_limit + 4 ELSE v_m * 2 END, v_budget - v_read);
        IF cardinality(v_full) <> v_fn THEN
            SELECT jsonb_object_agg(f.k, true) INTO v_fmap FROM unnest(v_full) AS f(k);
            v_fn := cardinality(v_full);
        END IF;
        -- The next rows of every keyed queue's claim index from its start, merged in claim
        -- order, and the (queue, key) pairs among them met for the first time. A start bounds
        -- the index scan in two parts (the index orders priority descending, due time and id
        -- ascending, which no single row comparison spans): the start's priority from its due
        -- time and id on, then the lower priorities. Without a start the first part is no scan
        -- at all (its NULL bound matches nothing) and the second reads from the index's start
        -- (every priority is below 2^31).
        WITH c AS (
            SELECT r.q, x.id, x.concurrency_key, x.priority, x.due_at
              FROM unnest(p_queues, v_left, v_sp, v_sd, v_si) AS r(q, a, sp, sd, si)
             CROSS JOIN LATERAL (
                   -- (Each part in index order, so the merge below, which sorts anyway, finds
                   -- the first rows of each queue among at most twice v_m.)
                   (SELECT y.id, y.concurrency_key, y.priority, y.due_at
                      FROM {schema}.jobs_hot y
                     WHERE y.queue = r.q AND y.status = 0 AND y.priority = r.sp
                       AND (y.due_at, y.id) >= (r.sd, r.si) AND y.due_at <= now()
                       AND NOT (y.id = ANY (v_ids)) AND NOT (y.id = ANY (v_tids))
                       AND (y.concurrency_key IS NULL
                            OR NOT (v_fmap ? (r.q || chr(31) || y.concurrency_key)))
                     ORDER BY y.due_at, y.id
                     LIMIT v_m)
                   UNION ALL
                   (SELECT y.id, y.concurrency_key, y.priority, y.due_at
                      FROM {schema}.jobs_hot y
                     WHERE y.queue = r.q AND y.status = 0 AND y.priority < coalesce(r.sp::bigint, 2147483648)
                       AND y.due_at <= now()
                       AND NOT (y.id = ANY (v_ids)) AND NOT (y.id = ANY (v_tids))
                       AND (y.concurrency_key IS NULL
                            OR NOT (v_fmap ? (r.q || chr(31) || y.concurrency_key)))
                     ORDER BY y.priority DESC, y.due_at, y.id
                     LIMIT v_m)
             ) x
             WHERE r.a > 0
             ORDER BY x.priority DESC, x.due_at, x.id
             LIMIT v_m
        ),
        n AS (
            SELECT DISTINCT c.q, c.concurrency_key AS k
              FROM c
             WHERE c.concurrency_key IS NOT NULL
               AND NOT (v_pmap ? (c.q || chr(31) || c.concurrency_key))
        )
        -- Each group of arrays is aggregated in one pass over the same rows, so its arrays
        -- pair up element by element: the rows in claim order (from the sorted sub-select,
        -- one sort for the five), the new pairs in any order (no sort of text).
        SELECT coalesce(a.q, '{}'), coalesce(a.id, '{}'), coalesce(a.k, '{}'), coalesce(a.p, '{}'),
               coalesce(a.d, '{}'), coalesce(b.q, '{}'), coalesce(b.k, '{}')
          INTO v_cq, v_cid, v_cck, v_cp, v_cd, v_nq, v_nk
          FROM (SELECT array_agg(o.q) AS q, array_agg(o.id) AS id, array_agg(o.concurrency_key) AS k,
                       array_agg(o.priority) AS p, array_agg(o.due_at) AS d
                  FROM (SELECT c.q, c.id, c.concurrency_key, c.priority, c.due_at
                          FROM c
                         ORDER BY c.priority DESC, c.due_at, c.id) o) a,
               (SELECT array_agg(n.q) AS q, array_agg(n.k) AS k FROM n) b;
        IF cardinality(v_nk) > 0 THEN
            -- Test hook ('key'): the first keys met, before their locks (tests/common/cap_race.rs).
            IF v_round = 1 AND nullif(v_delay, '') IS NOT NULL
               AND current_setting('chokaq.test_claim_delay_at', true) = 'key' THEN
                PERFORM pg_sleep(v_delay::numeric / 1000);
            END IF;
            -- Their locks, taken without waiting, in one statement (one flag per new pair, in
            -- the pairs' order): a key whose lock another claimer holds is skipped for this
            -- call. (A key at its cap is locked too, and found full by the count below: no
            -- count before the lock, which would cost a probe per key for an answer the count
            -- after it gives again.)
            SELECT coalesce(array_agg(s.locked ORDER BY s.o), '{}')
              INTO v_nlock
              FROM (SELECT n.o,
                           CASE WHEN c.kcap = 0 THEN false ELSE
                           pg_try_advisory_xact_lock({schema}.key_lock(n.q, n.k)) END AS locked
                      FROM unnest(v_nq, v_nk) WITH ORDINALITY AS n(q, k, o)
                      JOIN unnest(p_queues, p_kcaps) AS c(q, kcap) ON c.q = n.q
                    OFFSET 0) s;
            -- room: begin
            -- The new keys' room (in the pairs' order): none for a key not locked; for a locked
            -- key, the claim's limit, less (with a per-key cap) its Fetched + Processing rows and
            -- (with a per-key rate limit) its starts in the window, each counted here: a new
            -- statement after the locks, so a fresh snapshot under READ COMMITTED that sees every
            -- claim the locks' previous holders committed. One probe per key of
            -- jobs_hot_active_idx, the rows in flight (migration 14).
            SELECT coalesce(array_agg(greatest(0, z.room) ORDER BY z.o), '{}')
              INTO v_nroom
              FROM (SELECT n.o,
                           CASE WHEN n.locked IS NOT TRUE THEN 0
                                ELSE least(p_limit,
                                           CASE WHEN c.kcap IS NOT NULL THEN
                                               c.kcap - (SELECT count(*)::integer FROM {schema}.jobs_hot h
                                                          WHERE h.queue = n.q AND h.concurrency_key = n.k
                                                            AND h.status IN (1, 2))
                                           END,
                                           CASE WHEN c.rate IS NOT NULL THEN
                                               c.rate - (SELECT count(*)::integer FROM {schema}.starts st
                                                          WHERE st.queue = n.q AND st.ckey = n.k
                                                            AND st.stamp > (SELECT clock_timestamp())
                                                                           - c.per * interval '1 millisecond')
                                           END)
                           END AS room
                      FROM unnest(v_nq, v_nk, v_nlock) WITH ORDINALITY AS n(q, k, locked, o)
                      JOIN unnest(p_queues, p_kcaps, p_rates, p_pers) AS c(q, kcap, rate, per) ON c.q = n.q) z;
            -- room: end
            -- (the keys are counted)
            v_room := v_room || v_nroom;
            FOR j IN 1 .. cardinality(v_nk) LOOP
                v_pqk := v_pqk || (v_nq[j] || chr(31) || v_nk[j]);
                IF v_nroom[j] <= 0 THEN
                    v_full := v_full || v_pqk[cardinality(v_pqk)];
                END IF;
            END LOOP;
            SELECT jsonb_object_agg(u.k, u.o) INTO v_pmap FROM unnest(v_pqk) WITH ORDINALITY AS u(k, o);
        END IF;
        -- The walk, in claim order over this round's rows: a keyless row is taken while its
        -- queue has room, a keyed row while its queue and its key have room.
        FOR j IN 1 .. cardinality(v_cid) LOOP
            EXIT WHEN v_got >= p_limit;
            qi := array_position(p_queues, v_cq[j]);
            CONTINUE WHEN v_left[qi] <= 0;
            IF v_cck[j] IS NULL THEN
                v_ids := v_ids || v_cid[j];
                v_left[qi] := v_left[qi] - 1;
                v_got := v_got + 1;
            ELSE
                k := (v_pmap ->> (v_cq[j] || chr(31) || v_cck[j]))::integer;
                IF v_room[k] > 0 THEN
                    v_room[k] := v_room[k] - 1;
                    v_left[qi] := v_left[qi] - 1;
                    v_got := v_got + 1;
                    v_tids := v_tids || v_cid[j];
                    IF v_room[k] = 0 THEN
                        v_full := v_full || v_pqk[k];
                    END IF;
                END IF;
            END IF;
        END LOOP;
        EXIT WHEN v_got >= p_limit;
        IF cardinality(v_cid) < v_m THEN
            -- The end of the due rows: part 2 wraps around (its position is cleared).
            v_wrap := v_part = 2;
            EXIT;
        END IF;
        -- Each queue's next round starts at its last row of this one: every row before it was
        -- taken, or is of a key now full, or of a queue with nothing left to take (the walk
        -- leaves no other row behind when it does not end the call).
        FOR j IN 1 .. cardinality(v_cid) LOOP
            qi := array_position(p_queues, v_cq[j]);
            v_sp[qi] := v_cp[j];
            v_sd[qi] := v_cd[j];
            v_si[qi] := v_cid[j];
        END LOOP;
        v_read := v_read + cardinality(v_cid);
        IF v_read >= v_budget THEN
            IF v_part = 2 THEN
                -- Part 2 spent: the next claim's part 2 continues from here.
                v_save := true;
                EXIT;
            END IF;
            -- Part 1 spent: part 2, from each queue's walk position where it lies further on.
            v_part := 2;
            v_read := 0;
            v_pround := 0;
            FOR qi IN 1 .. cardinality(p_queues) LOOP
                SELECT w.priority, w.due_at, w.id INTO v_wp, v_wd, v_wi
                  FROM {schema}.key_walks w WHERE w.queue = p_queues[qi];
                IF v_wi IS NOT NULL
                   AND (v_si[qi] IS NULL OR v_wp < v_sp[qi]
                        OR (v_wp = v_sp[qi] AND (v_wd, v_wi) > (v_sd[qi], v_si[qi]))) THEN
                    v_sp[qi] := v_wp;
                    v_sd[qi] := v_wd;
                    v_si[qi] := v_wi;
                END IF;
            END LOOP;
        END IF;
    END LOOP;
    -- Part 2's end: where it stopped (or, at the end of the due rows, no position), for the
    -- next claim. Never waited for: a row another claimer holds is left to the next.
    IF v_save OR v_wrap THEN
        IF v_save THEN
            INSERT INTO {schema}.key_walks (queue)
            SELECT u.q FROM unnest(p_queues) AS u(q)
             WHERE NOT EXISTS (SELECT 1 FROM {schema}.key_walks w WHERE w.queue = u.q)
             ORDER BY u.q
                ON CONFLICT (queue) DO NOTHING;
        END IF;
        UPDATE {schema}.key_walks w
           SET priority = CASE WHEN v_save THEN u.p END, due_at = CASE WHEN v_save THEN u.d END,
               id = CASE WHEN v_save THEN u.i END
          FROM unnest(p_queues, v_sp, v_sd, v_si) AS u(q, p, d, i)
         WHERE w.queue = u.q
           AND w.queue = ANY (ARRAY(SELECT x.queue FROM {schema}.key_walks x
                                     WHERE x.queue = ANY (p_queues)
                                     ORDER BY x.queue
                                       FOR UPDATE SKIP LOCKED));
    END IF;
    -- The keyed rows the walk took (claim() locks them by id, skipping any taken meanwhile:
    -- the claim may come back short, never over a key's room).
    v_ids := v_ids || v_tids;
    RETURN v_ids;
END
$fn$;

-- Promotion of Blocked rows (status 4, migration 13) of the given keys (`p_queues`,
-- `p_keys` pairwise; NULL keys ignored): per key, up to its parking depth (`key_depth` of the
-- queue's per-key cap) less the key's Pending + Fetched + Processing rows (counted in this
-- function's own statement: a fresh snapshot), all of them when the queue has no per-key cap,
-- in claim order, skipping rows
-- another session holds. Returns how many were promoted. Called by complete_and_claim and
-- by rescue's sweep; the other moves promote in their own statement (`promote!`, sql.rs).
CREATE OR REPLACE FUNCTION {schema}.promote_blocked(p_queues text[], p_keys text[])
RETURNS integer
LANGUAGE sql VOLATILE
AS $fn$
    WITH k AS (
        SELECT DISTINCT u.q, u.k FROM unnest(p_queues, p_keys) AS u(q, k) WHERE u.k IS NOT NULL
    ),
    up AS (
        UPDATE {schema}.jobs_hot h SET status = CASE WHEN h.due_at > now() THEN 3 ELSE 0 END
           WHERE h.status = 4 AND h.id = ANY (ARRAY(SELECT x.id FROM k LEFT JOIN {schema}.queues c ON c.name = k.q
                 CROSS JOIN LATERAL (
                       SELECT x.id FROM {schema}.jobs_hot x
                        WHERE x.queue = k.q AND x.concurrency_key = k.k AND x.status = 4
                        ORDER BY x.priority DESC, x.due_at, x.id
                        LIMIT CASE WHEN c.key_max_workers IS NULL THEN NULL
                                   -- The key's live rows (as key_live! in sql.rs counts them):
                                   -- its Pending rows, at most the depth, and its running rows.
                                   ELSE greatest(0, {schema}.key_depth(c.key_max_workers)
                                                    - (SELECT count(*) FROM (SELECT 1 FROM {schema}.jobs_hot y
                                                                              WHERE y.queue = k.q AND y.concurrency_key = k.k
                                                                                AND y.status = 0
                                                                              LIMIT {schema}.key_depth(c.key_max_workers)) z)
                                                    - (SELECT count(*) FROM {schema}.jobs_hot y
                                                        WHERE y.queue = k.q AND y.concurrency_key = k.k
                                                          AND y.status IN (1, 2)))
                              END
                          FOR UPDATE SKIP LOCKED) x))
        RETURNING 1
    )
    SELECT count(*)::integer FROM up
$fn$;

-- Complete and claim in one call: moves the Fetched or Processing jobs whose (id, lease) this
-- worker still holds to the archive (as the complete statement does: a Fetched job's run is
-- counted, attempt + 1, started_at now(): its own run's start, not an earlier attempt's), then claims through claim() in the same
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
    v_kq     text[];
    v_kk     text[];
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
        INSERT INTO {schema}.jobs_archive (id, queue, kind, payload, tags, concurrency_key, idempotency_key,
                                           priority, attempt, max_attempts, lease, worker_id, heartbeat_at,
                                           scheduled_at, created_at, started_at, updated_at, last_error, created_by,
                                           finished_at)
        SELECT g.id, g.queue, g.kind, g.payload, g.tags, g.concurrency_key, g.idempotency_key, g.priority,
               CASE WHEN g.status = 1 THEN g.attempt + 1 ELSE g.attempt END, g.max_attempts,
               g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at, g.created_at,
               CASE WHEN g.status = 1 THEN now() ELSE coalesce(g.started_at, now()) END,
               now(), g.last_error, g.created_by, now()
          FROM g
        RETURNING id, queue, concurrency_key
    ),
    per AS (SELECT ins.queue, count(*)::integer AS n FROM ins GROUP BY ins.queue),
    keyed AS (SELECT DISTINCT ins.queue, ins.concurrency_key FROM ins WHERE ins.concurrency_key IS NOT NULL)
    SELECT coalesce((SELECT array_agg(ins.id) FROM ins), '{}'),
           coalesce((SELECT array_agg(per.queue ORDER BY per.queue) FROM per), '{}'),
           coalesce((SELECT array_agg(per.n ORDER BY per.queue) FROM per), '{}'),
           (SELECT array_agg(keyed.queue) FROM keyed),
           (SELECT array_agg(keyed.concurrency_key) FROM keyed)
      INTO v_done, v_fqueue, v_freed, v_kq, v_kk;

    -- The completed keys' Blocked rows, before the claim (a new statement: it counts without
    -- the rows just archived), so the claim may take them.
    IF v_kq IS NOT NULL THEN
        PERFORM {schema}.promote_blocked(v_kq, v_kk);
    END IF;

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
