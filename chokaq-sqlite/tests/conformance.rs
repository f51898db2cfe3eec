//! The shared conformance suite on SQLite, multi-process cases included.
//!
//! SQLite has no schemas: the store is a database file. The harness creates a fresh
//! `chokaq_t_<hex>.db` in the temp directory (or in `CHOKAQ_TEST_SQLITE_DIR`), migrates it,
//! hands its path to child processes (they reopen the same file, never migrate), and removes
//! it after the run. SQLite needs no server, so the backend is always available.
//!
//! `cargo test -p chokaq-sqlite --test conformance` (filter: `-- cap_`).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use chokaq_conformance::{fresh_schema_name, run_main, Harness, TestBackend};
use chokaq_core::testing::TestSupport;
use chokaq_core::Backend;
use chokaq_sqlite::{SqliteBackend, SqliteConfig};
use tokio::sync::OnceCell;

/// The database file a child process must reopen.
const ENV_CHILD_DB: &str = "CHOKAQ_SQLITE_CONFORMANCE_DB";

#[derive(Debug)]
struct SqliteHarness {
    path: PathBuf,
    child: bool,
    opened: OnceCell<Arc<SqliteBackend>>,
}

impl SqliteHarness {
    fn from_env() -> Self {
        match std::env::var(ENV_CHILD_DB) {
            Ok(p) if !p.is_empty() => SqliteHarness { path: PathBuf::from(p), child: true, opened: OnceCell::new() },
            _ => {
                let dir =
                    std::env::var("CHOKAQ_TEST_SQLITE_DIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
                let path = dir.join(format!("{}.db", fresh_schema_name()));
                SqliteHarness { path, child: false, opened: OnceCell::new() }
            }
        }
    }
}

#[async_trait]
impl Harness for SqliteHarness {
    fn name(&self) -> &str {
        "sqlite"
    }

    async fn open(&self) -> chokaq_core::Result<Arc<dyn TestBackend>> {
        let b = self
            .opened
            .get_or_try_init(|| async {
                let b = SqliteBackend::connect(SqliteConfig::new(self.path.display().to_string())).await?;
                if !self.child {
                    b.migrate().await?;
                }
                Ok::<_, chokaq_core::Error>(Arc::new(b))
            })
            .await?;
        Ok(b.clone())
    }

    fn child_env(&self) -> Vec<(String, String)> {
        vec![(ENV_CHILD_DB.to_string(), self.path.display().to_string())]
    }

    async fn finish(&self) -> chokaq_core::Result<()> {
        if self.child {
            return Ok(());
        }
        if let Some(b) = self.opened.get() {
            b.drop_schema().await?;
            b.close().await;
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    run_main(SqliteHarness::from_env())
}
