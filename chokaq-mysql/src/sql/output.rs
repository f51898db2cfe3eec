//! The statements of the output room (`docs/outputs.md`).

/// The output on a hot row `lock_held` locked for this lease: (output as JSON text, id).
pub(super) const RECORD_OUTPUT: &str = "UPDATE {schema}.jobs_hot SET output = ? WHERE id = ?";

/// The job's output wherever it is, in one statement: (id, id, id). One row when the job
/// exists (NULL when it recorded none), none otherwise.
pub(super) const GET_OUTPUT: &str = "SELECT output FROM {schema}.jobs_hot WHERE id = ? \
     UNION ALL SELECT output FROM {schema}.jobs_archive WHERE id = ? \
     UNION ALL SELECT output FROM {schema}.jobs_dlq WHERE id = ?";
