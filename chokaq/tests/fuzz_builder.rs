//! Fuzz-style test of the worker builder (issue: hostile input and misconfiguration): random
//! and extreme settings (durations from zero to `Duration::MAX`, counts from zero to
//! `u32::MAX`, odd queue names) go through `WorkerBuilder::build`. Every input ends in `Ok` or
//! a typed `InvalidInput`, never a panic; and a sample of the accepted workers is run on the
//! memory backend until it has finished one job, so no accepted setting panics a loop later.
//!
//! `CHOKAQ_FUZZ_ITERATIONS` (default 2,000) and `CHOKAQ_FUZZ_SEED` set a longer or other run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq::core::memory::MemoryBackend;
use chokaq::core::{ErrorKind, JobKind, NewJob, QueueName, RescueParams};
use chokaq::{Backend, BackendExt, MaintenanceConfig, RetryPolicy, Worker};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn iterations() -> usize {
    std::env::var("CHOKAQ_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

fn seed() -> u64 {
    std::env::var("CHOKAQ_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_b11d)
}

/// Durations weighted towards the edges: zero, tiny, ordinary, huge, `Duration::MAX`.
fn duration(rng: &mut StdRng) -> Duration {
    match rng.gen_range(0..8) {
        0 => Duration::ZERO,
        1 => Duration::MAX,
        2 => Duration::from_nanos(rng.gen_range(1..1_000)),
        3 => Duration::from_secs(u64::MAX / rng.gen_range(1..1_000)),
        4 => Duration::from_secs(rng.gen_range(0..100_000_000)),
        _ => Duration::from_millis(rng.gen_range(1..5_000)),
    }
}

fn count(rng: &mut StdRng) -> u32 {
    match rng.gen_range(0..6) {
        0 => 0,
        1 => u32::MAX,
        2 => rng.gen_range(1_000..100_000),
        _ => rng.gen_range(1..64),
    }
}

fn queue_name(rng: &mut StdRng) -> String {
    const ODD: &[&str] =
        &["", " ", "q\n", "q\u{202e}x", "q\u{200b}", "a/b", "ünï", "default", "x_y.z:1-2", "'; DROP TABLE x; --"];
    if rng.gen_bool(0.3) {
        ODD[rng.gen_range(0..ODD.len())].to_string()
    } else {
        "q".repeat(rng.gen_range(1..300))
    }
}

/// A builder with a random subset of settings, plus a description for the failure message.
fn random_builder(rng: &mut StdRng, backend: Arc<dyn Backend>, queue: &str) -> (chokaq::WorkerBuilder, String) {
    let mut b = Worker::builder(backend).queue(queue).register_raw("fuzz.v1", |_p, _c| async { Ok(()) });
    let mut desc = format!("queue {queue:?}");
    macro_rules! maybe {
        ($name:literal, $value:expr, $apply:expr) => {
            if rng.gen_bool(0.4) {
                let v = $value;
                desc.push_str(&format!(", {} {:?}", $name, v));
                b = $apply(b, v);
            }
        };
    }
    maybe!("concurrency", count(rng), |b: chokaq::WorkerBuilder, v| b.concurrency(v));
    maybe!("prefetch", count(rng), |b: chokaq::WorkerBuilder, v| b.prefetch(v));
    maybe!("lookahead", count(rng), |b: chokaq::WorkerBuilder, v| b.lookahead(v));
    maybe!("lookahead_wait", duration(rng), |b: chokaq::WorkerBuilder, v| b.lookahead_wait(v));
    maybe!("poll_interval", duration(rng), |b: chokaq::WorkerBuilder, v| b.poll_interval(v));
    maybe!("min_poll_interval", duration(rng), |b: chokaq::WorkerBuilder, v| b.min_poll_interval(v));
    maybe!("heartbeat_interval", duration(rng), |b: chokaq::WorkerBuilder, v| b.heartbeat_interval(v));
    maybe!("job_timeout", duration(rng), |b: chokaq::WorkerBuilder, v| b.job_timeout(v));
    maybe!("cancel_wait", duration(rng), |b: chokaq::WorkerBuilder, v| b.cancel_wait(v));
    maybe!("shutdown_grace", duration(rng), |b: chokaq::WorkerBuilder, v| b.shutdown_grace(v));
    maybe!("claim_batch_window", duration(rng), |b: chokaq::WorkerBuilder, v| b.claim_batch_window(v));
    maybe!("completion_batching", (count(rng) as usize, duration(rng)), |b: chokaq::WorkerBuilder, (n, d)| b
        .completion_batching(n, d));
    maybe!(
        "retry_policy",
        (duration(rng), duration(rng), rng.gen_range(-10.0..1e6f64)),
        |b: chokaq::WorkerBuilder, (base, max, factor)| {
            b.retry_policy(RetryPolicy { base, max, factor, ..RetryPolicy::default() })
        }
    );
    maybe!(
        "maintenance",
        (duration(rng), count(rng), duration(rng)),
        |b: chokaq::WorkerBuilder, (interval, limit, retention)| {
            let d = MaintenanceConfig::default();
            let rescue = RescueParams { limit, ..d.rescue.clone() };
            b.maintenance(MaintenanceConfig { interval, rescue, archive_retention: Some(retention), ..d })
        }
    );
    // A queue's own slots (issue 40, item 5): of the worker's queue, of another it may also
    // claim, or of an odd name.
    maybe!(
        "queue_concurrency",
        (rng.gen_bool(0.5), if rng.gen_bool(0.7) { queue.to_string() } else { queue_name(rng) }, count(rng)),
        |b: chokaq::WorkerBuilder, (other, q, n): (bool, String, u32)| {
            let b = if other { b.queue("fuzz_other") } else { b };
            b.queue_concurrency(q, n)
        }
    );
    (b, desc)
}

#[test]
fn every_setting_builds_or_is_invalid_input_and_never_panics() {
    let mut rng = StdRng::seed_from_u64(seed());
    let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let (mut ok, mut invalid) = (0usize, 0usize);
    for i in 0..iterations() {
        let queue = if rng.gen_bool(0.8) { "fuzz".to_string() } else { queue_name(&mut rng) };
        let (b, desc) = random_builder(&mut rng, backend.clone(), &queue);
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.build()))
            .unwrap_or_else(|_| panic!("input {i} panicked in build(): {desc}"));
        match built {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "input {i}: {desc}: {e}");
                invalid += 1;
            }
        }
    }
    println!("worker builder: {ok} built, {invalid} refused with InvalidInput (seed {})", seed());
    assert!(ok > 0 && invalid > 0, "the inputs should reach both outcomes: {ok} ok, {invalid} invalid");
}

