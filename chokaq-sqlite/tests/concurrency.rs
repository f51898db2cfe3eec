//! Concurrency on one SQLite file: many claimer tasks in one process, and several OS
//! processes (this test binary re-executed) claiming from one file.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, JobId, Lease, WorkerId};
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use common::{fresh, job, q};

const CHILD_DB: &str = "CHOKAQ_SQLITE_CHILD_DB";
const CHILD_OUT: &str = "CHOKAQ_SQLITE_CHILD_OUT";
const CHILD_QUEUE: &str = "mp";

/// Checks that every id was claimed exactly once and is archived exactly once.
async fn assert_each_archived_once(b: &SqliteBackend, ids: &[JobId], claims: &[(JobId, Lease)]) {
    let mut per_id: HashMap<JobId, u32> = HashMap::new();
    for (id, _) in claims {
        *per_id.entry(*id).or_default() += 1;
    }
    let dups: Vec<_> = per_id.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "jobs claimed more than once: {dups:?}");
    assert_eq!(claims.len(), ids.len(), "every job claimed exactly once");
    let mut leases: Vec<Lease> = claims.iter().map(|(_, l)| *l).collect();
    leases.sort();
    leases.dedup();
    assert_eq!(leases.len(), claims.len(), "every claim got its own lease");
    let presence = b.presence_many(ids).await.unwrap();
    for (id, p) in presence {
        assert_eq!((p.hot, p.archive, p.dead), (0, 1, 0), "job {id}");
    }
    let snap = b.stats().await.unwrap();
    assert_eq!((snap.hot(), snap.archived, snap.dead), (0, ids.len() as u64, 0));
}

