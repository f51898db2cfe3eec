//! The workflow workload (issue 41, item 5, `docs/workflows.md`): a fan-out and fan-in of
//! `--workflow-tasks` tasks (one root, the middle ones after it, one sink after all of them)
//! enqueued in one call and drained by the runtime (8 slots, as the main drain); a chain of
//! `--workflow-chain` tasks, each after the one before, run one at a time by an idle worker
//! (each step: from the handler's return to the next handler's start, the completion's
//! commit, the release in it, the wake-up and the claim in between); and the claim of 10
//! beside a million tasks waiting for a dependency (status Waiting, outside the claim index).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq::core::Workflow;
use chokaq::{Backend, CancellationToken, JobContext, JobKind, NewJob, QueueName, Result, Worker};
use serde_json::{json, Value};

use super::{Bench, NOOP_KIND, WAIT_LIMIT};
use crate::figures::{human, Latency, Rate, Results, WorkflowFigures};
use crate::other;

const FAN_QUEUE: &str = "bench_flow";
const CHAIN_QUEUE: &str = "bench_chain";
const CHAIN_KIND: &str = "bench.chain.v1";

/// Each chain step's handler (start, return).
type StepTimes = Arc<Mutex<Vec<(Option<Instant>, Option<Instant>)>>>;

impl Bench {
    pub(super) async fn workflow_workload(&mut self, res: &mut Results) -> Result<()> {
        let mut fig = WorkflowFigures { tasks: u64::from(self.args.workflow_tasks), ..Default::default() };
        self.fan(&mut fig).await?;
        self.chain(&mut fig).await?;
        self.claim_beside_waiting(&mut fig, res).await?;
        res.workflow = Some(fig);
        Ok(())
    }

