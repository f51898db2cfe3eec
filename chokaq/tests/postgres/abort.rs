//! A handler that kills its process (issue 24, rule 9; issue 36, hole 1).

use super::*;

/// Attempts of the job whose handler aborts its process.
pub(crate) const ABORT_MAX_ATTEMPTS: i32 = 2;
/// The zombie timeout of its queue: a held job expires after this long without a heartbeat.
pub(crate) const ABORT_ZOMBIE_TIMEOUT: Duration = Duration::from_secs(1);
/// The signal `std::process::abort()` ends a process with (6 on Linux), without a libc
/// dependency.
pub(crate) const SIGABRT: i32 = 6;

/// Issue 24, rule 9, and issue 36, hole 1: a poison job (`max_attempts` 2) whose handler
/// appends its id to a run file (one `write`) and then calls `std::process::abort()` at once,
/// and an innocent job enqueued after it, waiting in the same one-slot worker's look-ahead. The
/// queue's zombie timeout is 1 s, the parent calls `rescue` every 100 ms and starts a fresh
/// worker process whenever the previous one died, until the poison job is in the dead-letter
/// table and the innocent one archived (at most 60 s).
///
/// The bound: the poison job runs at most `max_attempts + 1` (3) times. Its first run is not
/// counted (the process dies before the deferred start, 20 ms into the run), so its hold
/// expires and the rescue puts it back with `expired_holds` 1; from then on a worker records
/// its start before its handler begins, so each later run counts an attempt, and after
/// `max_attempts` the rescue of the Processing zombie dead-letters it. The innocent job's holds
/// expire with it, but an expiry never dead-letters: it runs once, and is archived with
/// attempt 1 (on 8fb8e0f it was dead-lettered `zombie` with 0 runs). Asserted: poison
/// dead-lettered `zombie`, its runs (lines in the run file) at most that bound, its stored
/// attempt at most `max_attempts`; the innocent job archived after exactly one run; every
/// worker process but the last ended by SIGABRT.
pub(crate) async fn aborting_handler(b: Arc<PgBackend>) -> TestResult {
    use std::os::unix::process::ExitStatusExt;
    let queue = chokaq::QueueName::new("default").map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetZombieTimeout(Some(ABORT_ZOMBIE_TIMEOUT)))
        .await
        .map_err(err)?;
    b.control_queue(&queue, chokaq::core::QueueControl::SetFetchedTimeout(Some(ABORT_ZOMBIE_TIMEOUT)))
        .await
        .map_err(err)?;
    let dynb: Arc<dyn Backend> = b.clone();
    let client = Client::new(dynb);
    let id = client.enqueue(JobBuilder::new(&Count { n: 0 }).max_attempts(ABORT_MAX_ATTEMPTS)).await.map_err(err)?.id;
    let innocent =
        client.enqueue(JobBuilder::new(&Count { n: 1 }).max_attempts(ABORT_MAX_ATTEMPTS)).await.map_err(err)?.id;
    let dir = std::env::temp_dir().join(format!("chokaq_rt_{}", b.schema()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    let runs_file = dir.join("runs.txt");
    let extra = [(ABORT_ENV, "1".to_string())];

    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(60);
    let params = RescueParams { limit: 100, purge: Vec::new() };
    let (mut started, mut aborted) = (0u32, 0u32);
    let (mut rescued_held, mut rescued_dead, mut rescued_zombies) = (0u64, 0u64, 0u64);
    let mut child: Option<ChildProc> = None;
    let record = loop {
        let record = b.get_job(id).await.map_err(err)?.ok_or("the job is gone")?;
        let other = b.get_job(innocent).await.map_err(err)?.ok_or("the innocent job is gone")?;
        let other_final = matches!(other.location, JobLocation::Dead(_) | JobLocation::Archived);
        if matches!(record.location, JobLocation::Dead(_)) && other_final {
            break record;
        }
        ensure!(
            Instant::now() < deadline,
            "the job is not dead-lettered after 60 s: {:?}, attempt {}, {} worker processes started, {} runs",
            record.location,
            record.attempt,
            started,
            read_runs(&runs_file)?.len()
        );
        // A fresh worker process whenever the previous one died.
        if let Some(c) = &mut child {
            if let Some(status) = c.child.try_wait().map_err(err)? {
                ensure!(status.signal() == Some(SIGABRT), "a worker process ended with {status}, not SIGABRT");
                aborted += 1;
                child = None;
            }
        }
        if child.is_none() {
            child = Some(spawn_child_env(b.schema(), &runs_file, &extra).await?);
            started += 1;
        }
        let r = b.rescue(&params).await.map_err(err)?;
        rescued_held += r.fetched_released;
        rescued_dead += r.zombies_dead;
        rescued_zombies += r.zombies_retried;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let elapsed = t0.elapsed();
    // The last worker process: started after the last death, or dead itself.
    if let Some(mut c) = child.take() {
        drop(c.child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), c.child.wait())
            .await
            .map_err(|_| "the last worker process did not exit")?
            .map_err(err)?;
        if status.signal() == Some(SIGABRT) {
            aborted += 1;
        } else {
            ensure!(status.success(), "the last worker process exited with {status}");
        }
    }
    let all_runs = read_runs(&runs_file)?;
    let runs: Vec<_> = all_runs.iter().filter(|r| **r == id).collect();
    let innocent_runs = all_runs.iter().filter(|r| **r == innocent).count();
    let other = b.get_job(innocent).await.map_err(err)?.ok_or("the innocent job is gone")?;
    let bound = ABORT_MAX_ATTEMPTS + 1;
    println!(
        "    aborting handler: {} runs (bound max_attempts {ABORT_MAX_ATTEMPTS} + 1 = {bound}), {started} worker \
         processes started, {aborted} aborted; dead-lettered {:?} after {elapsed:.2?} with attempt {} (last error \
         {:?}); the innocent job: {:?}, attempt {}, {innocent_runs} runs; the rescue calls put {rescued_held} held \
         jobs back, dead-lettered {rescued_dead}, retried {rescued_zombies} zombies",
        runs.len(),
        record.location,
        record.attempt,
        record.last_error.as_deref().unwrap_or(""),
        other.location,
        other.attempt
    );
    ensure!(all_runs.iter().all(|r| *r == id || *r == innocent), "a run for another job id");
    ensure!(
        (other.location, other.attempt, innocent_runs) == (JobLocation::Archived, 1, 1),
        "the innocent job ended {:?} with attempt {} after {innocent_runs} runs, not archived after one run",
        other.location,
        other.attempt
    );
    ensure!(
        record.location == JobLocation::Dead(DeadReason::Zombie),
        "the job ended {:?}, not dead-lettered zombie",
        record.location
    );
    ensure!(runs.len() as i32 <= bound, "the job ran {} times: more than max_attempts + 1 = {bound}", runs.len());
    ensure!(!runs.is_empty(), "the job never ran");
    ensure!(
        record.attempt <= ABORT_MAX_ATTEMPTS,
        "the job's stored attempt is {}, over max_attempts {ABORT_MAX_ATTEMPTS}",
        record.attempt
    );
    ensure!(aborted as usize == runs.len(), "{aborted} worker processes aborted for {} poison runs", runs.len());
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
