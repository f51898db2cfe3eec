//! The middleware in front of every route: the `Host` rule without authentication (DNS
//! rebinding), authentication, the mount prefix, the CSRF cookie; for every POST the
//! cross-origin refusal, read-only refusal, the body timeout and the CSRF check; security
//! headers on every response.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::csrf::{self, Check};
use crate::{data, Auth, Ctx, Shared};

/// The largest POST body accepted (a retry of many dead letters is ~40 bytes an id).
const MAX_BODY: usize = 256 * 1024;

pub(crate) async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    // The request's deadline: its reads stop on the database then (issue 40 item 3).
    let deadline = std::time::Instant::now() + st.opts.request_timeout;
    let wants_json = req.uri().path().starts_with("/api/")
        || req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("application/json"));

    // Without authentication a page of another site whose name resolves to this machine (DNS
    // rebinding) would be same-origin with the dashboard: answer only to local names.
    if st.opts.auth == Auth::None && !host_allowed(&req, &st.opts.allowed_hosts) {
        return secure(plain_error(
            StatusCode::MISDIRECTED_REQUEST,
            "this dashboard has no authentication and answers only to localhost, a loopback address or a host \
             allowed with WebOptions::allow_host",
            wants_json,
        ));
    }

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

    let cookies: Vec<String> =
        csrf::cookie_tokens(req.headers()).into_iter().filter(|t| st.csrf.check(t) == Check::Valid).collect();
    let (token, set_cookie) = match cookies.first() {
        Some(t) => (t.clone(), false),
        None => (st.csrf.issue(), true),
    };

    let mut req = req;
    if req.method() == Method::POST {
        if let Some(why) = cross_origin(req.headers(), &st.opts.allowed_hosts) {
            return secure(plain_error(StatusCode::FORBIDDEN, &why, wants_json));
        }
        if st.opts.read_only {
            return secure(plain_error(StatusCode::FORBIDDEN, "the dashboard is read-only", wants_json));
        }
        let (parts, body) = req.into_parts();
        let bytes = match tokio::time::timeout(st.opts.body_timeout, axum::body::to_bytes(body, MAX_BODY)).await {
            Ok(Ok(b)) => b,
            Ok(Err(_)) => {
                return secure(plain_error(StatusCode::PAYLOAD_TOO_LARGE, "request body too large", wants_json))
            }
            Err(_) => {
                let mut resp = plain_error(StatusCode::REQUEST_TIMEOUT, "the request body came too slowly", wants_json);
                resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                return secure(resp);
            }
        };
        let submitted = submitted_token(&parts.headers, &bytes);
        let ok = submitted
            .as_ref()
            .is_some_and(|s| cookies.iter().any(|c| csrf::constant_time_eq(c.as_bytes(), s.as_bytes())));
        if !ok {
            let why = match &submitted {
                Some(s) if st.csrf.check(s) == Check::Expired => {
                    "CSRF token expired: reload the page and try again".to_string()
                }
                Some(_) if !cookies.is_empty() => "CSRF token wrong: reload the page and try again".to_string(),
                _ => "CSRF token missing: reload the page and try again".to_string(),
            };
            return secure(plain_error(StatusCode::FORBIDDEN, &why, wants_json));
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
        backend: st.reads_until(deadline),
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
        let secure_attr = if st.opts.secure_cookie { "; Secure" } else { "" };
        let cookie =
            format!("{}={token}; Path={}; HttpOnly; SameSite=Strict{secure_attr}", csrf::COOKIE, cookie_path(&base));
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    secure(resp)
}

/// Whether an `Authorization` header value is the expected one: the scheme compared without
/// case (RFC 9110), the credentials in constant time.
pub(crate) fn auth_matches(given: &[u8], expected: &str) -> bool {
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
pub(crate) fn mount_prefix(original: Option<&str>, inner: &str) -> String {
    let Some(original) = original else { return String::new() };
    let o = original.trim_end_matches('/');
    let i = inner.trim_end_matches('/');
    o.strip_suffix(i).unwrap_or("").trim_end_matches('/').to_string()
}

/// The CSRF cookie's `Path`: the mount prefix, every byte that is not a safe path character
/// (letters, digits, `-._~/%!$&'()*+=:@`) percent-encoded, so that nothing from the request
/// (`;`, `,`, spaces) can end the attribute and add another. The encoded path never matches
/// the raw one, so a hostile prefix gets a cookie its requests do not carry (never a broader one).
pub(crate) fn cookie_path(base: &str) -> String {
    if base.is_empty() {
        return "/".to_string();
    }
    let mut out = String::with_capacity(base.len());
    for b in base.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/%!$&'()*+=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `host[:port]` or `[v6]:port` into the host (without brackets) and the port.
pub(crate) fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (h, port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    if host.is_empty() || (!s.starts_with('[') && host.contains(':')) {
        return None;
    }
    Some((host, port))
}

/// Whether `host` (and `port`) is a local name, or one of the allowed ones (`name` for any
/// port, `name:port` for that port only).
fn is_allowed(host: &str, port: Option<u16>, allowed: &[String]) -> bool {
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
        || host
            .parse::<Ipv6Addr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()));
    loopback
        || allowed
            .iter()
            .filter_map(|a| split_host_port(a))
            .any(|(h, p)| h.eq_ignore_ascii_case(host) && (p.is_none() || p == port))
}

/// The `Host` rule for [`Auth::None`]: the `Host` header, and the request target's authority
/// when it has one, must be local or allowed. A request without `Host` (HTTP/1.0, not a
/// browser: a browser always sends it) passes.
fn host_allowed(req: &Request, allowed: &[String]) -> bool {
    let ok = |v: &str| split_host_port(v).is_some_and(|(h, p)| is_allowed(h, p, allowed));
    if let Some(a) = req.uri().authority() {
        if !ok(a.as_str()) {
            return false;
        }
    }
    match req.headers().get(header::HOST) {
        None => true,
        Some(v) => v.to_str().is_ok_and(ok),
    }
}

/// Why a POST is cross-origin, if it is: `Sec-Fetch-Site` other than `same-origin` (or `none`,
/// a user's own navigation), or an `Origin` that is neither the request's `Host` nor an allowed
/// host (`null` included). A POST without either header (a script, curl) is left to the CSRF
/// token.
fn cross_origin(headers: &HeaderMap, allowed: &[String]) -> Option<String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return Some(format!(
                "cross-origin request refused (Sec-Fetch-Site: {})",
                String::from_utf8_lossy(site.as_bytes())
            ));
        }
    }
    let origin = headers.get(header::ORIGIN)?;
    let refused = || Some("cross-origin request refused: its Origin is not this dashboard".to_string());
    let Some((scheme, authority)) = origin.to_str().ok().and_then(|o| o.split_once("://")) else { return refused() };
    let default_port = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return refused(),
    };
    let Some((o_host, o_port)) = split_host_port(authority) else { return refused() };
    let o_port = o_port.unwrap_or(default_port);
    let same_as_host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(split_host_port)
        .is_some_and(|(h, p)| h.eq_ignore_ascii_case(o_host) && p.unwrap_or(default_port) == o_port);
    let allowed_origin = allowed
        .iter()
        .filter_map(|a| split_host_port(a))
        .any(|(h, p)| h.eq_ignore_ascii_case(o_host) && p.is_none_or(|p| p == o_port));
    if same_as_host || allowed_origin {
        None
    } else {
        refused()
    }
}

