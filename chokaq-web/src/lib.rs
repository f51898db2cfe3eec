//! `chokaq-web`: the chokaq dashboard, an [axum] [`Router`] over any [`Backend`].
//!
//! ```no_run
//! # async fn demo(backend: std::sync::Arc<dyn chokaq_core::Backend>) -> chokaq_core::Result<()> {
//! use chokaq_web::{Auth, WebOptions};
//! // Mounted inside an application, under any prefix:
//! let dashboard = chokaq_web::router(backend.clone(), WebOptions::new(Auth::bearer("a-long-random-token-0123")));
//! let app: axum::Router = axum::Router::new().nest("/ops/jobs", dashboard);
//! # let _ = app;
//! // Or standalone:
//! chokaq_web::serve(backend, "127.0.0.1:8080".parse().unwrap(), WebOptions::new(Auth::basic("ops", "correct-horse-battery"))).await
//! # }
//! ```
//!
//! Pages are server-rendered HTML that read with JavaScript off; a small embedded script
//! refreshes the overview every 1.5 s and asks for confirmation before irreversible actions.
//! Every action is a POST that needs the CSRF token (double-submit: the `chokaq_csrf` cookie,
//! `SameSite=Strict`, and the same value in the form field `csrf` or the `x-csrf-token`
//! header; tokens expire after 12 h), and a POST whose `Origin` or `Sec-Fetch-Site` says
//! cross-origin is refused; read-only mode hides every action and refuses every POST with 403.
//! Without authentication only a local `Host` is answered (DNS rebinding). [`serve`] holds
//! header-read, body and request timeouts and a connection cap before authentication. Every
//! read a request makes carries its deadline (arrival + `request_timeout`) to the database
//! ([`Backend::with_read_deadline`]): the statement is stopped there when the deadline passes or
//! the request is dropped. Nothing is loaded from outside the binary.
//!
//! Every request is logged with `tracing` (target `chokaq_web::access`): method, path (never
//! the query, headers or body), status and milliseconds; a 5xx at ERROR, a 4xx at WARN.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::{middleware, Router};
use chokaq_core::{Backend, Error, ErrorKind};

mod access;
mod chart;
mod csrf;
mod data;
mod guard;
mod html;
mod options;
mod pages;
mod serve;

pub use data::{OverviewData, QueueRow, Totals, WorkersSummary};
pub use options::{Auth, WebOptions, MIN_SECRET_LEN};

pub(crate) struct AppState {
    pub backend: Arc<dyn Backend>,
    pub opts: WebOptions,
    pub expected_auth: Option<String>,
    pub csrf: csrf::Csrf,
    pub cache: data::SnapshotCache,
}

pub(crate) type Shared = Arc<AppState>;

impl AppState {
    /// The backend with its reads bounded by `deadline` ([`Backend::with_read_deadline`]): the
    /// database stops a read's statement when the deadline passes or the read is dropped. The
    /// backend itself when it takes no deadline.
    pub fn reads_until(&self, deadline: std::time::Instant) -> Arc<dyn Backend> {
        self.backend.with_read_deadline(deadline).unwrap_or_else(|| self.backend.clone())
    }

    /// [`AppState::reads_until`] the request timeout from now: what a computation off the
    /// request path (the overview's snapshot) reads through.
    pub fn reads_from_now(&self) -> Arc<dyn Backend> {
        self.reads_until(std::time::Instant::now() + self.opts.request_timeout)
    }
}

