//! tests/api.rs: authentication, CSRF and read-only on every route; basic auth, no auth, a real listener.

use super::*;

// ---- cases ------------------------------------------------------------------------------

/// Every GET endpoint: 401 without auth or with a wrong one (with a challenge), 200 with it.
pub(crate) async fn every_get_needs_auth(b: Arc<dyn Backend>) -> TestResult {
    let live = enqueue(&b, "web-a", "web.ok.v1", 1).await?[0];
    let s = session(&b).await?;
    let paths = [
        "".to_string(),
        "?fragment=live".into(),
        "/jobs".into(),
        "/jobs?table=archive".into(),
        "/jobs?table=dead".into(),
        format!("/jobs/{live}"),
        "/queues/web-a".into(),
        "/dead".into(),
        "/workers".into(),
        "/assets/style.css".into(),
        "/assets/app.js".into(),
        "/api/overview".into(),
        "/api/queues/web-a".into(),
        "/api/jobs".into(),
        format!("/api/jobs/{live}"),
        "/api/workers".into(),
        "/api/csrf".into(),
    ];
    for p in &paths {
        for auth in [None, Some("Bearer wrong-token"), Some("Basic b3BzOnB3"), Some(TOKEN)] {
            let mut anon = s.clone();
            anon.auth = auth.map(str::to_string);
            let r = anon.get(p).await?;
            ensure_eq!(r.status, StatusCode::UNAUTHORIZED, "GET {p} with {auth:?}");
            ensure_eq!(r.header(header::WWW_AUTHENTICATE), "Bearer realm=\"chokaq\"", "challenge of {p}");
            ensure!(!r.body.contains("web-a"), "a 401 leaks data: {}", r.body);
        }
        let r = s.get(p).await?;
        ensure_eq!(r.status, StatusCode::OK, "GET {p}: {}", r.body);
        ensure!(r.header(header::CONTENT_SECURITY_POLICY).contains("default-src 'none'"), "CSP on {p}");
    }
    Ok(())
}

