//! The simulator's teeth: each broken runtime variant (the behaviour before issue 36's fixes)
//! must be caught by the random seeds of the CI budget, and by its scripted scenario.

use super::flow::FlowFault;
use super::run::{run, Plan};
use super::{random_plan, scenarios, CI_SEEDS};
use crate::worker::Broken;

/// The first seed of the CI budget whose run with `broken` breaks a rule, and what it broke.
fn first_catch(broken: Broken) -> Option<(u64, String)> {
    (0..CI_SEEDS).find_map(|seed| {
        let mut plan: Plan = random_plan(seed);
        plan.broken = vec![broken];
        let out = run(&plan);
        out.violations.first().map(|v| (seed, v.clone()))
    })
}

/// Runs the variant through the CI seeds and its scenario; both must catch it.
fn caught(broken: Broken, scenario: impl FnOnce(&dyn Fn(&mut Plan)) -> Result<(), String>) {
    let set = |p: &mut Plan| p.broken = vec![broken];
    let by_scenario = scenario(&set);
    assert!(by_scenario.is_err(), "tooth {broken:?}: NOT caught by its scenario");
    match first_catch(broken) {
        Some((seed, v)) => eprintln!("sim teeth: {broken:?} caught by seed {seed}: {v}"),
        None => panic!("tooth {broken:?}: NOT caught by any of the {CI_SEEDS} CI seeds"),
    }
}

#[test]
fn tooth_suspect_begins_unconfirmed() {
    caught(Broken::SuspectUnconfirmed, |f| scenarios::poison_and_innocent(f));
}

#[test]
fn tooth_no_self_fencing() {
    caught(Broken::NoSelfFence, |f| scenarios::heartbeat_outage(f));
}

#[test]
fn tooth_rate_checked_at_claim_only() {
    caught(Broken::RateAtClaimOnly, |f| scenarios::rate_binds_begins(f));
}

#[test]
fn tooth_prefetch_begins_without_the_gate() {
    caught(Broken::BufferWithoutGate, |f| scenarios::prefetch_stalled_writes(f));
}

#[test]
fn tooth_queue_slots_shared() {
    caught(Broken::SharedQueueSlots, |f| scenarios::queue_slots_bind(f));
}

#[test]
fn tooth_lookahead_hoards() {
    caught(Broken::LookaheadHoards, |f| scenarios::no_hoarding(false, f));
}

/// The first CI seed with a workflow whose run, its store broken by `fault`, breaks a rule.
fn first_flow_catch(fault: FlowFault) -> Option<(u64, String)> {
    (0..CI_SEEDS).find_map(|seed| {
        let mut plan: Plan = random_plan(seed);
        plan.flow.as_mut()?.fault = Some(fault);
        run(&plan).violations.first().map(|v| (seed, v.clone()))
    })
}

#[test]
fn tooth_workflow_released_after_the_first_dependency() {
    match first_flow_catch(FlowFault::FirstDependencyOnly) {
        Some((seed, v)) => eprintln!("sim teeth: FirstDependencyOnly caught by seed {seed}: {v}"),
        None => panic!("tooth FirstDependencyOnly: NOT caught by any of the {CI_SEEDS} CI seeds"),
    }
}

#[test]
fn tooth_workflow_released_after_a_failed_dependency() {
    match first_flow_catch(FlowFault::AllRunAnyway) {
        Some((seed, v)) => eprintln!("sim teeth: AllRunAnyway caught by seed {seed}: {v}"),
        None => panic!("tooth AllRunAnyway: NOT caught by any of the {CI_SEEDS} CI seeds"),
    }
}

#[test]
fn tooth_batch_callback_twice() {
    let caught = (0..CI_SEEDS).find_map(|seed| {
        let mut plan: Plan = random_plan(seed);
        plan.batch.as_mut()?.twice = true;
        run(&plan).violations.first().map(|v| (seed, v.clone()))
    });
    match caught {
        Some((seed, v)) => eprintln!("sim teeth: BatchCallbackTwice caught by seed {seed}: {v}"),
        None => panic!("tooth BatchCallbackTwice: NOT caught by any of the {CI_SEEDS} CI seeds"),
    }
}
