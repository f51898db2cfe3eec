//! Reads bounded by a deadline ([`crate::Backend::with_read_deadline`]): what a backend
//! declares about them ([`ReadDeadline`]) and the helpers every backend shares.

use std::time::{Duration, Instant};

use crate::{Error, ErrorKind, Result};

/// How a backend bounds the reads of [`with_read_deadline`](crate::Backend::with_read_deadline)
/// (a flag of [`Capabilities`](crate::Capabilities)). The reads it bounds:
/// [`queue_settings`](crate::Backend::queue_settings), `stats`, `stats_estimated`, `get_job`,
/// `list_jobs`, `list_workers`, `throughput` and `list_schedules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadDeadline {
    /// Reads take no deadline: `with_read_deadline` answers `None`, and a statement runs until
    /// it ends, whatever happens to its caller.
    Unbounded,
    /// The database stops a read's statement when the deadline passes, and cancels it when the
    /// read's future is dropped before it ends (PostgreSQL, MariaDB / MySQL, SQLite in
    /// process, and the memory backend, whose reads finish in one step).
    Server,
    /// The backend stops waiting when the deadline passes and closes the connection (a dropped
    /// read closes it too), and lock waits end at the deadline; but the driver cannot cancel a
    /// statement, so one the server is already running goes on until the server notices the
    /// closed connection (SQL Server through tiberius, which sends no attention signal).
    Client,
}

/// The time left before `deadline`, or the error of a read whose deadline has passed.
pub fn remaining(deadline: Instant) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(passed());
    }
    Ok(left)
}

/// The error of a read whose deadline passed (before it started, or while the database ran
/// it): [`ErrorKind::Unavailable`], like a pool that had no connection in time.
pub fn passed() -> Error {
    Error::new(ErrorKind::Unavailable, "the read's deadline passed (the database stopped its statement)")
}

/// A deadline of whole milliseconds from now, at least 1 (what a server setting takes).
pub fn millis_left(deadline: Instant) -> Result<u64> {
    let left = remaining(deadline)?;
    Ok(u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_deadline_is_unavailable_and_a_future_one_leaves_time() {
        let e = remaining(Instant::now()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.to_string().contains("deadline passed"), "{e}");
        let left = remaining(Instant::now() + Duration::from_secs(60)).unwrap();
        assert!(left > Duration::from_secs(59) && left <= Duration::from_secs(60), "{left:?}");
        let ms = millis_left(Instant::now() + Duration::from_micros(10)).unwrap_or(1);
        assert_eq!(ms, 1, "under a millisecond left is 1 ms (or passed)");
    }
}