/// One action, how to check that it took effect, and its expected redirect.
pub(crate) struct Action {
    pub(crate) path: String,
    pub(crate) fields: Vec<(&'static str, String)>,
    pub(crate) redirect: String,
}

pub(crate) async fn actions_fixture(b: &Arc<dyn Backend>) -> Result<(Vec<Action>, JobId, JobId, JobId), String> {
    let live = enqueue(b, "web-b", "web.ok.v1", 1).await?[0];
    let dead = make_dead(b, "web-d", 3, "boom").await?;
    let acts = vec![
        Action { path: "/queues/web-b/pause".into(), fields: vec![], redirect: "/queues/web-b?done=pause".into() },
        Action { path: "/queues/web-b/resume".into(), fields: vec![], redirect: "/queues/web-b?done=resume".into() },
        Action {
            path: "/queues/web-b/deactivate".into(),
            fields: vec![],
            redirect: "/queues/web-b?done=deactivate".into(),
        },
        Action {
            path: "/queues/web-b/activate".into(),
            fields: vec![],
            redirect: "/queues/web-b?done=activate".into(),
        },
        Action {
            path: "/queues/web-b/cap".into(),
            fields: vec![("max_workers", "3".into())],
            redirect: "/queues/web-b?done=cap".into(),
        },
        Action {
            path: format!("/jobs/{live}/cancel"),
            fields: vec![("confirm", "yes".into())],
            redirect: format!("/jobs/{live}?done=cancelled"),
        },
        Action {
            path: format!("/jobs/{}/retry", dead[0]),
            fields: vec![],
            redirect: format!("/jobs/{}?done=requeued", dead[0]),
        },
        Action {
            path: "/dead/retry".into(),
            fields: vec![("ids", dead[1].to_string())],
            redirect: "/dead?done=requeued&n=1".into(),
        },
        Action {
            path: "/dead/purge".into(),
            fields: vec![("older_than_hours", "0".into()), ("queue", "web-d".into()), ("confirm", "yes".into())],
            redirect: "/dead?done=purged&n=1".into(),
        },
    ];
    Ok((acts, live, dead[0], dead[2]))
}

/// The state the actions change, to show that a refused action changed nothing.
pub(crate) async fn snapshot(b: &Arc<dyn Backend>, ids: &[JobId]) -> Result<String, String> {
    let s = b.queue_settings(&q("web-b")).await.map_err(err)?;
    let mut out = format!("paused={} active={} cap={:?};", s.is_paused, s.is_active, s.max_workers);
    for id in ids {
        out.push_str(&format!("{:?};", location(b, *id).await?));
    }
    Ok(out)
}

/// Every action: refused without auth, without a CSRF token (none, only the cookie, only the
/// field), with a wrong one (forged, another dashboard's, cookie and field differing); then
/// done with both.
pub(crate) async fn every_action_needs_auth_and_csrf(b: Arc<dyn Backend>) -> TestResult {
    let (acts, live, dead0, dead2) = actions_fixture(&b).await?;
    let s = session(&b).await?;
    let before = snapshot(&b, &[live, dead0, dead2]).await?;
    // A valid token of another dashboard instance (another secret).
    let other = session(&b).await?;
    let other_token = other.token.clone().unwrap();
    let mine = s.token.clone().unwrap();
    let forged = format!("{}.{}", &mine[..32], "0".repeat(64));

    for a in &acts {
        let fields: Vec<(&str, &str)> = a.fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // No auth (but a good token).
        let mut anon = s.clone();
        anon.auth = None;
        ensure_eq!(anon.post(&a.path, &fields).await?.status, StatusCode::UNAUTHORIZED, "POST {} without auth", a.path);
        // No token at all.
        let mut none = s.clone();
        none.cookie = None;
        none.token = None;
        let r = none.post(&a.path, &fields).await?;
        ensure_eq!(r.status, StatusCode::FORBIDDEN, "POST {} without CSRF", a.path);
        ensure!(r.body.contains("CSRF token missing"), "{}", r.body);
        // Cookie only.
        let mut cookie_only = s.clone();
        cookie_only.token = None;
        ensure_eq!(cookie_only.post(&a.path, &fields).await?.status, StatusCode::FORBIDDEN, "{} cookie only", a.path);
        // Field only.
        let mut field_only = s.clone();
        field_only.cookie = None;
        ensure_eq!(field_only.post(&a.path, &fields).await?.status, StatusCode::FORBIDDEN, "{} field only", a.path);
        // Wrong: forged signature (cookie = field), another instance's token, cookie != field.
        for (cookie, field) in [(&forged, &forged), (&other_token, &other_token), (&mine, &other_token)] {
            let mut wrong = s.clone();
            wrong.cookie = Some(format!("chokaq_csrf={cookie}"));
            wrong.token = Some(field.clone());
            let r = wrong.post(&a.path, &fields).await?;
            ensure_eq!(r.status, StatusCode::FORBIDDEN, "POST {} with a wrong CSRF token", a.path);
            ensure!(r.body.contains("CSRF token"), "{}", r.body);
        }
        // The header instead of the field works the same way: a wrong one is refused.
        let h = [("authorization", BEARER), ("cookie", &format!("chokaq_csrf={mine}")), ("x-csrf-token", &other_token)];
        let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, *v)).collect();
        let r = call(&s.app, "POST", &format!("{PREFIX}{}", a.path), &hs, Some(form_body(&fields))).await?;
        ensure_eq!(r.status, StatusCode::FORBIDDEN, "POST {} with a wrong x-csrf-token", a.path);
    }
    ensure_eq!(snapshot(&b, &[live, dead0, dead2]).await?, before, "refused actions changed nothing");

    // Now each one with auth and the token: a 303 to the right page.
    for a in &acts {
        let fields: Vec<(&str, &str)> = a.fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = s.post(&a.path, &fields).await?;
        ensure_eq!(r.status, StatusCode::SEE_OTHER, "POST {}: {}", a.path, r.body);
        ensure_eq!(r.header(header::LOCATION), format!("{PREFIX}{}", a.redirect), "redirect of {}", a.path);
    }
    let st = b.queue_settings(&q("web-b")).await.map_err(err)?;
    ensure!(!st.is_paused && st.is_active && st.max_workers == Some(3), "settings {st:?}");
    ensure_eq!(location(&b, live).await?, Some(JobLocation::Dead(DeadReason::Cancelled)), "cancelled");
    ensure_eq!(location(&b, dead0).await?, Some(JobLocation::Hot(JobStatus::Pending)), "retried");
    ensure_eq!(location(&b, dead2).await?, None, "purged");

    // The token in the x-csrf-token header works too.
    let h = [("authorization", BEARER), ("cookie", &format!("chokaq_csrf={mine}")), ("x-csrf-token", &mine)];
    let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, *v)).collect();
    let r = call(&s.app, "POST", &format!("{PREFIX}/queues/web-b/pause"), &hs, None).await?;
    ensure_eq!(r.status, StatusCode::SEE_OTHER, "pause with the header: {}", r.body);
    ensure!(b.queue_settings(&q("web-b")).await.map_err(err)?.is_paused, "paused through the header");
    Ok(())
}

