-- chokaq PostgreSQL schema, version 1.
-- `{schema}` is replaced by the validated, quoted schema name before this runs; the migrator
-- runs it in one transaction under a schema-specific advisory lock.

CREATE SEQUENCE {schema}.lease_seq AS bigint;

-- Per-queue control. A queue without a row is active, unpaused and unlimited.
CREATE TABLE {schema}.queues (
    name              text        PRIMARY KEY,
    max_workers       integer     NULL CHECK (max_workers >= 0),
    is_paused         boolean     NOT NULL DEFAULT false,
    is_active         boolean     NOT NULL DEFAULT true,
    zombie_timeout_ms bigint      NULL CHECK (zombie_timeout_ms > 0),
    zombie_policy     smallint    NOT NULL DEFAULT 0, -- 0 retry, 1 dead-letter
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Live jobs: Pending (0), Fetched (1), Processing (2).
CREATE TABLE {schema}.jobs_hot (
    id               uuid        PRIMARY KEY,
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    tags             text[]      NOT NULL DEFAULT '{}',
    idempotency_key  text        NULL,
    priority         integer     NOT NULL DEFAULT 0,
    status           smallint    NOT NULL DEFAULT 0 CHECK (status IN (0, 1, 2)),
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    lease            bigint      NULL,
    worker_id        uuid        NULL,
    heartbeat_at     timestamptz NULL,
    scheduled_at     timestamptz NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- The claim order's due time, stored so one partial index serves the whole ORDER BY.
    due_at           timestamptz NOT NULL GENERATED ALWAYS AS (coalesce(scheduled_at, created_at)) STORED,
    started_at       timestamptz NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    last_error       text        NULL,
    cancel_requested boolean     NOT NULL DEFAULT false,
    created_by       text        NULL
);

-- The claim: one bounded index seek per queue, already in claim order.
CREATE INDEX jobs_hot_claim_idx ON {schema}.jobs_hot (queue, priority DESC, due_at, id) WHERE status = 0;
-- The cap: Fetched + Processing of one queue.
CREATE INDEX jobs_hot_active_idx ON {schema}.jobs_hot (queue) WHERE status IN (1, 2);
-- Rescue.
CREATE INDEX jobs_hot_fetched_idx ON {schema}.jobs_hot (updated_at) WHERE status = 1;
CREATE INDEX jobs_hot_processing_idx ON {schema}.jobs_hot (heartbeat_at) WHERE status = 2;
-- At most one live job per idempotency key.
CREATE UNIQUE INDEX jobs_hot_idempotency_idx ON {schema}.jobs_hot (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Succeeded jobs.
CREATE TABLE {schema}.jobs_archive (
    id               uuid        PRIMARY KEY,
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    tags             text[]      NOT NULL DEFAULT '{}',
    idempotency_key  text        NULL,
    priority         integer     NOT NULL,
    attempt          integer     NOT NULL,
    max_attempts     integer     NOT NULL,
    lease            bigint      NULL,
    worker_id        uuid        NULL,
    heartbeat_at     timestamptz NULL,
    scheduled_at     timestamptz NULL,
    created_at       timestamptz NOT NULL,
    started_at       timestamptz NULL,
    updated_at       timestamptz NOT NULL,
    last_error       text        NULL,
    created_by       text        NULL,
    finished_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_archive_finished_idx ON {schema}.jobs_archive (finished_at);
CREATE INDEX jobs_archive_queue_idx ON {schema}.jobs_archive (queue, id);

-- Dead letters: failed, cancelled, timed out, zombie, expired.
CREATE TABLE {schema}.jobs_dlq (
    id               uuid        PRIMARY KEY,
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    tags             text[]      NOT NULL DEFAULT '{}',
    idempotency_key  text        NULL,
    priority         integer     NOT NULL,
    attempt          integer     NOT NULL,
    max_attempts     integer     NOT NULL,
    lease            bigint      NULL,
    worker_id        uuid        NULL,
    heartbeat_at     timestamptz NULL,
    scheduled_at     timestamptz NULL,
    created_at       timestamptz NOT NULL,
    started_at       timestamptz NULL,
    updated_at       timestamptz NOT NULL,
    reason           text        NOT NULL,
    error            text        NULL,
    created_by       text        NULL,
    finished_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_dlq_finished_idx ON {schema}.jobs_dlq (finished_at);
CREATE INDEX jobs_dlq_queue_idx ON {schema}.jobs_dlq (queue, id);

-- The claim, as one statement per call (SELECT * FROM claim(...)).
--
-- Uncapped queues: one bounded, skip-locked index seek per queue; no lock on the queues row,
-- no count. Capped queues: the queue's control row is locked FOR UPDATE SKIP LOCKED (in name
-- order), then the active count is read by a NEW statement. Under READ COMMITTED every
-- statement of a VOLATILE plpgsql function takes a fresh snapshot, so that count sees every
-- claim committed by the previous holder of the lock; a count taken inside the claim
-- statement itself would use the statement's start snapshot and miss them (the seed's bug).
-- The lock is held until this claim commits, so no other claim of the queue can count before
-- our claimed rows are visible. A claimer that finds the row locked skips the queue for this
-- call instead of waiting (the claim path never waits on a lock), and a queue whose cap is
-- already full in the first statement's snapshot is skipped without locking (a stale count
-- can only be too high there, which costs a slot for one call, never the cap).
CREATE FUNCTION {schema}.claim(p_worker uuid, p_queues text[], p_limit integer, p_start boolean)
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
    i        integer;
BEGIN
    -- Requested queues that may run: no control row, or active and unpaused. Uncapped ones may
    -- take up to p_limit; capped ones start at 0 and get their allowance under their lock.
    SELECT coalesce(array_agg(r.q ORDER BY r.q), '{}'),
           coalesce(array_agg(CASE WHEN c.max_workers IS NULL THEN p_limit ELSE 0 END ORDER BY r.q), '{}'),
           coalesce(array_agg(r.q ORDER BY r.q) FILTER (
               WHERE CASE WHEN c.max_workers IS NULL THEN false
                          ELSE c.max_workers > (SELECT count(*) FROM {schema}.jobs_hot h
                                                 WHERE h.queue = r.q AND h.status IN (1, 2))
                     END), '{}')
      INTO v_names, v_allow, v_capped
      FROM (SELECT DISTINCT unnest(p_queues) AS q) r
      LEFT JOIN {schema}.queues c ON c.name = r.q
     WHERE c.name IS NULL OR (c.is_active AND NOT c.is_paused);

    FOREACH v_q IN ARRAY v_capped LOOP
        -- Serialises the claimers of this queue only; re-reads the latest committed settings.
        SELECT c.max_workers, c.is_paused, c.is_active
          INTO v_max, v_paused, v_active
          FROM {schema}.queues c
         WHERE c.name = v_q
           FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND; -- another claimer holds it: skip this queue, do not wait
        i := array_position(v_names, v_q);
        IF v_paused OR NOT v_active THEN
            v_allow[i] := 0;
        ELSIF v_max IS NULL THEN
            v_allow[i] := p_limit;
        ELSE
            -- A new statement, so a new snapshot: sees the previous lock holder's claims.
            SELECT count(*) INTO v_busy
              FROM {schema}.jobs_hot h
             WHERE h.queue = v_q AND h.status IN (1, 2);
            v_allow[i] := greatest(0, least(p_limit, v_max - v_busy));
        END IF;
    END LOOP;

    -- Nothing may be taken (every capped queue full or held by another claimer): done.
    IF NOT coalesce(0 < ANY (v_allow), false) THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH cand AS (
        SELECT c.id, c.priority, c.due_at
          FROM unnest(v_names, v_allow) AS r(q, allow)
         CROSS JOIN LATERAL (
               SELECT h.id, h.priority, h.due_at
                 FROM {schema}.jobs_hot h
                WHERE h.queue = r.q AND h.status = 0 AND h.due_at <= now()
                ORDER BY h.priority DESC, h.due_at, h.id
                LIMIT r.allow
                  FOR UPDATE SKIP LOCKED
         ) c
         WHERE r.allow > 0
    ),
    pick AS (
        SELECT cand.id FROM cand ORDER BY cand.priority DESC, cand.due_at, cand.id LIMIT p_limit
    ),
    upd AS (
        UPDATE {schema}.jobs_hot h
           SET status       = CASE WHEN p_start THEN 2 ELSE 1 END,
               attempt      = CASE WHEN p_start THEN h.attempt + 1 ELSE h.attempt END,
               started_at   = CASE WHEN p_start THEN now() ELSE h.started_at END,
               heartbeat_at = CASE WHEN p_start THEN now() ELSE h.heartbeat_at END,
               lease        = nextval('{schema}.lease_seq'),
               worker_id    = p_worker,
               updated_at   = now()
          FROM pick
         WHERE h.id = pick.id
        RETURNING h.*
    )
    SELECT * FROM upd;
END
$fn$;
