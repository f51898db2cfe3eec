//! The connection of one read, bounded by the backend's read deadline when it has one
//! ([`chokaq_core::Backend::with_read_deadline`], the dashboard's reads): the server stops the
//! statement when the deadline passes, and kills it when the read is dropped before it ends.
//!
//! A bounded read reads its session's id and the server's version (one round trip), then sets
//! the session's time limit to the time left: MariaDB's `max_statement_time` (seconds, every
//! statement, lock waits included) or MySQL 8's `max_execution_time` (milliseconds, read-only
//! SELECTs), each a bound parameter. The server stops a statement past it (1969 / 3024: the
//! deadline's error, `Unavailable`) on its own, whatever happens to this process. The limit
//! goes back to the server's default before the session returns to the pool.
//!
//! Dropped before it ends (the client went away, the request timeout), the read's session is
//! never reused: a task sends `KILL QUERY <id>` on a connection of its own (a pool full of held
//! reads cannot make it wait), then closes the session, which stays open until the kill was
//! sent, so the id cannot name another session by then. Without a runtime to run that task,
//! the session is closed and the statement ends at the deadline.

use std::time::Duration;

use chokaq_core::{deadline, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, MySql, MySqlConnection, Row};

use crate::backend::MysqlBackend;
use crate::error::{map_err, mysql_code, TIME_LIMIT};

/// How long the kill of a dropped read may take to connect and send.
const KILL_WITHIN: Duration = Duration::from_secs(10);

/// Which time limit the server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    MariaDb,
    MySql,
}

/// A pooled connection for one read. Finish it with [`ReadConn::finish`]; a bounded one
/// dropped before that has its statement killed and is closed.
pub(crate) struct ReadConn {
    conn: Option<PoolConnection<MySql>>,
    /// The session's id and the limit set, for a bounded read.
    bound: Option<(u64, Flavour)>,
    /// The backend, for a bounded read (its statements and connect options).
    backend: Option<MysqlBackend>,
}

impl ReadConn {
    /// A connection of the pool; bounded (the time left set as its limit) when the backend
    /// has a read deadline, in which case it waits for the pool no longer than that.
    pub(crate) async fn open(b: &MysqlBackend) -> Result<ReadConn> {
        let Some(d) = b.read_deadline else {
            let conn = b.pool.acquire().await.map_err(map_err)?;
            return Ok(ReadConn { conn: Some(conn), bound: None, backend: None });
        };
        deadline::remaining(d)?;
        let conn = tokio::time::timeout_at(d.into(), b.pool.acquire())
            .await
            .map_err(|_| deadline::passed())?
            .map_err(map_err)?;
        let mut r = ReadConn { conn: Some(conn), bound: None, backend: Some(b.clone()) };
        let set_up = async {
            let row = sqlx::query(&b.sql.bounded_setup).fetch_one(r.conn()).await?;
            let id: u64 = row.try_get("id")?;
            let version: String = row.try_get("version")?;
            let flavour = if version.contains("MariaDB") { Flavour::MariaDb } else { Flavour::MySql };
            // The time left, read once the session is in hand.
            let ms = deadline::millis_left(d).map_err(|_| sqlx::Error::PoolTimedOut)?;
            // Dropped from here on, the statement is killed.
            r.bound = Some((id, flavour));
            match flavour {
                Flavour::MariaDb => {
                    let secs = ms as f64 / 1000.0;
                    sqlx::query(&b.sql.bounded_limit_mariadb).bind(secs).execute(r.conn()).await?
                }
                Flavour::MySql => sqlx::query(&b.sql.bounded_limit_mysql).bind(ms).execute(r.conn()).await?,
            };
            Ok::<_, sqlx::Error>(())
        };
        match set_up.await {
            Ok(()) => Ok(r),
            Err(sqlx::Error::PoolTimedOut) => Err(r.close(deadline::passed())),
            Err(e) => Err(r.close(map_err(e))),
        }
    }

    /// The session.
    pub(crate) fn conn(&mut self) -> &mut MySqlConnection {
        self.conn.as_mut().expect("a read connection is finished once")
    }

    /// Ends the read with its outcome: a bounded session's limit goes back to the server's
    /// default and the session to the pool; after an error it is closed instead. A statement
    /// the server stopped at the time limit is the deadline's error.
    pub(crate) async fn finish<T>(mut self, outcome: Result<T>) -> Result<T> {
        let (Some((_, flavour)), Some(b)) = (self.bound, self.backend.clone()) else {
            drop(self.conn.take());
            return outcome;
        };
        let v = match outcome {
            Ok(v) => v,
            Err(e) => {
                let stopped = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<sqlx::Error>())
                    .and_then(mysql_code)
                    .is_some_and(|c| TIME_LIMIT.contains(&c));
                return Err(self.close(if stopped { deadline::passed() } else { e }));
            }
        };
        let sql = b.sql;
        let reset = match flavour {
            Flavour::MariaDb => &sql.bounded_reset_mariadb,
            Flavour::MySql => &sql.bounded_reset_mysql,
        };
        match sqlx::query(reset).execute(self.conn()).await {
            Ok(_) => {
                self.bound = None;
                drop(self.conn.take());
                Ok(v)
            }
            Err(e) => Err(self.close(map_err(e))),
        }
    }

    /// Closes the session after an error (nothing of it runs any more: no kill).
    fn close(mut self, e: chokaq_core::Error) -> chokaq_core::Error {
        self.bound = None;
        if let Some(mut c) = self.conn.take() {
            c.close_on_drop();
        }
        e
    }
}

impl Drop for ReadConn {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        let (Some((id, _)), Some(b)) = (self.bound, self.backend.as_ref()) else { return };
        // Its limit is still set and a statement may be running: never back to the pool.
        conn.close_on_drop();
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let opts = b.options.clone();
        let sql = b.sql.bounded_kill.clone();
        rt.spawn(async move {
            let kill = async {
                let mut c = MySqlConnection::connect_with(&opts).await?;
                sqlx::query(&sql).bind(id).execute(&mut c).await?;
                c.close().await
            };
            match tokio::time::timeout(KILL_WITHIN, kill).await {
                Ok(Ok(())) => {}
                // The statement ended meanwhile (1094: no such thread).
                Ok(Err(e)) if mysql_code(&e) == Some(1094) => {}
                Ok(Err(e)) => tracing::debug!(error = %map_err(e), id, "the kill of a dropped read failed"),
                Err(_) => tracing::debug!(id, "the kill of a dropped read timed out"),
            }
            // Closed only now: until the kill was sent, `id` was this session's.
            drop(conn);
        });
    }
}
