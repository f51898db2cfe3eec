//! Pooled sessions kept between statements.
//!
//! sqlx hands a connection back to its pool on a task it spawns, and that task pings the
//! session first (`sqlx-core` 0.8, `PoolConnection::return_to_pool`, not configurable): every
//! statement run on `&PgPool` costs a second round trip and a task. Measured by the bench
//! (issue 12, item 2): 8 tasks inserting one row per statement did 4,814 rows/s each on a
//! connection of its own, and 3,571 rows/s through the pool.
//!
//! [`Kept`] is an executor over the same pool that keeps sessions checked out between
//! statements, in a stack of at most `max_connections - 1`. A statement takes the most
//! recently used kept session, else one from the pool, and afterwards:
//!
//! * it succeeded: the session is kept, unless the stack is full or the pool has no idle
//!   session left for its own users (transactions, migrations, [`PgBackend::pool`]'s callers,
//!   who may be waiting): then it goes back to the pool;
//! * the database refused it (a `Database` error: the protocol is in step): the session goes
//!   back to the pool, which pings it;
//! * anything else (an I/O or protocol error, a timeout, the server shutting the session
//!   down: SQLSTATE classes 57P and 08): the session is closed, and so is every kept one,
//!   since a server that went away took them all;
//! * the statement was dropped before it finished: the session is closed (its protocol state
//!   is unknown).
//!
//! The backend's own transactions begin through [`Kept::begin`], which hands a kept session
//! back first when the pool is at its size with nothing idle. A session kept unused for
//! [`IDLE_BACK`] goes back to the pool, so a backend that has gone
//! quiet leaves every session to the pool's own users. Kept sessions are not subject to the
//! pool's idle timeout or maximum lifetime.
//!
//! [`PgBackend::pool`]: crate::PgBackend::pool

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::TryStreamExt;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::Describe;
use sqlx::{Either, Execute, Executor, PgPool, Postgres};
use tokio::time::Instant;

/// How long a session stays kept unused before it goes back to the pool.
pub(crate) const IDLE_BACK: Duration = Duration::from_millis(100);

/// The pool and the sessions kept out of it. Cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct Kept {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    /// The kept sessions, each with the time it was last used (most recent last).
    idle: Mutex<Vec<(PoolConnection<Postgres>, Instant)>>,
    max_idle: usize,
    /// [`IDLE_BACK`] (longer in a test that must tell the sweep apart from a hand-back).
    idle_back: Duration,
    /// The task that hands unused sessions back (`sweep`) was started.
    sweeping: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|e| e.into_inner()));
        if tokio::runtime::Handle::try_current().is_err() {
            // Handing a session back spawns a task; without a runtime, close them directly.
            for (c, _) in idle {
                drop(c.detach());
            }
        }
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").field("kept", &self.kept()).field("max_idle", &self.inner.max_idle).finish()
    }
}

impl Kept {
    pub(crate) fn new(pool: PgPool) -> Self {
        Self::with_idle_back(pool, IDLE_BACK)
    }

    fn with_idle_back(pool: PgPool, idle_back: Duration) -> Self {
        let max_idle = (pool.options().get_max_connections() as usize).saturating_sub(1).max(1);
        let idle = Mutex::new(Vec::new());
        Kept { inner: Arc::new(Inner { pool, idle, max_idle, idle_back, sweeping: AtomicBool::new(false) }) }
    }

    /// A transaction on the pool. When the pool is at its size with nothing idle, a kept
    /// session goes back to it first, so the transaction never waits for one the stack holds.
    pub(crate) async fn begin(&self) -> Result<sqlx::Transaction<'static, Postgres>, sqlx::Error> {
        self.hand_back_if_dry();
        self.inner.pool.begin().await
    }

    /// A session of the pool for a caller that holds it (a bounded read, `bounded.rs`), with the
    /// same hand-back as [`Kept::begin`].
    pub(crate) async fn acquire(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        self.hand_back_if_dry();
        self.inner.pool.acquire().await
    }

    /// When the pool is at its size with nothing idle, hands one kept session back to it.
    fn hand_back_if_dry(&self) {
        let pool = &self.inner.pool;
        if pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections() {
            let back = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            drop(back);
        }
    }

    /// How many sessions are kept now.
    pub(crate) fn kept(&self) -> usize {
        self.inner.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    async fn take(&self) -> Result<Session, sqlx::Error> {
        let kept = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match kept {
            Some((c, _)) => c,
            None => self.inner.pool.acquire().await?,
        };
        Ok(Session { conn: Some(conn), home: self.clone() })
    }

    /// Keeps `conn` unless the stack is full or the pool has no idle session for its own
    /// users (then it goes back to the pool).
    fn keep(&self, conn: PoolConnection<Postgres>) {
        let pool = &self.inner.pool;
        let pool_dry = pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections();
        {
            let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
            if pool_dry || idle.len() >= self.inner.max_idle {
                drop(idle);
                drop(conn);
                return;
            }
            idle.push((conn, Instant::now()));
        }
        if !self.inner.sweeping.swap(true, Ordering::AcqRel) {
            tokio::spawn(sweep(Arc::downgrade(&self.inner)));
        }
    }
}

