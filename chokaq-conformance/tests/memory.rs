//! The suite against the in-memory reference backend (`chokaq_core::memory::MemoryBackend`).

use std::sync::Arc;

use async_trait::async_trait;
use chokaq_conformance::{run_main, Harness, TestBackend};
use chokaq_core::memory::MemoryBackend;

#[derive(Debug)]
struct MemoryHarness {
    backend: Arc<MemoryBackend>,
}

#[async_trait]
impl Harness for MemoryHarness {
    fn name(&self) -> &str {
        "memory"
    }

    async fn open(&self) -> chokaq_core::Result<Arc<dyn TestBackend>> {
        Ok(self.backend.clone())
    }
}

fn main() -> std::process::ExitCode {
    run_main(MemoryHarness { backend: Arc::new(MemoryBackend::new()) })
}
