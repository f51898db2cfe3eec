//! Reads bounded by a deadline ([`chokaq_core::Backend::with_read_deadline`], the dashboard's
//! reads): the server stops the statement when the deadline passes, and cancels it when the
//! read is dropped before it ends.
//!
//! A bounded read takes a session of the pool for itself ([`Session`]) and runs in a
//! transaction whose `statement_timeout` is the time left ([`crate::sql`]'s `BOUNDED_SETUP`,
//! `SET LOCAL` through `set_config(…, true)`): the server ends the statement by the deadline on
//! its own, whatever happens to this process, and the setting ends with the transaction, so
//! the session goes back to the pool without it. The same round trip reads the session's
//! process id.
//!
//! Dropped before it ends (the client went away, the request timeout), the read's session is
//! never reused: a task sends `pg_cancel_backend(pid)` on a connection of its own (a pool full
//! of held reads cannot make it wait), then closes the session. The session stays open until
//! the cancel was sent, so the process id cannot belong to another session by then. Without a
//! runtime to run that task, the session is closed and the statement ends at the deadline.
//!
//! A statement the server stopped (SQLSTATE 57014, by the timeout or the cancel) is the
//! deadline's error ([`deadline::passed`], `Unavailable`). Bounded reads are not retried: the
//! deadline is the caller's.

use std::time::{Duration, Instant};

use chokaq_core::{deadline, Error, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Executor, PgConnection, Postgres, Row};

use crate::backend::PgBackend;
use crate::error::map_sqlx_error;

/// How long the cancel of a dropped read may take to connect and send.
const CANCEL_WITHIN: Duration = Duration::from_secs(10);

/// A pooled session holding one bounded read's transaction. Finish it with
/// [`Session::finish`]; dropped before that, its statement is cancelled and it is closed.
pub(crate) struct Session {
    conn: Option<PoolConnection<Postgres>>,
    /// The server process of the session, once read.
    pid: Option<i32>,
    backend: PgBackend,
}

impl Session {
    /// Takes a session (waiting no longer than the deadline), begins the
    /// transaction and sets its `statement_timeout` to the time left.
    pub(crate) async fn open(b: &PgBackend, deadline: Instant) -> Result<Session> {
        let left = deadline::millis_left(deadline)?;
        let conn = tokio::time::timeout_at(deadline.into(), b.kept.acquire())
            .await
            .map_err(|_| deadline::passed())?
            .map_err(map_sqlx_error)?;
        let mut s = Session { conn: Some(conn), pid: None, backend: b.clone() };
        let sql = b.sql();
        let set_up = async {
            s.conn().execute(sql.bounded_begin.as_str()).await?;
            let row = sqlx::query(&sql.bounded_setup).bind(format!("{left}ms")).fetch_one(s.conn()).await?;
            row.try_get::<i32, _>("pid")
        };
        match set_up.await {
            Ok(pid) => {
                s.pid = Some(pid);
                Ok(s)
            }
            Err(e) => Err(s.fail(e)),
        }
    }

    /// The session, inside the bounded transaction.
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("a session is finished once")
    }

    /// Ends the read with the outcome of its statements: commits and hands the session back
    /// to the pool, or, on an error, closes it (its transaction is aborted) and returns the
    /// error (a statement the server stopped: the deadline's).
    pub(crate) async fn finish<T>(mut self, outcome: std::result::Result<T, sqlx::Error>) -> Result<T> {
        let v = match outcome {
            Ok(v) => v,
            Err(e) => return Err(self.fail(e)),
        };
        let sql = self.backend.shared.clone();
        let commit = self.conn().execute(sql.sql.bounded_commit.as_str()).await;
        match commit {
            Ok(_) => {
                self.pid = None;
                drop(self.conn.take());
                Ok(v)
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Closes the session after a failed statement (nothing of it runs any more: no cancel).
    fn fail(mut self, e: sqlx::Error) -> Error {
        self.pid = None;
        if let Some(mut c) = self.conn.take() {
            c.close_on_drop();
        }
        match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("57014") => deadline::passed(),
            _ => map_sqlx_error(e),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        conn.close_on_drop();
        let Some(pid) = self.pid else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let opts = (*self.backend.pool.connect_options()).clone();
        let sql = self.backend.sql().bounded_cancel.clone();
        rt.spawn(async move {
            let cancel = async {
                let mut c = PgConnection::connect_with(&opts).await?;
                sqlx::query(&sql).bind(pid).execute(&mut c).await?;
                c.close().await
            };
            if let Err(e) = tokio::time::timeout(CANCEL_WITHIN, cancel).await.unwrap_or(Err(sqlx::Error::PoolTimedOut))
            {
                tracing::debug!(error = %map_sqlx_error(e), pid, "the cancel of a dropped read failed");
            }
            // Closed only now: until the cancel was sent, `pid` was this session's.
            drop(conn);
        });
    }
}