/// 8 claimer tasks over 2,000 jobs in a queue capped at 3: no duplicates, the cap holds at
/// every claim (checked by a concurrent observer reading consistent snapshots, and by the
/// claimers' own count), every job archived once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_claimers_two_thousand_jobs_cap_three() {
    const JOBS: usize = 2000;
    const CAP: u32 = 3;
    let (b, _db) = fresh().await;
    b.set_max_workers(&q("capped"), Some(CAP)).await.unwrap();
    let ids: Vec<JobId> = b.enqueue_many(vec![job("capped"); JOBS]).await.unwrap().iter().map(|e| e.id).collect();

    let claims: Arc<Mutex<Vec<(JobId, Lease)>>> = Arc::default();
    // Held = claimed and not yet completed, counted by the claimers: raised after the claim
    // committed and lowered before the completion commits, so it never exceeds the number
    // of active rows in the database.
    let held = Arc::new(AtomicU64::new(0));
    let max_held = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicU64::new(0));
    let started = Instant::now();

    let observer = {
        let (b, done) = (b.clone(), done.clone());
        tokio::spawn(async move {
            let mut max_seen = 0u64;
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) {
                let snap = b.stats().await.unwrap();
                let active = snap.queue("capped").map(|s| s.fetched + s.processing).unwrap_or(0);
                max_seen = max_seen.max(active);
                assert_eq!(snap.total(), JOBS as u64, "sums add up in every snapshot");
                reads += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (max_seen, reads)
        })
    };

    let mut tasks = Vec::new();
    for i in 0..8 {
        let (b, claims, held, max_held) = (b.clone(), claims.clone(), held.clone(), max_held.clone());
        let finished = finished.clone();
        tasks.push(tokio::spawn(async move {
            let w = WorkerId::random();
            let mode = if i % 2 == 0 { ClaimMode::Start } else { ClaimMode::Reserve };
            let mut idle_since: Option<Instant> = None;
            loop {
                let got = b.claim(&ClaimParams::new(w, vec![q("capped")], 2, mode)).await.unwrap();
                if got.is_empty() {
                    if finished.load(Ordering::Acquire) == JOBS as u64 {
                        break;
                    }
                    // Others hold the cap: poll again, with a deadline against livelock.
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    assert!(since.elapsed() < Duration::from_secs(60), "claimer starved for 60 s");
                    // Poll interval of an idle worker (not synchronisation: the loop re-checks).
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                idle_since = None;
                assert!(got.len() as u32 <= CAP);
                let now_held = held.fetch_add(got.len() as u64, Ordering::AcqRel) + got.len() as u64;
                max_held.fetch_max(now_held, Ordering::AcqRel);
                claims.lock().unwrap().extend(got.iter().map(|j| (j.id, j.lease)));
                let mut leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
                if mode == ClaimMode::Reserve {
                    let out = b.start(w, &leases).await.unwrap();
                    assert!(out.lost.is_empty(), "lost a lease nobody could take: {out:?}");
                }
                // Complete one by one half the time, as a batch otherwise.
                held.fetch_sub(got.len() as u64, Ordering::AcqRel);
                if i % 4 < 2 {
                    let out = b.complete(w, &leases).await.unwrap();
                    assert_eq!(out.done.len(), got.len());
                } else {
                    for l in leases.drain(..) {
                        assert!(!b.complete_one(w, l).await.unwrap().is_lost());
                    }
                }
                finished.fetch_add(got.len() as u64, Ordering::AcqRel);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.store(true, Ordering::Release);
    let (max_seen, reads) = observer.await.unwrap();
    let elapsed = started.elapsed();
    println!(
        "8 claimers, {JOBS} jobs, cap {CAP}: {elapsed:?}, max active seen by observer {max_seen} in {reads} \
         snapshots, max held by claimers {}",
        max_held.load(Ordering::Acquire)
    );
    assert!(max_seen <= u64::from(CAP), "observer saw {max_seen} active > cap {CAP}");
    assert!(max_held.load(Ordering::Acquire) <= u64::from(CAP));
    let claims = claims.lock().unwrap().clone();
    assert_each_archived_once(&b, &ids, &claims).await;
}

/// Uncapped: 8 claimers in batches of 10 over 2,000 jobs, no duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_claimers_uncapped_no_duplicates() {
    const JOBS: usize = 2000;
    let (b, _db) = fresh().await;
    let ids: Vec<JobId> = b.enqueue_many(vec![job("free"); JOBS]).await.unwrap().iter().map(|e| e.id).collect();
    let claims: Arc<Mutex<Vec<(JobId, Lease)>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (b, claims) = (b.clone(), claims.clone());
        tasks.push(tokio::spawn(async move {
            let w = WorkerId::random();
            loop {
                let got = b.claim(&ClaimParams::new(w, vec![q("free")], 10, ClaimMode::Start)).await.unwrap();
                if got.is_empty() {
                    break;
                }
                claims.lock().unwrap().extend(got.iter().map(|j| (j.id, j.lease)));
                let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
                assert_eq!(b.complete(w, &leases).await.unwrap().done.len(), got.len());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let claims = claims.lock().unwrap().clone();
    assert_each_archived_once(&b, &ids, &claims).await;
}

/// The child side of the multi-process tests: runs only when re-executed by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, started by the multi-process tests"]
async fn child_claimer_process() {
    let (Ok(db), Ok(out)) = (std::env::var(CHILD_DB), std::env::var(CHILD_OUT)) else {
        panic!("{CHILD_DB} and {CHILD_OUT} must be set: this test is run by two_processes_claim_from_one_file");
    };
    let b = SqliteBackend::connect(SqliteConfig::new(db)).await.unwrap();
    let mut file = std::fs::File::create(out).unwrap();
    let w = WorkerId::random();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "child ran out of time");
        let got = b.claim(&ClaimParams::new(w, vec![q(CHILD_QUEUE)], 5, ClaimMode::Start)).await.unwrap();
        if got.is_empty() {
            let snap = b.stats().await.unwrap();
            if snap.queue(CHILD_QUEUE).map(|s| s.pending).unwrap_or(0) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        // Record before completing: a duplicate claim would show even if completion failed.
        for j in &got {
            writeln!(file, "{} {}", j.id, j.lease).unwrap();
        }
        file.flush().unwrap();
        let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
        let res = b.complete(w, &leases).await.unwrap();
        assert_eq!(res.done.len(), got.len(), "lost leases: {:?}", res.lost);
    }
    file.sync_all().unwrap();
    b.close().await;
}

fn parse_claims(text: &str) -> Vec<(JobId, Lease)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (id, lease) = l.split_once(' ').unwrap();
            (id.parse::<JobId>().unwrap(), Lease(lease.trim().parse::<i64>().unwrap()))
        })
        .collect()
}

/// Two OS processes (plus claimer tasks in this one) claim from one file, with a cap of 4
/// on the queue: no job is claimed twice, the cap holds across processes, every job is
/// archived exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_claim_from_one_file() {
    const JOBS: usize = 1500;
    const CAP: u32 = 4;
    let (b, db) = fresh().await;
    b.set_max_workers(&q(CHILD_QUEUE), Some(CAP)).await.unwrap();
    let ids: Vec<JobId> = b.enqueue_many(vec![job(CHILD_QUEUE); JOBS]).await.unwrap().iter().map(|e| e.id).collect();

    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    let mut outs = Vec::new();
    for n in 0..2 {
        let out = std::env::temp_dir().join(format!("chokaq_t_child_{}_{n}.txt", uuid::Uuid::new_v4().simple()));
        let child = tokio::process::Command::new(&exe)
            .args(["child_claimer_process", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
            .env(CHILD_DB, db.path.display().to_string())
            .env(CHILD_OUT, &out)
            .kill_on_drop(true)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        children.push(child);
        outs.push(out);
    }

    // This process claims too, and watches the cap.
    let started = Instant::now();
    let mut mine: Vec<(JobId, Lease)> = Vec::new();
    let mut max_active = 0u64;
    let w = WorkerId::random();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "parent ran out of time");
        let snap = b.stats().await.unwrap();
        let s = snap.queue(CHILD_QUEUE).cloned().unwrap_or_default();
        max_active = max_active.max(s.fetched + s.processing);
        assert_eq!(snap.total(), JOBS as u64);
        let got = b.claim(&ClaimParams::new(w, vec![q(CHILD_QUEUE)], 2, ClaimMode::Start)).await.unwrap();
        if got.is_empty() {
            if s.pending == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        mine.extend(got.iter().map(|j| (j.id, j.lease)));
        let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
        assert_eq!(b.complete(w, &leases).await.unwrap().done.len(), got.len());
    }

    let mut all = mine.clone();
    for (child, out) in children.into_iter().zip(&outs) {
        let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await.unwrap().unwrap();
        assert!(
            output.status.success(),
            "child failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let text = std::fs::read_to_string(out).unwrap();
        let _ = std::fs::remove_file(out);
        let claims = parse_claims(&text);
        println!("child claimed {}", claims.len());
        all.extend(claims);
    }
    println!(
        "3 processes, {JOBS} jobs, cap {CAP}: {:?}; parent claimed {}, max active seen {max_active}",
        started.elapsed(),
        mine.len()
    );
    assert!(max_active <= u64::from(CAP), "cap overshoot across processes: {max_active}");
    assert_each_archived_once(&b, &ids, &all).await;
}
