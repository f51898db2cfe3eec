use std::time::Duration;

use crate::ReadDeadline;

/// How finely a backend stores timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampPrecision {
    /// PostgreSQL `timestamptz`.
    Microsecond,
    /// SQL Server `datetime2(7)`.
    HundredNanoseconds,
    /// Whole milliseconds.
    Millisecond,
}

impl TimestampPrecision {
    /// The smallest difference between two stored instants.
    pub fn resolution(self) -> Duration {
        match self {
            TimestampPrecision::Microsecond => Duration::from_micros(1),
            TimestampPrecision::HundredNanoseconds => Duration::from_nanos(100),
            TimestampPrecision::Millisecond => Duration::from_millis(1),
        }
    }
}

/// What a backend can do, as data. The conformance suite gates cases on these flags, never on
/// a backend's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// How finely timestamps are stored.
    pub timestamp_precision: TimestampPrecision,
    /// Test support can kill the backend's database connections mid-transaction.
    pub kill_connections: bool,
    /// Several OS processes may share one database safely.
    pub multi_process: bool,
    /// How the reads of [`crate::Backend::with_read_deadline`] are bounded.
    pub read_deadline: ReadDeadline,
    /// Stores workflows ([`crate::Backend::enqueue_workflow`], `docs/workflows.md`). Off: those
    /// calls are [`crate::ErrorKind::Unsupported`].
    pub workflows: bool,
    /// Stores batches ([`crate::Backend::enqueue_batch`], `docs/workflows.md`). Off: those
    /// calls are [`crate::ErrorKind::Unsupported`].
    pub batches: bool,
}

impl Capabilities {
    /// The capabilities of an ordinary database server: several processes may share it
    /// (`multi_process` on); the test-only `kill_connections` is off. Whether a backend pushes
    /// wake-ups is not a flag: [`crate::Backend::wakeups`] answers it. Reads take no deadline
    /// ([`ReadDeadline::Unbounded`]).
    pub const fn minimal(timestamp_precision: TimestampPrecision) -> Self {
        Capabilities {
            timestamp_precision,
            kill_connections: false,
            multi_process: true,
            read_deadline: ReadDeadline::Unbounded,
            workflows: false,
            batches: false,
        }
    }

    /// Sets `kill_connections`.
    pub const fn with_kill_connections(mut self, v: bool) -> Self {
        self.kill_connections = v;
        self
    }

    /// Sets `multi_process`.
    pub const fn with_multi_process(mut self, v: bool) -> Self {
        self.multi_process = v;
        self
    }

    /// Sets `workflows`.
    pub const fn with_workflows(mut self, v: bool) -> Self {
        self.workflows = v;
        self
    }

    /// Sets `batches`.
    pub const fn with_batches(mut self, v: bool) -> Self {
        self.batches = v;
        self
    }

    /// Sets `read_deadline`.
    pub const fn with_read_deadline(mut self, v: ReadDeadline) -> Self {
        self.read_deadline = v;
        self
    }
}