/// Every [`IDLE_BACK`], hands the sessions kept unused that long back to the pool; ends with
/// the last clone of the [`Kept`].
async fn sweep(inner: Weak<Inner>) {
    let Some(every) = inner.upgrade().map(|i| i.idle_back) else { return };
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        let stale: Vec<_> = {
            let mut idle = inner.idle.lock().unwrap_or_else(|e| e.into_inner());
            // Oldest first: the unused ones are at the bottom of the stack.
            let n = idle.iter().take_while(|(_, used)| used.elapsed() >= every).count();
            idle.drain(..n).collect()
        };
        drop(stale);
    }
}

/// A session taken for one statement; closed if dropped without [`Session::settle`].
struct Session {
    conn: Option<PoolConnection<Postgres>>,
    home: Kept,
}

impl Session {
    fn conn(&mut self) -> &mut sqlx::PgConnection {
        self.conn.as_mut().expect("a session is settled once")
    }

    /// Keeps the session, hands it back to the pool, or closes it (see the module's text).
    fn settle<T>(mut self, result: &Result<T, sqlx::Error>) {
        let Some(conn) = self.conn.take() else { return };
        match result {
            Ok(_) => self.home.keep(conn),
            // Refused, with the session alive (not a shutdown, class 57P, or a connection
            // exception, class 08).
            Err(sqlx::Error::Database(e)) if !e.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")) => {
                drop(conn)
            }
            Err(_) => {
                let mut conn = conn;
                conn.close_on_drop();
                let stale = std::mem::take(&mut *self.home.inner.idle.lock().unwrap_or_else(|e| e.into_inner()));
                for (mut c, _) in stale {
                    c.close_on_drop();
                }
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            // Dropped mid-statement: the session's protocol state is unknown.
            conn.close_on_drop();
        }
    }
}

