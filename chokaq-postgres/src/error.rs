//! The one place where sqlx errors become chokaq errors, and the one retry loop.

use std::future::Future;
use std::time::Duration;

use chokaq_core::{Error, ErrorKind, Result};
use rand::Rng;

/// Maps a sqlx error to a chokaq [`Error`] by SQLSTATE. Messages never contain the URL.
pub fn map_sqlx_error(e: sqlx::Error) -> Error {
    // A refused TLS handshake is a configuration error, not an unreachable database.
    if let Some(cause) = crate::tls::tls_failure(&e) {
        return crate::tls::pg_tls_error(&cause, e);
    }
    match &e {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let msg = format!("postgres error {code}: {}", db.message());
            let kind = match code.as_str() {
                "40P01" | "40001" | "55P03" => ErrorKind::Transient,
                "23505" => ErrorKind::Conflict,
                "57P01" | "57P02" | "57P03" => ErrorKind::Unavailable,
                // query_canceled: the sessions' statement_timeout (`PgConfig::statement_timeout`)
                // or a cancel stopped the statement; the database did not answer in the time
                // it was given, as a bounded read's deadline and MariaDB's max_statement_time.
                "57014" => ErrorKind::Unavailable,
                c if c.starts_with("08") => ErrorKind::Unavailable,
                c if c.starts_with("22") => ErrorKind::InvalidInput,
                // insufficient_privilege: the URL's role lacks a grant, which no retry brings.
                "42501" => {
                    return Error::with_source(
                        ErrorKind::InvalidInput,
                        format!("{msg} (the URL's role lacks a privilege: grant it, or connect as a role that has it)"),
                        e,
                    )
                }
                // An undefined table, schema or function: the schema is missing or older
                // than this build.
                "42P01" | "3F000" | "42883" => {
                    return Error::with_source(
                        ErrorKind::NotMigrated,
                        format!("{msg} (schema not migrated? call migrate() first)"),
                        e,
                    )
                }
                _ => ErrorKind::Other,
            };
            Error::with_source(kind, msg, e)
        }
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            let msg = format!("database unreachable: {e}");
            Error::with_source(ErrorKind::Unavailable, msg, e)
        }
        sqlx::Error::PoolTimedOut => Error::with_source(ErrorKind::Unavailable, "connection pool timed out", e),
        sqlx::Error::PoolClosed => Error::with_source(ErrorKind::Unavailable, "connection pool closed", e),
        sqlx::Error::WorkerCrashed => Error::with_source(ErrorKind::Unavailable, "connection worker crashed", e),
        // Its text may quote the URL: keep neither.
        sqlx::Error::Configuration(_) => Error::new(ErrorKind::InvalidInput, "invalid connection configuration"),
        sqlx::Error::RowNotFound => Error::with_source(ErrorKind::NotFound, "no row", e),
        _ => {
            let msg = format!("postgres: {e}");
            Error::with_source(ErrorKind::Other, msg, e)
        }
    }
}

const MAX_TRIES: u32 = 5;

/// Whether a failed statement may run again as it is: deadlock, serialization failure and
/// lock timeout, and a session terminated by the server (57P01/57P02/57P03: an administrator
/// command, a shutdown). PostgreSQL reports those as an error of the statement it aborts (or,
/// for an idle session, of the next one, which never ran), so nothing of it was committed.
/// Plain I/O errors are not retried: a lost connection cannot tell whether a commit happened.
pub(crate) fn retryable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("40P01" | "40001" | "55P03" | "57P01" | "57P02" | "57P03"))
        }
        _ => false,
    }
}

/// Runs `op` and retries it while [`retryable`] (at most 5 tries, 5 to 100 ms jittered
/// back-off). Every statement the backend runs on its own pool goes through here.
pub(crate) async fn with_retry<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                let again = retryable(&e) && tries < MAX_TRIES;
                let err = map_sqlx_error(e);
                if !again {
                    return Err(err);
                }
                let cap = (5u64 << tries).min(100);
                let ms = rand::thread_rng().gen_range(5..=cap.max(5));
                tracing::debug!(tries, ms, error = %err, "transient error, retrying");
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
    }
}
