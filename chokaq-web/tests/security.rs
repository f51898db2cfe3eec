//! Issue 26, items 1, 2, 3 and 7: the dashboard on a hostile network. DNS rebinding (the `Host`
//! of a `--no-auth` dashboard), cross-origin POSTs in every auth mode, timeouts and the
//! connection cap of `serve_on` before any authentication, the CSRF cookie's path under a
//! hostile mount prefix, and weak settings (short or blank secrets, the `Secure` cookie, CSRF
//! token expiry).
//!
//! Nothing here is decided by the database: every case runs on a fresh SQLite file (a real
//! backend, in the temp directory, removed afterwards). Requests go through a real listener
//! (raw HTTP/1.1 over TCP, as an attacker would send them) or through `oneshot`. Waits are
//! bounded reads and polls with deadlines.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use chokaq_core::{Backend, ClaimMode, ClaimParams, DeadReason, ErrorKind, FailAction, NewJob, QueueName, WorkerId};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

const TOKEN: &str = "sec-test-token-0123456789";
const BEARER: &str = "Bearer sec-test-token-0123456789";

// ---- fixtures ---------------------------------------------------------------------------

/// A fresh SQLite database, removed on drop.
struct Db {
    b: Arc<dyn Backend>,
    dir: std::path::PathBuf,
}

impl Db {
    async fn new() -> Db {
        let dir = std::env::temp_dir().join(format!("chokaq-web-sec-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string())).await.unwrap();
        db.migrate().await.unwrap();
        Db { b: Arc::new(db), dir }
    }

    async fn dead_count(&self) -> u64 {
        self.b.stats().await.unwrap().dead
    }

    async fn is_paused(&self, queue: &str) -> bool {
        self.b.queue_settings(&QueueName::new(queue).unwrap()).await.unwrap().is_paused
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn make_dead(b: &Arc<dyn Backend>, queue: &str, n: usize) {
    let jobs = (0..n)
        .map(|i| {
            NewJob::build(queue, "web.fail.v1").unwrap().json(serde_json::json!({ "secret": format!("payload-{i}") }))
        })
        .collect();
    b.enqueue_many(jobs).await.unwrap();
    let w = WorkerId::random();
    let q = QueueName::new(queue).unwrap();
    let claimed = b.claim(&ClaimParams::new(w, vec![q], n as u32, ClaimMode::Start)).await.unwrap();
    assert_eq!(claimed.len(), n);
    for j in claimed {
        let action = FailAction::DeadLetter { reason: DeadReason::Failed, error: "boom".into() };
        let out = b.fail(w, j.lease_ref(), action).await.unwrap();
        assert!(matches!(out, chokaq_core::Fenced::Done(_)), "fail: {out:?}");
    }
}

/// `serve_on` on 127.0.0.1 (a free port) until dropped.
struct Server {
    addr: SocketAddr,
    stop: Arc<tokio::sync::Notify>,
    task: Option<tokio::task::JoinHandle<chokaq_core::Result<()>>>,
}

impl Server {
    async fn start(b: Arc<dyn Backend>, opts: WebOptions) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(tokio::sync::Notify::new());
        let s = stop.clone();
        let task = tokio::spawn(chokaq_web::serve_on(b, listener, opts, async move { s.notified().await }));
        Server { addr, stop, task: Some(task) }
    }

    /// Sends `request` on a new connection and reads until the server closes it (10 s at most).
    async fn raw(&self, request: &str) -> String {
        let mut c = TcpStream::connect(self.addr).await.unwrap();
        c.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out))
            .await
            .expect("the server did not close a Connection: close request within 10 s")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn stop(mut self) {
        self.stop.notify_one();
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("serve_on stops").unwrap().unwrap();
    }
}

fn body_of(resp: &str) -> &str {
    resp.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("")
}

/// Reads one response (headers and a `Content-Length` body) from a keep-alive connection.
async fn read_response(c: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = c.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= len {
                return Ok(text);
            }
        }
    }
}

/// Reads until the server closes the connection; how long that took, or None after `limit`.
async fn closed_within(c: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut sink = Vec::new();
    match tokio::time::timeout(limit, c.read_to_end(&mut sink)).await {
        Ok(_) => Some(t0.elapsed()),
        Err(_) => None,
    }
}

struct Resp {
    status: StatusCode,
    set_cookie: String,
    body: String,
}

