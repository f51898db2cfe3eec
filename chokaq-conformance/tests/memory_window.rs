//! Issue 40, L7: a day's rate window holding a million starts, on the in-memory reference
//! backend: counted exactly (`check_long_window`), by a binary search whose cost the unit test
//! `memory::starts::tests::a_window_is_counted_by_a_binary_search` in chokaq-core bounds.

use chokaq_conformance::check_long_window;
use chokaq_core::memory::MemoryBackend;
use chokaq_core::QueueName;

#[tokio::test]
async fn a_million_starts_in_the_window_are_counted_exactly() {
    for by_key in [false, true] {
        let b = MemoryBackend::new();
        let q = QueueName::new(if by_key { "long-bykey" } else { "long-queue" }).unwrap();
        check_long_window(&b, &q, 999_990, by_key).await.unwrap_or_else(|e| panic!("by_key {by_key}: {e}"));
    }
}
