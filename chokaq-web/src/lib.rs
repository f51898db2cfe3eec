//! `chokaq-web`: the chokaq dashboard, an [axum] [`Router`] over any [`Backend`].
//!
//! ```no_run
//! # async fn demo(backend: std::sync::Arc<dyn chokaq_core::Backend>) -> chokaq_core::Result<()> {
//! use chokaq_web::{Auth, WebOptions};
//! // Mounted inside an application, under any prefix:
//! let dashboard = chokaq_web::router(backend.clone(), WebOptions::new(Auth::bearer("s3cret")));
//! let app: axum::Router = axum::Router::new().nest("/ops/jobs", dashboard);
//! # let _ = app;
//! // Or standalone:
//! chokaq_web::serve(backend, "127.0.0.1:8080".parse().unwrap(), WebOptions::new(Auth::basic("ops", "pw"))).await
//! # }
//! ```
//!
//! Pages are server-rendered HTML that read with JavaScript off; a small embedded script
//! refreshes the overview every 1.5 s and asks for confirmation before irreversible actions.
//! Every action is a POST that needs the CSRF token (double-submit: the `chokaq_csrf` cookie,
//! `SameSite=Strict`, and the same value in the form field `csrf` or the `x-csrf-token`
//! header); read-only mode hides every action and refuses every POST with 403. Nothing is
//! loaded from outside the binary.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use chokaq_core::{Backend, Error, ErrorKind};

mod chart;
mod csrf;
mod data;
mod html;
mod pages;

pub use data::{OverviewData, QueueRow, Totals, WorkersSummary};

/// How the dashboard authenticates a request.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// HTTP basic auth (the browser asks for it).
    Basic { user: String, pass: String },
    /// No authentication. [`serve`] accepts it only on a loopback address; with [`router`] the
    /// embedding application is responsible for authenticating requests before they reach it.
    None,
}

impl Auth {
    /// Bearer token auth.
    pub fn bearer(token: impl Into<String>) -> Self {
        Auth::Bearer(token.into())
    }

    /// Basic auth.
    pub fn basic(user: impl Into<String>, pass: impl Into<String>) -> Self {
        Auth::Basic { user: user.into(), pass: pass.into() }
    }

    /// The `Authorization` header value a request must carry; None for [`Auth::None`].
    fn expected_header(&self) -> Option<String> {
        match self {
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::Basic { user, pass } => Some(format!("Basic {}", base64(format!("{user}:{pass}").as_bytes()))),
            Auth::None => None,
        }
    }

    fn challenge(&self) -> &'static str {
        match self {
            Auth::Basic { .. } => "Basic realm=\"chokaq\", charset=\"UTF-8\"",
            _ => "Bearer realm=\"chokaq\"",
        }
    }
}

/// Secrets never appear in Debug output.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::Basic { user, .. } => write!(f, "Basic {{ user: {user:?}, pass: <redacted> }}"),
            Auth::None => f.write_str("None"),
        }
    }
}

/// The dashboard's settings.
#[derive(Debug, Clone)]
pub struct WebOptions {
    /// How requests authenticate.
    pub auth: Auth,
    /// Hide every action and refuse every POST (403).
    pub read_only: bool,
    /// The path prefix the browser sees, when a proxy in front strips it (e.g. `/ops/jobs`).
    /// None: worked out from the request (the prefix of [`Router::nest`]).
    pub base_path: Option<String>,
    /// A worker not seen for longer than this is shown as stuck.
    pub worker_stale_after: Duration,
    /// A queue whose oldest due job waits longer than this is highlighted.
    pub lag_warning: Duration,
    /// How often the overview refreshes itself (JavaScript on).
    pub refresh_every: Duration,
    /// How old the shared overview snapshot may be before it is refreshed (see
    /// [`WebOptions::snapshot_max_age`]).
    pub snapshot_max_age: Duration,
}

impl WebOptions {
    /// Read-write, the prefix from the request, workers stuck after 60 s, lag highlighted
    /// from 60 s, refresh every 1.5 s.
    pub fn new(auth: Auth) -> Self {
        WebOptions {
            auth,
            read_only: false,
            base_path: None,
            worker_stale_after: Duration::from_secs(60),
            lag_warning: Duration::from_secs(60),
            refresh_every: Duration::from_millis(1500),
            snapshot_max_age: Duration::from_secs(1),
        }
    }

