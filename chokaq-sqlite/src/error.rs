//! The one place where sqlx/SQLite errors become [`chokaq_core::Error`]s.
//!
//! Mapping is by SQLite result code (the primary code is the low byte of the extended code),
//! never by message text. Messages never contain the database path or URL.

use chokaq_core::{Error, ErrorKind};

/// SQLITE_ERROR: the generic error (a missing table among many others).
const SQLITE_ERROR: i64 = 1;
/// SQLITE_BUSY: another connection holds a lock the statement needs.
const SQLITE_BUSY: i64 = 5;
/// SQLITE_LOCKED: a conflict inside one connection or shared cache.
const SQLITE_LOCKED: i64 = 6;
/// SQLITE_IOERR.
const SQLITE_IOERR: i64 = 10;
/// SQLITE_FULL: disk full.
const SQLITE_FULL: i64 = 13;
/// SQLITE_CANTOPEN.
const SQLITE_CANTOPEN: i64 = 14;
/// SQLITE_CONSTRAINT.
const SQLITE_CONSTRAINT: i64 = 19;
/// SQLITE_NOTADB.
const SQLITE_NOTADB: i64 = 26;

/// The SQLite result code of an error, if it came from the database.
pub(crate) fn sqlite_code(e: &sqlx::Error) -> Option<i64> {
    match e {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse::<i64>().ok()),
        _ => None,
    }
}

/// Whether a SQLITE_ERROR is "no such table: …" (a file not migrated).
fn no_such_table(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.message().starts_with("no such table"))
}

/// Maps a driver error to a portable kind.
pub(crate) fn map_err(e: sqlx::Error) -> Error {
    let kind = match &e {
        sqlx::Error::Database(_) => match sqlite_code(&e).map(|c| c & 0xff) {
            Some(SQLITE_BUSY | SQLITE_LOCKED) => ErrorKind::Transient,
            Some(SQLITE_CONSTRAINT) => ErrorKind::Conflict,
            Some(SQLITE_CANTOPEN | SQLITE_IOERR | SQLITE_NOTADB) => ErrorKind::Unavailable,
            Some(SQLITE_FULL) => ErrorKind::Other,
            // The one exception to "never by message text": SQLite reports a missing table
            // with the generic SQLITE_ERROR and no extended code, so the prefix of its fixed
            // message is all there is to tell an unmigrated file from any other error.
            Some(SQLITE_ERROR) if no_such_table(&e) => ErrorKind::NotMigrated,
            _ => ErrorKind::Other,
        },
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed | sqlx::Error::Io(_) => {
            ErrorKind::Unavailable
        }
        _ => ErrorKind::Other,
    };
    let message = match &e {
        sqlx::Error::Database(db) if kind == ErrorKind::NotMigrated => format!(
            "sqlite error (code {}): {} (schema not migrated? call migrate() first)",
            db.code().unwrap_or_default(),
            db.message()
        ),
        sqlx::Error::Database(db) => {
            format!("sqlite error (code {}): {}", db.code().unwrap_or_default(), db.message())
        }
        sqlx::Error::PoolTimedOut => "sqlite: timed out waiting for a connection".to_string(),
        sqlx::Error::PoolClosed => "sqlite: the connection pool is closed".to_string(),
        sqlx::Error::WorkerCrashed => "sqlite: the connection worker stopped".to_string(),
        sqlx::Error::Io(io) => format!("sqlite: I/O error: {}", io.kind()),
        sqlx::Error::Configuration(_) => "sqlite: invalid connection configuration".to_string(),
        sqlx::Error::ColumnDecode { index, .. } => format!("sqlite: cannot decode column {index}"),
        sqlx::Error::ColumnNotFound(c) => format!("sqlite: column not found: {c}"),
        other => format!("sqlite: {other}"),
    };
    match e {
        // A configuration error can quote the URL it could not parse: keep it out.
        sqlx::Error::Configuration(_) => Error::new(ErrorKind::InvalidInput, message),
        e => Error::with_source(kind, message, e),
    }
}

/// A corrupt or unexpected stored value.
pub(crate) fn corrupt(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, format!("sqlite: unexpected stored value: {}", what.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_errors_are_unavailable() {
        assert_eq!(map_err(sqlx::Error::PoolTimedOut).kind(), ErrorKind::Unavailable);
        assert_eq!(map_err(sqlx::Error::RowNotFound).kind(), ErrorKind::Other);
    }
}
