//! Running cases: as libtest-mimic trials ([`run_main`]), as a plain list ([`run_cases`]) and
//! as the runner binary's printed suite ([`run_suite`]).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq_core::ErrorKind;
use libtest_mimic::{Arguments, Completion, Failed, Trial};

use crate::cases::{all_cases, Case};
use crate::ctx::{ChildLauncher, Ctx, StressSettings};
use crate::harness::{is_required, Harness, TestBackend};

/// Why a case cannot run on this backend (a missing capability), if it cannot.
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
    if case.needs.listen_notify && !matches!(backend.wakeups().await, Ok(Some(_))) {
        return Some("backend pushes no wake-ups (Backend::wakeups returns None)".into());
    }
    None
}

fn build_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("a tokio runtime")
}

/// Cases take this lock shared, exclusive cases take it alone.
fn exclusivity() -> &'static tokio::sync::RwLock<()> {
    static LOCK: std::sync::OnceLock<tokio::sync::RwLock<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::RwLock::new(()))
}

/// Runs one case against `backend` with a per-case time limit (exclusive cases wait until
/// no other case of this process runs, and hold the others back meanwhile).
pub async fn run_one(case: &Case, ctx: Ctx) -> Result<(), String> {
    let limit = Duration::from_secs(120);
    let lock = exclusivity();
    let (_shared, _alone) =
        if case.needs.exclusive { (None, Some(lock.write().await)) } else { (Some(lock.read().await), None) };
    match tokio::time::timeout(limit, (case.run)(ctx)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(f)) => Err(f.0),
        Err(_) => Err(format!("case {} did not finish within {limit:?}", case.name)),
    }
}

/// Runs the named cases (all cases when `names` is empty) against `backend`, in-process
/// (multi-process cases are reported as skipped with `Err("skipped: ...")` unless
/// `children` is given), sequentially, and returns each case's outcome in order. The teeth
/// test uses this.
pub async fn run_cases(
    backend: Arc<dyn TestBackend>,
    names: &[&str],
    children: Option<ChildLauncher>,
) -> Vec<(String, Result<(), String>)> {
    let stress = StressSettings::from_env();
    let caps = backend.capabilities();
    let mut out = Vec::new();
    for case in all_cases() {
        if !names.is_empty() && !names.contains(&case.name) {
            continue;
        }
        if let Some(why) = missing_capability(&case, &*backend, children.is_some()).await {
            out.push((case.name.to_string(), Err(format!("skipped: {why}"))));
            continue;
        }
        let ctx = Ctx { backend: backend.clone(), caps, case: case.name, stress, children: children.clone() };
        out.push((case.name.to_string(), run_one(&case, ctx).await));
    }
    for name in names {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), Err(format!("no case named {name}"))));
        }
    }
    out
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
            Err(e) => Err((e.kind() == ErrorKind::Unavailable, format!("{name} could not be opened: {e}"))),
        },
    };
    let children = ChildLauncher::current_exe(harness.child_env()).ok();
    let stress = StressSettings::from_env();
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
                    if let Some(why) = handle.block_on(missing_capability(&case, &*backend, children.is_some())) {
                        return Ok(Completion::ignored_with(why));
                    }
                    let caps = backend.capabilities();
                    let ctx = Ctx { backend, caps, case: case.name, stress, children };
                    handle.block_on(run_one(&case, ctx)).map(|()| Completion::Completed).map_err(Failed::from)
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
    pub skipped: usize,
}

/// Runs every case whose name contains `filter` against `backend`, `parallel` at a time,
/// printing one line per case as it finishes and a closing line `N passed, N failed`.
pub async fn run_suite(
    backend: Arc<dyn TestBackend>,
    filter: Option<&str>,
    children: Option<ChildLauncher>,
    parallel: usize,
) -> Summary {
    let stress = StressSettings::from_env();
    let caps = backend.capabilities();
    let cases: Vec<Case> = all_cases().into_iter().filter(|c| filter.is_none_or(|f| c.name.contains(f))).collect();
    let sem = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for case in cases {
        let backend = backend.clone();
        let children = children.clone();
        let sem = sem.clone();
        set.spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore open");
            if let Some(why) = missing_capability(&case, &*backend, children.is_some()).await {
                println!("case {:<44} ... skipped ({why})", case.name);
                return (0, 0, 1);
            }
            let ctx = Ctx { backend, caps, case: case.name, stress, children };
            let t = Instant::now();
            let r = run_one(&case, ctx).await;
            let ms = t.elapsed().as_millis();
            match r {
                Ok(()) => {
                    println!("case {:<44} ... ok ({ms} ms)", case.name);
                    (1, 0, 0)
                }
                Err(e) => {
                    println!("case {:<44} ... FAILED ({ms} ms): {e}", case.name);
                    (0, 1, 0)
                }
            }
        });
    }
    let mut s = Summary::default();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((p, f, k)) => {
                s.passed += p;
                s.failed += f;
                s.skipped += k;
            }
            Err(e) => {
                println!("case panicked: {e}");
                s.failed += 1;
            }
        }
    }
    if s.skipped > 0 {
        println!("{} skipped (missing capability)", s.skipped);
    }
    println!("{} passed, {} failed", s.passed, s.failed);
    s
}