pub(crate) fn secure(mut resp: Response) -> Response {
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

pub(crate) fn plain_error(status: StatusCode, message: &str, json: bool) -> Response {
    if json {
        (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
    } else {
        let shown = crate::html::visible(message);
        (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{status}: {shown}\n")).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn cookie_paths_are_safe_characters_only() {
        assert_eq!(cookie_path(""), "/");
        assert_eq!(cookie_path("/ops/jobs"), "/ops/jobs");
        assert_eq!(cookie_path("/t/x;Path=%2F;SameSite=None"), "/t/x%3BPath=%2F%3BSameSite=None");
        assert_eq!(cookie_path("/a b,c\"d\\"), "/a%20b%2Cc%22d%5C");
        assert_eq!(cookie_path("/é"), "/%C3%A9");
    }

    #[test]
    fn hosts_split_and_match() {
        assert_eq!(split_host_port("localhost:8080"), Some(("localhost", Some(8080))));
        assert_eq!(split_host_port("[::1]:80"), Some(("::1", Some(80))));
        assert_eq!(split_host_port("[::1]"), Some(("::1", None)));
        assert_eq!(split_host_port("::1"), None);
        assert_eq!(split_host_port(""), None);
        assert_eq!(split_host_port("a:b"), None);
        assert_eq!(split_host_port("[::1]x"), None);
        for local in ["localhost", "LocalHost", "127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            assert!(is_allowed(local, Some(1), &[]), "{local}");
        }
        for foreign in ["localhost.attacker.example", "127.0.0.1.nip.io", "10.0.0.1", "0.0.0.0", "::", "127.1"] {
            assert!(!is_allowed(foreign, Some(1), &[]), "{foreign}");
        }
        let allowed = vec!["jobs.example.com".to_string(), "ops.example.com:8443".to_string()];
        assert!(is_allowed("JOBS.example.com", Some(1), &allowed));
        assert!(is_allowed("ops.example.com", Some(8443), &allowed));
        assert!(!is_allowed("ops.example.com", Some(443), &allowed));
    }

    #[test]
    fn origins_must_name_the_host() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_static(v));
            }
            m
        };
        assert!(cross_origin(&h(&[("host", "localhost:8080")]), &[]).is_none());
        assert!(cross_origin(&h(&[("host", "localhost:8080"), ("origin", "http://localhost:8080")]), &[]).is_none());
        assert!(cross_origin(&h(&[("host", "localhost"), ("origin", "http://localhost")]), &[]).is_none());
        assert!(cross_origin(&h(&[("host", "x.example"), ("origin", "https://x.example")]), &[]).is_none());
        assert!(cross_origin(&h(&[("host", "localhost:8080"), ("origin", "http://localhost:8081")]), &[]).is_some());
        assert!(cross_origin(&h(&[("host", "localhost:8080"), ("origin", "null")]), &[]).is_some());
        assert!(cross_origin(&h(&[("host", "localhost:8080"), ("sec-fetch-site", "same-site")]), &[]).is_some());
        assert!(cross_origin(&h(&[("host", "localhost:8080"), ("sec-fetch-site", "none")]), &[]).is_none());
        let proxy = vec!["jobs.example.com".to_string()];
        let behind = h(&[("host", "127.0.0.1:8080"), ("origin", "https://jobs.example.com")]);
        assert!(cross_origin(&behind, &[]).is_some());
        assert!(cross_origin(&behind, &proxy).is_none());
    }
}
