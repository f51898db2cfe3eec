//! The cases, one per behaviour, grouped as the contract is.
//!
//! Each group file registers its cases with one [`cases!`] line (a case's name is the group
//! and the function name: `claim` + `respects_limit` = `claim_respects_limit`); this file
//! declares the group modules and lists them once, in [`all_cases`]'s order.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::ctx::{Ctx, Failure};

/// How long a race round may go without progress before it fails.
pub(crate) const STALL: Duration = Duration::from_secs(60);

/// A race round's hang guard: it fails a round only when the shared count of finished jobs has
/// not moved for [`STALL`], never for being slow. A round's time depends on the machine's load:
/// a fixed deadline turned a slow round into a failure once (PostgreSQL's
/// `sixteen_claimers_ten_thousand_jobs_cap_three` took 129 s beside two CI runs).
pub(crate) struct Progress {
    seen: u64,
    since: Instant,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Progress { seen: 0, since: Instant::now() }
    }

    /// Whether `done` has not moved for [`STALL`] (each call notes a move).
    pub(crate) fn stalled(&mut self, done: u64) -> bool {
        if done != self.seen {
            (self.seen, self.since) = (done, Instant::now());
            return false;
        }
        self.since.elapsed() > STALL
    }
}

mod bad_input;
mod batch;
mod cancel;
mod cap;
mod cap_race;
mod claim;
mod complete_and_claim;
mod hold;
mod hostile;
mod idempotency;
mod isolation;
mod keyed;
mod lease;
mod lifecycle;
mod notify;
mod outcome;
mod output;
mod pause;
mod periodic;
mod rate;
mod rescue;
mod retry;
mod schedule;
mod stats;
mod stress;
mod unique;
mod workers;
mod workflow;

pub use bad_input::NASTY;
pub(crate) use periodic::run_scheduler;
pub use rate::{check_long_window, max_in_window};

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// An assertion or a backend call failed; the message says what was expected and seen.
    Failed(String),
    /// The case cannot run on this backend or in this run (the reason): never a pass. The
    /// runner decides it for a missing [`Needs`]; a case may decide it itself (the wake-up
    /// case, when `Backend::wakeups` returns `None`).
    Ignored(String),
}

impl Outcome {
    /// Whether the case failed.
    pub fn is_failed(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }
}

impl From<Failure> for Outcome {
    fn from(f: Failure) -> Self {
        Outcome::Failed(f.0)
    }
}

/// What a case function may return: [`crate::CaseResult`] (passed or failed) or
/// `Result<Outcome, Failure>` (for a case that may decide it is ignored).
pub(crate) trait IntoOutcome {
    fn into_outcome(self) -> Outcome;
}

impl IntoOutcome for Result<(), Failure> {
    fn into_outcome(self) -> Outcome {
        self.map_or_else(Outcome::from, |()| Outcome::Passed)
    }
}

impl IntoOutcome for Result<Outcome, Failure> {
    fn into_outcome(self) -> Outcome {
        self.unwrap_or_else(Outcome::from)
    }
}

/// What a case needs beyond the core contract (checked against the backend's capabilities
/// before the case runs; a missing one makes the case [`Outcome::Ignored`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Several OS processes on one store, and a child-process launcher.
    pub multi_process: bool,
    /// [`chokaq_core::testing::TestSupport::kill_connections`].
    pub kill_connections: bool,
    /// Runs alone: no other case of the run is in flight meanwhile (it disturbs the shared
    /// backend, e.g. kills its connections).
    pub exclusive: bool,
    /// [`chokaq_core::Capabilities::workflows`].
    pub workflows: bool,
    /// [`chokaq_core::Capabilities::batches`].
    pub batches: bool,
}

impl Needs {
    /// Nothing beyond the contract.
    pub const NONE: Needs =
        Needs { multi_process: false, kill_connections: false, exclusive: false, workflows: false, batches: false };
    /// Child OS processes.
    pub const MULTI_PROCESS: Needs = Needs { multi_process: true, ..Needs::NONE };
    /// Killing connections (alone: the kills hit every session of the backend).
    pub const KILL_CONNECTIONS: Needs = Needs { kill_connections: true, exclusive: true, ..Needs::NONE };
    /// A backend that stores workflows.
    pub const WORKFLOWS: Needs = Needs { workflows: true, ..Needs::NONE };
    /// A backend that stores batches.
    pub const BATCHES: Needs = Needs { batches: true, ..Needs::NONE };
}

/// One named case.
#[derive(Clone, Copy)]
pub struct Case {
    /// Unique, filterable name, prefixed by its group (`claim_`, `cap_`, ...).
    pub name: &'static str,
    /// The group (shown as the trial's kind).
    pub group: &'static str,
    /// What it needs beyond the contract.
    pub needs: Needs,
    /// The case itself.
    pub run: fn(Ctx) -> BoxFuture<'static, Outcome>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("needs", &self.needs)
            .finish()
    }
}

/// Registers the cases of one group file, in order: `cases!(group: case_fn, ...)`. Each
/// entry is an `async fn(Ctx)` of that file returning [`crate::CaseResult`] (or
/// `Result<Outcome, Failure>`), optionally followed by `[NEEDS]`, a [`Needs`] constant
/// (`[MULTI_PROCESS]`, `[KILL_CONNECTIONS]`). The case is named `<group>_<case_fn>`. Expands
/// to the file's `fn cases() -> Vec<Case>`.
macro_rules! cases {
    (@needs) => {
        $crate::cases::Needs::NONE
    };
    (@needs $needs:ident) => {
        $crate::cases::Needs::$needs
    };
    ($group:ident: $($case:ident $([$needs:ident])?),+ $(,)?) => {
        /// This group's cases, in order.
        pub(super) fn cases() -> Vec<$crate::cases::Case> {
            vec![$($crate::cases::Case {
                name: concat!(stringify!($group), "_", stringify!($case)),
                group: stringify!($group),
                needs: $crate::cases::cases!(@needs $($needs)?),
                run: |cx| Box::pin(async move { $crate::cases::IntoOutcome::into_outcome($case(cx).await) }),
            }),+]
        }
    };
}
pub(crate) use cases;

/// Lists the group modules once; expands to [`all_cases`].
macro_rules! groups {
    ($($group:ident),+ $(,)?) => {
        /// Every case, in a stable order: the groups as listed, each group's cases as its
        /// `cases!` line lists them.
        pub fn all_cases() -> Vec<Case> {
            let mut all = Vec::new();
            $(all.extend($group::cases());)+
            all
        }
    };
}

groups!(
    claim,
    cap,
    cap_race,
    keyed,
    rate,
    lease,
    hold,
    complete_and_claim,
    lifecycle,
    retry,
    rescue,
    schedule,
    pause,
    idempotency,
    unique,
    stats,
    bad_input,
    stress,
    notify,
    cancel,
    outcome,
    output,
    workflow,
    batch,
    isolation,
    hostile,
    workers,
    periodic,
);

/// The names of every case.
pub fn case_names() -> Vec<&'static str> {
    all_cases().iter().map(|c| c.name).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_are_unique_and_prefixed_by_their_group() {
        let all = all_cases();
        let names: HashSet<&str> = all.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), all.len(), "duplicate case names");
        for c in &all {
            assert!(c.name.starts_with(&format!("{}_", c.group)), "{c:?}");
        }
    }
}