async fn call(app: &Router, method: &str, uri: &str, headers: &[(&str, &str)], body: Option<String>) -> Resp {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if body.is_some() {
        b = b.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let resp = app.clone().oneshot(b.body(body.map(Body::from).unwrap_or_else(Body::empty)).unwrap()).await.unwrap();
    let status = resp.status();
    let set_cookie =
        resp.headers().get_all(header::SET_COOKIE).iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    Resp { status, set_cookie: set_cookie.join("\n"), body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// The token of `GET {prefix}/api/csrf`, with the headers given.
async fn csrf_token(app: &Router, prefix: &str, headers: &[(&str, &str)]) -> String {
    let r = call(app, "GET", &format!("{prefix}/api/csrf"), headers, None).await;
    assert_eq!(r.status, StatusCode::OK, "GET /api/csrf: {}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    v["token"].as_str().unwrap().to_string()
}

// ---- item 1: DNS rebinding, cross-origin POSTs --------------------------------------------

/// The requests, over a socket, against a `--no-auth` dashboard: every one with
/// `Host: rebind.attacker.example:PORT` is refused (421) before it does or shows anything;
/// loopback literals, `localhost` (with or without port) pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_rebinding_host_is_refused_without_auth() {
    let db = Db::new().await;
    make_dead(&db.b, "sec-rebind", 2).await;
    let srv = Server::start(db.b.clone(), WebOptions::new(Auth::None)).await;
    let port = srv.addr.port();
    let evil = format!("rebind.attacker.example:{port}");

    let r = srv.raw(&format!("GET /api/csrf HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n")).await;
    assert!(r.starts_with("HTTP/1.1 421"), "GET /api/csrf with a foreign Host: {r}");
    assert!(!r.to_ascii_lowercase().contains("set-cookie") && !r.contains("token"), "a token leaked: {r}");

    // A token and its cookie, taken the legitimate way, then replayed under the foreign Host.
    let ok = srv.raw(&format!("GET /api/csrf HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let v: serde_json::Value = serde_json::from_str(body_of(&ok)).unwrap();
    let token = v["token"].as_str().unwrap().to_string();
    let purge = |host: &str, origin: &str| {
        let body = format!("csrf={token}&older_than_hours=0");
        format!(
            "POST /dead/purge HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nCookie: chokaq_csrf={token}\r\n\
             Accept: application/json\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let r = srv.raw(&purge(&evil, &format!("http://{evil}"))).await;
    assert!(r.starts_with("HTTP/1.1 421"), "POST /dead/purge with a foreign Host: {r}");
    assert_eq!(db.dead_count().await, 2, "the rebinding purge deleted dead letters");

    let r = srv.raw(&format!("GET /api/jobs?table=dead HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n")).await;
    assert!(r.starts_with("HTTP/1.1 421"), "GET /api/jobs?table=dead with a foreign Host: {r}");
    assert!(!r.contains("sec-rebind"), "dead letters shown to a foreign Host: {r}");

    for host in [format!("localhost:{port}"), "localhost".into(), format!("127.0.0.1:{port}"), "127.0.0.1".into()] {
        let r =
            srv.raw(&format!("GET /api/jobs?table=dead HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await;
        assert!(r.starts_with("HTTP/1.1 200") && r.contains("sec-rebind"), "Host {host}: {r}");
    }
    for host in ["rebind.attacker.example", "localhost.attacker.example", "127.0.0.1.nip.io", "10.0.0.1:80", ""] {
        let r = srv.raw(&format!("GET /api/overview HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await;
        assert!(!r.starts_with("HTTP/1.1 200"), "Host {host:?} was served: {r}");
    }
    // The same purge from the dashboard's own origin goes through.
    let local = format!("localhost:{port}");
    let r = srv.raw(&purge(&local, &format!("http://{local}"))).await;
    assert!(r.starts_with("HTTP/1.1 200"), "POST /dead/purge from localhost: {r}");
    assert_eq!(db.dead_count().await, 0, "purged from localhost");
    srv.stop().await;
}

/// A POST whose `Origin` or `Sec-Fetch-Site` says cross-origin is refused (403, nothing done)
/// with every auth mode, even with good credentials and a good CSRF token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_origin_posts_are_refused_in_every_auth_mode() {
    let db = Db::new().await;
    let modes = [
        (Auth::None, None),
        (Auth::bearer(TOKEN), Some(BEARER)),
        // "ops:correct-horse-battery" in base64.
        (Auth::basic("ops", "correct-horse-battery"), Some("Basic b3BzOmNvcnJlY3QtaG9yc2UtYmF0dGVyeQ==")),
    ];
    for (auth, authz) in modes {
        let mode = format!("{auth:?}");
        let app = chokaq_web::router(db.b.clone(), WebOptions::new(auth).snapshot_max_age(Duration::ZERO));
        let host = ("host", "localhost:8080");
        let mut base = vec![host];
        if let Some(a) = authz {
            base.push(("authorization", a));
        }
        let token = csrf_token(&app, "", &base).await;
        let cookie = format!("chokaq_csrf={token}");
        // create=yes: the queue has no job yet (its settings are written on purpose).
        let form = format!("csrf={token}&create=yes");
        let post = |extra: Vec<(&'static str, &'static str)>| {
            let mut h = base.clone();
            h.push(("cookie", cookie.as_str()));
            h.push(("accept", "application/json"));
            h.extend(extra);
            let (app, form) = (app.clone(), form.clone());
            async move { call(&app, "POST", "/queues/sec-xo/pause", &h, Some(form)).await }
        };
        for extra in [
            vec![("origin", "http://evil.example")],
            vec![("origin", "null")],
            vec![("origin", "http://localhost:8081")],
            vec![("sec-fetch-site", "cross-site")],
            vec![("sec-fetch-site", "same-site")],
            vec![("origin", "http://localhost:8080"), ("sec-fetch-site", "cross-site")],
        ] {
            let r = post(extra.clone()).await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{mode}: {extra:?} was accepted: {}", r.body);
            assert!(r.body.contains("cross-origin"), "{mode}: {extra:?}: {}", r.body);
            assert!(!db.is_paused("sec-xo").await, "{mode}: {extra:?} paused the queue");
        }
        let r = post(vec![("origin", "http://localhost:8080"), ("sec-fetch-site", "same-origin")]).await;
        assert_eq!(r.status, StatusCode::OK, "{mode}: a same-origin POST: {}", r.body);
        assert!(db.is_paused("sec-xo").await, "{mode}: paused");
        // No Origin, no Sec-Fetch-Site (a script, curl): the CSRF token decides.
        let h = [base.clone(), vec![("cookie", cookie.as_str()), ("accept", "application/json")]].concat();
        let r = call(&app, "POST", "/queues/sec-xo/resume", &h, Some(form.clone())).await;
        assert_eq!(r.status, StatusCode::OK, "{mode}: a POST without Origin: {}", r.body);
        assert!(!db.is_paused("sec-xo").await, "{mode}: resumed");
    }
}

// ---- item 3: the cookie path ------------------------------------------------------------

/// Under `nest("/t/{tenant}")` the mount prefix comes from the request: one that is not made
/// of safe path characters never reaches the cookie's attributes as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_path_never_carries_attributes_from_the_request() {
    let db = Db::new().await;
    let app = Router::new().nest("/t/{tenant}", chokaq_web::router(db.b.clone(), WebOptions::new(Auth::bearer(TOKEN))));
    let auth = [("authorization", BEARER)];
    let r = call(&app, "GET", "/t/x;Path=%2F;SameSite=None/api/csrf", &auth, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let c = r.set_cookie;
    let attrs: Vec<&str> = c.split(';').map(str::trim).collect();
    assert_eq!(attrs.iter().filter(|a| a.starts_with("Path=")).count(), 1, "one Path attribute: {c}");
    let same_site: Vec<&&str> = attrs.iter().filter(|a| a.starts_with("SameSite=")).collect();
    assert_eq!(same_site, [&"SameSite=Strict"], "SameSite: {c}");
    assert_eq!(c.matches(';').count(), 3, "name=value; Path; HttpOnly; SameSite and nothing else: {c}");
    assert!(c.contains("; Path=/t/x%3BPath=%2F%3BSameSite=None;"), "the prefix, encoded: {c}");
    let r = call(&app, "GET", "/t/acme-1/api/csrf", &auth, None).await;
    assert!(r.set_cookie.contains("; Path=/t/acme-1;"), "a plain tenant: {}", r.set_cookie);
}

// ---- item 2: timeouts and the connection cap --------------------------------------------

fn short_timeouts() -> WebOptions {
    WebOptions::new(Auth::bearer(TOKEN))
        .header_read_timeout(Duration::from_millis(300))
        .body_timeout(Duration::from_millis(300))
        .request_timeout(Duration::from_secs(5))
}

/// A connection that sends part of its headers, one that sends nothing, and a POST announcing
/// 100,000 bytes that sends 2 are all closed within the (shortened) timeouts, before any
/// authentication; the 10 s limits here are the test's own patience.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let db = Db::new().await;
    let srv = Server::start(db.b.clone(), short_timeouts()).await;
    let patience = Duration::from_secs(10);

    let mut partial = TcpStream::connect(srv.addr).await.unwrap();
    partial.write_all(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nX-Slow: ").await.unwrap();
    let mut silent = TcpStream::connect(srv.addr).await.unwrap();
    let mut body = TcpStream::connect(srv.addr).await.unwrap();
    body.write_all(
        format!(
            "POST /queues/sec-slow/pause HTTP/1.1\r\nHost: localhost\r\nAuthorization: {BEARER}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nab"
        )
        .as_bytes(),
    )
    .await
    .unwrap();

    let t = closed_within(&mut partial, patience).await;
    assert!(t.is_some(), "a connection with partial headers was still open after {patience:?}");
    let t = closed_within(&mut silent, patience).await;
    assert!(t.is_some(), "a silent connection was still open after {patience:?}");
    let r = tokio::time::timeout(patience, read_response(&mut body)).await;
    let r =
        r.unwrap_or_else(|_| panic!("a POST announcing 100,000 bytes that sent 2 had no answer after {patience:?}"));
    let r = r.unwrap();
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
    assert!(closed_within(&mut body, patience).await.is_some(), "the slow POST's connection stayed open");
    assert!(!db.is_paused("sec-slow").await, "the slow POST did something");

    // A normal request still works.
    let ok = srv
        .raw(&format!(
            "GET /api/overview HTTP/1.1\r\nHost: localhost\r\nAuthorization: {BEARER}\r\nConnection: close\r\n\r\n"
        ))
        .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    srv.stop().await;
}

/// The request timeout covers the whole request, its body included: with a long body timeout
/// and a short request timeout, the slow POST gets 503 and its connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_timeout_bounds_a_whole_request() {
    let db = Db::new().await;
    let opts = WebOptions::new(Auth::bearer(TOKEN))
        .body_timeout(Duration::from_secs(60))
        .request_timeout(Duration::from_millis(300));
    let srv = Server::start(db.b.clone(), opts).await;
    let mut c = TcpStream::connect(srv.addr).await.unwrap();
    c.write_all(
        format!(
            "POST /queues/sec-slow/pause HTTP/1.1\r\nHost: localhost\r\nAuthorization: {BEARER}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nab"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), read_response(&mut c))
        .await
        .expect("no answer within 10 s to a request past its 300 ms timeout")
        .unwrap();
    assert!(r.starts_with("HTTP/1.1 503") && r.contains("timed out"), "{r}");
    assert!(closed_within(&mut c, Duration::from_secs(10)).await.is_some(), "the connection stayed open");
    assert!(!db.is_paused("sec-slow").await, "the slow POST did something");
    srv.stop().await;
}

/// At most `max_connections` connections are served at once; the next one waits (in the
/// listen backlog) until one closes, then is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let db = Db::new().await;
    let opts = WebOptions::new(Auth::bearer(TOKEN)).max_connections(2).header_read_timeout(Duration::from_secs(30));
    let srv = Server::start(db.b.clone(), opts).await;
    let req = format!("GET /api/overview HTTP/1.1\r\nHost: localhost\r\nAuthorization: {BEARER}\r\n\r\n");
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(srv.addr).await.unwrap();
        c.write_all(req.as_bytes()).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(10), read_response(&mut c)).await.unwrap().unwrap();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        held.push(c);
    }
    // Two connections are open (kept alive): a third is not served while they are.
    let mut third = TcpStream::connect(srv.addr).await.unwrap();
    third.write_all(req.as_bytes()).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(500), read_response(&mut third)).await;
    assert!(early.is_err(), "a third connection was served beyond the cap of 2: {early:?}");
    // One closes: the third is served (within 10 s).
    drop(held.pop());
    let r = tokio::time::timeout(Duration::from_secs(10), read_response(&mut third))
        .await
        .expect("the waiting connection was never served after a slot freed")
        .unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    drop(held);
    drop(third);
    srv.stop().await;
}

// ---- item 7: weak settings --------------------------------------------------------------

/// A blank or short secret is an InvalidInput error from `validate`, `check_listen` (what
/// `chokaq web` calls) and `serve_on`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_secrets_are_refused() {
    let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
    for (auth, needle) in [
        (Auth::bearer("   "), "blank"),
        (Auth::bearer(""), "blank"),
        (Auth::bearer("\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t"), "blank"),
        (Auth::bearer("short-token"), "at least 16"),
        (Auth::bearer(" sixteen-chars-token "), "whitespace"),
        (Auth::basic("ops", "pw"), "at least 16"),
        (Auth::basic("ops", "                    "), "blank"),
        (Auth::basic("", "correct-horse-battery"), "user"),
        (Auth::basic("o:ps", "correct-horse-battery"), "user"),
    ] {
        let opts = WebOptions::new(auth.clone());
        let e = opts.validate().expect_err(&format!("{auth:?} was accepted"));
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(needle), "{auth:?}: {e}");
        assert!(!e.to_string().contains("short-token") && !e.to_string().contains("pw\""), "the secret in: {e}");
        let e = chokaq_web::check_listen(listen, &opts).expect_err("check_listen");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
    for auth in [Auth::bearer(TOKEN), Auth::basic("ops", "correct-horse-battery"), Auth::None] {
        WebOptions::new(auth).validate().unwrap();
    }
    let e = WebOptions::new(Auth::bearer(TOKEN)).max_connections(0).validate().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let e = WebOptions::new(Auth::bearer(TOKEN)).header_read_timeout(Duration::ZERO).validate().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");

    let db = Db::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let e = chokaq_web::serve_on(db.b.clone(), listener, WebOptions::new(Auth::bearer("   ")), std::future::ready(()))
        .await
        .expect_err("serve_on with a blank token");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
}

/// `secure_cookie(true)` marks the CSRF cookie `Secure`; it is off by default (plain HTTP on
/// loopback would lose the cookie).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_cookie_option() {
    let db = Db::new().await;
    let auth = [("authorization", BEARER)];
    let plain = chokaq_web::router(db.b.clone(), WebOptions::new(Auth::bearer(TOKEN)));
    let c = call(&plain, "GET", "/api/csrf", &auth, None).await.set_cookie;
    assert!(!c.contains("Secure"), "{c}");
    let tls = chokaq_web::router(db.b.clone(), WebOptions::new(Auth::bearer(TOKEN)).secure_cookie(true));
    let c = call(&tls, "GET", "/api/csrf", &auth, None).await.set_cookie;
    assert!(c.ends_with("; Secure") && c.contains("HttpOnly; SameSite=Strict"), "{c}");
}

/// A CSRF token expires `csrf_max_age` after it was issued: a POST carrying it is refused with
/// 403 "expired", and the next page hands out a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrf_tokens_expire() {
    let db = Db::new().await;
    let opts = WebOptions::new(Auth::bearer(TOKEN)).csrf_max_age(Duration::from_millis(20));
    let app = chokaq_web::router(db.b.clone(), opts);
    let auth = ("authorization", BEARER);
    let token = csrf_token(&app, "", &[auth]).await;
    let cookie = format!("chokaq_csrf={token}");
    let h = [auth, ("cookie", cookie.as_str()), ("accept", "application/json")];
    let deadline = Instant::now() + Duration::from_secs(5);
    let refused = loop {
        let r = call(&app, "POST", "/queues/sec-exp/resume", &h, Some(format!("csrf={token}&create=yes"))).await;
        if r.status == StatusCode::FORBIDDEN {
            break r;
        }
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert!(Instant::now() < deadline, "a 20 ms CSRF token was still accepted after 5 s");
        tokio::task::yield_now().await;
    };
    assert!(refused.body.contains("expired"), "{}", refused.body);
    let r = call(&app, "GET", "/api/csrf", &h[..2], None).await;
    assert!(
        r.set_cookie.starts_with("chokaq_csrf=") && !r.set_cookie.contains(&token),
        "a fresh token: {}",
        r.set_cookie
    );
    // The default is 12 h.
    assert_eq!(WebOptions::new(Auth::None).csrf_max_age, Duration::from_secs(12 * 3600));
}
