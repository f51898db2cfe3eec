//! The statements of the workflow room (migration 19, `functions_flows.sql`, docs/workflows.md):
//! the enqueue of a whole graph in one statement, its status, a job's workflow, and the live
//! tasks a cancel reaches. The release of dependents and the cancel cascade are not here: the
//! trigger on `jobs_hot` runs them inside every move's own statement.

/// Every task's job, task row and edge, in one statement (all or none; inside the caller's
/// transaction with `enqueue_workflow_in_tx`). A task with dependencies is Waiting (5); a root
/// is Scheduled (3) when due later, else Pending (0). `hooked` is set on the rows other
/// tasks wait for (the trigger's WHEN clause). Returns each job's queue and status, and the
/// transaction id (the wake-up of an enqueue in the caller's transaction waits for its commit).
/// `$1` ids, `$2` queues, `$3` kinds, `$4` payloads (JSON text), `$5` tags (JSON text), `$6`
/// priorities, `$7` run times, `$8` delays in microseconds, `$9` max attempts, `$10`
/// created_by, `$11` concurrency keys, `$12` task names, `$13` dependency names (JSON text),
/// `$14` dependency counts, `$15` run anyway, `$16` has dependents, `$17` the workflow's id,
/// `$18` its name, `$19` to `$21` the edges (dependency's job, dependent's job, part: null for
/// a narrow dependent), `$22` to `$24` the parts of the wide ones (job, part, dependencies).
pub(super) const ENQUEUE_WORKFLOW: &str = "
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[],
                         $7::timestamptz[], $8::int8[], $9::int4[], $10::text[], $11::text[],
                         $12::text[], $13::text[], $14::int4[], $15::bool[], $16::bool[])
        WITH ORDINALITY AS t(id, queue, kind, payload, tags, priority, scheduled_at, delay_us, max_attempts,
                             created_by, ckey, name, deps, deps_left, run_anyway, hooked, ord)
),
wf AS (
    INSERT INTO {schema}.workflows (id, name) VALUES ($17::uuid, $18::text) RETURNING id
),
tasks AS (
    INSERT INTO {schema}.workflow_tasks (job_id, workflow_id, idx, name, deps, deps_left, run_anyway)
    SELECT i.id, wf.id, (i.ord - 1)::int4, i.name, i.deps::jsonb, i.deps_left, i.run_anyway
      FROM input i CROSS JOIN wf
    RETURNING job_id
),
edges AS (
    INSERT INTO {schema}.workflow_edges (from_job, to_job, part)
    SELECT e.f, e.t, e.p FROM unnest($19::uuid[], $20::uuid[], $21::int2[]) AS e (f, t, p)
    RETURNING from_job
),
parts AS (
    INSERT INTO {schema}.workflow_parts (job_id, part, deps_left)
    SELECT p.j, p.p, p.n FROM unnest($22::uuid[], $23::int2[], $24::int4[]) AS p (j, p, n)
    RETURNING job_id
),
ins AS (
    INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, concurrency_key, priority, max_attempts,
                                   scheduled_at, status, created_by, hooked)
    SELECT i.id, i.queue, i.kind, i.payload::jsonb, ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)),
           i.ckey, i.priority, i.max_attempts, x.at,
           CASE WHEN i.deps_left > 0 THEN 5 WHEN x.at > now() THEN 3 ELSE 0 END,
           i.created_by, CASE WHEN i.hooked THEN true END
      FROM input i
     CROSS JOIN LATERAL (SELECT CASE WHEN i.delay_us IS NULL THEN i.scheduled_at
                                     ELSE now() + i.delay_us * interval '1 microsecond' END AS at) AS x
     ORDER BY i.ord
    RETURNING queue, status
)
SELECT ins.queue, ins.status, txid_current() AS xid,
       (SELECT count(*) FROM tasks) AS tasks, (SELECT count(*) FROM edges) AS edges,
       (SELECT count(*) FROM parts) AS parts
  FROM ins";

/// A workflow's name and each task (in the order added) with where its job stands: one
/// snapshot, so a job is seen in exactly one table (or none: purged). `$1` the workflow's id.
pub(super) const GET_WORKFLOW: &str = "
SELECT w.name AS workflow, t.name, t.job_id, t.deps::text AS deps,
       CASE WHEN h.id IS NOT NULL THEN CASE WHEN h.status = 5 THEN 'waiting'
                                            WHEN h.status IN (1, 2) THEN 'running'
                                            ELSE 'pending' END
            WHEN a.id IS NOT NULL THEN 'succeeded'
            WHEN d.id IS NOT NULL THEN 'dead'
            ELSE 'gone' END AS state,
       d.reason
  FROM {schema}.workflows w
  JOIN {schema}.workflow_tasks t ON t.workflow_id = w.id
  LEFT JOIN {schema}.jobs_hot h ON h.id = t.job_id
  LEFT JOIN {schema}.jobs_archive a ON a.id = t.job_id
  LEFT JOIN {schema}.jobs_dlq d ON d.id = t.job_id
 WHERE w.id = $1
 ORDER BY t.idx";

/// The workflow a job is a task of. `$1` the job's id.
pub(super) const WORKFLOW_OF: &str = "SELECT workflow_id FROM {schema}.workflow_tasks WHERE job_id = $1";

/// A workflow's tasks still in the hot table, in the order added (a row with a null job: the
/// workflow exists and has none; no row: no such workflow). `$1` the workflow's id.
pub(super) const WORKFLOW_LIVE_TASKS: &str = "
SELECT w.id, x.job_id
  FROM {schema}.workflows w
  LEFT JOIN (SELECT t.job_id, t.idx, t.workflow_id
               FROM {schema}.workflow_tasks t
               JOIN {schema}.jobs_hot h ON h.id = t.job_id) AS x ON x.workflow_id = w.id
 WHERE w.id = $1
 ORDER BY x.idx";
