//! The access and error log: one `tracing` event per request (target `chokaq_web::access`),
//! outside every other layer so refusals (401, 421, 429 from the guard) are logged too.
//!
//! A line names the method, the path as the client sent it (percent-encoded, any invisible
//! character escaped, at most [`MAX_PATH`] characters), the status and the duration in
//! milliseconds. Never the query string (filters, and whatever a client put there), headers
//! (the `Authorization` secret, cookies) or bodies (CSRF tokens). A 5xx is logged at ERROR, a
//! 4xx at WARN, the rest at INFO; a request dropped before its answer (the client went away,
//! or the server's request timeout cut it off) is logged at WARN as `cancelled`.

use std::time::Instant;

use axum::extract::{OriginalUri, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

/// The longest path logged (characters); a longer one is cut and marked with `…`.
pub(crate) const MAX_PATH: usize = 512;

pub(crate) async fn access_log(req: Request, next: Next) -> Response {
    let path = req.extensions().get::<OriginalUri>().map_or_else(|| req.uri().path(), |o| o.path());
    let mut line = Line { method: req.method().clone(), path: loggable(path), t0: Instant::now(), done: false };
    let resp = next.run(req).await;
    line.finish(resp.status().as_u16());
    resp
}

/// The path as logged: invisible characters escaped, cut at [`MAX_PATH`].
pub(crate) fn loggable(path: &str) -> String {
    let mut out = crate::html::visible(path);
    if let Some((i, _)) = out.char_indices().nth(MAX_PATH) {
        out.truncate(i);
        out.push('…');
    }
    out
}

/// One request's line, written when its answer is ready, or on drop when it never was.
struct Line {
    method: Method,
    path: String,
    t0: Instant,
    done: bool,
}

impl Line {
    fn finish(&mut self, status: u16) {
        self.done = true;
        let ms = self.t0.elapsed().as_millis() as u64;
        let (method, path) = (self.method.as_str(), self.path.as_str());
        match status {
            500.. => tracing::error!(target: "chokaq_web::access", method, path, status, ms, "request failed"),
            400..=499 => tracing::warn!(target: "chokaq_web::access", method, path, status, ms, "request refused"),
            _ => tracing::info!(target: "chokaq_web::access", method, path, status, ms, "request"),
        }
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if !self.done {
            let ms = self.t0.elapsed().as_millis() as u64;
            let (method, path) = (self.method.as_str(), self.path.as_str());
            tracing::warn!(target: "chokaq_web::access", method, path, ms, "request cancelled before its answer");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_escaped_and_cut() {
        assert_eq!(loggable("/queues/a\u{202E}b"), "/queues/a\\u{202e}b");
        let long = format!("/{}", "x".repeat(2000));
        let cut = loggable(&long);
        assert_eq!(cut.chars().count(), MAX_PATH + 1);
        assert!(cut.ends_with('…'));
    }
}
