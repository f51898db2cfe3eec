//! The heartbeat's HOT share: jobs in Processing, the backend's heartbeat over all of them a
//! number of times, and how many of those row updates PostgreSQL made HOT (no index entry).

use std::time::Instant;

use chokaq::core::{ClaimMode, ClaimParams, ClaimedJob, LeaseRef, MAX_CLAIM_LIMIT, MAX_ENQUEUE_BATCH};
use chokaq::{Backend, JobKind, NewJob, QueueName, Result, WorkerId};
use serde_json::json;

use super::{Bench, NOOP_KIND};
use crate::figures::{HeartbeatFigures, Latency};
use crate::other;

impl Bench {
    /// --heartbeat-jobs jobs claimed in Start mode (Processing), then --heartbeat-rounds
    /// heartbeat calls over all of them, nothing else running; `jobs_hot`'s update and HOT
    /// update counters over those calls. The jobs are completed afterwards.
    pub(super) async fn heartbeat(&self) -> Result<HeartbeatFigures> {
        let n = self.args.heartbeat_jobs as usize;
        let rounds = self.args.heartbeat_rounds;
        let queue = QueueName::new("heartbeat")?;
        let kind = JobKind::new(NOOP_KIND)?;
        let jobs: Vec<NewJob> =
            (0..n).map(|i| NewJob::new(queue.clone(), kind.clone()).json(json!({ "n": i }))).collect();
        for chunk in jobs.chunks(MAX_ENQUEUE_BATCH) {
            self.pg.enqueue_many(chunk.to_vec()).await?;
        }
        let worker = WorkerId::random();
        let mut leases: Vec<LeaseRef> = Vec::with_capacity(n);
        while leases.len() < n {
            let limit = (n - leases.len()).min(MAX_CLAIM_LIMIT as usize) as u32;
            let got = self.pg.claim(&ClaimParams::new(worker, vec![queue.clone()], limit, ClaimMode::Start)).await?;
            if got.is_empty() {
                return Err(other(format!("heartbeat: claimed {} of {n} jobs", leases.len())));
            }
            leases.extend(got.iter().map(ClaimedJob::lease_ref));
        }
        // Start from a table without dead row versions, like the drains.
        self.vacuum_hot().await?;
        let pb = self.bar("heartbeat", u64::from(rounds));
        let probe = self.probe(Some("jobs_hot")).await?;
        let mut ms = Vec::with_capacity(rounds as usize);
        for _ in 0..rounds {
            let t0 = Instant::now();
            let report = self.pg.heartbeat(worker, &leases).await?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
            if report.held.len() != n {
                return Err(other(format!("heartbeat: {} of {n} leases held", report.held.len())));
            }
            pb.inc(1);
        }
        let p = self.probed(probe).await?;
        pb.finish_with_message("done");
        if let Some(t) = &p.table {
            let expected = n as i64 * i64::from(rounds);
            if t.updates != expected || t.inserts != 0 || t.deletes != 0 {
                return Err(other(format!("heartbeat: jobs_hot counted {t:?}, expected {expected} updates only")));
            }
        }
        for chunk in leases.chunks(MAX_CLAIM_LIMIT as usize) {
            let out = self.pg.complete(worker, chunk).await?;
            if out.done.len() != chunk.len() {
                return Err(other(format!("heartbeat: complete lost {} leases", out.lost.len())));
            }
        }
        Ok(HeartbeatFigures {
            jobs: n as u32,
            rounds,
            call: Latency::of(ms),
            table: p.table,
            wal_bytes: p.wal_bytes,
            index_entries: p.index_entries,
        })
    }
}
