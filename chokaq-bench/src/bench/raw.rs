//! The raw loops. `raw`: the physical limit of the design, a bare copy of the hot table
//! drained by concurrent skip-locked claim-and-delete loops on the same pool, no runtime, no
//! leases. `raw_b500`: the same loops claiming 500 jobs at a time. `raw_min`: the least a
//! skip-locked queue can do, a six-column table with one partial index, claimed and marked
//! done by loops on connections of their own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use chokaq::{Error, QueueName, Result, WorkerId};
use chokaq_postgres::map_sqlx_error;
use sqlx::Connection;

use super::Bench;
use crate::figures::{Costs, Rate, RawFigures, Results};
use crate::other;
use crate::timed::CallStat;

impl Bench {
    /// The physical limit: a bare copy of the hot table drained by --raw-loops concurrent
    /// loops of "claim `batch` with FOR UPDATE SKIP LOCKED, then DELETE them", no runtime, no
    /// leases. `name` is the loop's name in the figures (`raw`, `raw_b500`); every raw loop
    /// runs the same statements on the same kind of table, only the batch differs.
    pub(super) async fn raw(&mut self, name: &'static str, batch: u32, res: &mut Results) -> Result<RawFigures> {
        let n = u64::from(self.args.jobs);
        let s = self.q();
        // The same rows the enqueue path writes: enqueue them, then move them to the bare table.
        let fillq = QueueName::new("rawfill")?;
        self.fill(&format!("fill for {name}"), std::slice::from_ref(&fillq), n, res).await?;
        self.exec(&format!("CREATE TABLE {s}.raw_jobs (LIKE {s}.jobs_hot INCLUDING ALL)")).await?;
        let cols: String = sqlx::query_scalar(
            "SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
               FROM information_schema.columns
              WHERE table_schema = $1 AND table_name = 'jobs_hot' AND is_generated = 'NEVER'",
        )
        .bind(&self.schema)
        .fetch_one(self.pg.pool())
        .await
        .map_err(map_sqlx_error)?;
        let moved = sqlx::query(&format!(
            "WITH m AS (DELETE FROM {s}.jobs_hot WHERE queue = $1 RETURNING *)
             INSERT INTO {s}.raw_jobs ({cols}) SELECT {cols} FROM m"
        ))
        .bind(fillq.as_str())
        .execute(self.pg.pool())
        .await
        .map_err(map_sqlx_error)?
        .rows_affected();
        if moved != n {
            return Err(other(format!("{name}: moved {moved} rows, expected {n}")));
        }
        self.exec(&format!("VACUUM (ANALYZE) {s}.raw_jobs")).await?;
        self.vacuum_hot().await?;

        let claim_sql = Arc::new(format!(
            "UPDATE {s}.raw_jobs
                SET status = 2, attempt = attempt + 1, worker_id = $1, started_at = now(), heartbeat_at = now(),
                    updated_at = now()
              WHERE id IN (SELECT id FROM {s}.raw_jobs
                            WHERE queue = $2 AND status = 0 AND due_at <= now()
                            ORDER BY priority DESC, due_at, id
                            LIMIT $3
                              FOR UPDATE SKIP LOCKED)
             RETURNING id"
        ));
        let delete_sql = Arc::new(format!("DELETE FROM {s}.raw_jobs WHERE id = ANY($1)"));
        let loops = self.args.raw_loops();
        let pb = self.bar(&format!("{name} x{loops} loops"), n);
        let done = Arc::new(AtomicU64::new(0));
        let claim_stat = Arc::new(CallStat::default());
        let delete_stat = Arc::new(CallStat::default());
        let probe = self.probe(Some("raw_jobs")).await?;
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..loops {
            let pool = self.pg.pool().clone();
            let (claim_sql, delete_sql) = (claim_sql.clone(), delete_sql.clone());
            let (done, claim_stat, delete_stat, pb) =
                (done.clone(), claim_stat.clone(), delete_stat.clone(), pb.clone());
            let worker = WorkerId::random().0;
            handles.push(tokio::spawn(async move {
                loop {
                    let t = Instant::now();
                    let ids: Vec<uuid::Uuid> = sqlx::query_scalar(&claim_sql)
                        .bind(worker)
                        .bind("rawfill")
                        .bind(i64::from(batch))
                        .fetch_all(&pool)
                        .await
                        .map_err(map_sqlx_error)?;
                    claim_stat.record(ids.len(), t);
                    if ids.is_empty() {
                        return Ok::<(), Error>(());
                    }
                    let t = Instant::now();
                    let gone = sqlx::query(&delete_sql)
                        .bind(&ids)
                        .execute(&pool)
                        .await
                        .map_err(map_sqlx_error)?
                        .rows_affected();
                    delete_stat.record(gone as usize, t);
                    done.fetch_add(gone, Ordering::Relaxed);
                    pb.inc(gone);
                }
            }));
        }
        for h in handles {
            h.await.map_err(|e| other(format!("{name} loop failed: {e}")))??;
        }
        let secs = t0.elapsed().as_secs_f64();
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        let left = format!("SELECT count(*) FROM {s}.raw_jobs");
        let label = format!("{name}: deleted");
        let end = RawEnd { label: &label, table: "raw_jobs", left_sql: &left, loops, batch, n, secs };
        self.raw_figures(end, probe, &done, &claim_stat, &delete_stat).await
    }

