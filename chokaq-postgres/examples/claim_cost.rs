//! Measures what a claim costs as the backlog grows: the median time of 50 claims of 10 jobs
//! over 10 queues with 10,000 and with 1,000,000 Pending rows, and the real
//! `EXPLAIN (ANALYZE, BUFFERS)` of the claim statement at 1,000,000.
//!
//! ```text
//! cargo run --release -p chokaq-postgres --example claim_cost
//! ```
//!
//! The server is `CHOKAQ_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! It works in a fresh schema `chokaq_bench_<hex>` and drops it at the end.

use std::time::{Duration, Instant};

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, ClaimMode, ClaimParams, QueueName, WorkerId};
use chokaq_postgres::{PgBackend, PgConfig, FUNCTIONS};
use sqlx::Row;

const QUEUES: usize = 10;
const CLAIMS: usize = 50;

#[tokio::main]
async fn main() -> chokaq_core::Result<()> {
    let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let schema = format!("chokaq_bench_{:08x}", rand::random::<u32>());
    let db = PgBackend::connect(PgConfig::new(url).schema(schema.clone())).await?;
    db.migrate().await?;
    let result = run(&db).await;
    db.drop_schema().await?;
    result
}

async fn run(db: &PgBackend) -> chokaq_core::Result<()> {
    let queues: Vec<QueueName> = (0..QUEUES).map(|i| QueueName::new(format!("q{i}")).unwrap()).collect();
    let mut medians = Vec::new();
    for backlog in [10_000usize, 1_000_000] {
        fill(db, backlog).await?;
        let worker = WorkerId::random();
        let req = ClaimParams::new(worker, queues.clone(), 10, ClaimMode::Start);
        for _ in 0..5 {
            db.claim(&req).await?; // warm the plan cache and the buffers
        }
        let mut times = Vec::with_capacity(CLAIMS);
        for _ in 0..CLAIMS {
            let t = Instant::now();
            let got = db.claim(&req).await?;
            times.push(t.elapsed());
            assert_eq!(got.len(), 10);
        }
        times.sort();
        let median = times[CLAIMS / 2];
        println!(
            "backlog {backlog:>9} Pending: claim of 10 over {QUEUES} queues: median {:.3} ms, min {:.3} ms, max {:.3} ms ({CLAIMS} claims)",
            ms(median),
            ms(times[0]),
            ms(times[CLAIMS - 1])
        );
        medians.push(median);
        if backlog == 1_000_000 {
            explain(db, &queues).await?;
        }
    }
    let ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
    println!("ratio 1M / 10k: {ratio:.2}");
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Replaces the hot table's rows by `n` Pending jobs spread over the queues, with mixed
/// priorities and due times, in one `INSERT … SELECT generate_series`.
async fn fill(db: &PgBackend, n: usize) -> chokaq_core::Result<()> {
    let s = format!("\"{}\"", db.schema());
    let t = Instant::now();
    let stmts = [
        format!("TRUNCATE {s}.jobs_hot"),
        format!(
            "INSERT INTO {s}.jobs_hot (id, queue, kind, payload, priority, max_attempts, created_at)
             SELECT gen_random_uuid(), 'q' || (i % {QUEUES}), 'bench.v1', '{{\"i\": 1}}'::jsonb, (i % 3),
                    25, now() - (i % 100000) * interval '1 millisecond'
               FROM generate_series(1, $1) AS i"
        ),
        format!("ANALYZE {s}.jobs_hot"),
    ];
    for sql in &stmts {
        let q = sqlx::query(sql);
        let q = if sql.contains("$1") { q.bind(n as i64) } else { q };
        q.execute(db.pool()).await.map_err(chokaq_postgres::map_sqlx_error)?;
    }
    eprintln!("filled {n} rows in {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the claim statement that `<schema>.claim()` runs (taken from
/// the functions script, its plpgsql variables bound as parameters), in a rolled-back
/// transaction.
async fn explain(db: &PgBackend, queues: &[QueueName]) -> chokaq_core::Result<()> {
    let migration = FUNCTIONS;
    let start = migration.find("RETURN QUERY").expect("claim statement") + "RETURN QUERY".len();
    let end =
        migration[start..].find("RETURNING h.*").expect("end of the claim statement") + start + "RETURNING h.*".len();
    let stmt = migration[start..end]
        .trim()
        .trim_end_matches(';')
        .replace("{schema}", &format!("\"{}\"", db.schema()))
        .replace("v_qn", "$1::text[]")
        .replace("v_qk", "$2::int[]")
        .replace("p_limit", "$3")
        .replace("p_mode", "$4")
        .replace("p_worker", "$5");
    let names: Vec<String> = queues.iter().map(|q| q.as_str().to_string()).collect();
    let allow: Vec<i32> = vec![10; names.len()];
    let mut tx = db.pool().begin().await.map_err(chokaq_postgres::map_sqlx_error)?;
    let rows = sqlx::query(&format!("EXPLAIN (ANALYZE, BUFFERS) {stmt}"))
        .bind(&names)
        .bind(&allow)
        .bind(10i32)
        .bind(2i16)
        .bind(uuid::Uuid::new_v4())
        .fetch_all(&mut *tx)
        .await
        .map_err(chokaq_postgres::map_sqlx_error)?;
    tx.rollback().await.map_err(chokaq_postgres::map_sqlx_error)?;
    println!("\nEXPLAIN (ANALYZE, BUFFERS) of the claim statement, 1,000,000 Pending rows, 10 queues, limit 10:");
    for r in rows {
        println!("{}", r.get::<String, _>(0));
    }
    Ok(())
}
