//! `chokaq::apptest` on SQLite: each case on a new database file in a temporary directory of
//! this run, removed at the end (the cases are in `apptest_cases`).

mod apptest_cases;

use std::path::PathBuf;
use std::sync::Arc;

use chokaq::sqlite::{SqliteBackend, SqliteConfig};
use chokaq::Backend;

fn dir() -> PathBuf {
    std::env::temp_dir().join(format!("chokaq_apptest_{}", std::process::id()))
}

fn main() -> std::process::ExitCode {
    std::fs::create_dir_all(dir()).expect("temporary directory");
    let code = apptest_cases::main_with(
        Ok(()),
        Vec::new(),
        || async {
            let file = dir().join(format!("{:016x}.db", rand::random::<u64>()));
            let b = SqliteBackend::connect(SqliteConfig::new(file.to_string_lossy())).await?;
            b.migrate().await?;
            Ok(Arc::new(b))
        },
        |_b: Arc<SqliteBackend>| async {},
    );
    let _ = std::fs::remove_dir_all(dir());
    code
}
