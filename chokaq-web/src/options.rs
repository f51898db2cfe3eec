//! The dashboard's settings: how requests authenticate ([`Auth`]) and everything else
//! ([`WebOptions`]), with [`WebOptions::validate`] refusing weak or unusable values.

use std::time::Duration;

use chokaq_core::Error;

/// The shortest bearer token or basic-auth password accepted.
pub const MIN_SECRET_LEN: usize = 16;

/// How the dashboard authenticates a request.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// HTTP basic auth (the browser asks for it).
    Basic { user: String, pass: String },
    /// No authentication. [`serve`](crate::serve) accepts it only on a loopback address, and
    /// the dashboard then answers only requests whose `Host` is `localhost`, a loopback address
    /// or a name allowed with [`WebOptions::allow_host`] (DNS rebinding). With
    /// [`router`](crate::router) the embedding application is responsible for authenticating
    /// requests before they reach it.
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
    pub(crate) fn expected_header(&self) -> Option<String> {
        match self {
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::Basic { user, pass } => Some(format!("Basic {}", base64(format!("{user}:{pass}").as_bytes()))),
            Auth::None => None,
        }
    }

    pub(crate) fn challenge(&self) -> &'static str {
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
    /// None: worked out from the request (the prefix of [`Router::nest`](axum::Router::nest)).
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
    /// Host names accepted besides `localhost` and loopback addresses (see
    /// [`WebOptions::allow_host`]).
    pub allowed_hosts: Vec<String>,
    /// Mark the CSRF cookie `Secure` (see [`WebOptions::secure_cookie`]).
    pub secure_cookie: bool,
    /// How long a CSRF token is accepted after it was issued (default 12 h).
    pub csrf_max_age: Duration,
    /// How long a connection may take to send a request's headers, the first request's or the
    /// next one's on a kept-alive connection (default 10 s; [`serve`](crate::serve) and
    /// [`serve_on`](crate::serve_on)).
    pub header_read_timeout: Duration,
    /// How long one request may take from its headers to its response (default 60 s;
    /// [`serve`](crate::serve) and [`serve_on`](crate::serve_on)). Under [`router`](crate::router)
    /// too, it is the deadline of each request's database reads (from its arrival), stopped on
    /// the database when it passes ([`chokaq_core::Backend::with_read_deadline`]).
    pub request_timeout: Duration,
    /// How long a POST may take to send its body (default 10 s; also under
    /// [`router`](crate::router)).
    pub body_timeout: Duration,
    /// How many connections [`serve`](crate::serve) and [`serve_on`](crate::serve_on) serve at
    /// once (default 512); more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// How many of those connections one peer may hold (one IPv4 address, one IPv6 /64;
    /// default 64, at most `max_connections`): one more is answered 429 and closed at once, so
    /// one client cannot take every slot. Behind a reverse proxy every connection comes from
    /// the proxy: raise it to `max_connections` there.
    pub max_connections_per_peer: usize,
}