/// A sample of accepted random settings runs: each worker finishes one job and stops cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_settings_run_a_job_without_panicking() {
    let mut rng = StdRng::seed_from_u64(seed() ^ 0xa11ce);
    let mut ran = 0;
    let mut tries = 0;
    while ran < 25 && tries < 5_000 {
        tries += 1;
        let backend = Arc::new(MemoryBackend::new());
        let (b, desc) = random_builder(&mut rng, backend.clone(), "fuzz");
        let Ok(worker) = b.build() else { continue };
        let id = backend
            .enqueue(NewJob::new(QueueName::new("fuzz").unwrap(), JobKind::new("fuzz.v1").unwrap()))
            .await
            .unwrap()
            .id;
        let token = chokaq::CancellationToken::new();
        let handle = tokio::spawn(worker.run(token.clone()));
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut done = false;
        while Instant::now() < deadline {
            if matches!(
                backend.get_job(id).await.unwrap().map(|r| r.location),
                Some(chokaq::core::JobLocation::Archived)
            ) {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await; // poll interval, not a synchronisation
        }
        token.cancel();
        let joined = tokio::time::timeout(Duration::from_secs(30), handle).await;
        let result = joined.unwrap_or_else(|_| panic!("worker did not stop within 30 s: {desc}"));
        let report = result.unwrap_or_else(|e| panic!("worker task panicked ({e}): {desc}"));
        // A setting the queue's own timeouts cannot keep (a heartbeat interval over half the
        // zombie timeout, a prefetch against the fetched timeout) is refused when the worker
        // starts, as an InvalidInput naming the queue (docs/runtime.md, Settings).
        if let Err(e) = &report {
            let refused = e.kind() == chokaq::ErrorKind::InvalidInput && e.to_string().contains("queue fuzz:");
            assert!(refused, "worker returned an error ({e}): {desc}");
            continue;
        }
        // Settings that make the first claim wait longer than the deadline (a huge poll
        // interval with no wake-up) are allowed; everything else must have run the job.
        if done {
            ran += 1;
        }
    }
    println!("{ran} accepted random settings ran a job ({tries} tried)");
    assert!(ran >= 10, "too few accepted settings ran a job: {ran} of {tries}");
}
