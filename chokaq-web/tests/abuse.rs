//! Issue 40 item 3, the dashboard under abuse, through a real listener (`serve_on`) on a fresh
//! SQLite file: L4, one peer's idle sockets cannot take every connection slot.
//!
//! Two peers on one machine: the attacker connects from 127.0.0.2, the operator from
//! 127.0.0.1 (all of 127/8 is loopback on Linux). Waits are polls with deadlines.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq_core::Backend;
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const TOKEN: &str = "abuse-test-token-0123456789";

/// A fresh SQLite database, removed on drop.
struct Db {
    b: Arc<dyn Backend>,
    dir: std::path::PathBuf,
}

impl Db {
    async fn new() -> Db {
        let dir = std::env::temp_dir().join(format!("chokaq-web-abuse-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string())).await.unwrap();
        db.migrate().await.unwrap();
        Db { b: Arc::new(db), dir }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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

    async fn stop(mut self) {
        self.stop.notify_one();
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(20), task).await.expect("serve_on stops").unwrap().unwrap();
    }
}

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(to).await.unwrap()
}

/// Sends one `Connection: close` request and reads the whole answer (5 s at most).
async fn request(c: &mut TcpStream, path: &str) -> String {
    let req =
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n");
    c.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out)).await.expect("answered").unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// What an idle socket holds now without waiting: Some(text) once the server wrote or closed,
/// None while it is still open and silent.
fn peek_now(c: &TcpStream) -> Option<String> {
    let mut buf = [0u8; 512];
    match c.try_read(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => Some(format!("error: {e}")),
    }
}

/// L4: 300 idle sockets from one peer, a connection cap of 256: another peer's request is
/// answered within a second, and the first peer holds exactly its share (64, the default)
/// while its 236 other connections were answered 429 and closed. Before the fix the idle
/// sockets held all 256 slots and the request waited for the header-read timeout (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_cannot_take_every_slot() {
    let db = Db::new().await;
    let opts = WebOptions::new(Auth::bearer(TOKEN)).max_connections(256);
    let srv = Server::start(db.b.clone(), opts).await;
    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(connect_from("127.0.0.2", srv.addr).await);
    }
    let t0 = Instant::now();
    let mut c = connect_from("127.0.0.1", srv.addr).await;
    let answer = request(&mut c, "/api/overview").await;
    let took = t0.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took < Duration::from_secs(1), "another peer's request took {took:?} behind 300 idle sockets");

    // The refused ones have their 429 (written before the operator's connection was accepted).
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut refused, mut open) = (0, 0);
    let mut seen: Vec<Option<String>> = vec![None; idle.len()];
    while Instant::now() < deadline {
        for (i, s) in idle.iter().enumerate() {
            if seen[i].is_none() {
                seen[i] = peek_now(s);
            }
        }
        refused = seen.iter().filter(|s| s.as_deref().is_some_and(|t| t.starts_with("HTTP/1.1 429"))).count();
        open = seen.iter().filter(|s| s.is_none()).count();
        if refused + open == idle.len() && refused == 236 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other: Vec<_> = seen.iter().flatten().filter(|t| !t.starts_with("HTTP/1.1 429")).collect();
    assert!(other.is_empty(), "unexpected answers: {other:?}");
    assert_eq!((refused, open), (236, 64), "429s and connections still open from the one peer");
    let refusal = seen.iter().flatten().next().unwrap();
    assert!(refusal.ends_with("too many connections from this address\n"), "{refusal}");

    // The held 64 count against the cap until they close; closed, the peer is served again.
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = connect_from("127.0.0.2", srv.addr).await;
        let a = request(&mut c, "/api/overview").await;
        if a.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the peer was never served again after closing its sockets: {a}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    srv.stop().await;
}
