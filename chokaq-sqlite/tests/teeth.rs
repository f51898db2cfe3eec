//! Teeth: proof that the conformance suite catches a broken SQLite backend. For each
//! deliberately broken claim (`chokaq_sqlite::Faults`, issue 25's four), a fresh database file
//! with that fault switched on runs the cases meant to catch it, and at least one of them must
//! FAIL (the trial prints which); the same cases must pass on a fresh file with no fault.
//!
//! `cargo test -p chokaq-sqlite --test teeth` (files in `CHOKAQ_TEST_SQLITE_DIR`, else the
//! temp directory). SQLite needs no server: the trials always run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use chokaq_conformance::libtest_mimic::{Arguments, Failed, Trial};
use chokaq_conformance::{fresh_schema_name, run_cases, TestBackend};
use chokaq_core::testing::TestSupport;
use chokaq_core::Backend;
use chokaq_sqlite::{Faults, SqliteBackend, SqliteConfig};

struct Tooth {
    fault: &'static str,
    faults: Faults,
    cases: &'static [&'static str],
}

fn teeth() -> Vec<Tooth> {
    let f = Faults::default();
    vec![
        // Two claimers both count "k0 has 0 running" before the lock: each takes the cap.
        Tooth {
            fault: "key_check_then_act",
            faults: Faults { key_check_then_act: true, ..f },
            cases: &["keyed_race_tasks"],
        },
        Tooth {
            fault: "key_ignored",
            faults: Faults { key_ignored: true, ..f },
            cases: &["keyed_cap_binds_each_key", "keyed_race_tasks"],
        },
        // A repeated complete or fail frees the key's slot again: the key runs over its cap.
        Tooth {
            fault: "key_slot_double_free",
            faults: Faults { key_slot_double_free: true, ..f },
            cases: &["keyed_repeated_outcomes_keep_count"],
        },
        Tooth {
            fault: "rate_off_by_one",
            faults: Faults { rate_off_by_one: true, ..f },
            cases: &["rate_limits_starts_in_window", "rate_by_key"],
        },
        Tooth {
            fault: "rate_kind_change_keeps_numbers",
            faults: Faults { rate_kind_change_keeps_numbers: true, ..f },
            cases: &["rate_kind_change_keeps_the_window"],
        },
    ]
}

/// A fresh database file's path.
fn fresh_path() -> PathBuf {
    let dir = std::env::var("CHOKAQ_TEST_SQLITE_DIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
    dir.join(format!("{}.db", fresh_schema_name()))
}

/// Runs `cases` on a fresh file with `faults`; returns each case's outcome.
async fn run(faults: Faults, cases: &[&str]) -> Result<Vec<(String, Result<(), String>)>, String> {
    let path = fresh_path();
    let b = SqliteBackend::connect(SqliteConfig::new(path.display().to_string()))
        .await
        .map_err(|e| format!("opening a fresh file: {e}"))?
        .with_faults(faults);
    b.migrate().await.map_err(|e| format!("migrating a fresh file: {e}"))?;
    let b = Arc::new(b);
    let out = run_cases(b.clone() as Arc<dyn TestBackend>, cases, None).await;
    if let Err(e) = b.drop_schema().await {
        eprintln!("teeth: dropping the file failed: {e}");
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    Ok(out)
}

fn check(tooth: &Tooth, rt: &tokio::runtime::Handle) -> Result<(), Failed> {
    let faulty = rt.block_on(run(tooth.faults, tooth.cases))?;
    let skipped: Vec<&String> =
        faulty.iter().filter(|(_, r)| r.as_ref().is_err_and(|e| e.starts_with("skipped:"))).map(|(n, _)| n).collect();
    if faulty.len() != tooth.cases.len() || !skipped.is_empty() {
        return Err(format!("fault {}: cases not run (unknown names or skipped): ran {faulty:?}", tooth.fault).into());
    }
    let caught: Vec<&(String, Result<(), String>)> = faulty.iter().filter(|(_, r)| r.is_err()).collect();
    if caught.is_empty() {
        return Err(format!("fault {} was NOT caught: every case passed: {:?}", tooth.fault, tooth.cases).into());
    }
    for (name, r) in &caught {
        let msg = r.as_ref().err().map(|e| e.lines().next().unwrap_or("").to_string()).unwrap_or_default();
        println!("teeth: fault {} caught by {name}: {msg}", tooth.fault);
    }
    let clean = rt.block_on(run(Faults::default(), tooth.cases))?;
    let failed: Vec<_> = clean.iter().filter(|(_, r)| r.is_err()).collect();
    if !failed.is_empty() || clean.len() != tooth.cases.len() {
        return Err(format!("the same cases fail with NO fault (so the catch proves nothing): {clean:?}").into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    let handle = rt.handle().clone();
    let trials = teeth()
        .into_iter()
        .map(|tooth| {
            let handle = handle.clone();
            Trial::test(format!("teeth_{}", tooth.fault), move || check(&tooth, &handle))
        })
        .collect();
    chokaq_conformance::libtest_mimic::run(&args, trials).exit_code()
}
