//! The statements of the batch room (migration 19, `functions_flows.sql`, docs/workflows.md):
//! the enqueue of a batch with its callbacks, an addition, and the status. Counting each job's
//! end and enqueueing the callbacks is not here: the trigger on `jobs_hot` runs it inside
//! every move's own statement.

/// The jobs' arrays of a batch statement (`$1` to `$11`, as `jobs_insert!` inserts them).
macro_rules! jobs_input {
    () => {
        "input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int4[],
                         $7::timestamptz[], $8::int8[], $9::int4[], $10::text[], $11::text[])
        WITH ORDINALITY AS t(id, queue, kind, payload, tags, priority, scheduled_at, delay_us, max_attempts,
                             created_by, ckey, ord)
)"
    };
}

/// The insert of a batch's jobs (`hooked`: the trigger counts each one's end), from `input`
/// crossed with the batch row `b` (none: nothing inserted); `$part`: each job's part (an
/// expression of `i`; null: counted on the batch row).
macro_rules! jobs_insert {
    ($part:literal) => {
        concat!(
            "ins AS (
    INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, tags, concurrency_key, priority, max_attempts,
                                   scheduled_at, status, created_by, hooked)
    SELECT i.id, i.queue, i.kind, i.payload::jsonb, ARRAY(SELECT jsonb_array_elements_text(i.tags::jsonb)),
           i.ckey, i.priority, i.max_attempts, x.at, CASE WHEN x.at > now() THEN 3 ELSE 0 END, i.created_by, true
      FROM input i
     CROSS JOIN b
     CROSS JOIN LATERAL (SELECT CASE WHEN i.delay_us IS NULL THEN i.scheduled_at
                                     ELSE now() + i.delay_us * interval '1 microsecond' END AS at) AS x
     ORDER BY i.ord
    RETURNING queue, status
),
bj AS (
    INSERT INTO {schema}.batch_jobs (job_id, batch_id, part)
    SELECT i.id, b.id, ",
            $part,
            " FROM input i CROSS JOIN b RETURNING job_id
)"
        )
    };
}

/// A batch, its jobs and its callbacks, in one statement (all or none). `$1`..`$11` the jobs
/// (ids, queues, kinds, payloads and tags as JSON text, priorities, run times, delays in
/// microseconds, max attempts, created_by, concurrency keys), `$12` the batch's id, `$13` its
/// name, `$14` the callbacks' events, `$15`..`$25` their jobs (chosen ids, then as the
/// jobs'), `$26` each job's part (null: none), `$27` the batch's unfinished count (its jobs, or its
/// parts), `$28` and `$29` the parts (number, jobs). Returns each job's queue and status, and
/// the transaction id.
pub(super) const ENQUEUE_BATCH: &str = concat!(
    "WITH ",
    jobs_input!(),
    ",
b AS (
    INSERT INTO {schema}.batches (id, name, total, unfinished) VALUES ($12::uuid, $13::text, cardinality($1::uuid[]), $27::int4)
    RETURNING id
),
bp AS (
    INSERT INTO {schema}.batch_parts (batch_id, part, jobs_left)
    SELECT b.id, p.part, p.n FROM unnest($28::int2[], $29::int4[]) AS p (part, n) CROSS JOIN b
    RETURNING part
),
cb AS (
    INSERT INTO {schema}.batch_callbacks (batch_id, event, job_id, queue, kind, payload, tags, priority,
                                          max_attempts, scheduled_at, delay_us, created_by, concurrency_key)
    SELECT b.id, c.event, c.job_id, c.queue, c.kind, c.payload::jsonb,
           ARRAY(SELECT jsonb_array_elements_text(c.tags::jsonb)), c.priority, c.max_attempts, c.scheduled_at,
           c.delay_us, c.created_by, c.ckey
      FROM unnest($14::text[], $15::uuid[], $16::text[], $17::text[], $18::text[], $19::text[], $20::int4[],
                  $21::timestamptz[], $22::int8[], $23::int4[], $24::text[], $25::text[])
           AS c (event, job_id, queue, kind, payload, tags, priority, scheduled_at, delay_us, max_attempts,
                 created_by, ckey)
     CROSS JOIN b
    RETURNING event
),
",
    jobs_insert!("($26::int2[])[i.ord::int4]"),
    "
SELECT ins.queue, ins.status, txid_current() AS xid, (SELECT count(*) FROM cb) AS callbacks,
       (SELECT count(*) FROM bj) AS jobs, (SELECT count(*) FROM bp) AS parts
  FROM ins"
);

/// Jobs added to a batch that is not final, in one statement: the batch row's update (which
/// waits for a racing completion's lock and reads its counts) decides; a final batch adds
/// nothing and returns no row. `$1`..`$11` the jobs as in [`ENQUEUE_BATCH`], `$12` the batch.
pub(super) const ADD_TO_BATCH: &str = concat!(
    "WITH ",
    jobs_input!(),
    ",
b AS (
    UPDATE {schema}.batches b SET total = b.total + cardinality($1::uuid[]), unfinished = b.unfinished + cardinality($1::uuid[])
     WHERE b.id = $12::uuid AND b.unfinished > 0
    RETURNING b.id
),
",
    jobs_insert!("NULL::int2"),
    "
SELECT ins.queue, ins.status, txid_current() AS xid, (SELECT count(*) FROM bj) AS jobs
  FROM ins"
);

/// A batch's counts and the callbacks enqueued so far, in the order they were enqueued (one
/// row with null event when none; `succeeded`: the total less the dead and the jobs not yet
/// ended, those on the row and those of its parts). `$1` the batch's id.
pub(super) const GET_BATCH: &str = "
SELECT b.name, b.total, b.total - b.dead - (b.unfinished - pp.open_parts + pp.jobs_left) AS succeeded, b.dead, c.event,
       c.job_id
  FROM {schema}.batches b
 CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE q.jobs_left > 0) AS open_parts,
                            coalesce(sum(q.jobs_left), 0) AS jobs_left
                       FROM {schema}.batch_parts q WHERE q.batch_id = b.id) AS pp
  LEFT JOIN {schema}.batch_callbacks c ON c.batch_id = b.id AND c.fired_at IS NOT NULL
 WHERE b.id = $1
 ORDER BY c.fired_at, CASE c.event WHEN 'first_dead' THEN 0 WHEN 'finished' THEN 1 ELSE 2 END";
