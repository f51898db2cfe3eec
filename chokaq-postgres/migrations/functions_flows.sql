
-- Workflows and batches (migration 19, docs/workflows.md): the end of a task that other tasks
-- wait for, and of a batch's job.
--
-- Every move of a hot row to the archive or the dead letters deletes it from jobs_hot; the
-- trigger below fires for the rows flagged `hooked` only (its WHEN clause: a plain job
-- pays nothing), at the end of the moving statement, in its transaction: it sees where the row
-- went. Nothing else moves a task: a retry, a snooze and a rescue that retries update the row
-- in place and release nothing. A dead letter's cascade runs there; the count of a task's end
-- by its dependents runs at the transaction's commit (`flow_ends`, migration 20), still inside
-- it: the dependents are released by the last dependency's own commit.
--
-- `flow_release`: the dependents of `p_from` (tasks that just became final) have that many
-- fewer dependencies to wait for; those at none become Pending (or Scheduled, when their own
-- run time is later) and their queues are woken at the commit. Called once per transaction,
-- at its commit (`flow_flush`), with every task it ended. A wide fan-in's edges count down
-- their part (migration 20); a part at zero counts one down on its task row, as each edge of
-- a narrow task does. Rows are locked in key order, parts before tasks: racing completions of
-- one part, or of the last parts of one task, decrement one after the other (the second waits
-- for the first's commit and reads its count), so exactly one of them reads zero and releases
-- the task, in the last completion's transaction; and no two transactions wait for each other
-- in a cycle. Its work is bounded by the dependents' edges (the primary key's prefix).
CREATE OR REPLACE FUNCTION {schema}.flow_release(p_from uuid[]) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    v_jobs uuid[];
    v_counts integer[];
    v_n integer;
BEGIN
    PERFORM 1 FROM {schema}.workflow_parts p
     WHERE (p.job_id, p.part) IN (SELECT e.to_job, e.part
                                    FROM {schema}.workflow_edges e
                                   WHERE e.from_job = ANY (p_from) AND e.part IS NOT NULL)
     ORDER BY p.job_id, p.part
       FOR UPDATE OF p;
    WITH d AS (
        SELECT e.to_job, e.part, count(*)::integer AS n
          FROM {schema}.workflow_edges e
         WHERE e.from_job = ANY (p_from)
         GROUP BY e.to_job, e.part
    ),
    p AS (
        UPDATE {schema}.workflow_parts p SET deps_left = greatest(p.deps_left - d.n, 0)
          FROM d WHERE p.job_id = d.to_job AND p.part = d.part
        RETURNING p.job_id, p.deps_left
    ),
    c AS (
        SELECT d.to_job AS job, d.n FROM d WHERE d.part IS NULL
        UNION ALL
        SELECT p.job_id, 1 FROM p WHERE p.deps_left = 0
    )
    SELECT array_agg(x.job ORDER BY x.job), array_agg(x.n ORDER BY x.job) INTO v_jobs, v_counts
      FROM (SELECT c.job, sum(c.n)::integer AS n FROM c GROUP BY c.job) AS x;
    IF v_jobs IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM {schema}.workflow_tasks t
     WHERE t.job_id = ANY (v_jobs)
     ORDER BY t.job_id
       FOR UPDATE OF t;
    WITH t AS (
        UPDATE {schema}.workflow_tasks t SET deps_left = greatest(t.deps_left - x.n, 0)
          FROM unnest(v_jobs, v_counts) AS x (job, n) WHERE t.job_id = x.job
        RETURNING t.job_id, t.deps_left
    ),
    r AS (
        UPDATE {schema}.jobs_hot h
           SET status = CASE WHEN h.due_at > now() THEN 3 ELSE 0 END, updated_at = now()
          FROM t WHERE h.id = t.job_id AND t.deps_left = 0 AND h.status = 5
        RETURNING h.queue, h.status
    )
    SELECT count(pg_notify('{channel}', x.queue)) INTO v_n
      FROM (SELECT DISTINCT r.queue FROM r WHERE r.status = 0) AS x;
    RETURN v_n;
