//! The cases, one per behaviour, grouped as the contract is.

use futures::future::BoxFuture;

use crate::ctx::{CaseResult, Ctx};

mod bad_input;
mod cap;
mod claim;
mod idempotency;
mod lease;
mod lifecycle;
mod pause;
mod rescue;
mod retry;
mod schedule;
mod stats;
mod stress;

pub use bad_input::NASTY;

/// What a case needs beyond the core contract (checked against the backend's capabilities).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Several OS processes on one store, and a child-process launcher.
    pub multi_process: bool,
    /// [`chokaq_core::testing::TestSupport::kill_connections`].
    pub kill_connections: bool,
    /// [`chokaq_core::Backend::wakeups`] returns a stream.
    pub listen_notify: bool,
    /// Runs alone: no other case of the run is in flight meanwhile (it disturbs the shared
    /// backend, e.g. kills its connections).
    pub exclusive: bool,
}

impl Needs {
    /// Nothing beyond the contract.
    pub const NONE: Needs =
        Needs { multi_process: false, kill_connections: false, listen_notify: false, exclusive: false };
    /// Child OS processes.
    pub const MULTI_PROCESS: Needs = Needs { multi_process: true, ..Needs::NONE };
    /// Killing connections (alone: the kills hit every session of the backend).
    pub const KILL_CONNECTIONS: Needs = Needs { kill_connections: true, exclusive: true, ..Needs::NONE };
    /// Push wake-ups.
    pub const LISTEN_NOTIFY: Needs = Needs { listen_notify: true, ..Needs::NONE };
}

/// One named case.
#[derive(Clone, Copy)]
pub struct Case {
    /// Unique, filterable name, prefixed by its group (`claim_`, `cap_`, ...).
    pub name: &'static str,
    /// The group (shown as the trial's kind).
    pub group: &'static str,
    /// What it needs beyond the contract.
    pub needs: Needs,
    /// The case itself.
    pub run: fn(Ctx) -> BoxFuture<'static, CaseResult>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("needs", &self.needs)
            .finish()
    }
}

macro_rules! case {
    ($group:literal, $name:literal, $f:path) => {
        case!($group, $name, $f, Needs::NONE)
    };
    ($group:literal, $name:literal, $f:path, $needs:expr) => {
        Case { name: $name, group: $group, needs: $needs, run: |cx| Box::pin($f(cx)) }
    };
}

