//! Push wake-ups: an enqueue wakes a listener with a wake-up that names the enqueued queue,
//! on backends that push them.

use std::time::{Duration, Instant};

use chokaq_core::{QueueName, Wake, Wakeups};

use crate::cases::Outcome;
use crate::ctx::{Ctx, Failure, CALL_DEADLINE};
use crate::ensure;

super::cases!(notify: wakes_on_enqueue);

/// An enqueue wakes a listener with `Wake::Queue` naming the enqueued queue. Only a wake-up
/// for that very queue counts: `Wake::Any` (missed wake-ups) and wake-ups of other queues
/// (other cases run meanwhile) do not, and jobs enqueued into another queue, alone or first in
/// a batch, never produce one. Ignored when the backend pushes no wake-ups
/// (`Backend::wakeups` returns `None`).
pub async fn wakes_on_enqueue(cx: Ctx) -> Result<Outcome, Failure> {
    let mut wakeups = match cx.backend.wakeups().await {
        Ok(Some(w)) => w,
        Ok(None) => return Ok(Outcome::Ignored("backend pushes no wake-ups (Backend::wakeups returns None)".into())),
        Err(e) => return Ok(Outcome::Ignored(format!("backend pushes no wake-ups (Backend::wakeups failed: {e})"))),
    };
    let (other, target, second) = (cx.queue_named("other"), cx.queue_named("target"), cx.queue_named("second"));
    let never = [&target, &second];
    // 1. `wakeups` may return before the listener is subscribed (PostgreSQL's returns after
    //    LISTEN): enqueue into `other` until its own wake-up arrives. Meanwhile no wake-up may name `target` or `second` (no job went there).
    let one = |q: &QueueName| {
        let job = cx.job(q);
        let cx = cx.clone();
        async move { cx.enqueue(job).await.map(|_| ()) }
    };
    let seen = wait_for(&mut wakeups, &other, &never, CALL_DEADLINE, || one(&other)).await?;
    ensure!(seen, "no wake-up naming {other} within {CALL_DEADLINE:?} of enqueues into it (only others or Wake::Any)");
    // 2. One job into `target`: a wake-up naming `target` arrives (the stream is live now).
    let seen = wait_for(&mut wakeups, &target, &[&second], CALL_DEADLINE, || one(&target)).await?;
    ensure!(seen, "no wake-up naming {target} within {CALL_DEADLINE:?} of enqueues into it (only others or Wake::Any)");
    // 3. One batch into `other` then `second`: the second queue of the batch is woken too.
    let batch = || {
        let (jobs, cx) = (vec![cx.job(&other), cx.job(&second)], cx.clone());
        async move { Ok(cx.backend.enqueue_many(jobs).await.map(|_| ())?) }
    };
    let seen = wait_for(&mut wakeups, &second, &[], CALL_DEADLINE, batch).await?;
    ensure!(seen, "no wake-up naming {second} within {CALL_DEADLINE:?} of batches into {other} and {second}");
    Ok(Outcome::Passed)
}

/// Enqueues with `enqueue` every 500 ms until a wake-up naming `want` arrives (true) or
/// `limit` passes (false); a wake-up naming one of `never` fails the case.
async fn wait_for<F, Fut>(
    wakeups: &mut Wakeups,
    want: &QueueName,
    never: &[&QueueName],
    limit: Duration,
    mut enqueue: F,
) -> Result<bool, Failure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), Failure>>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        enqueue().await?;
        let round = tokio::time::Instant::now() + Duration::from_millis(500);
        loop {
            match tokio::time::timeout_at(round, wakeups.recv()).await {
                Ok(Some(Wake::Queue(name))) if name == want.as_str() => return Ok(true),
                Ok(Some(Wake::Queue(name))) => {
                    ensure!(
                        !never.iter().any(|q| q.as_str() == name),
                        "a wake-up named {name}, but no job was enqueued into it (only into {want})"
                    );
                }
                Ok(Some(Wake::Any)) => {}
                Ok(None) => return Err("the wake-up stream ended".into()),
                Err(_) => break,
            }
        }
    }
    Ok(false)
}
