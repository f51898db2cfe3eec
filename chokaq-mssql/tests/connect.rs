//! Connecting where no SQL Server answers: a typed `Unavailable` error, quickly, never a
//! panic, and never the password. Needs no server.

use std::time::{Duration, Instant};

use chokaq_core::ErrorKind;
use chokaq_mssql::{MssqlBackend, MssqlConfig};

const PASSWORD: &str = "N0tPr1nted!";

fn assert_redacted(text: &str) {
    assert!(!text.contains(PASSWORD), "password leaked: {text}");
    assert!(!text.contains("N0tPr1nted"), "password leaked: {text}");
}

#[tokio::test]
async fn refused_port_is_unavailable() {
    // Bind then drop a listener so the port is (almost certainly) closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = MssqlConfig::new(&format!(
        "server=tcp:127.0.0.1,{port};user=sa;password={{{PASSWORD}}};TrustServerCertificate=true;Encrypt=false"
    ))
    .unwrap();
    let t = Instant::now();
    let err = MssqlBackend::connect(cfg).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    assert_redacted(&err.to_string());
    assert_redacted(&format!("{err:?}"));
    println!("error shown to the user: {err}");
}

#[tokio::test]
async fn silent_server_hits_the_connect_timeout() {
    // Accepts TCP connections and never answers the TDS pre-login.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            open.push(s);
        }
    });
    let cfg = MssqlConfig::new(&format!("server=tcp:127.0.0.1,{port};user=sa;password={PASSWORD};Encrypt=false"))
        .unwrap()
        .connect_timeout(Duration::from_millis(700));
    let t = Instant::now();
    let err = MssqlBackend::connect(cfg).await.unwrap_err();
    let took = t.elapsed();
    hold.abort();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(took >= Duration::from_millis(600) && took < Duration::from_secs(5), "took {took:?}");
    assert!(err.to_string().contains("did not answer"), "{err}");
    assert_redacted(&err.to_string());
}

#[tokio::test]
async fn the_connect_timeout_comes_from_the_string() {
    let cfg =
        MssqlConfig::new(&format!("server=tcp:127.0.0.1,1;user=sa;password={PASSWORD};Connect Timeout=2")).unwrap();
    assert!(format!("{cfg:?}").contains("connect_timeout: 2s"), "{cfg:?}");
    assert_redacted(&format!("{cfg:?}"));
    assert_redacted(&cfg.to_string());
}