impl<'c> Executor<'c> for &'c Kept {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let kept = self.clone();
        // The whole result is read before the session is settled (the backend's statements
        // return a few rows; `fetch_all` collects them anyway).
        let all = async move {
            let mut s = kept.take().await?;
            let items: Result<Vec<_>, sqlx::Error> = s.conn().fetch_many(query).try_collect().await;
            s.settle(&items);
            items
        };
        Box::pin(
            futures::stream::once(all).map_ok(|items| futures::stream::iter(items.into_iter().map(Ok))).try_flatten(),
        )
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let kept = self.clone();
        Box::pin(async move {
            let mut s = kept.take().await?;
            let row = s.conn().fetch_optional(query).await;
            s.settle(&row);
            row
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        let kept = self.clone();
        Box::pin(async move {
            let mut s = kept.take().await?;
            let st = s.conn().prepare_with(sql, parameters).await;
            s.settle(&st);
            st
        })
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        let kept = self.clone();
        Box::pin(async move {
            let mut s = kept.take().await?;
            let d = s.conn().describe(sql).await;
            s.settle(&d);
            d
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::postgres::PgPoolOptions;

    use super::*;

    /// The local test server (`CHOKAQ_TEST_POSTGRES_URL`), as the crate's other tests use it.
    async fn pool(max: u32) -> PgPool {
        let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        PgPoolOptions::new().max_connections(max).test_before_acquire(false).connect(&url).await.expect("PostgreSQL")
    }

    /// A statement takes the session the last one left: no round trip to the pool between
    /// them (the pool's ping, a Sync message, is not visible in the server's statistics; the
    /// bench's single-job enqueue measures what it cost).
    #[tokio::test]
    async fn a_statement_takes_the_session_the_last_one_kept() {
        let kept = Kept::new(pool(3).await);
        let sql = "SELECT pg_backend_pid()";
        let pid: i32 = sqlx::query_scalar(sql).fetch_one(&kept).await.unwrap();
        assert_eq!(kept.kept(), 1, "the session is kept");
        for _ in 0..20 {
            let again: i32 = sqlx::query_scalar(sql).fetch_one(&kept).await.unwrap();
            assert_eq!(again, pid, "the next statement takes the kept session");
        }
        assert_eq!(kept.kept(), 1);
    }

    /// The pool's own users get every session back: a kept session goes back to the pool
    /// once unused for `IDLE_BACK`, so a caller holding one pooled session still gets the
    /// last one, which was kept.
    #[tokio::test]
    async fn unused_kept_sessions_go_back_to_the_pool() {
        let p = pool(2).await;
        let kept = Kept::new(p.clone());
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&kept).await.unwrap();
        assert_eq!((one, kept.kept()), (1, 1));
        let first = p.acquire().await.unwrap();
        let t0 = tokio::time::Instant::now();
        let second = tokio::time::timeout(Duration::from_secs(10), p.acquire()).await.expect("the kept one came back");
        second.unwrap();
        assert!(t0.elapsed() >= IDLE_BACK / 2, "it was kept until unused for a while");
        assert_eq!(kept.kept(), 0);
        drop(first);
    }

    /// A transaction begun while the pool is at its size with nothing idle takes a kept
    /// session back (the sweep is an hour away here, so only the hand-back can serve it).
    #[tokio::test]
    async fn a_transaction_gets_a_kept_session_back_at_once() {
        let p = pool(2).await;
        let kept = Kept::with_idle_back(p.clone(), Duration::from_secs(3600));
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&kept).await.unwrap();
        assert_eq!((one, kept.kept()), (1, 1));
        let held = p.acquire().await.unwrap();
        assert_eq!((p.size(), p.num_idle()), (2, 0), "the pool is at its size, nothing idle");
        let mut tx = tokio::time::timeout(Duration::from_secs(10), kept.begin())
            .await
            .expect("the kept session came back")
            .unwrap();
        assert_eq!(kept.kept(), 0);
        let two: i32 = sqlx::query_scalar("SELECT 2").fetch_one(&mut *tx).await.unwrap();
        assert_eq!(two, 2);
        tx.commit().await.unwrap();
        drop(held);
    }

    /// A refused statement (division by zero) hands its session back to the pool; a statement
    /// dropped before it finished closes its session. Either way the next statement runs.
    #[tokio::test]
    async fn refused_and_dropped_statements_leave_nothing_broken_behind() {
        let kept = Kept::new(pool(4).await);
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&kept).await.unwrap();
        assert_eq!((one, kept.kept()), (1, 1));
        let e = sqlx::query_scalar::<_, i32>("SELECT 1 / 0").fetch_one(&kept).await.unwrap_err();
        assert!(matches!(e, sqlx::Error::Database(_)), "{e:?}");
        assert_eq!(kept.kept(), 0, "a refused statement's session goes back to the pool");
        let sleep = sqlx::query("SELECT pg_sleep(30)").execute(&kept);
        assert!(tokio::time::timeout(Duration::from_millis(200), sleep).await.is_err(), "the sleep was cut short");
        assert_eq!(kept.kept(), 0, "the dropped statement's session is not kept");
        let two: i32 = sqlx::query_scalar("SELECT 2").fetch_one(&kept).await.unwrap();
        assert_eq!((two, kept.kept()), (2, 1));
    }

    /// A session the server ended fails its next statement as a lost connection; that session
    /// and every other kept one are closed, so the retry gets a live one.
    #[tokio::test]
    async fn a_lost_session_empties_the_stack() {
        let probe = pool(1).await;
        let kept = Kept::new(pool(4).await);
        // Three sessions kept: three statements at once.
        let q = || sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid() FROM pg_sleep(0.05)").fetch_one(&kept);
        let (a, b, c) = tokio::join!(q(), q(), q());
        let pids = [a.unwrap(), b.unwrap(), c.unwrap()];
        assert_eq!(kept.kept(), 3);
        let ended: i64 =
            sqlx::query_scalar("SELECT count(*) FILTER (WHERE pg_terminate_backend(p)) FROM unnest($1::int[]) p")
                .bind(&pids[..])
                .fetch_one(&probe)
                .await
                .unwrap();
        assert_eq!(ended, 3);
        let e = sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&kept).await.unwrap_err();
        assert!(!matches!(&e, sqlx::Error::Database(d) if d.code().as_deref() == Some("22012")), "{e:?}");
        assert_eq!(kept.kept(), 0, "every kept session went with the lost one");
        let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&kept).await.unwrap();
        assert_eq!(one, 1);
    }
}
