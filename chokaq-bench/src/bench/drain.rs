//! The drain: the worker runtime exactly as a user runs it (no-op handler) empties queue
//! `bench`, uncapped or with `max_workers`, through the timed backend wrapper.

use std::time::{Duration, Instant};

use chokaq::core::QueueControl;
use chokaq::{Backend, CancellationToken, JobContext, QueueName, Result, Worker};

use super::{Bench, NOOP_KIND, WAIT_LIMIT};
use crate::figures::{DrainFigures, Rate, Results};
use crate::other;

impl Bench {
    /// One drain of `n` jobs of queue `bench` by a worker with `concurrency` slots.
    pub(super) async fn drain(
        &mut self,
        concurrency: u32,
        cap: Option<u32>,
        res: &mut Results,
    ) -> Result<DrainFigures> {
        let n = match cap {
            Some(_) => self.args.capped_jobs,
            None => self.args.jobs,
        };
        let n = u64::from(n).max(self.bench_backlog);
        let queue = QueueName::new("bench")?;
        if self.bench_backlog < n {
            self.fill(
                &format!("fill for drain x{concurrency}"),
                std::slice::from_ref(&queue),
                n - self.bench_backlog,
                res,
            )
            .await?;
            self.bench_backlog = n;
        }
        self.pg.control_queue(&queue, QueueControl::SetMaxWorkers(cap)).await?;
        let (hot0, archived0) = self.hot_counts("bench").await?;
        if hot0 != n {
            return Err(other(format!("the drain expects {n} pending jobs, the queue holds {hot0}")));
        }
        self.vacuum_hot().await?;
        let label = match cap {
            Some(c) => format!("drain x{concurrency} cap {c}"),
            None => format!("drain x{concurrency}"),
        };
        let pb = self.bar(&label, n);
        let mut builder = Worker::builder(self.timed.clone())
            .queue("bench")
            .concurrency(concurrency)
            .register_raw(NOOP_KIND, |_payload, _ctx: JobContext| async { Ok(()) });
        if let Some(ms) = self.args.min_poll_ms {
            builder = builder.min_poll_interval(Duration::from_millis(ms.max(1)));
        }
        let worker = builder.build()?;
        let lsn = self.wal_lsn().await?;
        self.calls.reset();
        let token = CancellationToken::new();
        let t0 = Instant::now();
        let (stats, fut) = worker.run_with_handle(token.clone());
        let run = tokio::spawn(fut);
        // Watch the worker's own counter (reading the database would slow the drain down).
        let deadline = t0 + WAIT_LIMIT;
        loop {
            let done = stats.report().completed;
            pb.set_position(done);
            if done >= n {
                break;
            }
            if Instant::now() > deadline || run.is_finished() {
                token.cancel();
                return Err(other(format!("drain x{concurrency}: only {done} of {n} jobs completed")));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let secs = t0.elapsed().as_secs_f64();
        let figures = DrainFigures {
            concurrency,
            capped: cap,
            rate: Rate { jobs: n, secs, wal_bytes: 0 },
            claim: self.calls.claim.snapshot(),
            complete: self.calls.complete.snapshot(),
            heartbeat: self.calls.heartbeat.snapshot(),
            other: self.calls.other.snapshot(),
        };
        let wal = self.wal_since(&lsn).await?;
        token.cancel();
        let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        if report.completed != n || report.failed != 0 || report.lease_lost != 0 {
            return Err(other(format!("drain x{concurrency}: unexpected worker report {report:?}")));
        }
        let (hot1, archived1) = self.hot_counts("bench").await?;
        if hot1 != 0 || archived1 != archived0 + n {
            return Err(other(format!(
                "drain x{concurrency}: {hot1} jobs left, archive grew by {}",
                archived1.saturating_sub(archived0)
            )));
        }
        self.bench_backlog = 0;
        if cap.is_some() {
            self.pg.control_queue(&queue, QueueControl::SetMaxWorkers(None)).await?;
        }
        Ok(DrainFigures { rate: Rate { wal_bytes: wal, ..figures.rate.clone() }, ..figures })
    }
}