    /// The end of a raw loop: the window's costs, the exact-count check (every job handled,
    /// none left), the table dropped, the figures.
    async fn raw_figures(
        &self,
        end: RawEnd<'_>,
        probe: super::Probe,
        done: &AtomicU64,
        claim_stat: &CallStat,
        finish_stat: &CallStat,
    ) -> Result<RawFigures> {
        let p = self.probed(probe).await?;
        let left: i64 = sqlx::query_scalar(end.left_sql).fetch_one(self.pg.pool()).await.map_err(map_sqlx_error)?;
        let (n, got) = (end.n, done.load(Ordering::Relaxed));
        if got != n || left != 0 {
            return Err(other(format!("{} {got} of {n}, {left} left", end.label)));
        }
        eprintln!("{}: WAL by record: {}", end.label, super::wal_records_line(&p.wal_records, n));
        self.exec(&format!("DROP TABLE {}.{}", self.q(), end.table)).await?;
        let (claim, finish) = (claim_stat.snapshot(), finish_stat.snapshot());
        let statements = claim.calls + finish.calls;
        Ok(RawFigures {
            loops: end.loops,
            batch: end.batch,
            rate: Rate { jobs: n, secs: end.secs, wal_bytes: p.wal_bytes },
            claim,
            finish,
            costs: Costs {
                index_entries: p.index_entries,
                round_trips: statements,
                statements,
                table: p.table,
                server_cpu_us: p.server_cpu_us,
            },
        })
    }
}

/// What [`Bench::raw_figures`] needs of a finished raw loop.
struct RawEnd<'a> {
    /// The start of the mismatch message (`raw: deleted`).
    label: &'a str,
    table: &'static str,
    /// Counts the rows the loop should have handled and did not.
    left_sql: &'a str,
    loops: u32,
    batch: u32,
    n: u64,
    secs: f64,
}

/// The raw_min claim: `$1` the batch.
fn raw_min_claim(s: &str) -> String {
    format!(
        "WITH c AS (SELECT id FROM {s}.raw_min_jobs
                     WHERE status = 0
                     ORDER BY priority DESC, id
                     LIMIT $1
                       FOR UPDATE SKIP LOCKED)
         UPDATE {s}.raw_min_jobs j SET status = 1 FROM c WHERE j.id = c.id
         RETURNING j.id"
    )
}

