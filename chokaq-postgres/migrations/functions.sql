-- chokaq PostgreSQL functions: every plpgsql function of the schema, in this file and
-- functions_keys.sql after it (one script: migrate.rs concatenates the two).
--
-- Repeatable (Flyway's term): `migrate` applies it after the versioned migrations, under the
-- same lock and in the same transaction, whenever its checksum differs from the one recorded
-- in `repeatables` (and only by a build that knows every version the database has applied:
-- an older build leaves a newer build's functions alone). So a change of a function is a diff
-- of these files; a change of a signature or a return type (which CREATE OR REPLACE cannot make)
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
--    started_at is S too) and numbered in its bucket (below), in this transaction.
--    The count (issue 40, L7): never row by row (a limit of 1000000/1d read up to a million
--    index entries per claim). Each entry carries its ordinal `n` in its bucket under the
--    limit in force: the queue (queue-wide) or its key (per key; a key-less entry is in no
--    bucket and gets 0). A claim numbers its entries of a bucket last + 1, last + 2, ...,
--    `last` the n of the bucket's latest entry (by stamp, then n), read after the lock that
--    serialises the bucket's counts (the control row FOR NO KEY UPDATE queue-wide, the key's
--    lock per key), which it holds until its commit. Every previous holder committed its
--    entries before this claim took the lock, so `last` is the bucket's highest ordinal; it is
--    read in a statement before the one that writes (there the probe would walk over that
--    statement's own entries, which it cannot see), and nothing is drawn from a sequence, so a
--    rolled-back claim leaves no gap. So, in every committed state, a bucket's ordinals are
--    consecutive and grow with the stamps (S is read after the lock, so after the previous
--    holder's commit, so after its S): claims append at the top, and the only other writer,
--    the rescue's prune, deletes entries stamped at or before its now() - per, which by the
--    order of stamps are a prefix of the bucket (the entries it cannot see were committed
--    after its snapshot by claims later in the bucket's order: above all it deletes; a prune
--    that empties the bucket between a claim's read of `last` and its write leaves last + 1
--    onwards, consecutive still). A snapshot sees such a state, so the entries it sees
--    stamped after C - per are exactly those with n from the first of them (the lowest stamp,
--    then n) to the bucket's last, and their number is last - first + 1, or 0 when none is
--    stamped after C - per: two descents of the index (queue, stamp, n) or (queue, ckey, stamp,
--    n), the same for a window of ten starts or a million. A change of the limit's kind
--    (queue-wide / per key, or a limit set on a queue without one) renumbers the queue's log
--    for the new buckets, in stamp order, in control_queue's transaction under the control row
--    FOR UPDATE, which waits for every claim of the queue and holds the next ones until it
--    commits (one write per entry of the queue's log: the only cost that grows with the log,
--    paid once per change of kind).
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
    v_logk    boolean[] := '{}';
    v_bq      text[];
    v_bk      text[];
    v_bn      bigint[];
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
                -- previous holder committed is in it. Its last ordinal less the first one in
                -- the window, plus one (step 6, "The count").
                SELECT coalesce((SELECT l.n FROM {schema}.starts l
                                  WHERE l.queue = v_q
                                  ORDER BY l.stamp DESC, l.n DESC LIMIT 1)
                                - (SELECT f.n FROM {schema}.starts f
                                    WHERE f.queue = v_q
                                      AND f.stamp > (SELECT clock_timestamp()) - v_rp * interval '1 millisecond'
                                    ORDER BY f.stamp, f.n LIMIT 1) + 1, 0)::integer
                  INTO v_busy;
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
            v_logk := v_logk || v_rbykey[j];
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
            -- The last ordinal of each bucket this round may log in (step 6, "The count"): each
            -- queue-wide rate-limited queue, and each key of the keyed picks of a queue limited
            -- per key (key '' stands for the queue). A statement of its own, before the one that
            -- logs: there a probe would meet the entries that statement inserts, which it
            -- cannot see, and walk past one more for every row logged before it.
            SELECT coalesce(array_agg(x.q), '{}'), coalesce(array_agg(x.k), '{}'), coalesce(array_agg(x.last), '{}')
              INTO v_bq, v_bk, v_bn
              FROM (SELECT b.q, '' AS k,
                           (SELECT l.n FROM {schema}.starts l
                             WHERE l.queue = b.q
                             ORDER BY l.stamp DESC, l.n DESC LIMIT 1) AS last
                      FROM unnest(v_logq, v_logk) AS b(q, bykey)
                     WHERE NOT b.bykey
                    UNION ALL
                    SELECT d.q, d.k,
                           (SELECT l.n FROM {schema}.starts l
                             WHERE l.queue = d.q AND l.ckey = d.k
                             ORDER BY l.stamp DESC, l.n DESC LIMIT 1)
                      FROM (SELECT DISTINCT x.queue AS q, x.concurrency_key AS k
                              FROM {schema}.jobs_hot x
                             WHERE x.id = ANY (v_kpick) AND x.concurrency_key IS NOT NULL
                               AND x.queue = ANY (ARRAY(SELECT b.q FROM unnest(v_logq, v_logk) AS b(q, bykey)
                                                          WHERE b.bykey))) d) x;
            -- The starts of rate-limited queues logged with the claim's stamp, in the same
            -- statement (a CTE, whose start-up and copy of the rows no other claim pays for),
            -- each bucket's numbered after its last ordinal, in turn.
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
                INSERT INTO {schema}.starts (queue, ckey, stamp, n)
                SELECT u.queue, u.concurrency_key, v_stamp,
                       CASE WHEN b.bykey AND u.concurrency_key IS NULL THEN 0
                            ELSE coalesce(bb.last, 0)
                                 + row_number() OVER (PARTITION BY u.queue,
                                                                   CASE WHEN b.bykey THEN u.concurrency_key END)
                       END
                  FROM u
                  JOIN unnest(v_logq, v_logk) AS b(q, bykey) ON b.q = u.queue
                  LEFT JOIN unnest(v_bq, v_bk, v_bn) AS bb(q, k, last)
                         ON bb.q = u.queue AND bb.k = CASE WHEN b.bykey THEN u.concurrency_key ELSE '' END
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

