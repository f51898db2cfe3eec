//! Schedule: no job is claimed before `scheduled_at`.

use std::time::Duration;

use chokaq_core::testing::JobPatch;
use chokaq_core::{ClaimMode, JobLocation, JobStatus, WorkerId};

use crate::ctx::{CaseResult, Ctx};
use crate::{ensure, ensure_eq};

super::cases!(schedule: future_not_claimed, past_claimed_first, short_delay_becomes_due);

/// A job delayed by an hour (database clock) is not claimed; once its time is forced into the
/// past it is.
pub async fn future_not_claimed(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let before = cx.backend.db_now().await?;
    let id = cx.enqueue(cx.job(&q).delay(Duration::from_secs(3600))).await?;
    let r = cx.record(id).await?;
    let s = r.scheduled_at.ok_or("a delayed job has no scheduled_at")?;
    ensure!(s >= before + chrono::Duration::minutes(59), "scheduled_at {s} is not about an hour after {before}");
    let w = WorkerId::random();
    ensure!(cx.claim(w, &q, 10, ClaimMode::Start).await?.is_empty(), "a job due in an hour was claimed");
    let at_time = cx.enqueue(cx.job(&q).run_at(before + chrono::Duration::hours(2))).await?;
    ensure!(cx.claim(w, &q, 10, ClaimMode::Reserve).await?.is_empty(), "a job due in two hours was claimed");
    let past = cx.backend.db_now().await? - chrono::Duration::seconds(1);
    cx.force(id, JobPatch { scheduled_at: Some(Some(past)), ..Default::default() }).await?;
    let got = cx.claim(w, &q, 10, ClaimMode::Start).await?;
    ensure!(got.len() == 1 && got[0].id == id, "claim after the schedule passed: {got:?}");
    ensure_eq!(cx.record(at_time).await?.location, JobLocation::Hot(JobStatus::Pending), "the later job");
    Ok(())
}

/// A job scheduled in the past is claimable at once, ahead of newer jobs.
pub async fn past_claimed_first(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let newer = cx.enqueue(cx.job(&q)).await?;
    let past = cx.backend.db_now().await? - chrono::Duration::days(1);
    let old = cx.enqueue(cx.job(&q).run_at(past)).await?;
    let got: Vec<_> = cx.claim(WorkerId::random(), &q, 2, ClaimMode::Reserve).await?.iter().map(|j| j.id).collect();
    ensure_eq!(got, vec![old, newer], "claim order");
    Ok(())
}

/// A short delay: the job becomes claimable once due, and never before (the database clock
/// at the successful claim is at or after `scheduled_at`).
pub async fn short_delay_becomes_due(cx: Ctx) -> CaseResult {
    let q = cx.queue();
    let id = cx.enqueue(cx.job(&q).delay(Duration::from_millis(700))).await?;
    let due = cx.record(id).await?.scheduled_at.ok_or("no scheduled_at")?;
    let w = WorkerId::random();
    let deadline = std::time::Instant::now() + crate::POLL_DEADLINE;
    let (got, started) = loop {
        let got = cx.claim(w, &q, 1, ClaimMode::Start).await?;
        if let Some(j) = got.first() {
            break (j.id, j.started_at);
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the delayed job was not claimed within {:?}",
            crate::POLL_DEADLINE
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ensure_eq!(got, id, "claimed id");
    let started = started.ok_or("no started_at")?;
    ensure!(started >= due, "claimed at {started}, before its scheduled_at {due}");
    Ok(())
}