/// What every handler knows about the request: where the dashboard is mounted, the CSRF token
/// to put in forms, whether the client wants JSON, and the backend to read through.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub base: String,
    pub csrf: String,
    pub read_only: bool,
    pub wants_json: bool,
    /// The backend, its reads bounded by the request's deadline (arrival + `request_timeout`):
    /// a read still running then, or when the request is dropped (the client went away, the
    /// server's request timeout), is stopped on the database.
    pub backend: Arc<dyn Backend>,
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
/// must put its own authentication in front (the `Host` rule still applies: see
/// [`WebOptions::allow_host`]).
///
/// It cannot return an error: options that [`WebOptions::validate`] refuses (a short token, a
/// zero timeout) are logged as a warning and used as given. Call `validate` first when
/// embedding. The header-read and request timeouts and the connection cap belong to the
/// server ([`serve`], [`serve_on`]); an embedding application sets its own. The router still
/// bounds each request's database reads by `request_timeout` from the request's arrival.
pub fn router(backend: Arc<dyn Backend>, options: WebOptions) -> Router {
    if let Err(e) = options.validate() {
        tracing::warn!(error = %e, "chokaq dashboard: weak or unusable options (WebOptions::validate)");
    }
    let state: Shared = Arc::new(AppState {
        backend,
        expected_auth: options.auth.expected_header(),
        csrf: csrf::Csrf::new(options.csrf_max_age),
        opts: options,
        cache: data::SnapshotCache::default(),
    });
    // The first snapshot, computed at once when there is a runtime, so no visitor waits for it.
    if !state.opts.snapshot_max_age.is_zero() {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let st = state.clone();
            rt.spawn(async move {
                if let Err(e) = data::refresh_first(&st).await {
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
        .layer(middleware::from_fn_with_state(state.clone(), guard::guard))
        .layer(middleware::from_fn(access::access_log))
        .with_state(state)
}

/// Serves the dashboard on `listen` until the process gets Ctrl-C / SIGTERM.
///
/// Refuses options that [`WebOptions::validate`] refuses, and [`Auth::None`] unless `listen` is
/// a loopback address (the `--no-auth` rule). Every connection must send its request headers
/// within [`WebOptions::header_read_timeout`](WebOptions#structfield.header_read_timeout), a
/// POST its body within `body_timeout`, a request is answered (or cut off with 503) within
/// `request_timeout`, and at most `max_connections` are served at once (the next ones wait in
/// the listen backlog), all before authentication.
pub async fn serve(backend: Arc<dyn Backend>, listen: SocketAddr, options: WebOptions) -> chokaq_core::Result<()> {
    check_listen(listen, &options)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Error::with_source(ErrorKind::Unavailable, format!("could not listen on {listen}: {e}"), e))?;
    serve_on(backend, listener, options, shutdown_signal()).await
}

/// Serves the dashboard on a bound listener until `shutdown` resolves (tests, embedding), with
/// the checks, timeouts and connection cap of [`serve`]. On shutdown it stops accepting, lets
/// each connection finish its request in flight, and returns once every connection is closed.
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
    let limits = serve::Limits::from(&options);
    serve::run(listener, router(backend, options), limits, shutdown).await;
    Ok(())
}

/// Whether `options` may be served on `listen`: [`WebOptions::validate`], and `Auth::None`
/// only on loopback. An `InvalidInput` error otherwise (what `chokaq web` reports, exit 2).
pub fn check_listen(listen: SocketAddr, options: &WebOptions) -> chokaq_core::Result<()> {
    options.validate()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_auth_only_on_loopback() {
        let none = WebOptions::new(Auth::None);
        assert!(check_listen("127.0.0.1:8080".parse().unwrap(), &none).is_ok());
        assert!(check_listen("[::1]:8080".parse().unwrap(), &none).is_ok());
        let err = check_listen("0.0.0.0:8080".parse().unwrap(), &none).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        let token = WebOptions::new(Auth::bearer("a-token-of-24-characters"));
        assert!(check_listen("0.0.0.0:8080".parse().unwrap(), &token).is_ok());
        let short = WebOptions::new(Auth::bearer("t"));
        assert_eq!(check_listen("0.0.0.0:8080".parse().unwrap(), &short).unwrap_err().kind(), ErrorKind::InvalidInput);
    }
}
