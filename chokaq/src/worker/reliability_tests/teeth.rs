//! Teeth: each deliberately broken worker (switched on for one worker id) is caught by the
//! named scenario of `reliability_tests.rs`.

use super::*;

async fn caught<F, Fut>(what: Broken, scenario: F) -> String
where
    F: FnOnce(WorkerId) -> Fut,
    Fut: std::future::Future<Output = Res>,
{
    let worker = WorkerId::random();
    BROKEN.lock().unwrap().push((worker, what));
    let out = scenario(worker).await;
    BROKEN.lock().unwrap().retain(|(w, _)| *w != worker);
    match out {
        Ok(()) => panic!("the broken variant {what:?} was not caught"),
        Err(e) => {
            println!("{what:?} caught: {e}");
            e
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeth_giving_up_after_four_tries_is_caught() {
    caught(Broken::GiveUpAfterFour, outcomes_survive_many_transient_errors).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeth_forgetting_the_lease_before_the_write_is_caught() {
    let e = caught(Broken::UntrackBeforeWrite, unwritten_outcome_keeps_its_lease).await;
    assert!(e.contains("rescued"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeth_dropping_a_failed_complete_and_claim_batch_is_caught() {
    caught(Broken::DropFailedBatch, complete_and_claim_error_keeps_the_batch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeth_retrying_the_last_attempt_at_shutdown_is_caught() {
    let e = caught(Broken::ShutdownRetries, graceful_shutdown_never_dead_letters).await;
    assert!(e.contains("Dead"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeth_applying_lost_leases_by_id_is_caught() {
    let e = caught(Broken::LostById, heartbeat_reply_about_an_old_lease).await;
    assert!(e.contains("stopped the newer lease"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeth_claiming_the_lookahead_started_is_caught() {
    let e = caught(Broken::LookaheadStart, after_a_crash_lookahead_jobs_keep_their_attempt).await;
    assert!(e.contains("only the job that ran"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teeth_running_a_held_job_on_an_unconfirmed_lease_is_caught() {
    let e =
        caught(Broken::UnconfirmedLease, crate::worker::execution_tests::a_stale_held_job_is_confirmed_before_it_runs)
            .await;
    assert!(e.contains("no longer held"), "{e}");
}
