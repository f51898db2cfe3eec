//! The one place where SQL Server errors become `chokaq_core::Error`s: [`kind_for_number`]
//! maps a server error number (never the message text) to an `ErrorKind`; the other
//! functions wrap it for driver, connect, pool, timeout and decoding failures.

use chokaq_core::{Error, ErrorKind};

use crate::pool::ConnectError;

/// The kind for a SQL Server error number (and the client's `-2` timeout).
pub(crate) fn kind_for_number(number: i64) -> ErrorKind {
    match number {
        // deadlock victim, lock request timeout, snapshot update conflict
        1205 | 1222 | 3960 => ErrorKind::Transient,
        // Azure SQL: service busy / database unavailable / resource limits (these also end
        // the session, see `ends_session`); our own THROWs: the migration app lock of earlier
        // releases (51000; the migration now waits on a row of `Locks`, 1222 above) and a
        // queue lock (51002) not granted in time
        40197 | 40501 | 40613 | 49918 | 49919 | 49920 | 10928 | 10929 | 51000 | 51002 => ErrorKind::Transient,
        // our own THROW: the database compatibility level is below 130 (no OPENJSON)
        51001 => ErrorKind::Unsupported,
        // invalid object name: a table of the schema is missing (not migrated)
        208 => ErrorKind::NotMigrated,
        // duplicate key (unique index / constraint)
        2601 | 2627 => ErrorKind::Conflict,
        // client timeout; transport-level failures; cannot open database; shutting down
        -2 | 64 | 233 | 4060 | 6005 | 10053 | 10054 | 10060 | 10061 | 11001 => ErrorKind::Unavailable,
        // string or binary data would be truncated; JSON text is not properly formatted;
        // arithmetic overflow; date/time conversion failed or out of range; DATEADD overflow
        8152 | 2628 | 13609 | 8115 | 241 | 242 | 517 => ErrorKind::InvalidInput,
        _ => ErrorKind::Other,
    }
}

/// Whether a server error number usually means the server ended the session (Azure SQL's
/// reconfiguration, throttling and resource-limit errors): the connection must not go back to
/// the pool, even though the call itself is retried as transient.
pub(crate) fn ends_session(number: i64) -> bool {
    matches!(number, 40197 | 40501 | 40613 | 49918 | 49919 | 49920 | 10928 | 10929)
}

/// Whether the connection that saw `e` is still clean and may go back to the pool: a deadlock
/// victim, a lock timeout, a snapshot conflict or a duplicate key roll the `XACT_ABORT` batch
/// back and leave the session usable; everything else (including the errors after which the
/// server usually ends the session) discards it.
pub(crate) fn keeps_session(e: &tiberius::error::Error) -> bool {
    match e {
        tiberius::error::Error::Server(tok) => {
            let number = i64::from(tok.code());
            matches!(kind_for_number(number), ErrorKind::Transient | ErrorKind::Conflict) && !ends_session(number)
        }
        _ => false,
    }
}

/// Maps a tiberius error to a chokaq error; `op` names the operation for the message.
pub(crate) fn map_error(op: &str, e: tiberius::error::Error) -> Error {
    use tiberius::error::Error as T;
    match &e {
        T::Server(tok) => {
            let number = i64::from(tok.code());
            let kind = kind_for_number(number);
            let mut message = format!("{op}: SQL Server error {number}: {}", tok.message());
            if number == 208 {
                message.push_str(" (schema not migrated? call migrate() first)");
            }
            Error::with_source(kind, message, e)
        }
        T::Io { .. } | T::Tls(_) | T::Routing { .. } => {
            Error::with_source(ErrorKind::Unavailable, format!("{op}: connection failed: {e}"), e)
        }
        T::Protocol(_) => Error::with_source(ErrorKind::Unavailable, format!("{op}: protocol error: {e}"), e),
        _ => Error::with_source(ErrorKind::Other, format!("{op}: {e}"), e),
    }
}

/// The error for a statement that did not finish within the statement timeout (the same kind
/// as the client timeout `-2`).
pub(crate) fn timeout(op: &str, after: std::time::Duration) -> Error {
    Error::new(kind_for_number(-2), format!("{op}: no answer from SQL Server within {after:?}"))
}

/// A result row that does not have the expected shape.
pub(crate) fn decode(op: &str, what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Other, format!("{op}: unexpected result from SQL Server: {what}"))
}

/// Opening a connection failed.
pub(crate) fn connect_error(e: ConnectError) -> Error {
    match e {
        ConnectError::Timeout(d) => {
            Error::new(ErrorKind::Unavailable, format!("connect: SQL Server did not answer within {d:?}"))
        }
        ConnectError::Driver(e) => {
            // Server errors during login keep their number's kind (18456 login failed is
            // `Other`); every other failure to open a connection means the server is not
            // reachable as configured.
            let from_server = e.code().is_some();
            let err = map_error("connect", e);
            if from_server || err.kind() == ErrorKind::Unavailable {
                err
            } else {
                Error::new(ErrorKind::Unavailable, err.message().to_string())
            }
        }
    }
}

/// Getting a connection from the pool failed.
pub(crate) fn pool_error(e: bb8::RunError<ConnectError>) -> Error {
    match e {
        bb8::RunError::User(e) => connect_error(e),
        bb8::RunError::TimedOut => {
            Error::new(ErrorKind::Unavailable, "timed out waiting for a pooled SQL Server connection")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_map_to_kinds() {
        assert_eq!(kind_for_number(1205), ErrorKind::Transient);
        assert_eq!(kind_for_number(1222), ErrorKind::Transient);
        assert_eq!(kind_for_number(3960), ErrorKind::Transient);
        for n in [40197, 40501, 40613] {
            assert_eq!(kind_for_number(n), ErrorKind::Transient);
        }
        for n in [10928, 10929, 49918, 51000, 51002] {
            assert_eq!(kind_for_number(n), ErrorKind::Transient, "{n}");
        }
        assert_eq!(kind_for_number(51001), ErrorKind::Unsupported);
        assert_eq!(kind_for_number(2601), ErrorKind::Conflict);
        assert_eq!(kind_for_number(2627), ErrorKind::Conflict);
        assert_eq!(kind_for_number(-2), ErrorKind::Unavailable);
        assert_eq!(kind_for_number(208), ErrorKind::NotMigrated);
        assert_eq!(kind_for_number(50123), ErrorKind::Other);
        assert_eq!(kind_for_number(0), ErrorKind::Other);
    }

    #[test]
    fn azure_errors_that_end_the_session_discard_the_connection() {
        for n in [40197, 40501, 40613, 10928, 10929, 49918, 49919, 49920] {
            assert!(ends_session(n), "{n}");
            assert_eq!(kind_for_number(n), ErrorKind::Transient, "{n}: still retried");
        }
        for n in [1205, 1222, 3960, 2601, 2627, 51002] {
            assert!(!ends_session(n), "{n}: the session stays usable");
        }
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(!keeps_session(&tiberius::error::Error::from(io)));
    }

    #[test]
    fn io_errors_are_unavailable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = map_error("connect", tiberius::error::Error::from(io));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.to_string().contains("connect"));
        let e = map_error("claim", tiberius::error::Error::Tls("bad cert".into()));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        let e = map_error("claim", tiberius::error::Error::Conversion("x".into()));
        assert_eq!(e.kind(), ErrorKind::Other);
        let e = timeout("claim", std::time::Duration::from_secs(1));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
    }
}
