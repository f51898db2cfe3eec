//! The cases, one per behaviour, grouped as the contract is.

use futures::future::BoxFuture;

use crate::ctx::{CaseResult, Ctx};

mod claim;

/// What a case needs beyond the core contract (checked against the backend's capabilities).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Several OS processes on one store, and a child-process launcher.
    pub multi_process: bool,
    /// [`chokaq_core::testing::TestSupport::kill_connections`].
    pub kill_connections: bool,
    /// [`chokaq_core::Backend::wakeups`] returns a stream.
    pub listen_notify: bool,
}

impl Needs {
    /// Nothing beyond the contract.
    pub const NONE: Needs = Needs { multi_process: false, kill_connections: false, listen_notify: false };
    /// Child OS processes.
    pub const MULTI_PROCESS: Needs = Needs { multi_process: true, kill_connections: false, listen_notify: false };
    /// Killing connections.
    pub const KILL_CONNECTIONS: Needs = Needs { multi_process: false, kill_connections: true, listen_notify: false };
    /// Push wake-ups.
    pub const LISTEN_NOTIFY: Needs = Needs { multi_process: false, kill_connections: false, listen_notify: true };
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
    pub run: fn(Ctx) -> BoxFuture<'static, CaseResult>,
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

macro_rules! case {
    ($group:literal, $name:literal, $f:path) => {
        case!($group, $name, $f, Needs::NONE)
    };
    ($group:literal, $name:literal, $f:path, $needs:expr) => {
        Case { name: $name, group: $group, needs: $needs, run: |cx| Box::pin($f(cx)) }
    };
}

/// Every case, in a stable order.
pub fn all_cases() -> Vec<Case> {
    vec![
        case!("claim", "claim_returns_fetched_with_lease", claim::returns_fetched_with_lease),
        case!("claim", "claim_start_mode_goes_to_processing", claim::start_mode_goes_to_processing),
    ]
}

/// The names of every case.
pub fn case_names() -> Vec<&'static str> {
    all_cases().iter().map(|c| c.name).collect()
}
