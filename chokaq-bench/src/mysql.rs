//! `--url mysql://…` / `mariadb://…`: the MySQL backend's figures, in a fresh schema (a MySQL
//! database, dropped at the end): the enqueue rate (batches of `--enqueue-batch`), the drain by
//! the worker runtime at each `--drain-concurrency` against a raw `FOR UPDATE SKIP LOCKED` loop
//! on the same server in the same run (`--raw-loops` tasks, default the largest drain
//! concurrency, claiming `--raw-batch` rows and deleting them in one transaction), and the
//! claim-10 latency against `--backlog-small` and `--backlog-large` pending jobs. The deadlock
//! and lock-wait retries the backend counted are reported too. See `docs/mysql.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::testing::TestSupport;
use chokaq::core::{ClaimMode, ClaimParams, ClaimedJob, JobKind, LeaseRef, NewJob, QueueName, WorkerId};
use chokaq::{Backend, CancellationToken, Error, ErrorKind, JobContext, Result, Worker};
use chokaq_mysql::{MysqlBackend, MysqlConfig};
use serde_json::{json, Value};
use sqlx::Row;

use crate::args::{Args, Workload};

const KIND: &str = "bench.noop.v1";

fn other(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg)
}

fn sqlx_err(e: sqlx::Error) -> Error {
    other(format!("mysql: {e}"))
}

/// Whether the URL names the MySQL backend.
pub(crate) fn is_mysql(url: &str) -> bool {
    chokaq_mysql::is_mysql_url(url)
}

/// The whole MySQL run; returns its JSON object.
pub(crate) async fn run(args: &Args, url: &str) -> Result<Value> {
    let schema = format!("chokaq_bench_{:016x}", rand::random::<u64>());
    let cfg = MysqlConfig::new(url).schema(&schema).max_connections(args.connections.max(2));
    let b = Arc::new(MysqlBackend::connect(cfg).await?);
    b.migrate().await?;
    eprintln!("chokaq-bench (mysql): schema {schema}");
    let out = run_in(args, url, &b, &schema).await;
    if let Err(e) = b.drop_schema().await {
        eprintln!("chokaq-bench: could not drop schema {schema}: {e}");
    }
    let mut v = out?;
    let r = b.lock_retries();
    v["lock_retries"] = json!({
        "claim_deadlocks": r.claim_deadlocks, "claim_lock_waits": r.claim_lock_waits,
        "completion_deadlocks": r.completion_deadlocks, "completion_lock_waits": r.completion_lock_waits,
        "other_deadlocks": r.other_deadlocks, "other_lock_waits": r.other_lock_waits,
    });
    eprintln!("mysql: {r}");
    Ok(v)
}

