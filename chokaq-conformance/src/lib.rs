//! `chokaq-conformance`: the behaviour suite every chokaq backend runs.
//!
//! The suite is a list of named, generic async cases ([`all_cases`]), one per behaviour of
//! the contract (`docs/contract.md`: the guards of "Operations and guards" and the
//! invariants), driving any backend through [`chokaq_core::Backend`] plus
//! [`chokaq_core::testing::TestSupport`] only. Differences between databases are
//! [`chokaq_core::Capabilities`] flags and what [`chokaq_core::Backend::wakeups`] answers; a
//! case that cannot run on a backend ends [`Outcome::Ignored`] with the reason, never as a
//! pass. Each group file of `src/cases/` registers its cases with one `cases!` line; a case's
//! name is its group and its function name (`claim_respects_limit`).
//!
//! A backend crate runs the suite from one `tests/conformance.rs` (declared with
//! `harness = false` in its `Cargo.toml`) whose `main` calls [`run_main`] with a [`Harness`].
//! For a backend addressed by a URL and a schema, [`UrlHarness`] does everything (fresh
//! `chokaq_t_<hex>` schema, migrate, child-process reopen, drop at the end):
//!
//! ```no_run
//! // tests/conformance.rs
//! use std::sync::Arc;
//!
//! use chokaq_conformance::{run_main, TestBackend, UrlHarness};
//! use chokaq_core::memory::MemoryBackend; // stand-in: use your crate's backend
//!
//! fn main() -> std::process::ExitCode {
//!     // None = not configured: every case is ignored (CHOKAQ_TEST_REQUIRE=foo makes it fail).
//!     let url = std::env::var("CHOKAQ_TEST_FOO_URL").ok();
//!     run_main(UrlHarness::new("foo", url, |url, schema| {
//!         Box::pin(async move {
//!             let _ = (url, schema); // chokaq_foo::FooBackend::connect(&url, &schema).await?
//!             Ok(Arc::new(MemoryBackend::new()) as Arc<dyn TestBackend>)
//!         })
//!     }))
//! }
//! ```
//!
//! Then `cargo test -p chokaq-foo --test conformance` runs every case,
//! `cargo test -p chokaq-foo --test conformance -- cap_` only the cap group, and
//! `CHOKAQ_TEST_REQUIRE=foo` turns an unreachable database into failures.
//!
//! Other entry points: [`runner_main`] / [`Runner`] (a runner binary: the suite against the
//! database `CHOKAQ_CONFORMANCE_URL` names, printed case by case), [`run_case_outcomes`] and
//! [`run_cases`] (named outcomes, for the teeth tests that prove broken backends are caught)
//! and [`run_suite`] (the runner's printed suite). `docs/conformance.md` has the whole story:
//! running, adding a case, a new backend crate.

mod cases;
mod child;
mod cli;
mod ctx;
pub mod grammar;
mod harness;
mod runner;

pub use cases::{all_cases, case_names, check_long_window, max_in_window, Case, Needs, Outcome, NASTY};
pub use child::{maybe_run_child, ChildLine, ChildProc, ENV_CHILD_BATCH, ENV_CHILD_QUEUE, ENV_CHILD_ROLE};
pub use cli::{error_chain, runner_main, Runner, Target, ENV_CHILD_FAULT};
pub use ctx::{
    rescue_params, within, CaseResult, ChildLauncher, Ctx, Failure, StressSettings, AGED, CALL_DEADLINE, POLL_DEADLINE,
};
pub use harness::{
    fresh_schema_name, is_required, ConnectFn, Harness, TestBackend, UrlHarness, ENV_CHILD_SCHEMA, ENV_CHILD_URL,
    ENV_REQUIRE,
};
pub use runner::{missing_capability, run_case_outcomes, run_cases, run_main, run_one, run_suite, Summary};

/// Re-exported so a backend crate's [`Harness`] impl needs no dependency of its own on it.
pub use async_trait::async_trait;
/// Re-exported so backend crates can build extra trials (the teeth test) without their own
/// dependency on it.
pub use libtest_mimic;
/// Re-exported for the same reason.
pub use tokio;

/// `docs/conformance.md`: its Rust snippets are compiled as doctests of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../docs/conformance.md")]
pub struct ConformanceDocs;
