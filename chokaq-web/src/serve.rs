//! The standalone server behind [`serve_on`](crate::serve_on): an accept loop over hyper's
//! HTTP/1 server with a timer, so that limits hold before any authentication.
//!
//! - at most `max_connections` connections are served at once: the loop takes a slot before it
//!   accepts, so further clients wait in the kernel's listen backlog (costing the process no
//!   file descriptor) until a connection closes;
//! - hyper's header-read timeout closes a connection that has not sent a whole request head
//!   within `header_read_timeout`: partial headers, nothing at all, or nothing more after a
//!   kept-alive response;
//! - a request not answered within `request_timeout` gets 503 and the connection is closed;
//! - the POST body timeout is the guard's (it reads the body), so it holds under
//!   [`router`](crate::router) too.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::guard::{plain_error, secure};
use crate::WebOptions;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_connections: usize,
}

impl From<&WebOptions> for Limits {
    fn from(o: &WebOptions) -> Self {
        Limits {
            header_read_timeout: o.header_read_timeout,
            request_timeout: o.request_timeout,
            max_connections: o.max_connections,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then until every connection is closed.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: say so, give it a moment.
                    tracing::warn!(error = %e, "chokaq dashboard: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(app.clone());
        let timeout = limits.request_timeout;
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let call = svc.call(req);
            async move {
                match tokio::time::timeout(timeout, call).await {
                    Ok(resp) => resp,
                    Err(_) => {
                        let mut resp = plain_error(StatusCode::SERVICE_UNAVAILABLE, "the request timed out", false);
                        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                        Ok(secure(resp))
                    }
                }
            }
        });
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let mut stopping = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "chokaq dashboard: connection ended");
                        }
                        break;
                    }
                    _ = stop.wait_for(|s| *s), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it is closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}