async fn run_in(args: &Args, url: &str, b: &Arc<MysqlBackend>, schema: &str) -> Result<Value> {
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(args.connections.max(2))
        .connect(&url.replacen("mariadb://", "mysql://", 1))
        .await
        .map_err(sqlx_err)?;
    let server: String = sqlx::query_scalar("SELECT VERSION()").fetch_one(&pool).await.map_err(sqlx_err)?;
    let flush: u64 =
        sqlx::query_scalar("SELECT @@innodb_flush_log_at_trx_commit").fetch_one(&pool).await.map_err(sqlx_err)?;
    let n = u64::from(args.jobs);
    // Enqueue rate.
    let t0 = Instant::now();
    fill(b, &[QueueName::new("bench")?], n, args.enqueue_batch).await?;
    let enqueue = n as f64 / t0.elapsed().as_secs_f64();
    eprintln!("enqueue: {n} jobs in batches of {}: {enqueue:.0} jobs/s", args.enqueue_batch);
    // Drains by the runtime; each drain after the first refills the queue first.
    let mut drains = Vec::new();
    for (i, &c) in args.drain_concurrency.iter().enumerate() {
        if i > 0 {
            fill(b, &[QueueName::new("bench")?], n, args.enqueue_batch).await?;
        }
        let rate = drain(b, c, n).await?;
        eprintln!("drain x{c}: {rate:.0} jobs/s");
        drains.push(json!({ "concurrency": c, "jobs": n, "jobs_per_s": rate }));
    }
    // The raw loop on the same table.
    let loops = args.raw_loops.unwrap_or_else(|| args.drain_concurrency.iter().copied().max().unwrap_or(8));
    fill(b, &[QueueName::new("raw")?], n, args.enqueue_batch).await?;
    let (raw, raw_retries) = raw_loop(&pool, schema, loops, args.raw_batch, n).await?;
    eprintln!(
        "raw SKIP LOCKED loop x{loops} batch {}: {raw:.0} jobs/s ({raw_retries} batches retried after 1213/1205)",
        args.raw_batch
    );
    // Issue 25's workloads (before the claim cost, which leaves its large backlog behind).
    let dynb: Arc<dyn Backend> = b.clone();
    let keyed = if args.has(Workload::Keyed) {
        Some(crate::bench::keyed(&dynb, &args.keyed(), &crate::bench::NoSettle, None).await?)
    } else {
        None
    };
    let rate = if args.has(Workload::Rate) {
        let settle = crate::bench::NoSettle;
        Some(
            crate::bench::rate_limited(
                &dynb,
                args.rate_limit()?,
                args.rate_secs,
                args.rate_claimers,
                args.min_poll_ms,
                &settle,
            )
            .await?,
        )
    } else {
        None
    };
    // Claim cost at two backlogs.
    let small = claim_cost(b, args, u64::from(args.backlog_small), 0).await?;
    let large = claim_cost(b, args, u64::from(args.backlog_large), u64::from(args.backlog_small)).await?;
    eprintln!("claim-10 p50: {:.2} ms at {}, {:.2} ms at {}", small.0, args.backlog_small, large.0, args.backlog_large);
    let list = if args.has(Workload::List) { Some(list(args, &pool, b, schema).await?) } else { None };
    pool.close().await;
    let best = drains.iter().filter_map(|d| d["jobs_per_s"].as_f64()).fold(0.0, f64::max);
    let mut out = json!({
        "backend": "mysql",
        "server": server,
        "innodb_flush_log_at_trx_commit": flush,
        "client_cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "date": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "enqueue_jobs_per_s": enqueue,
        "enqueue_batch": args.enqueue_batch,
        "drains": drains,
        "raw": { "loops": loops, "batch": args.raw_batch, "jobs": n, "jobs_per_s": raw, "lock_retries": raw_retries },
        "drain_vs_raw": best / raw,
        "claim": {
            "small": { "backlog": args.backlog_small, "p50_ms": small.0, "p99_ms": small.1 },
            "large": { "backlog": args.backlog_large, "p50_ms": large.0, "p99_ms": large.1 },
            "large_vs_small_p50": large.0 / small.0,
        },
    });
    // Null when not run or unsupported (see `bench::keyed`).
    let drain8 = drains.iter().find(|d| d["concurrency"] == json!(8)).and_then(|d| d["jobs_per_s"].as_f64());
    let k = keyed.as_ref();
    let keyed_per_s = k.and_then(|k| k.drain_per_s());
    out["keyed_drain_jobs_per_s"] = json!(keyed_per_s);
    out["keyed_drain_vs_drain"] = json!(keyed_per_s.zip(drain8).map(|(k, d)| k / d));
    out["keyed_hot_ratio"] = json!(k.and_then(|k| k.hot_ratio()));
    out["claim_ms_p50_keys_10k"] = json!(k.and_then(|k| k.claim.map(|l| l.p50)));
    let r = rate.as_ref().filter(|x| !x.unsupported);
    out["rate_limited_max_in_window"] = json!(r.map(|x| x.max_in_window));
    out["rate_limited_utilisation"] = json!(r.and_then(|x| x.utilisation()));
    out["keyed"] = json!(k.map(|k| k.json()));
    out["rate_limited"] = json!(rate.as_ref().map(|x| x.json()));
    if let Some(list) = list {
        out["list_page_ms"] = list["list_page_ms"].clone();
        out["list"] = list["list"].clone();
    }
    Ok(out)
}

/// The list workload ([`crate::list`]): the archive filled by one INSERT … SELECT, the hot
/// table through the backend, then the timed pages.
async fn list(args: &Args, pool: &sqlx::MySqlPool, b: &Arc<MysqlBackend>, schema: &str) -> Result<Value> {
    let t0 = Instant::now();
    sqlx::query(&crate::list::mysql_archive_fill(schema))
        .bind(i64::from(args.list_archived))
        .execute(pool)
        .await
        .map_err(sqlx_err)?;
    let hot = crate::list::fill_hot(b.as_ref(), u64::from(args.list_hot)).await?;
    sqlx::query(&format!("ANALYZE TABLE `{schema}`.jobs_archive, `{schema}`.jobs_hot"))
        .execute(pool)
        .await
        .map_err(sqlx_err)?;
    eprintln!(
        "list: {} archived, {} hot ({hot} Processing) in {:.1} s",
        args.list_archived,
        args.list_hot,
        t0.elapsed().as_secs_f64()
    );
    crate::list::pages(b.as_ref(), u64::from(args.list_archived), u64::from(args.list_hot), args.list_samples).await
}

/// Enqueues `n` no-op jobs spread over `queues`.
async fn fill(b: &MysqlBackend, queues: &[QueueName], n: u64, batch: usize) -> Result<()> {
    let kind = JobKind::new(KIND)?;
    let mut left = n;
    let mut i = 0usize;
    while left > 0 {
        let k = left.min(batch as u64);
        let jobs: Vec<NewJob> = (0..k)
            .map(|j| NewJob::new(queues[(i + j as usize) % queues.len()].clone(), kind.clone()).json(json!({ "n": j })))
            .collect();
        b.enqueue_many(jobs).await?;
        i += k as usize;
        left -= k;
    }
    Ok(())
}

