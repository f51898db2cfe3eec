//! A rate window holds while the rescue prunes the starts log during claims (issue 36 hole 4):
//! six claimers of one rate-limited queue and a rescue loop beside them; afterwards no window
//! of the period holds more starts than the limit.
//!
//! `cargo test -p chokaq-mysql --test rate_race` (URL from `CHOKAQ_TEST_MYSQL_URL`;
//! `CHOKAQ_TEST_REQUIRE=mysql` makes an unreachable server a failure).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq_conformance::{fresh_schema_name, is_required};
use chokaq_core::testing::TestSupport;
use chokaq_core::{
    Backend, ClaimMode, ClaimParams, NewJob, QueueControl, QueueName, RateLimit, RescueParams, Timestamp, WorkerId,
};
use chokaq_mysql::{MysqlBackend, MysqlConfig};

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// The limit: `JOBS` starts per `PER`.
const JOBS: u32 = 2;
const PER: Duration = Duration::from_millis(50);
const CLAIMERS: usize = 6;
/// Bounds of the run: this many jobs, at most this long.
const BACKLOG: usize = 300;
const RUN_FOR: Duration = Duration::from_secs(6);

/// How many windows of `per` that begin at a start hold more than `limit` starts.
fn windows_over(at: &[Timestamp], per: Duration, limit: usize) -> usize {
    let per = chrono::Duration::from_std(per).unwrap();
    (0..at.len()).filter(|&i| at[i..].iter().take_while(|t| **t - at[i] < per).count() > limit).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_window_holds_while_the_rescue_prunes() {
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let schema = fresh_schema_name();
    let b = match MysqlBackend::connect(MysqlConfig::new(url).schema(schema).max_connections(16)).await {
        Ok(b) => b,
        Err(e) if !is_required("mysql") => {
            eprintln!("skipped: mysql unreachable: {e}");
            return;
        }
        Err(e) => panic!("mysql unreachable (and CHOKAQ_TEST_REQUIRE requires it): {e}"),
    };
    b.migrate().await.expect("migrate");
    let b = Arc::new(b);
    let q = QueueName::new("rr").unwrap();
    b.control_queue(&q, QueueControl::SetRateLimit(Some(RateLimit::new(JOBS, PER)))).await.unwrap();
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
        let (b, q) = (b.clone(), q.clone());
        claimers.push(tokio::spawn(async move {
            let w = WorkerId::random();
            let mut starts = Vec::new();
            while Instant::now() < until {
                let got = b.claim(&ClaimParams::new(w, vec![q.clone()], 1, ClaimMode::Start)).await.expect("claim");
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
    let over = windows_over(&starts, PER, JOBS as usize);
    eprintln!("{} starts, {rescues} rescues; at most {most} starts in a window of {PER:?}", starts.len());
    // The run really claimed and rescued (a window's worth of starts or more).
    assert!(starts.len() > JOBS as usize && rescues > 0, "{} starts, {rescues} rescues", starts.len());
    assert!(most <= JOBS as usize, "{over} windows of {PER:?} held more than {JOBS} starts (the most: {most})");
    assert_eq!(b.lock_retries().hot_paths(), 0, "{}", b.lock_retries());
    b.drop_schema().await.expect("drop the schema");
}