    /// The overview is one snapshot shared by every viewer: served as is while younger than
    /// `max_age` (default 1 s), served while one background refresh replaces it up to ten times
    /// that, computed on the request beyond. Every action drops it. `Duration::ZERO` computes
    /// it on every request.
    pub fn snapshot_max_age(mut self, max_age: Duration) -> Self {
        self.snapshot_max_age = max_age;
        self
    }

    /// Read-only mode.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// A fixed path prefix for links (see [`WebOptions::base_path`]).
    pub fn base_path(mut self, base: impl Into<String>) -> Self {
        self.base_path = Some(base.into());
        self
    }
}

pub(crate) struct AppState {
    pub backend: Arc<dyn Backend>,
    pub opts: WebOptions,
    pub expected_auth: Option<String>,
    pub csrf: csrf::Csrf,
    pub cache: data::SnapshotCache,
}

pub(crate) type Shared = Arc<AppState>;

/// What every handler knows about the request: where the dashboard is mounted, the CSRF token
/// to put in forms, whether the client wants JSON.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub base: String,
    pub csrf: String,
    pub read_only: bool,
    pub wants_json: bool,
}

impl Ctx {
    /// The overview's path: the prefix itself (`/ops/jobs`: axum's `nest` does not route
    /// `/ops/jobs/`), or `/` at the root.
    pub fn home(&self) -> String {
        if self.base.is_empty() {
            "/".to_string()
        } else {
            self.base.clone()
        }
    }
}

/// The dashboard as a [`Router`], to serve standalone or mount under any prefix with
/// [`Router::nest`]. With [`Auth::None`] it authenticates nothing: the embedding application
/// must put its own authentication in front.
pub fn router(backend: Arc<dyn Backend>, options: WebOptions) -> Router {
    let state: Shared = Arc::new(AppState {
        backend,
        expected_auth: options.auth.expected_header(),
        opts: options,
        csrf: csrf::Csrf::new(),
        cache: data::SnapshotCache::default(),
    });
    // The first snapshot, computed at once when there is a runtime, so no visitor waits for it.
    if !state.opts.snapshot_max_age.is_zero() {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let st = state.clone();
            rt.spawn(async move {
                if let Err(e) = data::refresh_now(&st).await {
                    tracing::debug!(error = %e, "dashboard: first overview snapshot failed");
                }
            });
        }
    }
    Router::new()
        .route("/", get(pages::overview))
        .route("/assets/style.css", get(pages::style))
        .route("/assets/app.js", get(pages::script))
        .route("/queues/{queue}", get(pages::queue))
        .route("/queues/{queue}/{action}", post(pages::queue_action))
        .route("/jobs", get(pages::jobs))
        .route("/jobs/{id}", get(pages::job))
        .route("/jobs/{id}/{action}", post(pages::job_action))
        .route("/dead", get(pages::dead))
        .route("/dead/retry", post(pages::dead_retry))
        .route("/dead/purge", post(pages::dead_purge))
        .route("/workers", get(pages::workers))
        .route("/schedules", get(pages::schedules))
        .route("/schedules/{name}/{action}", post(pages::schedule_action))
        .route("/api/schedules", get(pages::api_schedules))
        .route("/api/overview", get(pages::api_overview))
        .route("/api/queues/{queue}", get(pages::api_queue))
        .route("/api/jobs", get(pages::api_jobs))
        .route("/api/jobs/{id}", get(pages::api_job))
        .route("/api/workers", get(pages::api_workers))
        .route("/api/csrf", get(pages::api_csrf))
        .fallback(pages::not_found)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Serves the dashboard on `listen` until the process gets Ctrl-C / SIGTERM.
///
/// Refuses [`Auth::None`] unless `listen` is a loopback address (the `--no-auth` rule).
pub async fn serve(backend: Arc<dyn Backend>, listen: SocketAddr, options: WebOptions) -> chokaq_core::Result<()> {
    check_listen(listen, &options)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Error::with_source(ErrorKind::Unavailable, format!("could not listen on {listen}: {e}"), e))?;
    serve_on(backend, listener, options, shutdown_signal()).await
}

