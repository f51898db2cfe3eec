//! Running cases: as libtest-mimic trials ([`run_main`]), as a plain list
//! ([`run_case_outcomes`], [`run_cases`]) and as the runner binary's printed suite
//! ([`run_suite`]).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq_core::ErrorKind;
use libtest_mimic::{Arguments, Completion, Failed, Trial};

use crate::cases::{all_cases, Case, Outcome};
use crate::cli::error_chain;
use crate::ctx::{ChildLauncher, Ctx, StressSettings};
use crate::harness::{is_required, Harness, TestBackend};

/// Why a case cannot run on this backend (a missing [`crate::Needs`]), if it cannot. (A case
/// may also find out itself that it cannot run, and end [`Outcome::Ignored`].)
pub async fn missing_capability(case: &Case, backend: &dyn TestBackend, children: bool) -> Option<String> {
    let caps = backend.capabilities();
    if case.needs.multi_process && !caps.multi_process {
        return Some("backend lacks capability multi_process".into());
    }
    if case.needs.multi_process && !children {
        return Some("no child-process launcher in this run".into());
    }
    if case.needs.kill_connections && !caps.kill_connections {
        return Some("backend lacks capability kill_connections".into());
    }
    if case.needs.batches && !caps.batches {
        return Some("backend lacks capability batches (it does not store batches yet: docs/workflows.md)".into());
    }
    if case.needs.workflows && !caps.workflows {
        return Some("backend lacks capability workflows (it does not store workflows yet: docs/workflows.md)".into());
    }
    None
}

pub(crate) fn build_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("a tokio runtime")
}

/// Cases take this lock shared, exclusive cases take it alone.
fn exclusivity() -> &'static tokio::sync::RwLock<()> {
    static LOCK: std::sync::OnceLock<tokio::sync::RwLock<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::RwLock::new(()))
}

/// Runs one case with a per-case time limit (exclusive cases wait until no other case of
/// this process runs, and hold the others back meanwhile). The capability check is the
/// caller's ([`missing_capability`]).
pub async fn run_one(case: &Case, ctx: Ctx) -> Outcome {
    let limit = Duration::from_secs(120);
    let lock = exclusivity();
    let (_shared, _alone) =
        if case.needs.exclusive { (None, Some(lock.write().await)) } else { (Some(lock.read().await), None) };
    match tokio::time::timeout(limit, (case.run)(ctx)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(format!("case {} did not finish within {limit:?}", case.name)),
    }
}

/// Checks a case's needs, then runs it ([`Outcome::Ignored`] with the reason when a need is
/// missing).
async fn check_and_run(case: &Case, backend: Arc<dyn TestBackend>, children: Option<ChildLauncher>) -> Outcome {
    if let Some(why) = missing_capability(case, &*backend, children.is_some()).await {
        return Outcome::Ignored(why);
    }
    let caps = backend.capabilities();
    let ctx = Ctx { backend, caps, case: case.name, stress: StressSettings::from_env(), children };
    run_one(case, ctx).await
}

/// Runs the named cases (all cases when `names` is empty) against `backend`, in-process
/// (multi-process cases are ignored unless `children` is given), one after the other, and
/// returns each case's outcome in order; a name that is no case is [`Outcome::Failed`].
pub async fn run_case_outcomes(
    backend: Arc<dyn TestBackend>,
    names: &[&str],
    children: Option<ChildLauncher>,
) -> Vec<(String, Outcome)> {
    let mut out = Vec::new();
    for case in all_cases() {
        if !names.is_empty() && !names.contains(&case.name) {
            continue;
        }
        out.push((case.name.to_string(), check_and_run(&case, backend.clone(), children.clone()).await));
    }
    for name in names {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), Outcome::Failed(format!("no case named {name}"))));
        }
    }
    out
}

/// [`run_case_outcomes`] as results, for the teeth tests: a passed case is `Ok(())`, a
/// failed one `Err(message)`, an ignored one `Err("skipped: <reason>")` (that prefix is
/// part of this function's contract; [`run_case_outcomes`] tells the three apart).
pub async fn run_cases(
    backend: Arc<dyn TestBackend>,
    names: &[&str],
    children: Option<ChildLauncher>,
) -> Vec<(String, Result<(), String>)> {
    run_case_outcomes(backend, names, children)
        .await
        .into_iter()
        .map(|(name, outcome)| {
            let r = match outcome {
                Outcome::Passed => Ok(()),
                Outcome::Failed(msg) => Err(msg),
                Outcome::Ignored(why) => Err(format!("skipped: {why}")),
            };
            (name, r)
        })
        .collect()
}

