//! The pickup latency: one enqueue at a time at a steady rate into an idle worker woken by
//! LISTEN/NOTIFY, from the enqueue's return to the handler's start.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq::core::BackendExt;
use chokaq::{CancellationToken, JobContext, JobKind, NewJob, QueueName, Result, StatsHandle, Worker};
use serde_json::{json, Value};

use super::{Bench, PICKUP_KIND};
use crate::figures::{Latency, PickupFigures};
use crate::other;

impl Bench {
    /// Enqueue-to-handler-start latency: one job at a time at a steady rate into an idle worker
    /// woken by LISTEN/NOTIFY.
    pub(super) async fn pickup(&self) -> Result<PickupFigures> {
        let n = self.args.pickup_jobs as usize;
        let started: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; n]));
        let seen = started.clone();
        let worker = Worker::builder(self.timed.clone())
            .queue("pickup")
            .concurrency(8)
            .register_raw(PICKUP_KIND, move |payload: Value, _ctx: JobContext| {
                let now = Instant::now();
                if let Some(i) = payload.get("n").and_then(Value::as_u64) {
                    if let Some(slot) = seen.lock().unwrap().get_mut(i as usize) {
                        *slot = Some(now);
                    }
                }
                async { Ok(()) }
            })
            .build()?;
        let token = CancellationToken::new();
        let (stats, fut) = worker.run_with_handle(token.clone());
        let run = tokio::spawn(fut);
        let result = self.pickup_run(n, &started, &stats).await;
        token.cancel();
        let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
        let mut fig = result?;
        if report.completed != n as u64 || report.failed != 0 {
            return Err(other(format!("pickup: unexpected worker report {report:?}")));
        }
        fig.jobs = n as u32;
        fig.rate = self.args.pickup_rate;
        Ok(fig)
    }

    async fn pickup_run(
        &self,
        n: usize,
        started: &Mutex<Vec<Option<Instant>>>,
        stats: &StatsHandle,
    ) -> Result<PickupFigures> {
        // Ready once the worker made its first (empty) claim: its LISTEN is set up by then.
        let deadline = Instant::now() + Duration::from_secs(30);
        while stats.report().claim_calls == 0 {
            if Instant::now() > deadline {
                return Err(other("pickup: the worker never claimed"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let queue = QueueName::new("pickup")?;
        let kind = JobKind::new(PICKUP_KIND)?;
        let pb = self.bar(&format!("pickup @ {}/s", self.args.pickup_rate), n as u64);
        let mut returned = Vec::with_capacity(n);
        let mut call_ms = Vec::with_capacity(n);
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / self.args.pickup_rate));
        for i in 0..n {
            tick.tick().await;
            let job = NewJob::new(queue.clone(), kind.clone()).json(json!({ "n": i }));
            let t0 = Instant::now();
            self.pg.enqueue(job).await?;
            let t1 = Instant::now();
            call_ms.push((t1 - t0).as_secs_f64() * 1e3);
            returned.push(t1);
            pb.inc(1);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while stats.report().completed < n as u64 {
            if Instant::now() > deadline {
                return Err(other(format!("pickup: {} of {n} jobs completed", stats.report().completed)));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        pb.finish_with_message("done");
        let started = started.lock().unwrap();
        let mut ms = Vec::with_capacity(n);
        let mut early = 0u32;
        for (i, r) in returned.iter().enumerate() {
            let s = started[i].ok_or_else(|| other(format!("pickup: job {i} never started")))?;
            if s < *r {
                early += 1;
            }
            ms.push(s.saturating_duration_since(*r).as_secs_f64() * 1e3);
        }
        Ok(PickupFigures { jobs: 0, rate: 0.0, latency: Latency::of(ms), early, enqueue_call: Latency::of(call_ms) })
    }
}
