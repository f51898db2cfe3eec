
-- Workflows and batches (migration 19, docs/workflows.md): the end of a task that other tasks
-- wait for, and of a batch's job.
--
-- Every move of a hot row to the archive or the dead letters deletes it from jobs_hot; the
-- trigger below fires for the rows flagged `hooked` only (its WHEN clause: a plain job
-- pays nothing), at the end of the moving statement, in its transaction: it sees where the row
-- went. Nothing else moves a task: a retry, a snooze and a rescue that retries update the row
-- in place and release nothing.
--
-- `flow_release`: the dependents of `p_from` (tasks that just became final) have that many
-- fewer dependencies to wait for; those at none become Pending (or Scheduled, when their own
-- run time is later) and their queues are woken at the commit. The dependents' task rows are
-- locked in id order first, so racing completions of a fan-in decrement one after the other
-- (the second waits for the first's commit and reads its count): exactly one of them reads
-- zero and releases the task, in the last completion's transaction. Its work is bounded by the
-- dependents' edges (the primary key's prefix).
CREATE OR REPLACE FUNCTION {schema}.flow_release(p_from uuid[]) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    v_n integer;
BEGIN
    PERFORM 1 FROM {schema}.workflow_tasks t
     WHERE t.job_id IN (SELECT e.to_job FROM {schema}.workflow_edges e WHERE e.from_job = ANY (p_from))
     ORDER BY t.job_id
       FOR UPDATE OF t;
    WITH d AS (
        SELECT e.to_job, count(*)::integer AS n
          FROM {schema}.workflow_edges e
         WHERE e.from_job = ANY (p_from)
         GROUP BY e.to_job
    ),
    t AS (
        UPDATE {schema}.workflow_tasks t SET deps_left = greatest(t.deps_left - d.n, 0)
          FROM d WHERE t.job_id = d.to_job
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
        PERFORM {schema}.flow_release(ARRAY[p_id]);
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
    -- final (a cancelled task's other dependents were cancelled with it: no row to release).
    PERFORM {schema}.flow_release(ARRAY[p_id] || v_gone);
END
$fn$;

-- A batch's job became final: counted once, under the batch row's lock (racing completions of
-- one batch read its counts one after the other), and each callback now due and not yet
-- enqueued is enqueued (`first_dead`: this end is the batch's first dead letter; `finished`:
-- every job is final; `succeeded`: and none dead), its payload given the batch under
-- `"batch"` (chokaq_core::BatchInfo), its queue woken at the commit.
CREATE OR REPLACE FUNCTION {schema}.batch_ended(p_id uuid, p_dead boolean) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    v_batch uuid;
    v_b record;
    v_at timestamptz := clock_timestamp();
    v_n integer;
BEGIN
    UPDATE {schema}.batch_jobs j SET counted = true
     WHERE j.job_id = p_id AND NOT j.counted
    RETURNING j.batch_id INTO v_batch;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE {schema}.batches b
       SET succeeded = b.succeeded + CASE WHEN p_dead THEN 0 ELSE 1 END,
           dead = b.dead + CASE WHEN p_dead THEN 1 ELSE 0 END
     WHERE b.id = v_batch
    RETURNING b.id, b.name, b.total, b.succeeded, b.dead INTO v_b;
    WITH due AS (
        UPDATE {schema}.batch_callbacks c SET fired_at = v_at
         WHERE c.batch_id = v_batch AND c.fired_at IS NULL
           AND ((c.event = 'first_dead' AND p_dead AND v_b.dead = 1)
                OR (c.event = 'finished' AND v_b.succeeded + v_b.dead = v_b.total)
                OR (c.event = 'succeeded' AND v_b.succeeded = v_b.total))
        RETURNING c.*
    ),
    info AS (
        SELECT due.*, jsonb_build_object('id', v_b.id::text, 'name', v_b.name, 'event', due.event,
                                         'total', v_b.total, 'succeeded', v_b.succeeded,
                                         'dead', v_b.dead) AS batch,
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
