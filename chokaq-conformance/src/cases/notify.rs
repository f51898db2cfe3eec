//! Push wake-ups: an enqueue wakes a listener, on backends that push them.

use std::time::{Duration, Instant};

use chokaq_core::Wake;

use crate::cases::Outcome;
use crate::ctx::{Ctx, Failure};
use crate::ensure;

super::cases!(notify: wakes_on_enqueue);

/// An enqueue wakes a listener. Ignored when the backend pushes no wake-ups
/// (`Backend::wakeups` returns `None`).
pub async fn wakes_on_enqueue(cx: Ctx) -> Result<Outcome, Failure> {
    let mut wakeups = match cx.backend.wakeups().await {
        Ok(Some(w)) => w,
        Ok(None) => return Ok(Outcome::Ignored("backend pushes no wake-ups (Backend::wakeups returns None)".into())),
        Err(e) => return Ok(Outcome::Ignored(format!("backend pushes no wake-ups (Backend::wakeups failed: {e})"))),
    };
    let q = cx.queue();
    // The listener may need a moment to subscribe: enqueue until a wake-up for the queue comes.
    let deadline = Instant::now() + crate::POLL_DEADLINE;
    loop {
        cx.enqueue(cx.job(&q)).await?;
        match tokio::time::timeout(Duration::from_millis(500), wakeups.recv()).await {
            Ok(Some(Wake::Queue(name))) if name == q.as_str() => return Ok(Outcome::Passed),
            Ok(Some(Wake::Any)) => return Ok(Outcome::Passed),
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => return Err("the wake-up stream ended".into()),
        }
        ensure!(Instant::now() < deadline, "no wake-up for {q} within {:?}", crate::POLL_DEADLINE);
    }
}
