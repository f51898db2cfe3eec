//! Server time of the dashboard's overview with a big archive.
//!
//! ```text
//! cargo run --release -p chokaq-web --example overview_bench
//! cargo run --release -p chokaq-web --example overview_bench -- --archived 1000000 --queues 10 --requests 50
//! ```
//!
//! Loads a fresh PostgreSQL schema (`chokaq_webbench_<hex>`, dropped at the end) with
//! `--archived` archived jobs (default 1,000,000) spread over `--queues` queues (default 10) and
//! finished over the last two hours, plus 1,000 pending and 100 dead jobs a queue; runs
//! `VACUUM ANALYZE` (the steady state autovacuum keeps); then times `--requests` (default 50)
//! in-process requests, one every `--spacing-ms` (default 50, so the 1 s shared snapshot is
//! refreshed in the background during the run), of the overview page (`GET /`), of
//! `GET /api/overview` and of the live fragment through the router (request in, whole body out:
//! the server's time, no network), after 5 warm-up requests (before them, 5 first snapshots:
//! `GET /` on a freshly built router, a second apart); then the same page with the
//! snapshot computed on every request (`snapshot_max_age(ZERO)`), and the backend calls under
//! it alone. Prints p50 / p95 / max in milliseconds.
//!
//! The URL comes from `CHOKAQ_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); it is never printed.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ThroughputParams};
use chokaq_postgres::{PgBackend, PgConfig};
use chokaq_web::{Auth, WebOptions};
use tower::ServiceExt;

struct Args {
    archived: i64,
    queues: i64,
    requests: usize,
    spacing_ms: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args { archived: 1_000_000, queues: 10, requests: 50, spacing_ms: 50 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let n: i64 = v.parse().map_err(|_| format!("{flag}: not a number: {v}"))?;
        match flag.as_str() {
            "--archived" => a.archived = n,
            "--queues" => a.queues = n.max(1),
            "--requests" => a.requests = n.max(1) as usize,
            "--spacing-ms" => a.spacing_ms = n.max(0) as u64,
            _ => return Err(format!("unknown option {flag} (--archived N, --queues N, --requests N, --spacing-ms N)")),
        }
    }
    Ok(a)
}

fn summary(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(|a, b| a.total_cmp(b));
    let pick = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<36} p50 {:>7.2} ms   p95 {:>7.2} ms   max {:>7.2} ms   (n={})",
        pick(0.5),
        pick(0.95),
        pick(1.0),
        ms.len()
    );
}

async fn time<F, Fut>(n: usize, spacing_ms: u64, mut f: F) -> Result<Vec<f64>, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    for _ in 0..5 {
        f().await?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f().await?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(std::time::Duration::from_millis(spacing_ms)).await;
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let a = args()?;
    let url =
        std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("chokaq_webbench_{:08x}", rand::random::<u32>());
    let pg =
        PgBackend::connect(PgConfig::new(url).schema(&schema).max_connections(8)).await.map_err(|e| e.to_string())?;
    pg.migrate().await.map_err(|e| e.to_string())?;
    let pg = Arc::new(pg);
    let out = run(&a, &schema, pg.clone()).await;
    pg.drop_schema().await.map_err(|e| e.to_string())?;
    out
}

