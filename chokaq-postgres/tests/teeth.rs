//! Teeth: proof that the conformance suite catches broken backends. For each deliberately
//! broken statement (`chokaq_postgres::Faults`), a fresh schema with that fault switched on
//! runs the cases meant to catch it, and at least one of them must FAIL (the trial prints
//! which); the same cases must pass on a fresh schema with no fault.
//!
//! `cargo test -p chokaq-postgres --test teeth` (URL from `CHOKAQ_TEST_POSTGRES_URL`;
//! `CHOKAQ_TEST_REQUIRE=postgres` makes an unreachable server a failure).

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use chokaq_conformance::libtest_mimic::{Arguments, Completion, Failed, Trial};
use chokaq_conformance::{fresh_schema_name, is_required, run_cases, TestBackend};
use chokaq_core::testing::TestSupport;
use chokaq_core::Backend;
use chokaq_postgres::{Faults, PgBackend, PgConfig};
use futures::future::BoxFuture;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

struct Tooth {
    fault: &'static str,
    faults: Faults,
    cases: &'static [&'static str],
    /// PostgreSQL-only checks (`tests/common`) run after the cases, named as the cases are.
    checks: &'static [(&'static str, Check)],
}

/// A PostgreSQL-only check on the backend: what it saw, or the failure.
type Check = fn(Arc<PgBackend>) -> BoxFuture<'static, Result<String, String>>;

/// `common::cap_race::uncapped_claim_in_flight`, the claim held just before it takes rows.
fn first_cap_in_flight_take(b: Arc<PgBackend>) -> BoxFuture<'static, Result<String, String>> {
    Box::pin(async move { common::cap_race::uncapped_claim_in_flight(&b, "take").await })
}

/// `common::cap_race::uncapped_claim_in_flight`, the claim held after its first statement.
fn first_cap_in_flight_first(b: Arc<PgBackend>) -> BoxFuture<'static, Result<String, String>> {
    Box::pin(async move { common::cap_race::uncapped_claim_in_flight(&b, "first").await })
}

/// `common::cap_race::keyed_claim_in_flight`, the claim held before its key's lock.
fn key_in_flight_key(b: Arc<PgBackend>) -> BoxFuture<'static, Result<String, String>> {
    Box::pin(async move { common::cap_race::keyed_claim_in_flight(&b, "key").await })
}

/// `common::cap_race::keyed_claim_in_flight`, the claim held after its key's lock and count.
fn key_in_flight_take(b: Arc<PgBackend>) -> BoxFuture<'static, Result<String, String>> {
    Box::pin(async move { common::cap_race::keyed_claim_in_flight(&b, "take").await })
}

fn teeth() -> Vec<Tooth> {
    let f = Faults::default();
    vec![
        Tooth {
            fault: "claim_two_statements",
            faults: Faults { claim_two_statements: true, ..f },
            cases: &["claim_race_tasks_no_duplicates", "stats_readers_see_consistent_sums"],
            checks: &[],
        },
        Tooth {
            fault: "cap_plain_count",
            faults: Faults { cap_plain_count: true, ..f },
            cases: &["cap_race_strict", "cap_race_multi_queue"],
            checks: &[],
        },
        Tooth {
            fault: "complete_without_lease_guard",
            faults: Faults { complete_without_lease_guard: true, ..f },
            cases: &[
                "lease_stale_complete_is_lost",
                "lease_same_worker_stale_copy",
                "lease_wrong_lease_is_lost",
                "lease_batch_complete_mixed",
            ],
            checks: &[],
        },
        Tooth {
            fault: "move_two_autocommits",
            faults: Faults { move_two_autocommits: true, ..f },
            cases: &["stats_readers_see_consistent_sums", "stress_kill_connections_nothing_lost"],
            checks: &[],
        },
        Tooth {
            fault: "heartbeat_ignores_lease",
            faults: Faults { heartbeat_ignores_lease: true, ..f },
            cases: &["lease_stale_heartbeat_is_lost", "lease_status_guards"],
            checks: &[],
        },
        Tooth {
            fault: "complete_standing_ignores_lease",
            faults: Faults { complete_standing_ignores_lease: true, ..f },
            cases: &["outcome_stale_lease_after_outcome_is_lost"],
            checks: &[],
        },
        Tooth {
            fault: "claim_repeatable_read",
            faults: Faults { claim_repeatable_read: true, ..f },
            cases: &["isolation_cap_race_repeatable_read_default"],
            checks: &[],
        },
        Tooth {
            fault: "handoff_ignores_cap",
            faults: Faults { handoff_ignores_cap: true, ..f },
            cases: &["complete_and_claim_lowered_cap_hands_nothing_on"],
            checks: &[],
        },
        Tooth {
            fault: "first_cap_ignored",
            faults: Faults { first_cap_ignored: true, ..f },
            cases: &["cap_first_set_binds_racing_claimers"],
            checks: &[
                ("pg_first_cap_binds_a_claim_held_before_its_rows", first_cap_in_flight_take),
                ("pg_first_cap_binds_a_claim_held_after_its_first_statement", first_cap_in_flight_first),
            ],
        },
        Tooth {
            fault: "key_count_before_lock",
            faults: Faults { key_count_before_lock: true, ..f },
            cases: &["keyed_race_tasks"],
            checks: &[("pg_key_counted_after_its_lock", key_in_flight_key)],
        },
        Tooth {
            fault: "key_ignored",
            faults: Faults { key_ignored: true, ..f },
            cases: &["keyed_cap_binds_each_key", "keyed_no_head_of_line_blocking"],
            checks: &[],
        },
        Tooth {
            fault: "key_lock_freed_early",
            faults: Faults { key_lock_freed_early: true, ..f },
            cases: &["keyed_race_tasks"],
            checks: &[("pg_key_lock_held_until_commit", key_in_flight_take)],
        },
        Tooth {
            fault: "rate_window_off_by_one",
            faults: Faults { rate_window_off_by_one: true, ..f },
            cases: &["rate_limits_starts_in_window", "rate_by_key", "rate_race_tasks"],
            checks: &[],
        },
        Tooth {
            fault: "rate_kind_change_keeps_numbers",
            faults: Faults { rate_kind_change_keeps_numbers: true, ..f },
            cases: &["rate_kind_change_keeps_the_window"],
            checks: &[],
        },
        Tooth {
            fault: "key_read_skips_its_start",
            faults: Faults { key_read_skips_its_start: true, ..f },
            cases: &["keyed_no_head_of_line_blocking", "keyed_cap_binds_each_key"],
            checks: &[],
        },
        Tooth {
            fault: "start_not_repeatable",
            faults: Faults { start_not_repeatable: true, ..f },
            cases: &["outcome_repeated_start_is_done"],
            checks: &[],
        },
        Tooth {
            fault: "flow_release_early",
            faults: Faults { flow_release_early: true, ..f },
            cases: &["workflow_waits_for_every_dependency", "workflow_fan_in_starts_once_after_the_last"],
            checks: &[],
        },
        Tooth {
            fault: "flow_dead_releases",
            faults: Faults { flow_dead_releases: true, ..f },
            cases: &["workflow_failure_cancels_dependents_transitively"],
            checks: &[],
        },
        Tooth {
            fault: "flow_part_releases",
            faults: Faults { flow_part_releases: true, ..f },
            cases: &["workflow_wide_fan_in_waits_for_the_last", "workflow_fan_in_starts_once_after_the_last"],
            checks: &[],
        },
        Tooth {
            fault: "batch_part_finishes",
            faults: Faults { batch_part_finishes: true, ..f },
            cases: &["batch_large_finishes_after_the_last", "batch_racing_last_completions_fire_once"],
            checks: &[],
        },
        Tooth {
            fault: "batch_first_dead_every_time",
            faults: Faults { batch_first_dead_every_time: true, ..f },
            cases: &["batch_first_dead_fires_once"],
            checks: &[],
        },
    ]
}

