//! The drain: the worker runtime exactly as a user runs it (a no-op handler, or one that
//! sleeps) empties queue `bench`, uncapped or with `max_workers`, through the timed backend
//! wrapper.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::QueueControl;
use chokaq::{Backend, CancellationToken, JobContext, JobError, QueueName, Result, Worker};

use super::{Bench, NOOP_KIND, WAIT_LIMIT};
use crate::figures::{Costs, DrainFigures, Rate, Results};
use crate::other;

impl Bench {
    /// One drain of queue `bench` by a worker with `concurrency` slots whose handler takes
    /// `handler_ms`: the backlog the enqueue left, else a fresh one of the drain's size.
    pub(super) async fn drain(
        &mut self,
        concurrency: u32,
        cap: Option<u32>,
        handler_ms: u64,
        res: &mut Results,
    ) -> Result<DrainFigures> {
        self.drain_by(1, concurrency, cap, handler_ms, res).await
    }

    /// One drain as [`drain`](Self::drain), by `workers` workers (one runtime each, on the
    /// same backend) of `concurrency` slots each.
    pub(super) async fn drain_by(
        &mut self,
        workers: u32,
        concurrency: u32,
        cap: Option<u32>,
        handler_ms: u64,
        res: &mut Results,
    ) -> Result<DrainFigures> {
        let n = match cap {
            Some(_) if handler_ms > 0 => self.args.capped_slow_jobs,
            Some(_) => self.args.capped_jobs,
            None => self.args.drain_jobs(concurrency),
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
        let shape = if workers > 1 { format!("{workers} workers x{concurrency}") } else { format!("x{concurrency}") };
        let label = match (cap, self.exposure) {
            (Some(c), _) => format!("drain {shape} cap {c} h {handler_ms}ms"),
            (None, Some((l, u))) => format!("drain {shape} la {l} uw {u}"),
            (None, None) => format!("drain {shape}"),
        };
        let pb = self.bar(&label, n);
        let work = Duration::from_millis(handler_ms);
        // The handlers' time in all, measured (a sleep lasts a little longer than asked).
        let worked = Arc::new(AtomicU64::new(0));
        let mut runtimes = Vec::with_capacity(workers as usize);
        for _ in 0..workers {
            let worked_in = worked.clone();
            let mut builder = Worker::builder(self.timed.clone()).queue("bench").concurrency(concurrency).register_raw(
                NOOP_KIND,
                move |_payload, _ctx: JobContext| {
                    let worked = worked_in.clone();
                    async move {
                        if !work.is_zero() {
                            // The handler's work, simulated by a thread's sleep: tokio's timer
                            // rounds up to its next millisecond tick (5 ms took 6.15 ms on
                            // average, which would count against the runtime).
                            let t0 = Instant::now();
                            tokio::task::spawn_blocking(move || std::thread::sleep(work))
                                .await
                                .map_err(|e| JobError::retry(format!("handler sleep failed: {e}")))?;
                            worked.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        }
                        Ok(())
                    }
                },
            );
            if let Some((lookahead, unwritten)) = self.exposure {
                builder = builder.lookahead(lookahead).unwritten_outcomes(unwritten);
            }
            if let Some(ms) = self.args.min_poll_ms {
                builder = builder.min_poll_interval(Duration::from_millis(ms.max(1)));
            }
            runtimes.push(builder.build()?);
        }
        let probe = self.probe(Some("jobs_hot")).await?;
        self.calls.reset();
        let token = CancellationToken::new();
        let t0 = Instant::now();
        let mut stats = Vec::with_capacity(runtimes.len());
        let mut runs = Vec::with_capacity(runtimes.len());
        for worker in runtimes {
            let (s, fut) = worker.run_with_handle(token.clone());
            stats.push(s);
            runs.push(tokio::spawn(fut));
        }
        // Watch the workers' own counters (reading the database would slow the drain down).
        let deadline = t0 + WAIT_LIMIT;
        loop {
            let done: u64 = stats.iter().map(|s| s.report().completed).sum();
            pb.set_position(done);
            if done >= n {
                break;
            }
            if Instant::now() > deadline || runs.iter().any(|r| r.is_finished()) {
                token.cancel();
                return Err(other(format!("drain {shape}: only {done} of {n} jobs completed")));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let secs = t0.elapsed().as_secs_f64();
        token.cancel();
        let (mut completed, mut failed, mut lease_lost) = (0, 0, 0);
        for run in runs {
            let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
            completed += report.completed;
            failed += report.failed;
            lease_lost += report.lease_lost;
        }
        // The calls until the worker stopped (its last completions are written by then), and
        // the WAL, index entries and counters of the same window.
        let c = &self.calls;
        let mut figures = DrainFigures {
            workers,
            concurrency,
            capped: cap,
            exposure: self.exposure,
            handler_ms,
            handler_ms_measured: worked.load(Ordering::Relaxed) as f64 / 1e6 / n as f64,
            rate: Rate { jobs: n, secs, wal_bytes: 0 },
            claim: c.claim.snapshot(),
            complete_and_claim: c.complete_and_claim.snapshot(),
            completed_in_claim: c.completed_in_claim.load(Ordering::Relaxed),
            start: c.start.snapshot(),
            complete: c.complete.snapshot(),
            heartbeat: c.heartbeat.snapshot(),
            other: c.other.snapshot(),
            costs: Costs::default(),
        };
        let p = self.probed(probe).await?;
        eprintln!("drain {shape}: WAL by record: {}", super::wal_records_line(&p.wal_records, n));
        figures.rate.wal_bytes = p.wal_bytes;
        // One statement per call (see `timed`).
        let calls = figures.calls();
        figures.costs = Costs {
            index_entries: p.index_entries,
            round_trips: calls,
            statements: calls,
            table: p.table,
            server_cpu_us: p.server_cpu_us,
        };
        pb.finish_with_message(format!("{:.0} jobs/s", n as f64 / secs));
        if (completed, failed, lease_lost) != (n, 0, 0) {
            return Err(other(format!(
                "drain {shape}: the workers reported {completed} completed, {failed} failed, {lease_lost} lost of {n}"
            )));
        }
        let (hot1, archived1) = self.hot_counts("bench").await?;
        if hot1 != 0 || archived1 != archived0 + n {
            return Err(other(format!(
                "drain {shape}: {hot1} jobs left, archive grew by {}",
                archived1.saturating_sub(archived0)
            )));
        }
        self.bench_backlog = 0;
        if cap.is_some() {
            self.pg.control_queue(&queue, QueueControl::SetMaxWorkers(None)).await?;
        }
        Ok(figures)
    }
}
