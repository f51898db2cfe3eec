//! A rate window holds while the rescue prunes the starts log during claims (issue 36 hole 4,
//! the shape of chokaq-mysql's `rate_race`): six claimers of one rate-limited queue and a
//! rescue loop beside them; afterwards no window of the period holds more starts than the
//! limit. SQLite is immune by construction (`docs/sqlite.md`, "Keyed queues and rate limits"):
//! the claim and the rescue's prune each run under the single writer's lock and read the
//! clock after taking it.

mod common;

use std::time::{Duration, Instant};

use chokaq_core::{
    Backend, ClaimMode, ClaimParams, NewJob, QueueControl, RateLimit, RescueParams, Timestamp, WorkerId,
};
use common::{fresh, q};

/// The limit: `JOBS` starts per `PER`.
const JOBS: u32 = 2;
const PER: Duration = Duration::from_millis(50);
const CLAIMERS: usize = 6;
/// Bounds of the run: this many jobs, at most this long.
const BACKLOG: usize = 300;
const RUN_FOR: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_window_holds_while_the_rescue_prunes() {
    let (b, _db) = fresh().await;
    let queue = q("rr");
    b.control_queue(&queue, QueueControl::SetRateLimit(Some(RateLimit::new(JOBS, PER)))).await.unwrap();
    let jobs = (0..BACKLOG).map(|_| NewJob::build("rr", "rate.race.v1").unwrap()).collect();
    assert_eq!(b.enqueue_many(jobs).await.unwrap().len(), BACKLOG);

    let until = Instant::now() + RUN_FOR;
    let rescuer = {
        let b = b.clone();
        tokio::spawn(async move {
            let mut runs = 0u64;
            while Instant::now() < until {
                b.rescue(&RescueParams { limit: 100, purge: Vec::new() }).await.expect("rescue");
                runs += 1;
            }
            runs
        })
    };
    let mut claimers = Vec::new();
    for _ in 0..CLAIMERS {
        let (b, queue) = (b.clone(), queue.clone());
        claimers.push(tokio::spawn(async move {
            let w = WorkerId::random();
            let mut starts = Vec::new();
            while Instant::now() < until {
                let got = b.claim(&ClaimParams::new(w, vec![queue.clone()], 1, ClaimMode::Start)).await.expect("claim");
                starts.extend(got.iter().map(|j| j.started_at.expect("a started job has its start")));
            }
            starts
        }));
    }
    let mut starts: Vec<Timestamp> = Vec::new();
    for c in claimers {
        starts.extend(c.await.unwrap());
    }
    let rescues = rescuer.await.unwrap();
    starts.sort_unstable();
    let most = chokaq_conformance::max_in_window(&starts, PER);
    eprintln!("{} starts, {rescues} rescues; at most {most} starts in a window of {PER:?}", starts.len());
    assert!(starts.len() > JOBS as usize && rescues > 0, "{} starts, {rescues} rescues", starts.len());
    assert!(most <= JOBS as usize, "{most} starts in a window of {PER:?} (limit {JOBS})");
}
