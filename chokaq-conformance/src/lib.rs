//! `chokaq-conformance`: the behaviour suite every chokaq backend runs.
//!
//! The suite is a list of named, generic async [`cases`], one per behaviour of the contract
//! (`SPEC.md` §2 guards and §3 invariants), driving any backend through
//! [`chokaq_core::Backend`] plus [`chokaq_core::testing::TestSupport`] only. Differences
//! between databases are [`chokaq_core::Capabilities`] flags; a case whose capability is
//! missing is *ignored* with the reason, never counted as a pass.
//!
//! A backend crate runs the suite from one `tests/conformance.rs` (declared with
//! `harness = false` in its `Cargo.toml`), built on a [`Harness`]. For a backend addressed by
//! a URL and a schema, [`UrlHarness`] does everything (fresh `chokaq_t_<hex>` schema,
//! migrate, child-process reopen, drop at the end):
//!
//! ```no_run
//! // chokaq-foo/tests/conformance.rs
//! use std::sync::Arc;
//! use chokaq_conformance::{run_main, TestBackend, UrlHarness};
//!
//! # mod chokaq_foo { pub struct FooBackend; impl FooBackend {
//! #   pub async fn connect(_url: &str, _schema: &str) -> chokaq_core::Result<FooBackend> { unimplemented!() } } }
//! # impl chokaq_foo::FooBackend { fn into_dyn(self) -> Arc<dyn TestBackend> { unimplemented!() } }
//! fn main() -> std::process::ExitCode {
//!     // None = not configured: every case is ignored (CHOKAQ_TEST_REQUIRE=foo makes it fail).
//!     let url = std::env::var("CHOKAQ_TEST_FOO_URL").ok();
//!     run_main(UrlHarness::new("foo", url, |url, schema| {
//!         Box::pin(async move {
//!             let b = chokaq_foo::FooBackend::connect(&url, &schema).await?;
//!             Ok(b.into_dyn()) // i.e. Arc::new(b) as Arc<dyn TestBackend>
//!         })
//!     }))
//! }
//! ```
//!
//! Then `cargo test -p chokaq-foo --test conformance` runs every case,
//! `cargo test -p chokaq-foo --test conformance -- cap_` only the cap group, and
//! `CHOKAQ_TEST_REQUIRE=foo` turns an unreachable database into failures.
//!
//! Backends that are not "URL + schema" implement [`Harness`] themselves. Other entry points:
//! [`run_cases`] (a list of named outcomes, used by the teeth test that proves broken
//! backends are caught) and [`run_suite`] (the printed suite of the runner binary).

mod cases;
mod child;
mod cli;
mod ctx;
pub mod grammar;
mod harness;
mod runner;

pub use cases::{all_cases, case_names, Case, Needs, Outcome, NASTY};
pub use child::{maybe_run_child, ChildLine, ChildProc, ENV_CHILD_BATCH, ENV_CHILD_QUEUE, ENV_CHILD_ROLE};
pub use cli::{error_chain, runner_main, Runner, Target, ENV_CHILD_FAULT};
pub use ctx::{rescue_params, CaseResult, ChildLauncher, Ctx, Failure, StressSettings, AGED, POLL_DEADLINE};
pub use harness::{
    fresh_schema_name, is_required, ConnectFn, Harness, TestBackend, UrlHarness, ENV_CHILD_SCHEMA, ENV_CHILD_URL,
    ENV_REQUIRE,
};
pub use runner::{missing_capability, run_case_outcomes, run_cases, run_main, run_one, run_suite, Summary};

/// Re-exported so backend crates can build extra trials (the teeth test) without their own
/// dependency on it.
pub use libtest_mimic;
/// Re-exported for the same reason.
pub use tokio;
