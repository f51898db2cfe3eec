//! Names of the metrics the runtime records through the `metrics` facade. Install any
//! `metrics` recorder (Prometheus exporter, ...) to collect them; without one they cost
//! next to nothing.

/// Counter, labels `queue`: jobs inserted (duplicates by idempotency key not counted).
pub const ENQUEUED: &str = "chokaq_jobs_enqueued_total";
/// Counter, labels `queue`, `kind`: jobs archived by this worker.
pub const COMPLETED: &str = "chokaq_jobs_completed_total";
/// Counter, labels `queue`, `kind`: attempts that ended in an error, panic or timeout.
pub const FAILED: &str = "chokaq_jobs_failed_total";
/// Counter, labels `queue`, `kind`: attempts put back to Pending for a retry.
pub const RETRIED: &str = "chokaq_jobs_retried_total";
/// Counter, labels `queue`, `kind`, `reason`: jobs moved to the dead-letter table.
pub const DEAD_LETTERED: &str = "chokaq_jobs_dead_lettered_total";
/// Counter, labels `queue`, `kind`: outcomes discarded because the lease was lost.
pub const LEASE_LOST: &str = "chokaq_jobs_lease_lost_total";
/// Histogram, seconds: one claim round trip.
pub const CLAIM_LATENCY: &str = "chokaq_claim_latency_seconds";
/// Histogram, seconds, labels `queue`, `kind`: handler run time.
pub const JOB_RUN: &str = "chokaq_job_run_seconds";
/// Histogram, seconds, label `queue`: from due time to start (database clock).
pub const QUEUE_LAG: &str = "chokaq_queue_lag_seconds";