async fn run(a: &Args, schema: &str, pg: Arc<PgBackend>) -> Result<(), String> {
    let e = |e: sqlx::Error| e.to_string();
    let t = Instant::now();
    // The schema name is ours (validated by PgConfig); every value is a bound parameter.
    sqlx::query(&format!(
        "INSERT INTO {schema}.jobs_archive (id, queue, kind, payload, priority, attempt, max_attempts, created_at, \
         started_at, updated_at, finished_at) \
         SELECT gen_random_uuid(), 'bench-q' || (g % $2), 'bench.v1', '{{}}'::jsonb, 0, 1, 25, f - interval '1 second', \
                f - interval '500 ms', f, f \
           FROM (SELECT g, now() - (g % 7200) * interval '1 second' - (g % 1000) * interval '1 ms' AS f \
                   FROM generate_series(1, $1::bigint) g) s"
    ))
    .bind(a.archived)
    .bind(a.queues)
    .execute(pg.pool())
    .await
    .map_err(e)?;
    sqlx::query(&format!(
        "INSERT INTO {schema}.jobs_hot (id, queue, kind, payload, max_attempts, created_at) \
         SELECT gen_random_uuid(), 'bench-q' || (g % $2), 'bench.v1', '{{}}'::jsonb, 25, now() - (g % 600) * interval '1 second' \
           FROM generate_series(1, $1::bigint) g"
    ))
    .bind(1000 * a.queues)
    .bind(a.queues)
    .execute(pg.pool())
    .await
    .map_err(e)?;
    sqlx::query(&format!(
        "INSERT INTO {schema}.jobs_dlq (id, queue, kind, payload, priority, attempt, max_attempts, created_at, updated_at, \
         reason, error, finished_at) \
         SELECT gen_random_uuid(), 'bench-q' || (g % $2), 'bench.v1', '{{}}'::jsonb, 0, 25, 25, now(), now(), 'failed', \
                'boom', now() - (g % 3600) * interval '1 second' \
           FROM generate_series(1, $1::bigint) g"
    ))
    .bind(100 * a.queues)
    .bind(a.queues)
    .execute(pg.pool())
    .await
    .map_err(e)?;
    for table in ["jobs_archive", "jobs_hot", "jobs_dlq"] {
        sqlx::query(&format!("VACUUM ANALYZE {schema}.{table}")).execute(pg.pool()).await.map_err(e)?;
    }
    println!(
        "loaded {} archived, {} pending, {} dead jobs in {} queues in {:.1} s",
        a.archived,
        1000 * a.queues,
        100 * a.queues,
        a.queues,
        t.elapsed().as_secs_f64()
    );

    let backend: Arc<dyn Backend> = pg.clone();
    let shared = chokaq_web::router(backend.clone(), WebOptions::new(Auth::bearer("bench")));
    let uncached = chokaq_web::router(
        backend.clone(),
        WebOptions::new(Auth::bearer("bench")).snapshot_max_age(std::time::Duration::ZERO),
    );
    let get = |app: &axum::Router, path: &'static str| {
        let app = app.clone();
        move || {
            let app = app.clone();
            async move {
                let req = Request::get(path)
                    .header("authorization", "Bearer bench")
                    .body(Body::empty())
                    .map_err(|e| e.to_string())?;
                let resp = app.oneshot(req).await.map_err(|e| e.to_string())?;
                if !resp.status().is_success() {
                    return Err(format!("GET {path}: {}", resp.status()));
                }
                axum::body::to_bytes(resp.into_body(), 1 << 24).await.map_err(|e| e.to_string())?;
                Ok(())
            }
        }
    };
    let stats = backend.stats().await.map_err(|e| e.to_string())?;
    println!(
        "stats: {} queues, {} archived, {} pending, {} dead",
        stats.queues.len(),
        stats.archived,
        stats.pending,
        stats.dead
    );
    let est = backend.stats_estimated().await.map_err(|e| e.to_string())?;
    println!(
        "stats_estimated: {} queues, {} archived ({}), {} pending, {} dead",
        est.queues.len(),
        est.archived,
        if est.archived_estimated { "estimate" } else { "exact" },
        est.pending,
        est.dead
    );
    let tp = backend.throughput(&ThroughputParams::last_hour()).await;
    match &tp {
        Ok(b) => println!(
            "throughput: {} buckets, {} jobs finished in the last hour",
            b.len(),
            b.iter().map(|b| b.finished).sum::<u64>()
        ),
        Err(e) => println!("throughput: {e} (the overview shows it as not available; not in these timings)"),
    }
    match backend.list_workers().await {
        Ok(w) => println!("workers: {}", w.len()),
        Err(e) => println!("workers: {e} (not in these timings)"),
    }

    // The first snapshot: a dashboard that has just started, no snapshot yet, so the request
    // waits for one computation (a fresh router each time, a second after the previous one so
    // that its background throughput read is over).
    let mut firsts = Vec::new();
    for _ in 0..5 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let fresh = chokaq_web::router(backend.clone(), WebOptions::new(Auth::bearer("bench")));
        let t = Instant::now();
        get(&fresh, "/")().await?;
        firsts.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    summary("GET / first snapshot (fresh dashboard)", firsts);

    let n = a.requests;
    let sp = a.spacing_ms;
    summary("GET / (overview, shared snapshot)", time(n, sp, get(&shared, "/")).await?);
    summary("GET /api/overview (shared snapshot)", time(n, sp, get(&shared, "/api/overview")).await?);
    summary("GET /?fragment=live (shared)", time(n, sp, get(&shared, "/?fragment=live")).await?);
    summary("GET / computed on every request", time(n, sp, get(&uncached, "/")).await?);
    let b2 = backend.clone();
    summary(
        "  backend.stats() alone",
        time(n, sp, || {
            let b = b2.clone();
            async move { b.stats().await.map(|_| ()).map_err(|e| e.to_string()) }
        })
        .await?,
    );
    let b4 = backend.clone();
    summary(
        "  backend.stats_estimated() alone",
        time(n, sp, || {
            let b = b4.clone();
            async move { b.stats_estimated().await.map(|_| ()).map_err(|e| e.to_string()) }
        })
        .await?,
    );
    if tp.is_ok() {
        let b3 = backend.clone();
        summary(
            "  backend.throughput(1 h) alone",
            time(n, sp, || {
                let b = b3.clone();
                async move { b.throughput(&ThroughputParams::last_hour()).await.map(|_| ()).map_err(|e| e.to_string()) }
            })
            .await?,
        );
    }
    Ok(())
}
