//! Rescue: expired Fetched jobs back to Pending, zombies back to Pending or dead-lettered
//! by attempts and queue policy; fresh jobs left alone; a SIGKILLed worker's job finished by
//! another worker exactly once.

use std::time::Duration;

use chokaq_core::testing::{JobPatch, Presence};
use chokaq_core::{
    BackendExt, ClaimMode, DeadReason, Fenced, JobLocation, JobStatus, PurgeParams, PurgeTarget, QueueControl,
    WorkerId, ZombiePolicy, DEFAULT_FETCHED_TIMEOUT, DEFAULT_ZOMBIE_TIMEOUT,
};

use crate::child::ChildLine;
use crate::ctx::{rescue_params, CaseResult, Ctx, AGED};
use crate::{ensure, ensure_eq};

super::cases!(rescue:
    fetched_timeout,
    zombie_retried,
    zombie_dead_without_attempts,
    zombie_policy_dead_letter,
    queue_zombie_timeout,
    leaves_fresh_jobs,
    default_timeouts,
    queue_fetched_timeout,
    purges_with_the_rescue,
    sigkill_mid_job [MULTI_PROCESS],
);

/// A Fetched job not started within the fetched timeout goes back to Pending, attempt
/// unchanged, and its old lease is lost.
pub async fn fetched_timeout(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let w = WorkerId::random();
    let j = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    cx.age(id, AGED).await?;
    cx.rescue_until_at(id, JobLocation::Hot(JobStatus::Pending)).await?;
    let r = cx.record(id).await?;
    ensure_eq!((r.attempt, r.worker_id), (0, None), "(attempt, worker_id) after rescue");
    ensure_eq!(cx.backend.start_one(w, j.lease_ref()).await?, Fenced::LeaseLost, "start with the rescued lease");
    Ok(())
}

/// A zombie (Processing, heartbeat older than the timeout) with attempts left goes back to
/// Pending and is claimed again with a new lease and the next attempt.
pub async fn zombie_retried(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(3)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    cx.age(id, AGED).await?;
    cx.rescue_until_at(id, JobLocation::Hot(JobStatus::Pending)).await?;
    let again = cx.claim_one_started(WorkerId::random(), &q).await?;
    ensure_eq!((again.id, again.attempt), (id, 2), "(id, attempt) of the re-claim");
    ensure!(again.lease > j.lease, "re-claim lease not above the zombie's");
    Ok(())
}

/// A zombie with no attempts left is dead-lettered with reason zombie.
pub async fn zombie_dead_without_attempts(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).max_attempts(1)).await?;
    let j = cx.claim_one_started(WorkerId::random(), &q).await?;
    ensure_eq!(j.attempt, 1, "attempt");
    cx.age(id, AGED).await?;
    cx.rescue_until_at(id, JobLocation::Dead(DeadReason::Zombie)).await?;
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 0, dead: 1 }, "presence");
    Ok(())
}

/// A queue whose zombie policy is DeadLetter dead-letters zombies even with attempts left.
pub async fn zombie_policy_dead_letter(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let st = cx.backend.control_queue(&q, QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter)).await?;
    ensure_eq!(st.zombie_policy, ZombiePolicy::DeadLetter, "settings");
    let id = cx.enqueue(cx.job(&q).max_attempts(5)).await?;
    cx.claim_one_started(WorkerId::random(), &q).await?;
    cx.age(id, AGED).await?;
    cx.rescue_until_at(id, JobLocation::Dead(DeadReason::Zombie)).await?;
    Ok(())
}

/// A queue's own zombie timeout overrides the rescuer's default: a heartbeat 10 s old is a
/// zombie in a queue with a 1 s timeout, while the same age elsewhere (600 s default) is not.
pub async fn queue_zombie_timeout(cx: Ctx) -> CaseResult {
    let (fast, slow) = (cx.queue_named("fast"), cx.queue_named("slow"));
    let st = cx.backend.control_queue(&fast, QueueControl::SetZombieTimeout(Some(Duration::from_secs(1)))).await?;
    ensure_eq!(st.zombie_timeout, Some(Duration::from_secs(1)), "settings");
    let a = cx.enqueue(cx.job(&fast)).await?;
    let b = cx.enqueue(cx.job(&slow)).await?;
    cx.claim_one_started(WorkerId::random(), &fast).await?;
    cx.claim_one_started(WorkerId::random(), &slow).await?;
    let ten_ago = cx.backend.db_now().await? - chrono::Duration::seconds(10);
    for id in [a, b] {
        cx.force(id, JobPatch { heartbeat_at: Some(Some(ten_ago)), updated_at: Some(ten_ago), ..Default::default() })
            .await?;
    }
    cx.rescue_until_at(a, JobLocation::Hot(JobStatus::Pending)).await?;
    ensure_eq!(
        cx.record(b).await?.location,
        JobLocation::Hot(JobStatus::Processing),
        "job of the default-timeout queue"
    );
    Ok(())
}

