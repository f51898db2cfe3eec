//! Issue 40 item 3: no dashboard statement outlives its request. Each test makes one dashboard
//! read wait on the database on purpose (PostgreSQL and MariaDB: another session holds the
//! archive table locked; SQLite: the archive is a view whose every read computes for minutes),
//! serves the dashboard with `serve_on`, and asks `GET /api/jobs?table=archive`:
//!
//! - cut off by the request timeout: the answer is `503`, and shortly after no statement of the
//!   request is running on the server (`pg_stat_activity`, `information_schema.PROCESSLIST`),
//!   while the lock is still held (before, the statement waited there until the lock went);
//! - dropped by its client (the request timeout is 10 minutes, far away): the statement is
//!   gone from the server as well, long before that timeout;
//! - on SQLite (in-process) the read is stopped, so the one reader connection serves the next
//!   request.
//!
//! Nothing sleeps to synchronise: each step polls its condition with a generous deadline
//! ([`POLL`]). Databases from `CHOKAQ_TEST_POSTGRES_URL` / `CHOKAQ_TEST_MYSQL_URL` (or the
//! local defaults), each test in a fresh schema (database) dropped afterwards.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ErrorKind, JobTable, ListJobsParams, ReadDeadline};
use chokaq_mysql::{MysqlBackend, MysqlConfig};
use chokaq_postgres::{PgBackend, PgConfig};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use sqlx::{Connection, Executor};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "deadline-test-token-0123456789";

/// How long a condition is polled for before the test fails (far above the work itself: a
/// statement the server stopped is gone within milliseconds).
const POLL: Duration = Duration::from_secs(20);

/// The dashboard read each test holds up: the archive listing.
const REQUEST: &str = "GET /api/jobs?table=archive HTTP/1.1\r\nHost: localhost\r\n\
                       Authorization: Bearer deadline-test-token-0123456789\r\nAccept: application/json\r\n\r\n";

fn pg_url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

fn mysql_url() -> String {
    std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// Polls `probe` until it returns `want`, for [`POLL`] at most; the last value otherwise.
async fn poll_until<T, F, Fut>(want: T, mut probe: F) -> Result<(), T>
where
    T: PartialEq + Copy,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let t0 = Instant::now();
    loop {
        let got = probe().await;
        if got == want {
            return Ok(());
        }
        if t0.elapsed() > POLL {
            return Err(got);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `serve_on` on 127.0.0.1 (a free port) until [`Server::stop`].
struct Server {
    addr: SocketAddr,
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<chokaq_core::Result<()>>,
}

impl Server {
    async fn start(b: Arc<dyn Backend>, request_timeout: Duration) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(tokio::sync::Notify::new());
        let s = stop.clone();
        // No shared overview snapshot: only the request's own reads reach the database.
        let opts =
            WebOptions::new(Auth::bearer(TOKEN)).request_timeout(request_timeout).snapshot_max_age(Duration::ZERO);
        let task = tokio::spawn(chokaq_web::serve_on(b, listener, opts, async move { s.notified().await }));
        Server { addr, stop, task }
    }

    /// Sends the archive listing on a new connection (its answer is read by [`answer`]).
    async fn send(&self) -> TcpStream {
        let mut c = TcpStream::connect(self.addr).await.unwrap();
        c.write_all(REQUEST.as_bytes()).await.unwrap();
        c
    }

    async fn stop(self) {
        self.stop.notify_one();
        tokio::time::timeout(POLL, self.task).await.expect("serve_on stops").unwrap().unwrap();
    }
}

/// The status line and body of the one answer on `c` (it reads until the server closes the
/// connection, or [`POLL`] passes).
async fn answer(c: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    let t0 = Instant::now();
    loop {
        let left = POLL.saturating_sub(t0.elapsed());
        match tokio::time::timeout(left, c.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => break,
        }
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    format!("{status} {body}")
}

/// Whether `a` is the 503 of a request cut off at its deadline: by the server's request timeout,
/// or by the database stopping the read a moment before it (the same deadline).
fn cut_off(a: &str) -> bool {
    a.starts_with("HTTP/1.1 503") && (a.contains("the request timed out") || a.contains("the read's deadline passed"))
}

// ---- PostgreSQL --------------------------------------------------------------------------

/// A PostgreSQL schema whose archive another session holds locked (ACCESS EXCLUSIVE, in an open
/// transaction), and a probe session.
struct PgCase {
    pg: Arc<PgBackend>,
    schema: String,
    locker: sqlx::PgConnection,
    probe: sqlx::PgPool,
}

impl PgCase {
    async fn new() -> PgCase {
        let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
        let pg =
            PgBackend::connect(PgConfig::new(pg_url()).schema(&schema).max_connections(4)).await.expect("postgres");
        pg.migrate().await.unwrap();
        let mut locker = sqlx::PgConnection::connect(&pg_url()).await.unwrap();
        locker.execute("BEGIN").await.unwrap();
        locker
            .execute(format!("LOCK TABLE \"{schema}\".jobs_archive IN ACCESS EXCLUSIVE MODE").as_str())
            .await
            .unwrap();
        let probe = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&pg_url()).await.unwrap();
        PgCase { pg: Arc::new(pg), schema, locker, probe }
    }

    /// The backend's statements on the archive still running on the server.
    async fn running(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' \
             AND query LIKE '%jobs_archive%'",
        )
        .bind(format!("chokaq:{}", self.schema))
        .fetch_one(&self.probe)
        .await
        .unwrap()
    }

    async fn end(mut self) {
        self.locker.execute("ROLLBACK").await.unwrap();
        self.pg.drop_schema().await.unwrap();
    }
}

/// The request timeout cuts the request off with 503, and the server stops its statement: no
/// statement of it is left running while the lock it waits for is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_timed_out_request_leaves_no_statement_running() {
    let case = PgCase::new().await;
    let srv = Server::start(case.pg.clone(), Duration::from_millis(1500)).await;
    let mut c = srv.send().await;
    assert_eq!(poll_until(1, || case.running()).await, Ok(()), "the listing's statement never waited on the lock");
    let a = answer(&mut c).await;
    assert!(cut_off(&a), "{a}");
    let left = poll_until(0, || case.running()).await;
    assert_eq!(left, Ok(()), "statements of the timed-out request still running on the server {POLL:?} after");
    srv.stop().await;
    case.end().await;
}

