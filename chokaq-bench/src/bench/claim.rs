//! The claim cost: `Backend::claim` of 10 jobs against a small and a large backlog, and
//! beside a million jobs that are not due yet.

use std::time::Instant;

use chokaq::core::{ClaimMode, ClaimParams, ClaimedJob, LeaseRef};
use chokaq::{Backend, JobKind, NewJob, QueueName, Result, WorkerId};
use serde_json::json;

use super::{Bench, NOOP_KIND};
use crate::figures::{human, ClaimFigures, Latency, Results, ScheduledFigures};
use crate::other;

impl Bench {
    /// Claim-10 latency with `backlog` Pending rows spread over the claim queues: each sample
    /// is a timed claim (Start mode), then an untimed complete and a refill of as many jobs.
    pub(super) async fn claim_cost(&self, backlog: u64, res: &mut Results) -> Result<ClaimFigures> {
        let queues: Vec<QueueName> =
            (0..self.args.claim_queues).map(|i| QueueName::new(format!("claim{i}"))).collect::<Result<_>>()?;
        let have: u64 = {
            let s = self.pg.stats().await?;
            queues.iter().filter_map(|q| s.queue(q.as_str())).map(|q| q.pending + q.fetched + q.processing).sum()
        };
        if have > backlog {
            return Err(other(format!("claim backlog already holds {have} > {backlog}")));
        }
        self.fill(&format!("fill backlog {}", human(backlog)), &queues, backlog - have, res).await?;
        self.vacuum_hot().await?;
        let (all_ms, one_ms) = self.claim_samples(&queues, &format!("claim @ {}", human(backlog)), backlog).await?;
        Ok(ClaimFigures { backlog, all_queues: Latency::of(all_ms), one_queue: Latency::of(one_ms) })
    }

    /// The timed claims of [`claim_cost`](Self::claim_cost) on `queues` (which hold `backlog`
    /// Pending jobs): every queue, then one, alternately; each claim followed by an untimed
    /// complete and a refill. Returns (every queue, one queue) in milliseconds.
    pub(super) async fn claim_samples(
        &self,
        queues: &[QueueName],
        label: &str,
        backlog: u64,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let worker = WorkerId::random();
        let kind = JobKind::new(NOOP_KIND)?;
        let samples = self.args.claim_samples as usize;
        let warmup = 20usize;
        let pb = self.bar(label, (2 * (samples + warmup)) as u64);
        let mut all_ms = Vec::with_capacity(samples);
        let mut one_ms = Vec::with_capacity(samples);
        for i in 0..2 * (samples + warmup) {
            // Even samples ask every queue (a worker serving all of them), odd ones one queue.
            let ask = if i % 2 == 0 { queues.to_vec() } else { vec![queues[(i / 2) % queues.len()].clone()] };
            let req = ClaimParams::new(worker, ask, 10, ClaimMode::Start);
            let t0 = Instant::now();
            let jobs = self.pg.claim(&req).await?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if jobs.len() != 10 {
                return Err(other(format!(
                    "{label}: a claim from a backlog of {backlog} returned {} jobs",
                    jobs.len()
                )));
            }
            if i >= 2 * warmup {
                if i % 2 == 0 {
                    all_ms.push(ms);
                } else {
                    one_ms.push(ms);
                }
            }
            let leases: Vec<LeaseRef> = jobs.iter().map(ClaimedJob::lease_ref).collect();
            let out = self.pg.complete(worker, &leases).await?;
            if out.done.len() != leases.len() {
                return Err(other(format!("complete lost {} leases", out.lost.len())));
            }
            let refill: Vec<NewJob> =
                jobs.iter().map(|j| NewJob::new(j.queue.clone(), kind.clone()).json(json!({ "n": i }))).collect();
            self.pg.enqueue_many(refill).await?;
            pb.inc(1);
        }
        pb.finish_with_message("done");
        Ok((all_ms, one_ms))
    }
}

impl Bench {
    /// Claim-10 latency with --scheduled-jobs Pending jobs due tomorrow spread over the
    /// `sched` queues and --scheduled-due due ones beside them: each sample is a timed claim
    /// naming every queue (it returns the due ones), then an untimed complete and a refill of
    /// as many due jobs in the same queues.
    pub(super) async fn scheduled_claim(&self, res: &mut Results) -> Result<ScheduledFigures> {
        let queues: Vec<QueueName> =
            (0..self.args.claim_queues).map(|i| QueueName::new(format!("sched{i}"))).collect::<Result<_>>()?;
        let scheduled = u64::from(self.args.scheduled_jobs);
        let due = self.args.scheduled_due as usize;
        let tomorrow = chrono::Utc::now() + chrono::Duration::days(1);
        self.fill_at(&format!("fill scheduled {}", human(scheduled)), &queues, scheduled, Some(tomorrow), res).await?;
        let kind = JobKind::new(NOOP_KIND)?;
        let refill = |jobs: Vec<QueueName>, i: usize| -> Vec<NewJob> {
            jobs.into_iter().map(|q| NewJob::new(q, kind.clone()).json(json!({ "due": i }))).collect()
        };
        let first: Vec<QueueName> = (0..due).map(|i| queues[i % queues.len()].clone()).collect();
        self.pg.enqueue_many(refill(first, 0)).await?;
        self.vacuum_hot().await?;
        let worker = WorkerId::random();
        let samples = self.args.scheduled_samples as usize;
        let warmup = 20usize;
        let pb = self.bar(&format!("claim @ {} scheduled", human(scheduled)), (samples + warmup) as u64);
        let mut ms = Vec::with_capacity(samples);
        for i in 0..samples + warmup {
            let req = ClaimParams::new(worker, queues.clone(), 10, ClaimMode::Start);
            let t0 = Instant::now();
            let jobs = self.pg.claim(&req).await?;
            let took = t0.elapsed().as_secs_f64() * 1e3;
            if jobs.len() != due {
                return Err(other(format!("claim beside {scheduled} scheduled jobs returned {} of {due}", jobs.len())));
            }
            if i >= warmup {
                ms.push(took);
            }
            let leases: Vec<LeaseRef> = jobs.iter().map(ClaimedJob::lease_ref).collect();
            let out = self.pg.complete(worker, &leases).await?;
            if out.done.len() != leases.len() {
                return Err(other(format!("complete lost {} leases", out.lost.len())));
            }
            self.pg.enqueue_many(refill(jobs.into_iter().map(|j| j.queue).collect(), i + 1)).await?;
            pb.inc(1);
        }
        pb.finish_with_message("done");
        Ok(ScheduledFigures { scheduled, due: due as u32, all_queues: Latency::of(ms) })
    }
}
