//! The statements of the output room (`docs/outputs.md`).

/// `$1` worker, `$2` id, `$3` lease, `$4` the output: written on the hot row only while this
/// lease and worker hold it, Fetched or Processing (the guard of `heartbeat`). One row when
/// written, none when the lease was lost.
pub(super) const RECORD_OUTPUT: &str = "
UPDATE {schema}.jobs_hot h SET output = $4::jsonb
 WHERE h.id = $2 AND h.lease = $3 AND h.worker_id = $1 AND h.status IN (1, 2)
RETURNING h.id";

/// `$1` id: the job's output wherever it is, in one statement (one snapshot): one row when
/// the job exists (its output NULL when it recorded none), none otherwise.
pub(super) const GET_OUTPUT: &str = "
SELECT output FROM {schema}.jobs_hot WHERE id = $1
UNION ALL SELECT output FROM {schema}.jobs_archive WHERE id = $1
UNION ALL SELECT output FROM {schema}.jobs_dlq WHERE id = $1";
