//! Teeth: proof that the conformance suite catches a broken MySQL backend. For each
//! deliberately broken statement (`chokaq_mysql::Faults`), a fresh schema with that fault
//! switched on runs the cases meant to catch it, and at least one of them must FAIL (the trial
//! prints which); the same cases must pass on a fresh schema with no fault.
//!
//! `cargo test -p chokaq-mysql --test teeth` (URL from `CHOKAQ_TEST_MYSQL_URL`;
//! `CHOKAQ_TEST_REQUIRE=mysql` makes an unreachable server a failure).

use std::process::ExitCode;
use std::sync::Arc;

use chokaq_conformance::libtest_mimic::{Arguments, Completion, Failed, Trial};
use chokaq_conformance::{fresh_schema_name, is_required, run_cases, TestBackend};
use chokaq_core::testing::TestSupport;
use chokaq_core::Backend;
use chokaq_mysql::{Faults, MysqlBackend, MysqlConfig};

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

struct Tooth {
    fault: &'static str,
    faults: Faults,
    cases: &'static [&'static str],
}

fn teeth() -> Vec<Tooth> {
    let f = Faults::default();
    vec![
        Tooth {
            fault: "claim_read_then_update",
            faults: Faults { claim_read_then_update: true, ..f },
            cases: &["claim_race_tasks_no_duplicates", "stats_readers_see_consistent_sums"],
        },
        Tooth {
            fault: "move_two_transactions",
            faults: Faults { move_two_transactions: true, ..f },
            cases: &["stats_readers_see_consistent_sums", "stress_kill_connections_nothing_lost"],
        },
        // Issue 25 (a): the per-key running counts read before the control row's lock.
        Tooth {
            fault: "key_check_before_lock",
            faults: Faults { key_check_before_lock: true, ..f },
            cases: &["keyed_race_tasks"],
        },
        // Issue 25 (d): the rate window off by one (`started <= jobs` lets one start too many).
        Tooth {
            fault: "rate_window_off_by_one",
            faults: Faults { rate_window_off_by_one: true, ..f },
            cases: &["rate_limits_starts_in_window", "rate_race_tasks"],
        },
        // Issue 40, L7: a change of a limit's kind keeps the starts log's numbers.
        Tooth {
            fault: "rate_kind_change_keeps_numbers",
            faults: Faults { rate_kind_change_keeps_numbers: true, ..f },
            cases: &["rate_kind_change_keeps_the_window"],
        },
    ]
}

async fn open(url: &str, faults: Faults) -> chokaq_core::Result<Arc<MysqlBackend>> {
    let cfg = MysqlConfig::new(url).schema(fresh_schema_name()).max_connections(16);
    let b = MysqlBackend::connect(cfg).await?.with_faults(faults);
    b.migrate().await?;
    Ok(Arc::new(b))
}

/// Runs `cases` on a fresh schema with `faults`; returns each case's outcome.
async fn run(url: &str, faults: Faults, cases: &[&str]) -> Result<Vec<(String, Result<(), String>)>, String> {
    let b = open(url, faults).await.map_err(|e| format!("opening a fresh schema: {e}"))?;
    let out = run_cases(b.clone() as Arc<dyn TestBackend>, cases, None).await;
    if let Err(e) = b.drop_schema().await {
        eprintln!("teeth: dropping the schema failed: {e}");
    }
    Ok(out)
}

fn check(url: &str, tooth: &Tooth, rt: &tokio::runtime::Handle) -> Result<(), Failed> {
    let faulty = rt.block_on(run(url, tooth.faults, tooth.cases))?;
    let caught: Vec<&(String, Result<(), String>)> =
        faulty.iter().filter(|(_, r)| r.as_ref().is_err_and(|e| !e.starts_with("skipped:"))).collect();
    if caught.is_empty() {
        return Err(format!("fault {} was NOT caught: every case passed: {:?}", tooth.fault, tooth.cases).into());
    }
    for (name, r) in &caught {
        let msg = r.as_ref().err().map(|e| e.lines().next().unwrap_or("").to_string()).unwrap_or_default();
        println!("teeth: fault {} caught by {name}: {msg}", tooth.fault);
    }
    let clean = rt.block_on(run(url, Faults::default(), tooth.cases))?;
    let failed: Vec<_> = clean.iter().filter(|(_, r)| r.is_err()).collect();
    if !failed.is_empty() {
        return Err(format!("the same cases fail with NO fault (so the catch proves nothing): {failed:?}").into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let probe = rt.block_on(async {
        let b = MysqlBackend::connect(MysqlConfig::new(url.clone()).schema("chokaq_probe")).await?;
        b.close().await;
        Ok::<(), chokaq_core::Error>(())
    });
    let unavailable = probe.err().map(|e| format!("mysql unreachable: {e}"));
    let required = is_required("mysql");
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
