//! The reader connection of one read, bounded by the backend's read deadline when it has one
//! ([`chokaq_core::Backend::with_read_deadline`], the dashboard's reads).
//!
//! SQLite runs in this process, on the connection's own thread: dropping a read's future does
//! not stop a statement that is computing (sqlx notices only when it has a row to send). So a
//! bounded read installs a progress handler on its connection (`sqlite3_progress_handler`,
//! through sqlx's `lock_handle`) that SQLite calls every [`CHECK_EVERY`] virtual-machine steps:
//! it interrupts the statement (SQLITE_INTERRUPT, the deadline's error) once the deadline has
//! passed or the read was dropped. A read that ends removes the handler before its connection
//! goes back to the pool; a dropped one marks itself stopped and closes its connection (the
//! close runs after the interrupted statement), so the pool's slot is free again at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use chokaq_core::{deadline, Result};
use sqlx::pool::PoolConnection;
use sqlx::{Sqlite, SqliteConnection};

use crate::backend::SqliteBackend;
use crate::error::{map_err, sqlite_code};

/// Virtual-machine steps between two checks of the deadline (a check reads the clock).
const CHECK_EVERY: i32 = 1000;

/// SQLITE_INTERRUPT: the progress handler stopped the statement.
const SQLITE_INTERRUPT: i64 = 9;

/// A reader connection for one read. Finish it with [`ReadConn::finish`]; a bounded one dropped
/// before that stops its statement and is closed.
pub(crate) struct ReadConn {
    conn: Option<PoolConnection<Sqlite>>,
    /// Set when a bounded read is dropped: its handler stops the statement.
    stopped: Option<Arc<AtomicBool>>,
}

impl ReadConn {
    /// A reader connection; bounded (its progress handler installed) when the backend has a
    /// read deadline, in which case it waits for the pool no longer than that.
    pub(crate) async fn open(b: &SqliteBackend) -> Result<ReadConn> {
        let Some(d) = b.read_deadline else {
            let conn = b.reader.acquire().await.map_err(map_err)?;
            return Ok(ReadConn { conn: Some(conn), stopped: None });
        };
        deadline::remaining(d)?;
        let conn = tokio::time::timeout_at(d.into(), b.reader.acquire())
            .await
            .map_err(|_| deadline::passed())?
            .map_err(map_err)?;
        let stopped = Arc::new(AtomicBool::new(false));
        let mut r = ReadConn { conn: Some(conn), stopped: Some(stopped.clone()) };
        let installed = match r.conn().lock_handle().await {
            Ok(mut h) => {
                h.set_progress_handler(CHECK_EVERY, move || go_on(&stopped, d));
                Ok(())
            }
            Err(e) => Err(map_err(e)),
        };
        match installed {
            Ok(()) => Ok(r),
            Err(e) => Err(r.close(e)),
        }
    }

    /// The connection.
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        self.conn.as_mut().expect("a read connection is finished once")
    }

    /// Ends the read with its outcome: a bounded connection's handler is removed and the
    /// connection goes back to the pool. A statement the handler stopped is the deadline's
    /// error.
    pub(crate) async fn finish<T>(mut self, outcome: Result<T>) -> Result<T> {
        if self.stopped.is_none() {
            drop(self.conn.take());
            return outcome;
        }
        let outcome = outcome.map_err(|e| {
            let interrupted = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<sqlx::Error>())
                .and_then(sqlite_code)
                .is_some_and(|c| c & 0xff == SQLITE_INTERRUPT);
            if interrupted {
                deadline::passed()
            } else {
                e
            }
        });
        let removed = match self.conn().lock_handle().await {
            Ok(mut h) => {
                h.remove_progress_handler();
                Ok(())
            }
            Err(e) => Err(map_err(e)),
        };
        match removed {
            Ok(()) => {
                self.stopped = None;
                drop(self.conn.take());
                outcome
            }
            Err(e) => Err(self.close(outcome.err().unwrap_or(e))),
        }
    }

    /// Closes the connection after an error, its handler still installed.
    fn close(mut self, e: chokaq_core::Error) -> chokaq_core::Error {
        self.stopped = None;
        if let Some(mut c) = self.conn.take() {
            c.close_on_drop();
        }
        e
    }
}

/// The progress handler's answer: go on while the read is neither dropped nor past `deadline`.
fn go_on(stopped: &AtomicBool, deadline: Instant) -> bool {
    !stopped.load(Ordering::Relaxed) && Instant::now() < deadline
}

impl Drop for ReadConn {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        let Some(stopped) = self.stopped.take() else { return };
        // The statement stops at the handler's next check; the close waits for it.
        stopped.store(true, Ordering::Relaxed);
        conn.close_on_drop();
    }
}
