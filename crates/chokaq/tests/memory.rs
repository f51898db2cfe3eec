//! The runtime scenarios on the in-memory reference backend (fast, single process). The same
//! scenarios run on PostgreSQL in `tests/postgres.rs`.

mod common;

use std::sync::Arc;

use chokaq::core::memory::MemoryBackend;

fn backend() -> Arc<MemoryBackend> {
    Arc::new(MemoryBackend::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_roundtrip() {
    common::typed_roundtrip(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_fatal() {
    common::retry_and_fatal(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_and_panic() {
    common::poison_and_panic(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_retries() {
    common::timeout_retries(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_cancel() {
    let b = backend();
    common::operator_cancel(b.clone(), b).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_prefetch() {
    common::shutdown_releases_prefetch(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_releases_prefetch() {
    common::pause_releases_prefetch(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_discards_outcome() {
    common::lease_lost_discards_outcome(backend()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snooze_does_not_count() {
    common::snooze_does_not_count(backend()).await.unwrap();
}