/// Read-only: every action refused with 403 (auth and CSRF good), nothing changes, and no page
/// shows a form or button for an action.
pub(crate) async fn read_only_refuses_and_hides(b: Arc<dyn Backend>) -> TestResult {
    let (acts, live, dead0, dead2) = actions_fixture(&b).await?;
    let ro =
        Session::new(mounted(b.clone(), WebOptions::new(Auth::bearer(TOKEN)).read_only(true)), PREFIX, Some(BEARER))
            .login()
            .await?;
    let before = snapshot(&b, &[live, dead0, dead2]).await?;
    for a in &acts {
        let fields: Vec<(&str, &str)> = a.fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = ro.post(&a.path, &fields).await?;
        ensure_eq!(r.status, StatusCode::FORBIDDEN, "read-only POST {}", a.path);
        ensure!(r.body.contains("read-only"), "{}", r.body);
        ensure_eq!(
            ro.post_json(&a.path, &fields).await?.status,
            StatusCode::FORBIDDEN,
            "read-only JSON POST {}",
            a.path
        );
    }
    ensure_eq!(snapshot(&b, &[live, dead0, dead2]).await?, before, "read-only changed something");
    for p in [
        "".to_string(),
        "/queues/web-b".into(),
        format!("/jobs/{live}"),
        format!("/jobs/{dead0}"),
        "/dead".into(),
        "/jobs".into(),
        "/workers".into(),
    ] {
        let r = ro.get(&p).await?;
        ensure_eq!(r.status, StatusCode::OK, "GET {p}");
        ensure!(r.body.contains("id=\"read-only\""), "read-only badge on {p}");
        for needle in ["method=\"post\"", "data-action=", "btn primary", "btn danger"] {
            ensure!(!r.body.contains(needle), "{needle} on read-only {p}");
        }
    }
    // The read-write dashboard does show them.
    let rw = session(&b).await?;
    ensure!(rw.get(&format!("/jobs/{dead0}")).await?.body.contains("data-action=\"retry\""), "retry button");
    ensure!(rw.get("/queues/web-b").await?.body.contains("data-action=\"pause\""), "pause button");
    Ok(())
}

/// Basic auth, and Auth::None (no auth, CSRF still required).
pub(crate) async fn basic_and_no_auth(b: Arc<dyn Backend>) -> TestResult {
    let app = mounted(b.clone(), WebOptions::new(Auth::basic("ops", "pa:ss")));
    // "ops:pa:ss" in base64.
    let good = "Basic b3BzOnBhOnNz";
    let r = call(&app, "GET", "/ops/jobs", &[], None).await?;
    ensure_eq!(r.status, StatusCode::UNAUTHORIZED, "no auth");
    ensure!(r.header(header::WWW_AUTHENTICATE).starts_with("Basic realm=\"chokaq\""), "basic challenge");
    ensure_eq!(
        call(&app, "GET", "/ops/jobs", &[("authorization", "Basic b3BzOndyb25n")], None).await?.status,
        StatusCode::UNAUTHORIZED,
        "wrong password"
    );
    ensure_eq!(
        call(&app, "GET", "/ops/jobs", &[("authorization", BEARER)], None).await?.status,
        StatusCode::UNAUTHORIZED,
        "bearer on basic"
    );
    ensure_eq!(call(&app, "GET", "/ops/jobs", &[("authorization", good)], None).await?.status, StatusCode::OK, "basic");
    let s = Session::new(app, PREFIX, Some(good)).login().await?;
    // create=yes: web-ba has no job (issue 40: no settings for an unknown queue without it).
    let create = [("create", "yes")];
    ensure_eq!(s.post("/queues/web-ba/pause", &create).await?.status, StatusCode::SEE_OTHER, "basic POST");

    let open = Session::new(mounted(b.clone(), WebOptions::new(Auth::None)), PREFIX, None);
    ensure_eq!(open.get("").await?.status, StatusCode::OK, "Auth::None GET");
    ensure_eq!(
        open.post("/queues/web-ba/resume", &[]).await?.status,
        StatusCode::FORBIDDEN,
        "Auth::None still needs CSRF"
    );
    let open = open.login().await?;
    ensure_eq!(open.post("/queues/web-ba/resume", &[]).await?.status, StatusCode::SEE_OTHER, "Auth::None with CSRF");
    ensure!(!b.queue_settings(&q("web-ba")).await.map_err(err)?.is_paused, "resumed");
    Ok(())
}

/// `serve_on` over a real socket: auth enforced, `Auth::None` refused off loopback.
pub(crate) async fn real_listener(b: Arc<dyn Backend>) -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let err0 =
        chokaq_web::serve(b.clone(), "0.0.0.0:0".parse().unwrap(), WebOptions::new(Auth::None)).await.unwrap_err();
    ensure_eq!(err0.kind(), ErrorKind::InvalidInput, "no auth on 0.0.0.0");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
    let addr = listener.local_addr().map_err(err)?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let stop2 = stop.clone();
    let server =
        tokio::spawn(chokaq_web::serve_on(b.clone(), listener, WebOptions::new(Auth::bearer(TOKEN)), async move {
            stop2.notified().await
        }));
    let get = |auth: Option<&'static str>| async move {
        let mut c = tokio::net::TcpStream::connect(addr).await.map_err(err)?;
        let a = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        c.write_all(format!("GET /api/overview HTTP/1.1\r\nHost: x\r\n{a}Connection: close\r\n\r\n").as_bytes())
            .await
            .map_err(err)?;
        let mut out = String::new();
        c.read_to_string(&mut out).await.map_err(err)?;
        Ok::<String, String>(out)
    };
    let anon = get(None).await?;
    ensure!(anon.starts_with("HTTP/1.1 401"), "{anon}");
    let ok = get(Some(BEARER)).await?;
    ensure!(ok.starts_with("HTTP/1.1 200") && ok.contains("\"totals\""), "{ok}");
    stop.notify_one();
    tokio::time::timeout(Duration::from_secs(10), server).await.map_err(err)?.map_err(err)?.map_err(err)?;
    Ok(())
}