/// The entry point of a backend crate's `tests/conformance.rs` (`harness = false`): when the
/// process was started as a child worker it does the child's work and exits; otherwise it
/// opens the backend once, runs every case as a named libtest-mimic trial (filter with
/// `cargo test --test conformance -- cap_`), and drops what the harness created.
///
/// A backend that is not configured or not reachable shows every case as ignored with the
/// reason, unless `CHOKAQ_TEST_REQUIRE` names it: then every case fails.
pub fn run_main<H: Harness>(harness: H) -> ExitCode {
    let rt = build_runtime();
    if let Some(code) = crate::child::maybe_run_child(&rt, &harness) {
        return code;
    }
    let args = Arguments::from_args();
    let harness = Arc::new(harness);
    let name = harness.name().to_string();
    let required = is_required(&name);
    let opened: Result<Arc<dyn TestBackend>, (bool, String)> = match harness.unavailable_reason() {
        Some(why) => Err((true, why)),
        None => match rt.block_on(harness.open()) {
            Ok(b) => Ok(b),
            Err(e) => {
                Err((e.kind() == ErrorKind::Unavailable, format!("{name} could not be opened: {}", error_chain(&e))))
            }
        },
    };
    let children = ChildLauncher::current_exe(harness.child_env()).ok();
    let handle = rt.handle().clone();
    let mut trials = Vec::new();
    for case in all_cases() {
        let trial_name = case.name;
        let trial = match &opened {
            Err((unavailable, why)) => {
                let why = why.clone();
                let ignore = *unavailable && !required;
                Trial::ignorable_test(trial_name, move || {
                    if ignore {
                        Ok(Completion::ignored_with(format!("backend unavailable: {why}")))
                    } else if required {
                        Err(Failed::from(format!("{why} (and {} requires it)", crate::harness::ENV_REQUIRE)))
                    } else {
                        Err(Failed::from(why))
                    }
                })
            }
            Ok(backend) => {
                let backend = backend.clone();
                let handle = handle.clone();
                let children = children.clone();
                Trial::ignorable_test(trial_name, move || {
                    match handle.block_on(check_and_run(&case, backend, children)) {
                        Outcome::Passed => Ok(Completion::Completed),
                        Outcome::Ignored(why) => Ok(Completion::ignored_with(why)),
                        Outcome::Failed(msg) => Err(Failed::from(msg)),
                    }
                })
            }
        };
        trials.push(trial.with_kind(case.group));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    if opened.is_ok() {
        if let Err(e) = rt.block_on(harness.finish()) {
            eprintln!("conformance: cleanup failed: {e}");
        }
    }
    conclusion.exit_code()
}

/// Totals of [`run_suite`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
}

/// Runs every case whose name contains `filter` against `backend`, `parallel` at a time,
/// printing one line per case as it finishes (`ok`, `FAILED` or `ignored`, with the reason)
/// and the closing lines `N ignored` (when some were) and `N passed, N failed`.
pub async fn run_suite(
    backend: Arc<dyn TestBackend>,
    filter: Option<&str>,
    children: Option<ChildLauncher>,
    parallel: usize,
) -> Summary {
    let cases: Vec<Case> = all_cases().into_iter().filter(|c| filter.is_none_or(|f| c.name.contains(f))).collect();
    let sem = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for case in cases {
        let backend = backend.clone();
        let children = children.clone();
        let sem = sem.clone();
        set.spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore open");
            let t = Instant::now();
            let outcome = check_and_run(&case, backend, children).await;
            let ms = t.elapsed().as_millis();
            match &outcome {
                Outcome::Passed => println!("case {:<44} ... ok ({ms} ms)", case.name),
                Outcome::Ignored(why) => println!("case {:<44} ... ignored ({why})", case.name),
                Outcome::Failed(e) => println!("case {:<44} ... FAILED ({ms} ms): {e}", case.name),
            }
            outcome
        });
    }
    let mut s = Summary::default();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Outcome::Passed) => s.passed += 1,
            Ok(Outcome::Failed(_)) => s.failed += 1,
            Ok(Outcome::Ignored(_)) => s.ignored += 1,
            Err(e) => {
                println!("case panicked: {e}");
                s.failed += 1;
            }
        }
    }
    if s.ignored > 0 {
        println!("{} ignored", s.ignored);
    }
    println!("{} passed, {} failed", s.passed, s.failed);
    s
}