impl WebOptions {
    /// Read-write, the prefix from the request, workers stuck after 60 s, lag highlighted
    /// from 60 s, refresh every 1.5 s, CSRF tokens valid for 12 h, headers within 10 s, a
    /// body within 10 s, a request within 60 s, at most 512 connections, 64 from one peer.
    pub fn new(auth: Auth) -> Self {
        WebOptions {
            auth,
            read_only: false,
            base_path: None,
            worker_stale_after: Duration::from_secs(60),
            lag_warning: Duration::from_secs(60),
            refresh_every: Duration::from_millis(1500),
            snapshot_max_age: Duration::from_secs(1),
            allowed_hosts: Vec::new(),
            secure_cookie: false,
            csrf_max_age: Duration::from_secs(12 * 3600),
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(10),
            max_connections: 512,
            max_connections_per_peer: 64,
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

    /// Another name the dashboard may be reached by: `jobs.example.com` (any port) or
    /// `jobs.example.com:8443`. With [`Auth::None`] a request whose `Host` is not `localhost`,
    /// a loopback address or an allowed name is refused with 421 (DNS rebinding); in every
    /// mode a POST's `Origin` must name the request's `Host` or an allowed name (a proxy in
    /// front that rewrites `Host`).
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Mark the CSRF cookie `Secure`: set it when the browser reaches the dashboard over HTTPS
    /// (a TLS proxy in front). Off by default: a browser would drop a `Secure` cookie over
    /// plain HTTP on loopback.
    pub fn secure_cookie(mut self, secure: bool) -> Self {
        self.secure_cookie = secure;
        self
    }

    /// How long a CSRF token stays valid after it was issued (default 12 h). A POST with an
    /// older one is refused with 403 ("expired: reload the page"); the next page gets a new one.
    pub fn csrf_max_age(mut self, max_age: Duration) -> Self {
        self.csrf_max_age = max_age;
        self
    }

    /// See [`WebOptions::header_read_timeout`](WebOptions#structfield.header_read_timeout).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// See [`WebOptions::request_timeout`](WebOptions#structfield.request_timeout).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// See [`WebOptions::body_timeout`](WebOptions#structfield.body_timeout).
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// See [`WebOptions::max_connections`](WebOptions#structfield.max_connections).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// See [`WebOptions::max_connections_per_peer`](WebOptions#structfield.max_connections_per_peer).
    pub fn max_connections_per_peer(mut self, max: usize) -> Self {
        self.max_connections_per_peer = max;
        self
    }

    /// Refuses settings no one can use safely, as an `InvalidInput` error that never quotes a
    /// secret: a bearer token or basic-auth password that is blank, has surrounding whitespace
    /// or a control character, or is shorter than [`MIN_SECRET_LEN`] (16) characters; a
    /// basic-auth user that is empty or holds `:`; a zero timeout, CSRF lifetime, connection
    /// cap or per-peer cap; an allowed host that is not a host name or `host:port`. [`serve`](crate::serve),
    /// [`serve_on`](crate::serve_on) and [`check_listen`](crate::check_listen) call it;
    /// [`router`](crate::router) only logs its error, so call it yourself when embedding.
    pub fn validate(&self) -> chokaq_core::Result<()> {
        match &self.auth {
            Auth::Bearer(token) => check_secret("the bearer token", token)?,
            Auth::Basic { user, pass } => {
                if user.is_empty() || user.contains(':') || user.trim() != user || user.chars().any(char::is_control) {
                    return Err(Error::invalid(
                        "the basic-auth user must be non-empty, without ':', control characters or surrounding \
                         whitespace",
                    ));
                }
                check_secret("the basic-auth password", pass)?;
            }
            Auth::None => {}
        }
        for (name, d) in [
            ("csrf_max_age", self.csrf_max_age),
            ("header_read_timeout", self.header_read_timeout),
            ("request_timeout", self.request_timeout),
            ("body_timeout", self.body_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(format!("{name} must be longer than zero")));
            }
        }
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return Err(Error::invalid(format!(
                "max_connections must be between 1 and 1,000,000, not {}",
                self.max_connections
            )));
        }
        if self.max_connections_per_peer == 0 {
            return Err(Error::invalid("max_connections_per_peer must be at least 1"));
        }
        for h in &self.allowed_hosts {
            if crate::guard::split_host_port(h).is_none() || h.contains(|c: char| c.is_whitespace() || c == '/') {
                return Err(Error::invalid(format!("allowed host {h:?} is not a host name or host:port")));
            }
        }
        Ok(())
    }
}

fn check_secret(what: &str, secret: &str) -> chokaq_core::Result<()> {
    let why = if secret.trim().is_empty() {
        "is blank (empty or whitespace only)".to_string()
    } else if secret.trim() != secret {
        "starts or ends with whitespace".to_string()
    } else if secret.chars().any(char::is_control) {
        "holds a control character".to_string()
    } else if secret.chars().count() < MIN_SECRET_LEN {
        format!(
            "is {} characters long: use at least {MIN_SECRET_LEN} (e.g. `openssl rand -hex 24`)",
            secret.chars().count()
        )
    } else {
        return Ok(());
    };
    Err(Error::invalid(format!("{what} {why}")))
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
    fn debug_redacts_secrets() {
        let s = format!("{:?}", WebOptions::new(Auth::basic("ops", "hunter2")));
        assert!(!s.contains("hunter2"), "{s}");
        assert!(!format!("{:?}", Auth::bearer("tok-123")).contains("tok-123"));
    }

    #[test]
    fn secret_length_counts_characters() {
        assert!(check_secret("t", "0123456789abcdef").is_ok());
        assert!(check_secret("t", "0123456789abcde").is_err());
        assert!(check_secret("t", "ééééééééééééééé").is_err(), "15 characters, 30 bytes");
        assert!(check_secret("t", "0123456789\u{7}abcdef").is_err());
    }
}
