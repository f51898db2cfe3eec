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
            -- jobs_hot_active_idx, the rows in flight (migration 14), and two of starts_key_n_idx,
            -- the key's last ordinal and its first in the window (claim() step 6, "The count").
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
                                               c.rate - coalesce((SELECT l.n FROM {schema}.starts l
                                                                   WHERE l.queue = n.q AND l.ckey = n.k
                                                                   ORDER BY l.stamp DESC, l.n DESC LIMIT 1)
                                                                 - (SELECT st.n FROM {schema}.starts st
                                                                     WHERE st.queue = n.q AND st.ckey = n.k
                                                                       AND st.stamp > (SELECT clock_timestamp())
                                                                                      - c.per * interval '1 millisecond'
                                                                     ORDER BY st.stamp, st.n LIMIT 1) + 1, 0)::integer
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
        INSERT INTO {schema}.jobs_archive (id, queue, kind, payload, output, tags, concurrency_key,
                                           idempotency_key, priority, attempt, max_attempts, lease, worker_id, heartbeat_at,
                                           scheduled_at, created_at, started_at, updated_at, last_error, created_by,
                                           finished_at)
        SELECT g.id, g.queue, g.kind, g.payload, g.output, g.tags, g.concurrency_key, g.idempotency_key,
               g.priority, CASE WHEN g.status = 1 THEN g.attempt + 1 ELSE g.attempt END, g.max_attempts,
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
