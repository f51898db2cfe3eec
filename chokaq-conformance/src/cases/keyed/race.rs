//! The keyed races: claimer tasks, and claimer processes, over many keys at once; the
//! database's busiest keys watched while they run.

use super::*;

/// Watches the queue's busiest keys from the database while a race runs; records the most
/// running jobs any key had in one snapshot, and stops the race when it exceeds `cap`.
fn watch_keys(
    cx: &Ctx,
    q: &QueueName,
    cap: u32,
    stop: Arc<AtomicU64>,
    max_db: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<Result<(), Failure>> {
    let (cx, q) = (cx.clone(), q.clone());
    tokio::spawn(async move {
        while stop.load(Ordering::SeqCst) == 0 {
            let s = cx.queue_stats(&q).await?;
            let top = s.busiest_keys.first().map(|k| k.running).unwrap_or(0);
            max_db.fetch_max(top, Ordering::SeqCst);
            if top > u64::from(cap) {
                stop.store(2, Ordering::SeqCst);
            }
            tokio::task::yield_now().await;
        }
        Ok(())
    })
}

/// Racing claimer tasks over many keys (cap 2 each) and key-less jobs: an in-process count per
/// key goes up after a claim returns and down before the completion is sent, so it exceeds the
/// cap only if the database let too many out; the database's busiest keys are watched too.
pub async fn race_tasks(cx: Ctx) -> CaseResult {
    const CAP: u32 = 2;
    let q = cx.queue();
    let keys: Vec<String> = (0..8).map(|k| format!("k{k}")).collect();
    let mut spec: Vec<(Option<&str>, usize)> = keys.iter().map(|k| (Some(k.as_str()), 12)).collect();
    spec.push((None, 20));
    let ids = enqueue_keyed(&cx, &q, &spec).await?;
    let total = ids.len() as u64;
    set_key_cap(&cx, &q, Some(CAP)).await?;
    let held: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let max_held = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicU64::new(0));
    let max_db = Arc::new(AtomicU64::new(0));
    let watcher = watch_keys(&cx, &q, CAP, stop.clone(), max_db.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..cx.stress.claimers.max(6) {
        let (cx, q, held, max_held, done, stop) =
            (cx.clone(), q.clone(), held.clone(), max_held.clone(), done.clone(), stop.clone());
        tasks.spawn(async move {
            let w = WorkerId::random();
            let mut progress = crate::cases::Progress::new();
            let mut round = 0u64;
            while done.load(Ordering::SeqCst) < total && stop.load(Ordering::SeqCst) == 0 {
                let now_done = done.load(Ordering::SeqCst);
                ensure!(!progress.stalled(now_done), "keyed race: no job finished for 60 s ({now_done} of {total})");
                let mode = [ClaimMode::Reserve, ClaimMode::Start, ClaimMode::Hold][t % 3];
                let got = cx.claim(w, &q, 4, mode).await?;
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                {
                    let mut h = held.lock().expect("held map");
                    for j in got.iter().filter_map(|j| j.concurrency_key.as_ref()) {
                        let n = h.entry(j.clone()).or_insert(0);
                        *n += 1;
                        max_held.fetch_max(u64::from(*n), Ordering::SeqCst);
                        if *n > CAP {
                            stop.store(1, Ordering::SeqCst);
                            return Err(Failure(format!("key {j}: {n} jobs held at once by workers (cap {CAP})")));
                        }
                    }
                }
                let leases: Vec<LeaseRef> = got.iter().map(|j| j.lease_ref()).collect();
                round += 1;
                if mode == ClaimMode::Reserve && round % 3 == 0 {
                    // Jobs come back mid-race: released to Pending (their slots free, and
                    // they may be earlier in claim order than what others are taking).
                    {
                        let mut h = held.lock().expect("held map");
                        for k in got.iter().filter_map(|j| j.concurrency_key.as_ref()) {
                            *h.get_mut(k).expect("counted above") -= 1;
                        }
                    }
                    let r = cx.backend.release(w, &leases).await?;
                    ensure!(r.lost.is_empty(), "release lost leases {:?}", r.lost);
                    continue;
                }
                if mode == ClaimMode::Reserve {
                    let s = cx.backend.start(w, &leases).await?;
                    ensure!(s.lost.is_empty(), "start lost leases {:?}", s.lost);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                {
                    let mut h = held.lock().expect("held map");
                    for k in got.iter().filter_map(|j| j.concurrency_key.as_ref()) {
                        *h.get_mut(k).expect("counted above") -= 1;
                    }
                }
                let c = cx.backend.complete(w, &leases).await?;
                ensure!(c.lost.is_empty(), "complete lost leases {:?}", c.lost);
                done.fetch_add(c.done.len() as u64, Ordering::SeqCst);
            }
            Ok::<(), Failure>(())
        });
    }
    let mut first_err = None;
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.map_err(|e| Failure(format!("claimer panicked: {e}"))).and_then(|r| r) {
            stop.store(1, Ordering::SeqCst);
            first_err.get_or_insert(e);
        }
    }
    stop.fetch_max(1, Ordering::SeqCst);
    watcher.await.map_err(|e| Failure(format!("watcher panicked: {e}")))??;
    if let Some(e) = first_err {
        return Err(e);
    }
    let max_db = max_db.load(Ordering::SeqCst);
    ensure!(max_db <= u64::from(CAP), "the stats showed a key with {max_db} running jobs (cap {CAP})");
    ensure!(max_held.load(Ordering::SeqCst) <= u64::from(CAP), "workers held more than {CAP} jobs of one key");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!((s.archived, s.pending + s.fetched + s.processing), (total, 0), "(archived, live) after the race");
    Ok(())
}

/// Child OS processes (and this one) race over a keyed queue: every job claimed exactly once,
/// and no snapshot of the database ever shows a key over its cap.
pub async fn race_processes(cx: Ctx) -> CaseResult {
    const CAP: u32 = 1;
    let launcher = cx.children().ok_or("no child launcher")?.clone();
    let q = cx.queue();
    let keys: Vec<String> = (0..6).map(|k| format!("k{k}")).collect();
    let spec: Vec<(Option<&str>, usize)> = keys.iter().map(|k| (Some(k.as_str()), 15)).collect();
    let ids = enqueue_keyed(&cx, &q, &spec).await?;
    set_key_cap(&cx, &q, Some(CAP)).await?;
    let stop = Arc::new(AtomicU64::new(0));
    let max_db = Arc::new(AtomicU64::new(0));
    let watcher = watch_keys(&cx, &q, CAP, stop.clone(), max_db.clone());
    let mut procs = Vec::new();
    for p in 0..cx.stress.processes.max(3) {
        procs.push(launcher.spawn("claim-all", &q, 1 + (p as u32 % 4))?);
    }
    let mut readers = tokio::task::JoinSet::new();
    for mut p in procs {
        readers.spawn(async move {
            let mut claims = Vec::new();
            let mut done = false;
            while let Some(line) = p.next().await? {
                match line {
                    ChildLine::Claimed(id, l) => claims.push((id, l)),
                    ChildLine::Done => done = true,
                    ChildLine::Lost(id) => return Err(Failure(format!("child lost the lease of {id}"))),
                    ChildLine::Error(e) => return Err(Failure(format!("child failed: {e}"))),
                    ChildLine::Ready | ChildLine::Held(..) | ChildLine::Tick(..) => {}
                }
            }
            let status = p.child.wait().await.map_err(|e| Failure(format!("waiting for child: {e}")))?;
            ensure!(done && status.success(), "child ended without 'done' (exit {status})");
            Ok::<_, Failure>(claims)
        });
    }
    let mut all = Vec::new();
    let mut first_err = None;
    while let Some(r) = readers.join_next().await {
        match r.map_err(|e| Failure(format!("reader panicked: {e}"))).and_then(|r| r) {
            Ok(c) => all.extend(c),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    stop.fetch_max(1, Ordering::SeqCst);
    watcher.await.map_err(|e| Failure(format!("watcher panicked: {e}")))??;
    if let Some(e) = first_err {
        return Err(e);
    }
    let max_db = max_db.load(Ordering::SeqCst);
    ensure!(max_db <= u64::from(CAP), "the stats showed a key with {max_db} running jobs (cap {CAP})");
    let distinct: HashSet<JobId> = all.iter().map(|(id, _)| *id).collect();
    ensure_eq!((distinct.len(), all.len()), (ids.len(), ids.len()), "(distinct jobs claimed, claims)");
    let s = cx.queue_stats(&q).await?;
    ensure_eq!(s.archived, ids.len() as u64, "archived after the race");
    Ok(())
}