    /// The fan-out and fan-in: its enqueue, then its drain.
    async fn fan(&mut self, fig: &mut WorkflowFigures) -> Result<()> {
        let n = fig.tasks.max(3);
        let queue = QueueName::new(FAN_QUEUE)?;
        let kind = JobKind::new(NOOP_KIND)?;
        let job = |i: u64| NewJob::new(queue.clone(), kind.clone()).json(json!({ "n": i }));
        let mut wf = Workflow::new("bench-fan").add("root", job(0), [] as [&str; 0]);
        let middle: Vec<String> = (1..n - 1).map(|i| format!("m{i}")).collect();
        for (i, name) in middle.iter().enumerate() {
            wf = wf.add(name.as_str(), job(i as u64 + 1), ["root"]);
        }
        wf = wf.add("sink", job(n - 1), middle.iter().map(String::as_str));
        let lsn = self.wal_lsn().await?;
        let t0 = Instant::now();
        let e = self.pg.enqueue_workflow(&wf).await?;
        let secs = t0.elapsed().as_secs_f64();
        fig.enqueue = Rate { jobs: n, secs, wal_bytes: self.wal_since(&lsn).await? };
        if e.tasks.len() as u64 != n {
            return Err(other(format!("workflow enqueue returned {} tasks of {n}", e.tasks.len())));
        }
        eprintln!("workflow: {n} tasks enqueued in {:.3} s ({:.0} tasks/s)", secs, n as f64 / secs);
        self.vacuum_hot().await?;
        let worker = Worker::builder(self.timed.clone())
            .queue(FAN_QUEUE)
            .concurrency(8)
            .register_raw(NOOP_KIND, |_p, _c| async { Ok(()) });
        let worker = match self.args.min_poll_ms {
            Some(ms) => worker.min_poll_interval(Duration::from_millis(ms.max(1))),
            None => worker,
        }
        .build()?;
        let pb = self.bar("workflow fan-out/fan-in", n);
        let lsn = self.wal_lsn().await?;
        let token = CancellationToken::new();
        let t0 = Instant::now();
        let (stats, fut) = worker.run_with_handle(token.clone());
        let run = tokio::spawn(fut);
        let deadline = t0 + WAIT_LIMIT;
        loop {
            let done = stats.report().completed;
            pb.set_position(done);
            if done >= n {
                break;
            }
            if Instant::now() > deadline || run.is_finished() {
                token.cancel();
                return Err(other(format!("workflow drain: only {done} of {n} tasks completed")));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let secs = t0.elapsed().as_secs_f64();
        token.cancel();
        let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
        fig.drain = Rate { jobs: n, secs, wal_bytes: self.wal_since(&lsn).await? };
        pb.finish_with_message(format!("{:.0} tasks/s", n as f64 / secs));
        if (report.completed, report.failed, report.lease_lost) != (n, 0, 0) {
            return Err(other(format!("workflow drain: unexpected worker report {report:?}")));
        }
        let st = self.pg.get_workflow(e.id).await?.ok_or_else(|| other("workflow drain: the workflow is gone"))?;
        let ok = st.counts().get("succeeded").copied().unwrap_or(0) as u64;
        if ok != n {
            return Err(other(format!("workflow drain: {ok} of {n} tasks succeeded: {:?}", st.counts())));
        }
        Ok(())
    }

    /// The chain: one step at a time into an idle worker.
    async fn chain(&self, fig: &mut WorkflowFigures) -> Result<()> {
        let n = self.args.workflow_chain.max(2) as usize;
        fig.chain = n as u32;
        // (start, return) of each step's handler.
        let times: StepTimes = Arc::new(Mutex::new(vec![(None, None); n]));
        let seen = times.clone();
        let worker = Worker::builder(self.timed.clone())
            .queue(CHAIN_QUEUE)
            .concurrency(8)
            .register_raw(CHAIN_KIND, move |payload: Value, _ctx: JobContext| {
                let start = Instant::now();
                let seen = seen.clone();
                async move {
                    let i = payload.get("n").and_then(Value::as_u64).unwrap_or(0) as usize;
                    if let Some(slot) = seen.lock().unwrap().get_mut(i) {
                        *slot = (Some(start), Some(Instant::now()));
                    }
                    Ok(())
                }
            })
            .build()?;
        let token = CancellationToken::new();
        let (stats, fut) = worker.run_with_handle(token.clone());
        let run = tokio::spawn(fut);
        // Ready once the worker made its first (empty) claim: its LISTEN is set up by then.
        let deadline = Instant::now() + Duration::from_secs(30);
        while stats.report().claim_calls == 0 {
            if Instant::now() > deadline {
                token.cancel();
                return Err(other("workflow chain: the worker never claimed"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let (queue, kind) = (QueueName::new(CHAIN_QUEUE)?, JobKind::new(CHAIN_KIND)?);
        let names: Vec<String> = (0..n).map(|i| format!("s{i}")).collect();
        let mut wf = Workflow::new("bench-chain");
        for i in 0..n {
            let job = NewJob::new(queue.clone(), kind.clone()).json(json!({ "n": i }));
            wf = if i == 0 { wf.add(&names[0], job, [] as [&str; 0]) } else { wf.add(&names[i], job, [&names[i - 1]]) };
        }
        let pb = self.bar("workflow chain", n as u64);
        self.pg.enqueue_workflow(&wf).await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let done = stats.report().completed;
            pb.set_position(done);
            if done >= n as u64 {
                break;
            }
            if Instant::now() > deadline || run.is_finished() {
                token.cancel();
                return Err(other(format!("workflow chain: {done} of {n} steps completed")));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        token.cancel();
        let report = run.await.map_err(|e| other(format!("worker task failed: {e}")))??;
        pb.finish_with_message("done");
        if report.failed != 0 {
            return Err(other(format!("workflow chain: unexpected worker report {report:?}")));
        }
        let times = times.lock().unwrap();
        let mut ms = Vec::with_capacity(n - 1);
        for i in 1..n {
            let (Some(ret), Some(start)) = (times[i - 1].1, times[i].0) else {
                return Err(other(format!("workflow chain: step {i} has no times")));
            };
            if start < ret {
                return Err(other(format!("workflow chain: step {i} began before step {} returned", i - 1)));
            }
            ms.push((start - ret).as_secs_f64() * 1e3);
        }
        fig.step = Latency::of(ms);
        Ok(())
    }

    /// Claim-10 latency on `--claim-queues` queues holding `--backlog-small` Pending jobs and,
    /// beside them, `--workflow-waiting` tasks waiting for a dependency (written by one
    /// INSERT … SELECT: what they cost the claim is the question, not their enqueue).
    async fn claim_beside_waiting(&self, fig: &mut WorkflowFigures, res: &mut Results) -> Result<()> {
        let queues: Vec<QueueName> =
            (0..self.args.claim_queues).map(|i| QueueName::new(format!("wait{i}"))).collect::<Result<_>>()?;
        let backlog = u64::from(self.args.backlog_small);
        let waiting = u64::from(self.args.workflow_waiting);
        fig.waiting = waiting;
        self.fill(&format!("fill backlog {}", human(backlog)), &queues, backlog, res).await?;
        let t0 = Instant::now();
        sqlx::query(&format!(
            "INSERT INTO {}.jobs_hot (id, queue, kind, payload, max_attempts, status)
             SELECT gen_random_uuid(), 'wait' || (g % $2), $3, jsonb_build_object('n', g), 1, 5
               FROM generate_series(1, $1::int8) AS g",
            self.q()
        ))
        .bind(waiting as i64)
        .bind(i64::from(self.args.claim_queues))
        .bind(NOOP_KIND)
        .execute(self.pg.pool())
        .await
        .map_err(chokaq_postgres::map_sqlx_error)?;
        eprintln!("workflow: {} waiting tasks written in {:.1} s", human(waiting), t0.elapsed().as_secs_f64());
        self.vacuum_hot().await?;
        let label = format!("claim @ {} beside {} waiting", human(backlog), human(waiting));
        let (all_ms, _) = self.claim_samples(&queues, &label, backlog).await?;
        fig.claim_waiting = Latency::of(all_ms);
        Ok(())
    }
}