END
$fn$;

-- At the commit (a deferred trigger on `flow_ends`, fired once per row written; the first
-- firing takes every row of the transaction, the others find none): the dependents of every
-- task the transaction ended, and its batch jobs, are counted, one call each; workflows'
-- locks before batches'.
CREATE OR REPLACE FUNCTION {schema}.flow_flush() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    v_ids uuid[];
    v_dead boolean[];
BEGIN
    WITH x AS (
        DELETE FROM {schema}.flow_ends f WHERE f.xid = pg_current_xact_id() RETURNING f.job_id, f.dead
    )
    SELECT array_agg(x.job_id ORDER BY x.job_id), array_agg(x.dead ORDER BY x.job_id) INTO v_ids, v_dead FROM x;
    IF v_ids IS NOT NULL THEN
        PERFORM {schema}.flow_release(v_ids);
        PERFORM {schema}.batch_count(v_ids, v_dead);
    END IF;
    RETURN NULL;
END
$fn$;

-- A task with dependents became final. Archived: its dependents count it. Dead-lettered: its
-- dependents are cancelled, and theirs, transitively (each dead-lettered `cancelled`, its last
-- error naming the task that failed), except a task that runs anyway (and what lies behind
-- it), which counts the failure as its dependency's end. Each task's end counts once
-- (`counted`, set under the task row's lock).
CREATE OR REPLACE FUNCTION {schema}.flow_ended(p_id uuid, p_dead boolean) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_task text;
    v_flow uuid;
    v_name text;
    v_gone uuid[];
BEGIN
    UPDATE {schema}.workflow_tasks t SET counted = true
     WHERE t.job_id = p_id AND NOT t.counted
    RETURNING t.name, t.workflow_id INTO v_task, v_flow;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT p_dead THEN
        INSERT INTO {schema}.flow_ends (xid, job_id, dead) VALUES (pg_current_xact_id(), p_id, false);
        RETURN;
    END IF;
    SELECT w.name INTO v_name FROM {schema}.workflows w WHERE w.id = v_flow;
    -- The cascade: bounded by the failed task's part of the graph (each task once: UNION).
    WITH RECURSIVE c (job) AS (
        SELECT e.to_job
          FROM {schema}.workflow_edges e
          JOIN {schema}.workflow_tasks t ON t.job_id = e.to_job
         WHERE e.from_job = p_id AND NOT t.run_anyway
        UNION
        SELECT e.to_job
          FROM c
          JOIN {schema}.workflow_edges e ON e.from_job = c.job
          JOIN {schema}.workflow_tasks t ON t.job_id = e.to_job
         WHERE NOT t.run_anyway
    ),
    -- Only tasks still waiting (one that ran or ended is left as it is), in id order.
    l AS (
        SELECT h.id FROM {schema}.jobs_hot h
         WHERE h.id IN (SELECT c.job FROM c) AND h.status = 5
         ORDER BY h.id
           FOR UPDATE OF h
    ),
    g AS (DELETE FROM {schema}.jobs_hot h USING l WHERE h.id = l.id RETURNING h.*),
    dead AS (
        INSERT INTO {schema}.jobs_dlq (id, queue, kind, payload, output, tags, concurrency_key, idempotency_key,
                                       priority, attempt, max_attempts, lease, worker_id, heartbeat_at,
                                       scheduled_at, created_at, started_at, updated_at, created_by, finished_at,
                                       reason, error)
        SELECT g.id, g.queue, g.kind, g.payload, g.output, g.tags, g.concurrency_key, g.idempotency_key,
               g.priority, g.attempt, g.max_attempts, g.lease, g.worker_id, g.heartbeat_at, g.scheduled_at,
               g.created_at, g.started_at, now(), g.created_by, now(), 'cancelled',
               'workflow "' || v_name || '": dependency "' || v_task || '" was dead-lettered'
          FROM g
        RETURNING id
    ),
    -- Counted by this cascade: their own trigger (fired at this statement's end) returns.
    cnt AS (
        UPDATE {schema}.workflow_tasks t SET counted = true
          FROM dead WHERE t.job_id = dead.id
        RETURNING t.job_id
    )
    SELECT coalesce(array_agg(cnt.job_id), '{}') INTO v_gone FROM cnt;
    -- Run-anyway dependents of the failed task and of every task it cancelled count those as
    -- final (a cancelled task's other dependents were cancelled with it: no row to release),
    -- at the commit.
    INSERT INTO {schema}.flow_ends (xid, job_id, dead)
    SELECT pg_current_xact_id(), g.id, true FROM unnest(ARRAY[p_id] || v_gone) AS g (id);
END
$fn$;

-- A batch's job became final: counted once (`counted`, under its own row's lock), at the
-- commit (`batch_count`).
CREATE OR REPLACE FUNCTION {schema}.batch_ended(p_id uuid, p_dead boolean) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    UPDATE {schema}.batch_jobs j SET counted = true
     WHERE j.job_id = p_id AND NOT j.counted;
    IF FOUND THEN
        INSERT INTO {schema}.flow_ends (xid, job_id, dead) VALUES (pg_current_xact_id(), p_id, p_dead);
    END IF;
END
$fn$;

-- The ends of batch jobs in one transaction, counted at its commit (`flow_flush`): a large
-- batch's jobs lower their part (migration 20); a part at zero, and each job counted on the
-- batch row, lower `unfinished`; a dead one raises `dead`. Parts, then batch rows, are locked
-- in key order: racing last completions read the counts one after the other and exactly one
-- reads the batch final. Each callback now due and not yet enqueued is enqueued
-- (`first_dead`: the batch's first dead letters are in this transaction; `finished`: every
-- job is final; `succeeded`: and none dead), its payload given the batch under `"batch"`
-- (chokaq_core::BatchInfo; `succeeded` = the total less the dead and the jobs not yet ended
-- as this transaction sees them), its queue woken at the commit.
CREATE OR REPLACE FUNCTION {schema}.batch_count(p_ids uuid[], p_dead boolean[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_b uuid[];
    v_closes integer[];
    v_dead integer[];
    v_at timestamptz := clock_timestamp();
    v_n integer;
BEGIN
    PERFORM 1 FROM {schema}.batch_parts p
     WHERE (p.batch_id, p.part) IN (SELECT j.batch_id, j.part
                                      FROM {schema}.batch_jobs j
                                     WHERE j.job_id = ANY (p_ids) AND j.part IS NOT NULL)
     ORDER BY p.batch_id, p.part
       FOR UPDATE OF p;
    WITH e AS (
        SELECT j.batch_id, j.part, x.dead
          FROM unnest(p_ids, p_dead) AS x (id, dead)
          JOIN {schema}.batch_jobs j ON j.job_id = x.id
    ),
    d AS (
        SELECT e.batch_id, e.part, count(*)::integer AS n
          FROM e WHERE e.part IS NOT NULL
         GROUP BY e.batch_id, e.part
    ),
    p AS (
        UPDATE {schema}.batch_parts p SET jobs_left = greatest(p.jobs_left - d.n, 0)
          FROM d WHERE p.batch_id = d.batch_id AND p.part = d.part
        RETURNING p.batch_id, p.jobs_left
    ),
    c AS (
        SELECT e.batch_id, CASE WHEN e.part IS NULL THEN 1 ELSE 0 END AS closes,
               CASE WHEN e.dead THEN 1 ELSE 0 END AS dead
          FROM e
        UNION ALL
        SELECT p.batch_id, 1, 0 FROM p WHERE p.jobs_left = 0
    )
    SELECT array_agg(x.b ORDER BY x.b), array_agg(x.closes ORDER BY x.b), array_agg(x.dead ORDER BY x.b)
      INTO v_b, v_closes, v_dead
      FROM (SELECT c.batch_id AS b, sum(c.closes)::integer AS closes, sum(c.dead)::integer AS dead
              FROM c GROUP BY c.batch_id) AS x
     WHERE x.closes > 0 OR x.dead > 0;
    IF v_b IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM {schema}.batches b WHERE b.id = ANY (v_b) ORDER BY b.id FOR UPDATE OF b;
    WITH u AS (
        UPDATE {schema}.batches b SET unfinished = greatest(b.unfinished - x.closes, 0), dead = b.dead + x.dead
          FROM unnest(v_b, v_closes, v_dead) AS x (id, closes, dead)
         WHERE b.id = x.id
        RETURNING b.id, b.name, b.total, b.unfinished, b.dead, x.dead AS new_dead
    ),
    s AS (
        SELECT u.*, u.total - u.dead - (u.unfinished - pp.open_parts + pp.jobs_left) AS succeeded
          FROM u
         CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE q.jobs_left > 0) AS open_parts,
                                    coalesce(sum(q.jobs_left), 0) AS jobs_left
                               FROM {schema}.batch_parts q WHERE q.batch_id = u.id) AS pp
    ),
    due AS (
        UPDATE {schema}.batch_callbacks c SET fired_at = v_at
          FROM s
         WHERE c.batch_id = s.id AND c.fired_at IS NULL
           AND ((c.event = 'first_dead' AND s.new_dead > 0 AND s.dead = s.new_dead)
                OR (c.event = 'finished' AND s.unfinished = 0)
                OR (c.event = 'succeeded' AND s.unfinished = 0 AND s.dead = 0))
        RETURNING c.*, jsonb_build_object('id', s.id::text, 'name', s.name, 'event', c.event,
                                          'total', s.total, 'succeeded', s.succeeded,
                                          'dead', s.dead) AS batch
    ),
    info AS (
        SELECT due.*,
               CASE WHEN due.delay_us IS NULL THEN due.scheduled_at
                    ELSE now() + due.delay_us * interval '1 microsecond' END AS at
          FROM due
    ),
    ins AS (
        INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, concurrency_key, priority, max_attempts,
                                       scheduled_at, status, created_by)
        SELECT i.job_id, i.queue, i.kind,
               CASE WHEN jsonb_typeof(i.payload) = 'object' THEN i.payload || jsonb_build_object('batch', i.batch)
                    ELSE jsonb_build_object('batch', i.batch) END,
               i.tags, i.concurrency_key, i.priority, i.max_attempts, i.at,
               CASE WHEN i.at > now() THEN 3 ELSE 0 END, i.created_by
          FROM info i
         ORDER BY i.job_id
        RETURNING queue, status
    )
    SELECT count(pg_notify('{channel}', x.queue)) INTO v_n
      FROM (SELECT DISTINCT ins.queue FROM ins WHERE ins.status = 0) AS x;
END
$fn$;

-- The trigger: where did the row go? Archived, dead-lettered, or neither (deleted without a
-- move: nothing counts).
CREATE OR REPLACE FUNCTION {schema}.job_ended() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    v_dead boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM {schema}.jobs_archive a WHERE a.id = OLD.id) THEN
        v_dead := false;
    ELSIF EXISTS (SELECT 1 FROM {schema}.jobs_dlq d WHERE d.id = OLD.id) THEN
        v_dead := true;
    ELSE
        RETURN NULL;
    END IF;
    PERFORM {schema}.flow_ended(OLD.id, v_dead);
    PERFORM {schema}.batch_ended(OLD.id, v_dead);
    RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS jobs_hot_job_ended ON {schema}.jobs_hot;
CREATE TRIGGER jobs_hot_job_ended AFTER DELETE ON {schema}.jobs_hot
    FOR EACH ROW WHEN (OLD.hooked) EXECUTE FUNCTION {schema}.job_ended();

DROP TRIGGER IF EXISTS flow_ends_flush ON {schema}.flow_ends;
CREATE CONSTRAINT TRIGGER flow_ends_flush AFTER INSERT ON {schema}.flow_ends
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.flow_flush();
