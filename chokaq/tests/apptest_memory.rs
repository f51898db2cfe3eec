//! `chokaq::apptest` on the in-memory backend (the cases are in `apptest_cases`).

mod apptest_cases;

use std::sync::Arc;

use chokaq::core::memory::MemoryBackend;

fn main() -> std::process::ExitCode {
    apptest_cases::main_with(
        Ok(()),
        Vec::new(),
        || async { Ok(Arc::new(MemoryBackend::new())) },
        |_b: Arc<MemoryBackend>| async {},
    )
}
