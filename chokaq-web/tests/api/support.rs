//! tests/api.rs: the HTTP helpers (one request, a logged-in session) and the fixtures.

use super::*;

// ---- HTTP -------------------------------------------------------------------------------

#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Resp {
    pub(crate) fn json(&self) -> Result<Value, String> {
        serde_json::from_str(&self.body).map_err(|e| format!("not JSON ({e}): {}", self.body))
    }
    pub(crate) fn header(&self, name: header::HeaderName) -> String {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
    }
}

pub(crate) async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Result<Resp, String> {
    let mut b = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if body.is_some() {
        b = b.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let req = b.body(body.map(Body::from).unwrap_or_else(Body::empty)).map_err(err)?;
    let resp = app.clone().oneshot(req).await.map_err(err)?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.map_err(err)?;
    Ok(Resp { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() })
}

pub(crate) fn form_body(fields: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        s.append_pair(k, v);
    }
    s.finish()
}

/// A browser-like client of one mounted dashboard: auth header, CSRF cookie and token.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) app: Router,
    pub(crate) prefix: String,
    pub(crate) auth: Option<String>,
    pub(crate) cookie: Option<String>,
    pub(crate) token: Option<String>,
}

impl Session {
    pub(crate) fn new(app: Router, prefix: &str, auth: Option<&str>) -> Self {
        Session { app, prefix: prefix.to_string(), auth: auth.map(str::to_string), cookie: None, token: None }
    }

    pub(crate) fn headers(&self, json: bool) -> Vec<(&'static str, String)> {
        let mut h = Vec::new();
        if let Some(a) = &self.auth {
            h.push(("authorization", a.clone()));
        }
        if let Some(c) = &self.cookie {
            h.push(("cookie", c.clone()));
        }
        if json {
            h.push(("accept", "application/json".to_string()));
        }
        h
    }

    pub(crate) async fn req(&self, method: &str, path: &str, json: bool, body: Option<String>) -> Result<Resp, String> {
        let h = self.headers(json);
        let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        call(&self.app, method, &format!("{}{path}", self.prefix), &hs, body).await
    }

    pub(crate) async fn get(&self, path: &str) -> Result<Resp, String> {
        self.req("GET", path, false, None).await
    }

    /// Fetches a CSRF token (and its cookie) from `GET /api/csrf`.
    pub(crate) async fn login(mut self) -> Result<Self, String> {
        let r = self.get("/api/csrf").await?;
        ensure_eq!(r.status, StatusCode::OK, "GET /api/csrf: {}", r.body);
        let token = r.json()?["token"].as_str().ok_or("no token")?.to_string();
        let set = r.header(header::SET_COOKIE);
        ensure!(set.starts_with(&format!("chokaq_csrf={token};")), "Set-Cookie {set:?}");
        ensure!(set.contains("SameSite=Strict") && set.contains("HttpOnly"), "cookie flags: {set}");
        self.cookie = Some(format!("chokaq_csrf={token}"));
        self.token = Some(token);
        Ok(self)
    }

    /// A form POST carrying the token in the form (as the pages do).
    pub(crate) async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Result<Resp, String> {
        let mut f: Vec<(&str, &str)> = fields.to_vec();
        if let Some(t) = &self.token {
            f.push(("csrf", t));
        }
        self.req("POST", path, false, Some(form_body(&f))).await
    }

    /// A JSON API POST carrying the token in the form.
    pub(crate) async fn post_json(&self, path: &str, fields: &[(&str, &str)]) -> Result<Resp, String> {
        let mut f: Vec<(&str, &str)> = fields.to_vec();
        if let Some(t) = &self.token {
            f.push(("csrf", t));
        }
        self.req("POST", path, true, Some(form_body(&f))).await
    }
}

pub(crate) fn mounted(backend: Arc<dyn Backend>, opts: WebOptions) -> Router {
    Router::new().nest(PREFIX, chokaq_web::router(backend, opts))
}

/// A logged-in session. The overview is computed on every request here
/// (`snapshot_max_age(ZERO)`), so a case sees what it just wrote; `overview_snapshot` tests the
/// shared snapshot.
pub(crate) async fn session(b: &Arc<dyn Backend>) -> Result<Session, String> {
    let opts = WebOptions::new(Auth::bearer(TOKEN)).snapshot_max_age(Duration::ZERO);
    Session::new(mounted(b.clone(), opts), PREFIX, Some(BEARER)).login().await
}

// ---- fixtures ---------------------------------------------------------------------------

pub(crate) fn q(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

pub(crate) async fn enqueue(b: &Arc<dyn Backend>, queue: &str, kind: &str, n: usize) -> Result<Vec<JobId>, String> {
    let jobs = (0..n).map(|i| NewJob::build(queue, kind).unwrap().json(serde_json::json!({ "i": i }))).collect();
    Ok(b.enqueue_many(jobs).await.map_err(err)?.into_iter().map(|e| e.id).collect())
}

/// Claims (start mode) every due job of `queue`, up to `n`.
pub(crate) async fn claim(
    b: &Arc<dyn Backend>,
    queue: &str,
    n: u32,
) -> Result<(WorkerId, Vec<chokaq_core::ClaimedJob>), String> {
    let w = WorkerId::random();
    let jobs = b.claim(&ClaimParams::new(w, vec![q(queue)], n, ClaimMode::Start)).await.map_err(err)?;
    Ok((w, jobs))
}

pub(crate) async fn make_archived(b: &Arc<dyn Backend>, queue: &str, n: usize) -> Result<Vec<JobId>, String> {
    let ids = enqueue(b, queue, "web.ok.v1", n).await?;
    let (w, jobs) = claim(b, queue, n as u32).await?;
    ensure_eq!(jobs.len(), n, "claimed");
    let leases: Vec<_> = jobs.iter().map(|j| j.lease_ref()).collect();
    let out = b.complete(w, &leases).await.map_err(err)?;
    ensure_eq!(out.done.len(), n, "completed");
    Ok(ids)
}

pub(crate) async fn make_dead(b: &Arc<dyn Backend>, queue: &str, n: usize, error: &str) -> Result<Vec<JobId>, String> {
    let ids = enqueue(b, queue, "web.fail.v1", n).await?;
    let (w, jobs) = claim(b, queue, n as u32).await?;
    ensure_eq!(jobs.len(), n, "claimed");
    for j in jobs {
        let out = b
            .fail(w, j.lease_ref(), FailAction::DeadLetter { reason: DeadReason::Failed, error: error.to_string() })
            .await
            .map_err(err)?;
        ensure!(matches!(out, chokaq_core::Fenced::Done(_)), "fail: {out:?}");
    }
    Ok(ids)
}

pub(crate) async fn location(b: &Arc<dyn Backend>, id: JobId) -> Result<Option<JobLocation>, String> {
    Ok(b.get_job(id).await.map_err(err)?.map(|j| j.location))
}
