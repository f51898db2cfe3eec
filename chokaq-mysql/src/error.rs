//! The one place where sqlx/MySQL errors become [`chokaq_core::Error`]s, by server error number
//! (never by message text), and the deadlock / lock-wait counters.
//!
//! Messages never contain the URL or a password.

use std::sync::atomic::{AtomicU64, Ordering};

use chokaq_core::{Error, ErrorKind};

/// ER_LOCK_WAIT_TIMEOUT: a row lock waited longer than `innodb_lock_wait_timeout`.
pub(crate) const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// ER_LOCK_DEADLOCK: InnoDB chose this transaction as a deadlock victim (rolled back).
pub(crate) const DEADLOCK: u16 = 1213;
/// ER_DUP_ENTRY.
pub(crate) const DUP_ENTRY: u16 = 1062;
/// ER_BAD_DB_ERROR: unknown database.
const BAD_DB: u16 = 1049;
/// ER_NO_SUCH_TABLE.
const NO_SUCH_TABLE: u16 = 1146;
/// ER_BAD_FIELD_ERROR: an unknown column (a schema older than this build).
const BAD_FIELD: u16 = 1054;
/// Access denied (1044 database, 1045 login, 1142 table, 1143 column, 1227 a privilege such as
/// SUPER, 1370 a routine): the URL's user lacks a grant, which no retry brings.
const ACCESS_DENIED: [u16; 6] = [1044, 1045, 1142, 1143, 1227, 1370];
/// ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED / KILL.
const UNAVAILABLE: [u16; 4] = [1040, 1053, 1927, 2013];
/// A statement stopped at its time limit: MariaDB's `max_statement_time` (1969), MySQL's
/// `max_execution_time` (3024); a bounded read's deadline (`bounded.rs`) sets them.
pub(crate) const TIME_LIMIT: [u16; 2] = [1969, 3024];
/// Data errors: out of range, too long, bad value.
const BAD_DATA: [u16; 4] = [1264, 1406, 1366, 3140];

/// The server's error number, if the error came from the server.
pub(crate) fn mysql_code(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().map(|m| m.number()),
        _ => None,
    }
}

/// Maps a driver error to a portable kind.
pub(crate) fn map_err(e: sqlx::Error) -> Error {
    // A refused TLS handshake is a configuration error, not an unreachable server.
    if let Some(cause) = crate::tls::tls_failure(&e) {
        return crate::tls::tls_error(&cause, e);
    }
    let code = mysql_code(&e);
    let kind = match (&e, code) {
        (_, Some(DEADLOCK | LOCK_WAIT_TIMEOUT)) => ErrorKind::Transient,
        (_, Some(DUP_ENTRY)) => ErrorKind::Conflict,
        (_, Some(NO_SUCH_TABLE | BAD_DB | BAD_FIELD)) => ErrorKind::NotMigrated,
        (_, Some(c)) if ACCESS_DENIED.contains(&c) => ErrorKind::InvalidInput,
        (_, Some(c)) if UNAVAILABLE.contains(&c) || TIME_LIMIT.contains(&c) => ErrorKind::Unavailable,
        (_, Some(c)) if BAD_DATA.contains(&c) => ErrorKind::InvalidInput,
        (sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_), _) => ErrorKind::Unavailable,
        (sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed, _) => ErrorKind::Unavailable,
        _ => ErrorKind::Other,
    };
    let message = match &e {
        sqlx::Error::Database(db) if kind == ErrorKind::NotMigrated => format!(
            "mysql error {}: {} (schema not migrated? call migrate() first)",
            code.unwrap_or_default(),
            db.message()
        ),
        sqlx::Error::Database(db) if code.is_some_and(|c| ACCESS_DENIED.contains(&c)) => format!(
            "mysql error {}: {} (the URL's user lacks a privilege: grant it, or connect as a user that has it)",
            code.unwrap_or_default(),
            db.message()
        ),
        sqlx::Error::Database(db) => format!("mysql error {}: {}", code.unwrap_or_default(), db.message()),
        sqlx::Error::PoolTimedOut => "mysql: timed out waiting for a connection".to_string(),
        sqlx::Error::PoolClosed => "mysql: the connection pool is closed".to_string(),
        sqlx::Error::WorkerCrashed => "mysql: the connection worker stopped".to_string(),
        sqlx::Error::Io(io) => format!("mysql: database unreachable: {io}"),
        sqlx::Error::Configuration(_) => "mysql: invalid connection configuration".to_string(),
        sqlx::Error::ColumnDecode { index, .. } => format!("mysql: cannot decode column {index}"),
        sqlx::Error::ColumnNotFound(c) => format!("mysql: column not found: {c}"),
        other => format!("mysql: {other}"),
    };
    match e {
        // A configuration error can quote the URL it could not parse: keep it out.
        sqlx::Error::Configuration(_) => Error::new(ErrorKind::InvalidInput, message),
        e => Error::with_source(kind, message, e),
    }
}