/// Serves the dashboard on a bound listener until `shutdown` resolves (tests, embedding).
/// The same loopback rule as [`serve`] applies to [`Auth::None`].
pub async fn serve_on(
    backend: Arc<dyn Backend>,
    listener: tokio::net::TcpListener,
    options: WebOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> chokaq_core::Result<()> {
    let addr =
        listener.local_addr().map_err(|e| Error::with_source(ErrorKind::Other, format!("listener address: {e}"), e))?;
    check_listen(addr, &options)?;
    tracing::info!(%addr, read_only = options.read_only, "chokaq dashboard listening");
    axum::serve(listener, router(backend, options))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::with_source(ErrorKind::Other, format!("dashboard server: {e}"), e))
}

/// `Auth::None` only on loopback.
pub fn check_listen(listen: SocketAddr, options: &WebOptions) -> chokaq_core::Result<()> {
    if options.auth == Auth::None && !listen.ip().is_loopback() {
        return Err(Error::invalid(format!(
            "the dashboard without authentication may only listen on a loopback address, not {listen}: \
             set a bearer token or basic auth"
        )));
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// The largest POST body accepted (a retry of many dead letters is ~40 bytes an id).
const MAX_BODY: usize = 256 * 1024;

/// Every request: authentication, the mount prefix, the CSRF cookie; every POST: read-only
/// refusal and the CSRF check. Security headers on every response.
async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let wants_json = req.uri().path().starts_with("/api/")
        || req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/json"));
    let base = match &st.opts.base_path {
        Some(b) => b.trim_end_matches('/').to_string(),
        None => mount_prefix(req.extensions().get::<OriginalUri>().map(|o| o.path()), req.uri().path()),
    };

    if let Some(expected) = &st.expected_auth {
        let given = req.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes()).unwrap_or_default();
        if !auth_matches(given, expected) {
            let mut resp = plain_error(StatusCode::UNAUTHORIZED, "authentication required", wants_json);
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(st.opts.auth.challenge()));
            return secure(resp);
        }
    }

    let cookies: Vec<String> = csrf::cookie_tokens(req.headers()).into_iter().filter(|t| st.csrf.verify(t)).collect();
    let valid_cookie = cookies.first().cloned();
    let (token, set_cookie) = match valid_cookie {
        Some(t) => (t, false),
        None => (st.csrf.issue(), true),
    };

    let mut req = req;
    if req.method() == Method::POST {
        if st.opts.read_only {
            return secure(plain_error(StatusCode::FORBIDDEN, "the dashboard is read-only", wants_json));
        }
        let (parts, body) = req.into_parts();
        let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
            Ok(b) => b,
            Err(_) => return secure(plain_error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large", wants_json)),
        };
        let submitted = submitted_token(&parts.headers, &bytes);
        let ok = submitted
            .as_ref()
            .is_some_and(|s| cookies.iter().any(|c| csrf::constant_time_eq(c.as_bytes(), s.as_bytes())));
        if !ok {
            let why = if submitted.is_none() || cookies.is_empty() {
                "CSRF token missing: reload the page and try again"
            } else {
                "CSRF token wrong: reload the page and try again"
            };
            return secure(plain_error(StatusCode::FORBIDDEN, why, wants_json));
        }
        req = Request::from_parts(parts, Body::from(bytes));
    } else if req.method() != Method::GET && req.method() != Method::HEAD {
        return secure(plain_error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed", wants_json));
    }

    let is_post = req.method() == Method::POST;
    req.extensions_mut().insert(Ctx {
        base: base.clone(),
        csrf: token.clone(),
        read_only: st.opts.read_only,
        wants_json,
    });
    let mut resp = next.run(req).await;
    if is_post {
        // The next overview shows the action's effect: recomputed before the response.
        st.cache.invalidate();
        if !st.opts.snapshot_max_age.is_zero() {
            if let Err(e) = data::refresh_now(&st).await {
                tracing::warn!(error = %e, "dashboard: overview refresh after an action failed");
            }
        }
    }
    if set_cookie {
        let path = if base.is_empty() { "/".to_string() } else { base };
        let cookie = format!("{}={token}; Path={path}; HttpOnly; SameSite=Strict", csrf::COOKIE);
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    secure(resp)
}

/// Whether an `Authorization` header value is the expected one: the scheme compared without
/// case (RFC 9110), the credentials in constant time.
fn auth_matches(given: &[u8], expected: &str) -> bool {
    let (Some(g), Some(e)) = (given.iter().position(|&c| c == b' '), expected.find(' ')) else { return false };
    given[..g].eq_ignore_ascii_case(&expected.as_bytes()[..e])
        && csrf::constant_time_eq(given[g + 1..].trim_ascii_start(), &expected.as_bytes()[e + 1..])
}

/// The CSRF token a POST carries: the `x-csrf-token` header, else the form field `csrf`.
fn submitted_token(headers: &HeaderMap, body: &Bytes) -> Option<String> {
    if let Some(v) = headers.get("x-csrf-token").and_then(|v| v.to_str().ok()) {
        return Some(v.to_string());
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return None;
    }
    form_urlencoded::parse(body).find(|(k, _)| k == "csrf").map(|(_, v)| v.into_owned())
}

/// The prefix the router is nested under: the original path minus the path the router sees.
fn mount_prefix(original: Option<&str>, inner: &str) -> String {
    let Some(original) = original else { return String::new() };
    let o = original.trim_end_matches('/');
    let i = inner.trim_end_matches('/');
    o.strip_suffix(i).unwrap_or("").trim_end_matches('/').to_string()
}

fn secure(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

fn plain_error(status: StatusCode, message: &str, json: bool) -> Response {
    if json {
        (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
    } else {
        (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{status}: {message}\n"))
            .into_response()
    }
}

/// Standard base64 with padding (for the expected basic-auth header).
fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 { T[(n >> 6) as usize & 63] as char } else { '=' });
        out.push(if chunk.len() > 2 { T[n as usize & 63] as char } else { '=' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")]
        {
            assert_eq!(base64(i.as_bytes()), o);
        }
        assert_eq!(
            Auth::basic("Aladdin", "open sesame").expected_header().unwrap(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
    }

    #[test]
    fn auth_header_scheme_is_case_insensitive() {
        assert!(auth_matches(b"Bearer tok", "Bearer tok"));
        assert!(auth_matches(b"bearer tok", "Bearer tok"));
        assert!(auth_matches(b"BASIC  Zm9v", "Basic Zm9v"));
        assert!(!auth_matches(b"Bearer tok2", "Bearer tok"));
        assert!(!auth_matches(b"Bearer Tok", "Bearer tok"));
        assert!(!auth_matches(b"Basic tok", "Bearer tok"));
        assert!(!auth_matches(b"Bearertok", "Bearer tok"));
        assert!(!auth_matches(b"", "Bearer tok"));
    }

    #[test]
    fn mount_prefix_is_the_stripped_part() {
        assert_eq!(mount_prefix(Some("/ops/jobs/queues/a"), "/queues/a"), "/ops/jobs");
        assert_eq!(mount_prefix(Some("/ops/jobs"), "/"), "/ops/jobs");
        assert_eq!(mount_prefix(Some("/ops/jobs/"), "/"), "/ops/jobs");
        assert_eq!(mount_prefix(Some("/"), "/"), "");
        assert_eq!(mount_prefix(Some("/jobs"), "/jobs"), "");
        assert_eq!(mount_prefix(None, "/jobs"), "");
    }

    #[test]
    fn debug_redacts_secrets() {
        let s = format!("{:?}", WebOptions::new(Auth::basic("ops", "hunter2")));
        assert!(!s.contains("hunter2"), "{s}");
        assert!(!format!("{:?}", Auth::bearer("tok-123")).contains("tok-123"));
    }

    #[test]
    fn no_auth_only_on_loopback() {
        let none = WebOptions::new(Auth::None);
        assert!(check_listen("127.0.0.1:8080".parse().unwrap(), &none).is_ok());
        assert!(check_listen("[::1]:8080".parse().unwrap(), &none).is_ok());
        let err = check_listen("0.0.0.0:8080".parse().unwrap(), &none).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(check_listen("0.0.0.0:8080".parse().unwrap(), &WebOptions::new(Auth::bearer("t"))).is_ok());
    }
}