/// A request whose client goes away is dropped, and its statement is cancelled on the server
/// at once (the request timeout is 10 minutes away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_dropped_request_leaves_no_statement_running() {
    let case = PgCase::new().await;
    let srv = Server::start(case.pg.clone(), Duration::from_secs(600)).await;
    let c = srv.send().await;
    assert_eq!(poll_until(1, || case.running()).await, Ok(()), "the listing's statement never waited on the lock");
    drop(c);
    let left = poll_until(0, || case.running()).await;
    assert_eq!(left, Ok(()), "statements of the dropped request still running on the server {POLL:?} after");
    srv.stop().await;
    case.end().await;
}

// ---- MariaDB / MySQL ---------------------------------------------------------------------

/// A MariaDB database whose archive another session holds locked (`LOCK TABLES … WRITE`), and
/// a probe session.
struct MyCase {
    my: Arc<MysqlBackend>,
    schema: String,
    locker: sqlx::MySqlConnection,
    probe: sqlx::MySqlPool,
}

impl MyCase {
    async fn new() -> MyCase {
        let schema = format!("chokaq_t_{:016x}", rand::random::<u64>());
        let my = MysqlBackend::connect(MysqlConfig::new(mysql_url()).schema(&schema).max_connections(4))
            .await
            .expect("mariadb");
        my.migrate().await.unwrap();
        let mut locker = sqlx::MySqlConnection::connect(&mysql_url()).await.unwrap();
        locker.execute(format!("LOCK TABLES `{schema}`.jobs_archive WRITE").as_str()).await.unwrap();
        let probe = sqlx::mysql::MySqlPoolOptions::new().max_connections(1).connect(&mysql_url()).await.unwrap();
        MyCase { my: Arc::new(my), schema, locker, probe }
    }

    /// The backend's statements on the archive still running on the server.
    async fn running(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() \
             AND COMMAND IN ('Query', 'Execute') AND INFO LIKE CONCAT('%', ?, '%jobs_archive%')",
        )
        .bind(&self.schema)
        .fetch_one(&self.probe)
        .await
        .unwrap()
    }

    async fn end(mut self) {
        self.locker.execute("UNLOCK TABLES").await.unwrap();
        self.my.drop_schema().await.unwrap();
    }
}

/// The request timeout cuts the request off with 503, and the server stops its statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_timed_out_request_leaves_no_statement_running() {
    let case = MyCase::new().await;
    let srv = Server::start(case.my.clone(), Duration::from_millis(1500)).await;
    let mut c = srv.send().await;
    assert_eq!(poll_until(1, || case.running()).await, Ok(()), "the listing's statement never waited on the lock");
    let a = answer(&mut c).await;
    assert!(cut_off(&a), "{a}");
    let left = poll_until(0, || case.running()).await;
    assert_eq!(left, Ok(()), "statements of the timed-out request still running on the server {POLL:?} after");
    srv.stop().await;
    case.end().await;
}