/// The worker runtime drains queue `bench` (`n` jobs) with `concurrency` slots: jobs/s.
async fn drain(b: &Arc<MysqlBackend>, concurrency: u32, n: u64) -> Result<f64> {
    let worker = Worker::builder(b.clone() as Arc<dyn Backend>)
        .queue("bench")
        .concurrency(concurrency)
        .register_raw(KIND, |_payload, _ctx: JobContext| async { Ok(()) })
        .build()?;
    let token = CancellationToken::new();
    let t0 = Instant::now();
    let (stats, fut) = worker.run_with_handle(token.clone());
    let run = tokio::spawn(fut);
    while stats.report().completed < n {
        if t0.elapsed() > Duration::from_secs(1800) || run.is_finished() {
            token.cancel();
            return Err(other(format!("drain x{concurrency}: {} of {n} jobs", stats.report().completed)));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    token.cancel();
    run.await.map_err(|e| other(format!("worker task: {e}")))??;
    Ok(n as f64 / secs)
}

/// `loops` tasks, each: one transaction that locks up to `batch` Pending rows of queue `raw`
/// `FOR UPDATE SKIP LOCKED` in claim order and deletes them; until `n` are gone: jobs/s.
/// Returns the rate and how many batches a deadlock (1213) or lock wait timeout (1205) rolled
/// back (each retried).
async fn raw_loop(pool: &sqlx::MySqlPool, schema: &str, loops: u32, batch: u32, n: u64) -> Result<(f64, u64)> {
    let pick = format!(
        "SELECT id FROM `{schema}`.jobs_hot FORCE INDEX (jobs_hot_claim) WHERE queue = 'raw' AND status = 0 \
         AND due_at <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) \
         ORDER BY priority DESC, due_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED"
    );
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let retries = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..loops {
        let (pool, pick, done, retries, schema) =
            (pool.clone(), pick.clone(), done.clone(), retries.clone(), schema.to_string());
        tasks.spawn(async move {
            loop {
                // One batch; a deadlock (1213) or lock wait timeout (1205) rolls it back and the
                // loop goes on, counted, as the backend's own retries do (without this, eight
                // loops on 2,000 jobs once ended the run at a 1213).
                let batch = async {
                    let mut tx = pool.begin().await?;
                    sqlx::query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(&mut *tx).await?;
                    let rows = sqlx::query(&pick).fetch_all(&mut *tx).await?;
                    if rows.is_empty() {
                        tx.rollback().await?;
                        return Ok::<u64, sqlx::Error>(0);
                    }
                    let ids: Vec<Vec<u8>> = rows.iter().map(|r| r.get::<Vec<u8>, _>("id")).collect();
                    let marks = vec!["?"; ids.len()].join(", ");
                    let del = format!("DELETE FROM `{schema}`.jobs_hot WHERE id IN ({marks})");
                    let mut q = sqlx::query(&del);
                    for id in &ids {
                        q = q.bind(id);
                    }
                    q.execute(&mut *tx).await?;
                    tx.commit().await?;
                    Ok(ids.len() as u64)
                };
                match batch.await {
                    Ok(0) => {
                        if done.load(std::sync::atomic::Ordering::Relaxed) >= n {
                            return Ok::<(), sqlx::Error>(());
                        }
                    }
                    Ok(k) => {
                        done.fetch_add(k, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(sqlx::Error::Database(e))
                        if matches!(
                            e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().map(|m| m.number()),
                            Some(1213 | 1205)
                        ) =>
                    {
                        retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(e) => return Err(e),
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| other(format!("raw loop task: {e}")))?.map_err(sqlx_err)?;
    }
    Ok((n as f64 / t0.elapsed().as_secs_f64(), retries.load(std::sync::atomic::Ordering::Relaxed)))
}

/// Claim-10 latency (p50, p99 in ms) from queue `claim` holding `backlog` Pending jobs (`have`
/// are there already): each sample is a timed claim, then an untimed complete and a refill.
async fn claim_cost(b: &MysqlBackend, args: &Args, backlog: u64, have: u64) -> Result<(f64, f64)> {
    let q = QueueName::new("claim")?;
    fill(b, std::slice::from_ref(&q), backlog - have, args.enqueue_batch).await?;
    let worker = WorkerId::random();
    let kind = JobKind::new(KIND)?;
    let mut ms = Vec::new();
    for i in 0..(args.claim_samples + 20) {
        let t0 = Instant::now();
        let jobs = b.claim(&ClaimParams::new(worker, vec![q.clone()], 10, ClaimMode::Start)).await?;
        let took = t0.elapsed().as_secs_f64() * 1e3;
        if jobs.len() != 10 {
            return Err(other(format!("claim from a backlog of {backlog} returned {} jobs", jobs.len())));
        }
        if i >= 20 {
            ms.push(took);
        }
        let leases: Vec<LeaseRef> = jobs.iter().map(ClaimedJob::lease_ref).collect();
        b.complete(worker, &leases).await?;
        b.enqueue_many(jobs.iter().map(|_| NewJob::new(q.clone(), kind.clone()).json(json!({ "n": i }))).collect())
            .await?;
    }
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
    Ok((at(0.5), at(0.99)))
}
