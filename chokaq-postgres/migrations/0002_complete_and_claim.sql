-- chokaq PostgreSQL schema, version 2: complete and claim in one call.
--
-- Backend::complete_and_claim: moves the Processing jobs whose (id, lease) this worker still
-- holds to the archive (exactly as the complete statement does), then claims through claim()
-- in the same transaction. claim() counts a capped queue's Fetched + Processing rows in new
-- statements, which see this transaction's own deletes: the jobs just completed no longer
-- count against the cap. One round trip and one commit instead of two.
--
-- Returns one row per claimed job: o_done (the ids completed; the same array on every row)
-- and o_job (the claimed row); a single row with o_job NULL when nothing was claimed.
CREATE FUNCTION {schema}.complete_and_claim(p_worker uuid, p_ids uuid[], p_leases bigint[], p_queues text[],
                                            p_limit integer, p_start boolean)
RETURNS TABLE (o_done uuid[], o_job {schema}.jobs_hot)
LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
    v_done uuid[];
    v_row  {schema}.jobs_hot;
    v_any  boolean := false;
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
        RETURNING id
    )
    SELECT coalesce(array_agg(ins.id), '{}') INTO v_done FROM ins;

    FOR v_row IN SELECT * FROM {schema}.claim(p_worker, p_queues, p_limit, p_start) LOOP
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