/// Fresh Fetched and Processing jobs are left alone by rescue.
pub async fn leaves_fresh_jobs(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    cx.enqueue_n(&q, 2).await?;
    let w = WorkerId::random();
    let f = cx.claim(w, &q, 1, ClaimMode::Reserve).await?.remove(0);
    let p = cx.claim_one_started(w, &q).await?;
    let mut ran = false;
    for _ in 0..50 {
        if cx.backend.rescue(&rescue_params()).await?.ran {
            ran = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ensure!(ran, "rescue never ran (maintenance lock always held?)");
    ensure_eq!(cx.record(f.id).await?.location, JobLocation::Hot(JobStatus::Fetched), "fresh Fetched job");
    ensure_eq!(cx.record(p.id).await?.location, JobLocation::Hot(JobStatus::Processing), "fresh Processing job");
    ensure_eq!(cx.backend.complete_one(w, p.lease_ref()).await?, Fenced::Done(()), "complete of the fresh job");
    Ok(())
}

/// The timeouts a rescue applies come from the database, never from whichever caller wins
/// the maintenance lock (`RescueParams` carries none): for a queue that sets none they are the
/// contract's defaults, 60 s for a Fetched job and 300 s for a zombie. Jobs just inside them are
/// kept, jobs just past them are rescued.
pub async fn default_timeouts(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let w = WorkerId::random();
    let fetched = |cx: &Ctx| {
        let (cx, q) = (cx.clone(), q.clone());
        async move {
            let id = cx.enqueue(cx.job(&q)).await?;
            cx.claim(w, &q, 1, ClaimMode::Reserve).await?;
            Ok::<_, crate::ctx::Failure>(id)
        }
    };
    let (f_young, f_old) = (fetched(&cx).await?, fetched(&cx).await?);
    let p_young = cx.enqueue(cx.job(&q)).await?;
    cx.claim_one_started(w, &q).await?;
    let p_old = cx.enqueue(cx.job(&q)).await?;
    cx.claim_one_started(w, &q).await?;
    // Every claim before any ageing: another case's rescue may release an aged job at once,
    // and a later claim of this queue would then take it instead of the new job.
    cx.age(f_young, DEFAULT_FETCHED_TIMEOUT - Duration::from_secs(20)).await?;
    cx.age(f_old, DEFAULT_FETCHED_TIMEOUT + Duration::from_secs(20)).await?;
    cx.age(p_young, DEFAULT_ZOMBIE_TIMEOUT - Duration::from_secs(20)).await?;
    cx.age(p_old, DEFAULT_ZOMBIE_TIMEOUT + Duration::from_secs(20)).await?;
    cx.rescue_until("both old jobs rescued", || async {
        Ok(cx.record(f_old).await?.location == JobLocation::Hot(JobStatus::Pending)
            && cx.record(p_old).await?.location == JobLocation::Hot(JobStatus::Pending))
    })
    .await?;
    ensure_eq!(cx.record(f_young).await?.location, JobLocation::Hot(JobStatus::Fetched), "Fetched job 40 s old");
    ensure_eq!(cx.record(p_young).await?.location, JobLocation::Hot(JobStatus::Processing), "zombie 280 s old");
    Ok(())
}

/// A queue's fetched timeout (`QueueControl::SetFetchedTimeout`) replaces the default for its
/// jobs, longer or shorter.
pub async fn queue_fetched_timeout(cx: Ctx) -> CaseResult {
    let (long, short) = (cx.queue(), cx.queue());
    cx.backend.control_queue(&long, QueueControl::SetFetchedTimeout(Some(Duration::from_secs(7200)))).await?;
    let s = cx.backend.control_queue(&short, QueueControl::SetFetchedTimeout(Some(Duration::from_secs(1)))).await?;
    ensure_eq!(s.fetched_timeout, Some(Duration::from_secs(1)), "the setting read back");
    let w = WorkerId::random();
    let kept = cx.enqueue(cx.job(&long)).await?;
    cx.claim(w, &long, 1, ClaimMode::Reserve).await?;
    let released = cx.enqueue(cx.job(&short)).await?;
    cx.claim(w, &short, 1, ClaimMode::Reserve).await?;
    cx.age(kept, AGED).await?;
    cx.age(released, Duration::from_secs(5)).await?;
    cx.rescue_until_at(released, JobLocation::Hot(JobStatus::Pending)).await?;
    ensure_eq!(cx.record(kept).await?.location, JobLocation::Hot(JobStatus::Fetched), "an hour old, timeout 2 h");
    cx.backend.control_queue(&long, QueueControl::SetFetchedTimeout(None)).await?;
    cx.rescue_until_at(kept, JobLocation::Hot(JobStatus::Pending)).await?;
    Ok(())
}

/// The retention purges of `RescueParams::purge` run with the rescue, under its maintenance
/// lock, and their count comes back in `RescueReport::purged`.
pub async fn purges_with_the_rescue(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let w = WorkerId::random();
    let ids = cx.enqueue_n(&q, 2).await?;
    let got = cx.claim(w, &q, 2, ClaimMode::Start).await?;
    let leases: Vec<_> = got.iter().map(|j| j.lease_ref()).collect();
    ensure_eq!(cx.backend.complete(w, &leases).await?.done.len(), 2, "completed");
    let mut req = PurgeParams::new(PurgeTarget::Archive, Duration::ZERO);
    req.queue = Some(q.clone());
    let params = chokaq_core::RescueParams { limit: 1000, purge: vec![req] };
    let purged = std::sync::atomic::AtomicU64::new(0);
    cx.poll("the rescue's purge to delete both", || async {
        let r = cx.backend.rescue(&params).await?;
        ensure!(r.ran || r.purged == 0, "a rescue that did not run purged {}", r.purged);
        Ok(purged.fetch_add(r.purged, std::sync::atomic::Ordering::Relaxed) + r.purged >= 2)
    })
    .await?;
    ensure_eq!(purged.into_inner(), 2, "rows purged by the rescue calls");
    for id in ids {
        ensure_eq!(cx.presence(id).await?.total(), 0, "presence of purged {id}");
    }
    Ok(())
}

/// A child process claims a job (start mode) and is killed with SIGKILL mid-job. After its
/// lease times out (heartbeat forced into the past) rescue hands the job back, another
/// worker completes it, and it is archived exactly once; the dead worker's lease is lost.
pub async fn sigkill_mid_job(cx: Ctx) -> CaseResult {
    let launcher = cx.children().ok_or("no child launcher")?.clone();
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q)).await?;
    let mut child = launcher.spawn("hold", &q, 1)?;
    let (held, lease) = loop {
        match tokio::time::timeout(crate::POLL_DEADLINE, child.next())
            .await
            .map_err(|_| crate::Failure("child did not report a held job in time".into()))??
        {
            Some(ChildLine::Held(id, lease)) => break (id, lease),
            Some(ChildLine::Error(e)) => return Err(format!("child failed: {e}").into()),
            Some(_) => continue,
            None => return Err("child exited without holding a job".into()),
        }
    };
    ensure_eq!(held, id, "job the child holds");
    child.child.start_kill().map_err(|e| crate::Failure(format!("SIGKILL failed: {e}")))?;
    let status = child.child.wait().await.map_err(|e| crate::Failure(format!("wait: {e}")))?;
    ensure!(!status.success(), "killed child exited successfully ({status})");
    let r = cx.record(id).await?;
    ensure_eq!(r.location, JobLocation::Hot(JobStatus::Processing), "job of the killed worker");
    ensure_eq!(r.lease, Some(lease), "lease of the killed worker's job");
    cx.age(id, AGED).await?;
    cx.rescue_until_at(id, JobLocation::Hot(JobStatus::Pending)).await?;
    let w = WorkerId::random();
    let j = cx.claim_one_started(w, &q).await?;
    ensure_eq!((j.id, j.attempt), (id, 2), "(id, attempt) of the re-claim");
    let dead_worker = r.worker_id.ok_or("no worker id on the killed worker's job")?;
    let stale = chokaq_core::LeaseRef { id, lease };
    ensure_eq!(cx.backend.complete_one(dead_worker, stale).await?, Fenced::LeaseLost, "the killed worker's lease");
    ensure_eq!(cx.backend.complete_one(w, j.lease_ref()).await?, Fenced::Done(()), "complete by the new worker");
    ensure_eq!(cx.presence(id).await?, Presence { hot: 0, archive: 1, dead: 0 }, "presence");
    Ok(())
}
