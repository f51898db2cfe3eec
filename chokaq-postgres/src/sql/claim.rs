//! The statements of the claim room: the plpgsql claim functions' calls, and the dead-lettering of a claimed row that cannot be decoded.

pub(super) const CLAIM: &str = "SELECT * FROM {schema}.claim($1, $2, $3, $4)";

/// `$1` worker, `$2` ids, `$3` leases (the completions), `$4` queues, `$5` limit, `$6` mode:
/// the completed ids (`o_done`, on every row) and the claimed rows (all NULL when none).
pub(super) const COMPLETE_AND_CLAIM: &str =
    "SELECT r.o_done, (r.o_job).* FROM {schema}.complete_and_claim($1, $2, $3, $4, $5, $6) r";

/// A claimed row the backend cannot decode, to the dead-letter table as `failed` with the
/// reason: `$1` worker, `$2` id, `$3` lease (the claim's), `$4` error. Returns its id.
pub(super) const DEAD_UNDECODABLE: &str = concat!(
    "WITH g AS (
        DELETE FROM {schema}.jobs_hot h
         WHERE h.id = $2 AND h.lease = $3 AND h.worker_id = $1 AND h.status IN (1, 2)
        RETURNING h.*
     ),
     ",
    promote!("g"),
    "
     INSERT INTO {schema}.jobs_dlq (",
    dlq_cols!(),
    ") SELECT ",
    dlq_vals!(),
    ", 'failed', $4::text FROM g RETURNING id"
);
