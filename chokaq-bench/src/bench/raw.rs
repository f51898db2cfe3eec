//! The raw loop: the physical limit of the design, a bare copy of the hot table drained by
//! concurrent skip-locked claim-and-delete loops on the same pool, no runtime, no leases.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use chokaq::{Error, QueueName, Result, WorkerId};
use chokaq_postgres::map_sqlx_error;

use super::Bench;
use crate::figures::{Rate, RawFigures, Results};
use crate::other;
use crate::timed::CallStat;

impl Bench {
    /// The physical limit: a bare copy of the hot table drained by `loops` concurrent loops of
    /// "claim `batch` with FOR UPDATE SKIP LOCKED, then DELETE them", no runtime, no leases.
    pub(super) async fn raw(&mut self, res: &mut Results) -> Result<RawFigures> {
        let n = u64::from(self.args.jobs);
        let s = self.q();
        // The same rows the enqueue path writes: enqueue them, then move them to the bare table.
        let fillq = QueueName::new("rawfill")?;
        self.fill("fill for raw", std::slice::from_ref(&fillq), n, res).await?;
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
            return Err(other(format!("raw: moved {moved} rows, expected {n}")));
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
        let batch = i64::from(self.args.raw_batch);
        let pb = self.bar(&format!("raw x{loops} loops"), n);
        let done = Arc::new(AtomicU64::new(0));
        let claim_stat = Arc::new(CallStat::default());
        let delete_stat = Arc::new(CallStat::default());
        let lsn = self.wal_lsn().await?;
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
                        .bind(batch)
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
            h.await.map_err(|e| other(format!("raw loop failed: {e}")))??;
        }
        let secs = t0.elapsed().as_secs_f64();
        let wal = self.wal_since(&lsn).await?;
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {s}.raw_jobs"))
            .fetch_one(self.pg.pool())
            .await
            .map_err(map_sqlx_error)?;
        let got = done.load(Ordering::Relaxed);
        if got != n || left != 0 {
            return Err(other(format!("raw: deleted {got} of {n}, {left} left")));
        }
        self.exec(&format!("DROP TABLE {s}.raw_jobs")).await?;
        Ok(RawFigures {
            loops,
            batch: self.args.raw_batch,
            rate: Rate { jobs: n, secs, wal_bytes: wal },
            claim: claim_stat.snapshot(),
            delete: delete_stat.snapshot(),
        })
    }
}
