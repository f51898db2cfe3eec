//! Teeth without a database: the in-memory reference backend wrapped with deliberately broken
//! operations. Each broken wrapper must make at least one named case fail, and the same cases
//! must pass on the unbroken backend. (The PostgreSQL teeth test does the same with broken SQL.)

#[path = "teeth_memory/broken.rs"]
mod broken;

use std::sync::Arc;

use async_trait::async_trait;
use chokaq_conformance::{run_cases, TestBackend};
use chokaq_core::memory::MemoryBackend;
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::*;

use broken::{Broken, Fault};

async fn outcomes(fault: Option<Fault>, cases: &[&str]) -> Vec<(String, std::result::Result<(), String>)> {
    let b: Arc<dyn TestBackend> =
        Arc::new(Broken { inner: MemoryBackend::new(), fault, extra_key_slots: Default::default() });
    run_cases(b, cases, None).await
}

async fn assert_caught(fault: Fault, cases: &[&str]) {
    let broken = outcomes(Some(fault), cases).await;
    let caught: Vec<_> = broken.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(!caught.is_empty(), "{fault:?} was not caught by any of {cases:?}");
    for (name, r) in &caught {
        println!("{fault:?} caught by {name}: {}", r.as_ref().unwrap_err());
    }
    let clean = outcomes(None, cases).await;
    let failed: Vec<_> = clean.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.is_empty(), "the same cases fail with no fault: {failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_ignoring_the_lease_is_caught() {
    assert_caught(
        Fault::CompleteIgnoresLease,
        &["lease_stale_complete_is_lost", "lease_wrong_lease_is_lost", "lease_batch_complete_mixed"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeat_ignoring_the_lease_is_caught() {
    assert_caught(Fault::HeartbeatIgnoresLease, &["lease_stale_heartbeat_is_lost"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn record_output_ignoring_the_lease_is_caught() {
    assert_caught(Fault::RecordOutputIgnoresLease, &["output_stale_lease_writes_nothing"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_callback_twice_is_caught() {
    assert_caught(
        Fault::BatchCallbackTwice,
        &["batch_all_succeeded_fires_finished_and_succeeded", "batch_racing_last_completions_fire_once"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workflow_release_after_the_first_dependency_is_caught() {
    assert_caught(
        Fault::ReleaseAfterFirstDependency,
        &["workflow_waits_for_every_dependency", "workflow_fan_in_starts_once_after_the_last"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workflow_release_after_a_failed_dependency_is_caught() {
    assert_caught(Fault::ReleaseAfterFailedDependency, &["workflow_failure_cancels_dependents_transitively"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_then_act_cap_is_caught() {
    assert_caught(Fault::CapCheckThenAct, &["cap_race_strict"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_then_act_key_cap_is_caught() {
    assert_caught(Fault::KeyCheckThenAct, &["keyed_race_tasks"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ignoring_the_key_is_caught() {
    assert_caught(Fault::KeyIgnored, &["keyed_cap_binds_each_key", "keyed_no_head_of_line_blocking"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn freeing_a_key_slot_twice_is_caught() {
    assert_caught(Fault::KeyFreedTwice, &["keyed_repeated_outcomes_keep_count"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_window_off_by_one_is_caught() {
    assert_caught(Fault::RateOffByOne, &["rate_limits_starts_in_window", "rate_race_tasks"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_forever_is_caught() {
    assert_caught(Fault::RetryForever, &["retry_until_max_attempts_then_dead"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_and_claim_claiming_first_is_caught() {
    assert_caught(Fault::CompleteAndClaimClaimsFirst, &["complete_and_claim_claim_sees_its_completions"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_and_claim_ignoring_the_lease_is_caught() {
    assert_caught(Fault::CompleteAndClaimIgnoresLease, &["complete_and_claim_stale_lease_is_lost"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_and_claim_presuming_completions_is_caught() {
    assert_caught(
        Fault::CompleteAndClaimPresumesCompletions,
        &["complete_and_claim_stale_lease_is_lost", "complete_and_claim_race_cap"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn start_not_repeatable_is_caught() {
    assert_caught(Fault::StartNotRepeatable, &["outcome_repeated_start_is_done", "hold_start_counts_once"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_cancel_final_is_caught() {
    assert_caught(Fault::HeldCancelFinal, &["hold_cancel_is_a_request"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_cancel_is_caught() {
    assert_caught(
        Fault::CancelLost,
        &["cancel_then_retry_dead_letters", "cancel_then_snooze_dead_letters", "cancel_then_rescue_dead_letters"],
    )
    .await;
}

/// Wake-ups that do not name the enqueued queue are caught by the notify case (which passes
/// on correct wake-ups of the same wrapper).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn generic_or_misnamed_wakeups_are_caught() {
    let case = ["notify_wakes_on_enqueue"];
    let (generic, first_only, correct) = tokio::join!(
        outcomes(Some(Fault::WakeupsGeneric), &case),
        outcomes(Some(Fault::WakeupsFirstQueueOnly), &case),
        outcomes(Some(Fault::WakeupsCorrect), &case),
    );
    for (fault, out) in [("WakeupsGeneric", generic), ("WakeupsFirstQueueOnly", first_only)] {
        let err = out[0].1.as_ref().expect_err("a broken wake-up passed the notify case");
        assert!(!err.starts_with("skipped"), "{err}");
        println!("{fault} caught by notify_wakes_on_enqueue: {err}");
    }
    assert_eq!(correct[0].1, Ok(()), "the notify case fails on correct wake-ups");
}

/// A mover whose call hangs ends the stats-reader case at its own deadline, with a message
/// naming the call, not at the runner's 120 s limit per case.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hanging_mover_ends_the_stats_case_at_its_deadline() {
    let t = std::time::Instant::now();
    let out = outcomes(Some(Fault::CompleteHangs), &["stats_readers_see_consistent_sums"]).await;
    let err = out[0].1.as_ref().expect_err("a hung complete passed the stats case");
    println!("CompleteHangs caught by stats_readers_see_consistent_sums in {:?}: {err}", t.elapsed());
    assert!(err.contains("no answer within"), "the case did not name the hung call: {err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(60), "took {:?}", t.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_reporting_done_for_a_stale_lease_is_caught() {
    assert_caught(Fault::CompleteStaleIsDone, &["outcome_stale_lease_after_outcome_is_lost"]).await;
}

#[tokio::test]
async fn unknown_case_names_are_reported() {
    let out = outcomes(None, &["no_such_case"]).await;
    assert_eq!(out.len(), 1);
    assert!(out[0].1.as_ref().unwrap_err().contains("no case named"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn printed_suite_counts_failures() {
    let broken: Arc<dyn TestBackend> = Arc::new(Broken {
        inner: MemoryBackend::new(),
        fault: Some(Fault::CompleteIgnoresLease),
        extra_key_slots: Default::default(),
    });
    let s = chokaq_conformance::run_suite(broken, Some("lease_wrong_lease"), None, 2).await;
    assert_eq!((s.passed, s.failed), (0, 1));
    let clean: Arc<dyn TestBackend> = Arc::new(MemoryBackend::new());
    let s = chokaq_conformance::run_suite(clean, Some("lease_"), None, 2).await;
    assert_eq!(s.failed, 0);
    assert!(s.passed >= 10, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_register_that_resets_started_at_is_caught() {
    assert_caught(Fault::RegisterResetsStarted, &["workers_register_upserts"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prune_that_ignores_age_is_caught() {
    assert_caught(Fault::PruneIgnoresAge, &["workers_prune_removes_only_stale"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_throughput_that_ignores_the_queue_is_caught() {
    assert_caught(Fault::ThroughputIgnoresQueue, &["workers_throughput_counts_per_minute"]).await;
}

#[tokio::test]
async fn a_tick_without_the_compare_and_set_is_caught() {
    assert_caught(Fault::TickSkipsCas, &["periodic_tick_after_archive_is_not_enqueued_again"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unique_check_then_insert_is_caught() {
    assert_caught(Fault::UniqueCheckThenInsert, &["unique_race_one_row"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unique_key_without_the_period_is_caught() {
    assert_caught(Fault::UniqueKeyWithoutPeriod, &["unique_period_boundary"]).await;
}