async fn open(url: &str, faults: Faults) -> chokaq_core::Result<Arc<PgBackend>> {
    let cfg = PgConfig::new(url).schema(fresh_schema_name()).max_connections(16);
    let b = PgBackend::connect_with_faults(cfg, faults).await?;
    b.migrate().await?;
    Ok(Arc::new(b))
}

/// Runs `cases` on a fresh schema with `faults`; returns each case's outcome.
async fn run(
    url: &str,
    faults: Faults,
    cases: &[&str],
    checks: &[(&str, Check)],
) -> Result<Vec<(String, Result<(), String>)>, String> {
    let b = open(url, faults).await.map_err(|e| format!("opening a fresh schema: {e}"))?;
    let mut out = run_cases(b.clone() as Arc<dyn TestBackend>, cases, None).await;
    for (name, check) in checks {
        out.push((name.to_string(), check(b.clone()).await.map(|_| ())));
    }
    if let Err(e) = b.drop_schema().await {
        eprintln!("teeth: dropping the schema failed: {e}");
    }
    Ok(out)
}

fn check(url: &str, tooth: &Tooth, rt: &tokio::runtime::Handle) -> Result<(), Failed> {
    let faulty = rt.block_on(run(url, tooth.faults, tooth.cases, tooth.checks))?;
    let caught: Vec<&(String, Result<(), String>)> =
        faulty.iter().filter(|(_, r)| r.as_ref().is_err_and(|e| !e.starts_with("skipped:"))).collect();
    if caught.is_empty() {
        return Err(format!("fault {} was NOT caught: every case passed: {:?}", tooth.fault, tooth.cases).into());
    }
    for (name, r) in &caught {
        let msg = r.as_ref().err().map(|e| e.lines().next().unwrap_or("").to_string()).unwrap_or_default();
        println!("teeth: fault {} caught by {name}: {msg}", tooth.fault);
    }
    let clean = rt.block_on(run(url, Faults::default(), tooth.cases, tooth.checks))?;
    let failed: Vec<_> = clean.iter().filter(|(_, r)| r.is_err()).collect();
    if !failed.is_empty() {
        return Err(format!("the same cases fail with NO fault (so the catch proves nothing): {failed:?}").into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let probe = rt.block_on(PgBackend::connect(PgConfig::new(url.clone()).schema("chokaq_probe")));
    let unavailable = probe.err().map(|e| format!("postgres unreachable: {e}"));
    let required = is_required("postgres");
    let handle = rt.handle().clone();
    let trials = teeth()
        .into_iter()
        .map(|tooth| {
            let (url, handle, unavailable) = (url.clone(), handle.clone(), unavailable.clone());
            Trial::ignorable_test(format!("teeth_{}", tooth.fault), move || match unavailable {
                Some(why) if required => Err(Failed::from(format!("{why} (and CHOKAQ_TEST_REQUIRE requires it)"))),
                Some(why) => Ok(Completion::ignored_with(why)),
                None => check(&url, &tooth, &handle).map(|()| Completion::Completed),
            })
        })
        .collect();
    chokaq_conformance::libtest_mimic::run(&args, trials).exit_code()
}