impl Bench {
    /// The minimal loop: `(id bigserial primary key, queue, priority, status, payload,
    /// created_at)` with only the partial index `(priority DESC, id) WHERE status = 0`, filled
    /// with --jobs rows, drained by --raw-min-loops loops, each on a connection of its own, of
    /// two autocommit statements: claim a batch (status 1), then mark it done (status 2).
    pub(super) async fn raw_min(&mut self) -> Result<RawFigures> {
        let n = u64::from(self.args.jobs);
        let s = self.q();
        self.exec(&format!(
            "CREATE TABLE {s}.raw_min_jobs (
                 id bigserial PRIMARY KEY,
                 queue text NOT NULL,
                 priority int NOT NULL DEFAULT 0,
                 status smallint NOT NULL DEFAULT 0,
                 payload jsonb NOT NULL,
                 created_at timestamptz NOT NULL DEFAULT now());
             CREATE INDEX raw_min_jobs_claim_idx ON {s}.raw_min_jobs (priority DESC, id) WHERE status = 0;"
        ))
        .await?;
        let pb = self.bar("fill for raw_min", n);
        sqlx::query(&format!(
            "INSERT INTO {s}.raw_min_jobs (queue, payload)
             SELECT 'rawmin', jsonb_build_object('n', g) FROM generate_series(0, $1 - 1) g"
        ))
        .bind(n as i64)
        .execute(self.pg.pool())
        .await
        .map_err(map_sqlx_error)?;
        pb.finish_with_message("done");
        self.exec(&format!("VACUUM (ANALYZE) {s}.raw_min_jobs")).await?;
        // As before every drain: the loop starts after a checkpoint, so it writes the full-page
        // images of the pages it touches first, as the runtime's drains do (without it, raw_min
        // was measured without them: 450 B of WAL a job against the drain's 1,301, of which
        // 196 B were full-page images).
        super::checkpoint(self.pg.as_ref()).await;

        let loops = self.args.raw_min_loops;
        let batch = self.args.raw_batch;
        let claim_sql = Arc::new(raw_min_claim(&s));
        let done_sql = Arc::new(format!("UPDATE {s}.raw_min_jobs SET status = 2 WHERE id = ANY($1)"));
        // Each loop on a connection of its own, opened before the clock starts.
        let opts = self.pg.pool().connect_options();
        let mut conns = Vec::new();
        for _ in 0..loops {
            conns.push(sqlx::PgConnection::connect_with(&opts).await.map_err(map_sqlx_error)?);
        }
        let pb = self.bar(&format!("raw_min x{loops} loops"), n);
        let done = Arc::new(AtomicU64::new(0));
        let claim_stat = Arc::new(CallStat::default());
        let done_stat = Arc::new(CallStat::default());
        let probe = self.probe(Some("raw_min_jobs")).await?;
        let t0 = Instant::now();
        let mut handles = Vec::new();
        for mut conn in conns {
            let (claim_sql, done_sql) = (claim_sql.clone(), done_sql.clone());
            let (done, claim_stat, done_stat, pb) = (done.clone(), claim_stat.clone(), done_stat.clone(), pb.clone());
            handles.push(tokio::spawn(async move {
                loop {
                    let t = Instant::now();
                    let ids: Vec<i64> = sqlx::query_scalar(&claim_sql)
                        .bind(i64::from(batch))
                        .fetch_all(&mut conn)
                        .await
                        .map_err(map_sqlx_error)?;
                    claim_stat.record(ids.len(), t);
                    if ids.is_empty() {
                        break;
                    }
                    let t = Instant::now();
                    let marked = sqlx::query(&done_sql)
                        .bind(&ids)
                        .execute(&mut conn)
                        .await
                        .map_err(map_sqlx_error)?
                        .rows_affected();
                    done_stat.record(marked as usize, t);
                    done.fetch_add(marked, Ordering::Relaxed);
                    pb.inc(marked);
                }
                Ok::<_, Error>(conn)
            }));
        }
        let mut conns = Vec::new();
        for h in handles {
            conns.push(h.await.map_err(|e| other(format!("raw_min loop failed: {e}")))??);
        }
        let secs = t0.elapsed().as_secs_f64();
        // These sessions are not the pool's: they publish their counters, then close.
        for mut c in conns {
            if self.stats_flush {
                sqlx::query("SELECT pg_stat_force_next_flush()").execute(&mut c).await.map_err(map_sqlx_error)?;
            }
            c.close().await.map_err(map_sqlx_error)?;
        }
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        let left = format!("SELECT count(*) FROM {s}.raw_min_jobs WHERE status <> 2");
        let label = "raw_min: marked done";
        let end = RawEnd { label, table: "raw_min_jobs", left_sql: &left, loops, batch, n, secs };
        self.raw_figures(end, probe, &done, &claim_stat, &done_stat).await
    }
}
