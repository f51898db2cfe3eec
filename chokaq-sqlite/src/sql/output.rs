//! The statements of the output room (`docs/outputs.md`).

/// The output on the held hot row, Fetched or Processing (the guard of `heartbeat`): `?1` the
/// output (JSON text), `?2` id, `?3` lease, `?4` worker. One row when written, none when the
/// lease was lost.
pub(super) const RECORD_OUTPUT: &str = "UPDATE {schema}.jobs_hot SET output = ?1 \
     WHERE id = ?2 AND lease = ?3 AND worker_id = ?4 AND status IN (1, 2) RETURNING id";

/// The job's output wherever it is, in one statement: `?1` id. One row when the job exists
/// (NULL when it recorded none), none otherwise.
pub(super) const GET_OUTPUT: &str = "SELECT output FROM {schema}.jobs_hot WHERE id = ?1 \
     UNION ALL SELECT output FROM {schema}.jobs_archive WHERE id = ?1 \
     UNION ALL SELECT output FROM {schema}.jobs_dlq WHERE id = ?1";
