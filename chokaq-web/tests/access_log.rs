//! Issue 40 item 3: the dashboard's access and error log (tracing, target
//! `chokaq_web::access`), one line per request with method, path, status and duration;
//! secrets (the bearer token, the CSRF token, the query) never in it; a 5xx at ERROR with the
//! backend's error logged beside it. On a fresh SQLite file, through `oneshot` on a
//! current-thread runtime so the capturing subscriber sees every event.

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use chokaq_core::Backend;
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use chokaq_web::{Auth, WebOptions};
use tower::ServiceExt;

const TOKEN: &str = "access-log-token-0123456789";

/// Everything the subscriber writes, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap()).lines().map(str::to_string).collect()
    }
    fn access_lines(&self) -> Vec<String> {
        self.lines().into_iter().filter(|l| l.contains("chokaq_web::access")).collect()
    }
}

async fn status(app: &Router, method: &str, uri: &str, auth: Option<&str>) -> StatusCode {
    let mut b = Request::builder().method(method).uri(uri).header("cookie", "chokaq_csrf=cookie-secret-value");
    if let Some(a) = auth {
        b = b.header("authorization", a);
    }
    let resp = app.clone().oneshot(b.body(Body::empty()).unwrap()).await.unwrap();
    let s = resp.status();
    let _ = axum::body::to_bytes(resp.into_body(), 16 << 20).await.unwrap();
    s
}

#[test]
fn one_line_per_request_without_secrets() {
    let captured = Captured::default();
    let c2 = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || c2.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("chokaq-web-log-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = SqliteBackend::connect(SqliteConfig::new(dir.join("jobs.db").display().to_string())).await.unwrap();
        db.migrate().await.unwrap();
        let db = Arc::new(db);
        let backend: Arc<dyn Backend> = db.clone();
        let opts = WebOptions::new(Auth::bearer(TOKEN)).snapshot_max_age(std::time::Duration::ZERO);
        let app = Router::new().nest("/ops", chokaq_web::router(backend, opts));
        let bearer = format!("Bearer {TOKEN}");
        let before = captured.access_lines().len();
        assert_eq!(
            status(&app, "GET", "/ops/api/overview?secret=query-secret-value", Some(&bearer)).await,
            StatusCode::OK
        );
        assert_eq!(status(&app, "GET", "/ops/jobs/not-a-uuid", Some(&bearer)).await, StatusCode::BAD_REQUEST);
        assert_eq!(
            status(&app, "GET", "/ops/workers", Some("Bearer wrong-token-0123456789")).await,
            StatusCode::UNAUTHORIZED
        );
        // The database closed under the dashboard: a server error.
        db.close().await;
        let failed = status(&app, "GET", "/ops/api/queues/q1", Some(&bearer)).await;
        assert!(failed.is_server_error(), "{failed}");

        let lines = captured.access_lines();
        assert_eq!(lines.len() - before, 4, "one line per request: {lines:#?}");
        let want = [
            ("INFO", "GET", "/ops/api/overview", "200"),
            ("WARN", "GET", "/ops/jobs/not-a-uuid", "400"),
            ("WARN", "GET", "/ops/workers", "401"),
            ("ERROR", "GET", "/ops/api/queues/q1", failed.as_str()),
        ];
        for (line, (level, method, path, code)) in lines[before..].iter().zip(want) {
            assert!(line.contains(level), "{line}");
            assert!(
                line.contains(&format!("method=\"{method}\"")) || line.contains(&format!("method={method}")),
                "{line}"
            );
            assert!(line.contains(&format!("path=\"{path}\"")) || line.contains(&format!("path={path}")), "{line}");
            assert!(line.contains(&format!("status={code}")), "{line}");
            assert!(line.contains(" ms="), "{line}");
        }
        let all = captured.lines().join("\n");
        for secret in [TOKEN, "wrong-token-0123456789", "query-secret-value", "cookie-secret-value"] {
            assert!(!all.contains(secret), "{secret} logged:\n{all}");
        }
        assert!(
            captured.lines().iter().any(|l| l.contains("WARN") && l.contains("backend error")),
            "the 5xx's backend error logged:\n{all}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}