/// A request whose client goes away is dropped, and its statement is killed on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_dropped_request_leaves_no_statement_running() {
    let case = MyCase::new().await;
    let srv = Server::start(case.my.clone(), Duration::from_secs(600)).await;
    let c = srv.send().await;
    assert_eq!(poll_until(1, || case.running()).await, Ok(()), "the listing's statement never waited on the lock");
    drop(c);
    let left = poll_until(0, || case.running()).await;
    assert_eq!(left, Ok(()), "statements of the dropped request still running on the server {POLL:?} after");
    srv.stop().await;
    case.end().await;
}

// ---- SQLite ------------------------------------------------------------------------------

/// A SQLite database with one reader connection, whose archive is a view that computes for
/// minutes before its first row (a recursive count to 10^10, once per read).
async fn slow_sqlite(dir: &std::path::Path) -> Arc<SqliteBackend> {
    let path = dir.join("jobs.db").display().to_string();
    let db = SqliteBackend::connect(SqliteConfig::new(path.clone()).max_readers(1)).await.unwrap();
    db.migrate().await.unwrap();
    let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{path}")).await.unwrap();
    c.execute(
        "ALTER TABLE jobs_archive RENAME TO jobs_archive_kept; \
         CREATE VIEW jobs_archive AS SELECT a.* FROM \
         (WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 10000000000) \
          SELECT count(*) AS c FROM n) s CROSS JOIN jobs_archive_kept a WHERE s.c > 0",
    )
    .await
    .unwrap();
    Arc::new(db)
}

/// The request timeout cuts the slow read off with 503 and the read is stopped: the one reader
/// connection answers the next listing (of the live jobs) at once, with its one job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_timed_out_read_frees_its_connection() {
    let dir = std::env::temp_dir().join(format!("chokaq-web-deadline-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = slow_sqlite(&dir).await;
    chokaq_core::BackendExt::enqueue(&*db, chokaq_core::NewJob::build("dl", "deadline.v1").unwrap()).await.unwrap();
    // The next request's own timeout is far longer than the poll: it is answered only if the
    // slow read let its connection go.
    let srv = Server::start(db.clone(), Duration::from_millis(1500)).await;
    let mut c = srv.send().await;
    let a = answer(&mut c).await;
    assert!(cut_off(&a), "{a}");
    srv.stop().await;
    let srv2 = Server::start(db.clone(), Duration::from_secs(600)).await;
    let mut c = TcpStream::connect(srv2.addr).await.unwrap();
    c.write_all(REQUEST.replace("table=archive", "table=hot").as_bytes()).await.unwrap();
    let a = answer(&mut c).await;
    assert!(a.starts_with("HTTP/1.1 200"), "the next read was not served within {POLL:?}: {a:?}");
    let jobs = a.matches("\"kind\":\"deadline.v1\"").count();
    assert_eq!(jobs, 1, "{a}");
    srv2.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- the server stops a read at its deadline by itself ------------------------------------

/// A read of a view with a deadline, not dropped: the database stops its statement when the
/// deadline passes (PostgreSQL `statement_timeout`, MariaDB `max_statement_time`, SQLite's
/// progress handler), and the read fails with the deadline's error.
async fn stopped_at_its_deadline(b: &dyn Backend) {
    let view = b.with_read_deadline(Instant::now() + Duration::from_millis(300)).expect("a bounded view");
    let e = view.list_jobs(&ListJobsParams::new(JobTable::Archive)).await.expect_err("the read was stopped");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("deadline passed"), "{e}");
    assert_eq!(b.capabilities().read_deadline, ReadDeadline::Server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_read_is_stopped_at_its_deadline_by_the_server() {
    let case = PgCase::new().await;
    stopped_at_its_deadline(&*case.pg).await;
    assert_eq!(poll_until(0, || case.running()).await, Ok(()), "the statement still runs");
    case.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_a_read_is_stopped_at_its_deadline_by_the_server() {
    let case = MyCase::new().await;
    stopped_at_its_deadline(&*case.my).await;
    assert_eq!(poll_until(0, || case.running()).await, Ok(()), "the statement still runs");
    case.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_read_is_stopped_at_its_deadline() {
    let dir = std::env::temp_dir().join(format!("chokaq-web-deadline-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = slow_sqlite(&dir).await;
    stopped_at_its_deadline(&*db).await;
    // The one reader connection is free again: an unbounded read answers.
    let live = db.list_jobs(&ListJobsParams::new(JobTable::Hot)).await.unwrap();
    assert_eq!(live.jobs.len(), 0);
    db.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