/// Every case, in a stable order.
pub fn all_cases() -> Vec<Case> {
    vec![
        // claim
        case!("claim", "claim_returns_fetched_with_lease", claim::returns_fetched_with_lease),
        case!("claim", "claim_start_mode_goes_to_processing", claim::start_mode_goes_to_processing),
        case!("claim", "claim_respects_limit", claim::respects_limit),
        case!("claim", "claim_batch_distinct_ids_and_leases", claim::batch_distinct_ids_and_leases),
        case!("claim", "claim_order_priority_due_id", claim::order_priority_due_id),
        case!("claim", "claim_leases_grow", claim::leases_grow),
        case!("claim", "claim_only_named_queues", claim::only_named_queues),
        case!("claim", "claim_race_tasks_no_duplicates", claim::race_tasks_no_duplicates),
        case!("claim", "claim_race_processes_no_duplicates", claim::race_processes_no_duplicates, Needs::MULTI_PROCESS),
        // cap
        case!("cap", "cap_limits_single_batch", cap::limits_single_batch),
        case!("cap", "cap_counts_fetched_and_processing", cap::counts_fetched_and_processing),
        case!("cap", "cap_change_and_clear", cap::change_and_clear),
        case!("cap", "cap_zero_claims_nothing", cap::zero_claims_nothing),
        case!("cap", "cap_binds_only_its_queue", cap::binds_only_its_queue),
        case!("cap", "cap_race_strict", cap::race_strict),
        case!("cap", "cap_race_multi_queue", cap::race_multi_queue),
        // lease / fencing
        case!("lease", "lease_stale_complete_is_lost", lease::stale_complete_is_lost),
        case!("lease", "lease_stale_heartbeat_is_lost", lease::stale_heartbeat_is_lost),
        case!("lease", "lease_stale_fail_is_lost", lease::stale_fail_is_lost),
        case!("lease", "lease_same_worker_stale_copy", lease::same_worker_stale_copy),
        case!("lease", "lease_status_guards", lease::status_guards),
        case!("lease", "lease_wrong_lease_is_lost", lease::wrong_lease_is_lost),
        case!("lease", "lease_batch_complete_mixed", lease::batch_complete_mixed),
        case!("lease", "lease_cancelled_fetched_cannot_start", lease::cancelled_fetched_cannot_start),
        case!("lease", "lease_heartbeat_bumps", lease::heartbeat_bumps),
        case!("lease", "lease_concurrent_double_complete", lease::concurrent_double_complete),
        case!("lease", "lease_rescue_races_complete", lease::rescue_races_complete),
        // lifecycle
        case!("lifecycle", "lifecycle_reserve_start_complete", lifecycle::reserve_start_complete),
        case!("lifecycle", "lifecycle_release_returns_pending", lifecycle::release_returns_pending),
        case!("lifecycle", "lifecycle_cancel_each_state", lifecycle::cancel_each_state),
        case!("lifecycle", "lifecycle_cancel_not_live", lifecycle::cancel_not_live),
        case!("lifecycle", "lifecycle_requeue_dead", lifecycle::requeue_dead),
        case!("lifecycle", "lifecycle_requeue_key_conflict", lifecycle::requeue_key_conflict),
        case!("lifecycle", "lifecycle_purge", lifecycle::purge),
        case!("lifecycle", "lifecycle_get_and_list", lifecycle::get_and_list),
        case!("lifecycle", "lifecycle_enqueue_many_in_order", lifecycle::enqueue_many_in_order),
        case!("lifecycle", "lifecycle_purge_bounded", lifecycle::purge_bounded),
        case!("lifecycle", "lifecycle_concurrent_requeue_once", lifecycle::concurrent_requeue_once),
        case!("lifecycle", "lifecycle_cancel_races_claim", lifecycle::cancel_races_claim),
        // retry
        case!("retry", "retry_backoff_schedules_pending", retry::backoff_schedules_pending),
        case!("retry", "retry_until_max_attempts_then_dead", retry::until_max_attempts_then_dead),
        case!("retry", "retry_fatal_dead_letters_at_once", retry::fatal_dead_letters_at_once),
        case!("retry", "retry_snooze_does_not_count", retry::snooze_does_not_count),
        case!("retry", "retry_long_error_truncated", retry::long_error_truncated),
        // rescue
        case!("rescue", "rescue_fetched_timeout", rescue::fetched_timeout),
        case!("rescue", "rescue_zombie_retried", rescue::zombie_retried),
        case!("rescue", "rescue_zombie_dead_without_attempts", rescue::zombie_dead_without_attempts),
        case!("rescue", "rescue_zombie_policy_dead_letter", rescue::zombie_policy_dead_letter),
        case!("rescue", "rescue_queue_zombie_timeout", rescue::queue_zombie_timeout),
        case!("rescue", "rescue_leaves_fresh_jobs", rescue::leaves_fresh_jobs),
        case!("rescue", "rescue_sigkill_mid_job", rescue::sigkill_mid_job, Needs::MULTI_PROCESS),
        // schedule
        case!("schedule", "schedule_future_not_claimed", schedule::future_not_claimed),
        case!("schedule", "schedule_past_claimed_first", schedule::past_claimed_first),
        case!("schedule", "schedule_short_delay_becomes_due", schedule::short_delay_becomes_due),
        // pause
        case!("pause", "pause_blocks_claims", pause::blocks_claims),
        case!("pause", "pause_inactive_blocks_claims", pause::inactive_blocks_claims),
        case!("pause", "pause_fetched_released_on_pause", pause::fetched_released_on_pause),
        case!("pause", "pause_settings_and_isolation", pause::settings_and_isolation),
        // idempotency
        case!("idempotency", "idempotency_duplicate_returns_existing", idempotency::duplicate_returns_existing),
        case!("idempotency", "idempotency_concurrent_one_row", idempotency::concurrent_one_row),
        case!("idempotency", "idempotency_key_free_after_finish", idempotency::key_free_after_finish),
        case!("idempotency", "idempotency_batch_with_duplicates", idempotency::batch_with_duplicates),
        case!("idempotency", "idempotency_concurrent_overlapping_batches", idempotency::concurrent_overlapping_batches),
        // stats
        case!("stats", "stats_counts_per_state", stats::counts_per_state),
        case!("stats", "stats_oldest_due_lag", stats::oldest_due_lag),
        case!("stats", "stats_readers_see_consistent_sums", stats::readers_see_consistent_sums),
        // bad input
        case!("bad_input", "bad_input_nasty_text_roundtrips", bad_input::nasty_text_roundtrips),
        case!("bad_input", "bad_input_invalid_jobs_rejected", bad_input::invalid_jobs_rejected),
        case!("bad_input", "bad_input_invalid_claim_and_list", bad_input::invalid_claim_and_list),
        case!("bad_input", "bad_input_unknown_and_empty", bad_input::unknown_and_empty),
        case!("bad_input", "bad_input_dead_letter_keeps_text", bad_input::dead_letter_keeps_text),
        // faults and push
        case!(
            "stress",
            "stress_kill_connections_nothing_lost",
            stress::kill_connections_nothing_lost,
            Needs::KILL_CONNECTIONS
        ),
        case!("notify", "notify_wakes_on_enqueue", stress::notify_wakes_on_enqueue, Needs::LISTEN_NOTIFY),
    ]
}

/// The names of every case.
pub fn case_names() -> Vec<&'static str> {
    all_cases().iter().map(|c| c.name).collect()
}