/// Whether a chokaq error came from a deadlock (1213) or a lock wait timeout (1205): InnoDB
/// rolled the statement (a deadlock: the whole transaction) back, so running the transaction
/// again runs it once.
pub(crate) fn retryable_code(e: &Error) -> Option<u16> {
    let src = std::error::Error::source(e)?;
    let sqlx_err = src.downcast_ref::<sqlx::Error>()?;
    mysql_code(sqlx_err).filter(|c| *c == DEADLOCK || *c == LOCK_WAIT_TIMEOUT)
}

/// A corrupt or unexpected stored value.
pub(crate) fn corrupt(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, format!("mysql: unexpected stored value: {}", what.into()))
}

/// Which path of the backend retried a deadlock or lock wait timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// `claim` (and the claiming half of `complete_and_claim`).
    Claim,
    /// `start`, `heartbeat`, `complete`, `fail`, `release`.
    Completion,
    /// Everything else: enqueue, rescue, cancel, controls, requeue, purge, schedules, workers.
    Other,
}

/// How many deadlocks (1213) and lock wait timeouts (1205) the backend met and retried, per
/// path, since it connected ([`crate::MysqlBackend::lock_retries`]).
#[derive(Debug, Default)]
pub struct LockRetries {
    pub(crate) claim_deadlocks: AtomicU64,
    pub(crate) claim_lock_waits: AtomicU64,
    pub(crate) completion_deadlocks: AtomicU64,
    pub(crate) completion_lock_waits: AtomicU64,
    pub(crate) other_deadlocks: AtomicU64,
    pub(crate) other_lock_waits: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockRetryCounts {
    pub claim_deadlocks: u64,
    pub claim_lock_waits: u64,
    pub completion_deadlocks: u64,
    pub completion_lock_waits: u64,
    pub other_deadlocks: u64,
    pub other_lock_waits: u64,
}

impl LockRetryCounts {
    /// Deadlocks and lock wait timeouts on the claim and completion paths.
    pub fn hot_paths(&self) -> u64 {
        self.claim_deadlocks + self.claim_lock_waits + self.completion_deadlocks + self.completion_lock_waits
    }
}

impl std::fmt::Display for LockRetryCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "deadlocks/lock-wait timeouts retried: claim {}/{}, completion {}/{}, other {}/{}",
            self.claim_deadlocks,
            self.claim_lock_waits,
            self.completion_deadlocks,
            self.completion_lock_waits,
            self.other_deadlocks,
            self.other_lock_waits
        )
    }
}

impl LockRetries {
    pub(crate) fn count(&self, path: Path, code: u16) {
        let c = match (path, code == DEADLOCK) {
            (Path::Claim, true) => &self.claim_deadlocks,
            (Path::Claim, false) => &self.claim_lock_waits,
            (Path::Completion, true) => &self.completion_deadlocks,
            (Path::Completion, false) => &self.completion_lock_waits,
            (Path::Other, true) => &self.other_deadlocks,
            (Path::Other, false) => &self.other_lock_waits,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LockRetryCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LockRetryCounts {
            claim_deadlocks: g(&self.claim_deadlocks),
            claim_lock_waits: g(&self.claim_lock_waits),
            completion_deadlocks: g(&self.completion_deadlocks),
            completion_lock_waits: g(&self.completion_lock_waits),
            other_deadlocks: g(&self.other_deadlocks),
            other_lock_waits: g(&self.other_lock_waits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_errors_are_unavailable() {
        assert_eq!(map_err(sqlx::Error::PoolTimedOut).kind(), ErrorKind::Unavailable);
        assert_eq!(map_err(sqlx::Error::RowNotFound).kind(), ErrorKind::Other);
        assert!(retryable_code(&map_err(sqlx::Error::PoolTimedOut)).is_none());
    }
}
