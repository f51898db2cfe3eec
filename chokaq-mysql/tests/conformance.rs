//! The shared conformance suite against MariaDB / MySQL, in a fresh schema (database)
//! `chokaq_t_<hex>` that is dropped at the end. URL from `CHOKAQ_TEST_MYSQL_URL` (default: the
//! local server, `mysql://root@127.0.0.1:3306/test`); `CHOKAQ_TEST_REQUIRE=mysql` makes an
//! unreachable server a failure. Filter like any test:
//! `cargo test -p chokaq-mysql --test conformance -- cap_`.
//!
//! At the end it prints the deadlocks (1213) and lock wait timeouts (1205) the backend met and
//! retried, per path, and fails the run if the claim or completion path met any: the races
//! (`claim_race_*`, `cap_race_*`, `lease_concurrent_*`, `stress_*`, ...) must run without one.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use chokaq_conformance::{run_main, TestBackend, UrlHarness};
use chokaq_mysql::{LockRetryCounts, MysqlBackend, MysqlConfig};

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// Every backend the run opened (the harness may reopen it).
static OPENED: Mutex<Vec<MysqlBackend>> = Mutex::new(Vec::new());

fn main() -> ExitCode {
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let code = run_main(UrlHarness::new("mysql", Some(url), |url, schema| {
        Box::pin(async move {
            let backend = MysqlBackend::connect(MysqlConfig::new(url).schema(schema).max_connections(16)).await?;
            OPENED.lock().unwrap_or_else(|p| p.into_inner()).push(backend.clone());
            Ok(Arc::new(backend) as Arc<dyn TestBackend>)
        })
    }));
    let opened = OPENED.lock().unwrap_or_else(|p| p.into_inner());
    if opened.is_empty() {
        return code;
    }
    let mut total = LockRetryCounts::default();
    for b in opened.iter() {
        let c = b.lock_retries();
        total.claim_deadlocks += c.claim_deadlocks;
        total.claim_lock_waits += c.claim_lock_waits;
        total.completion_deadlocks += c.completion_deadlocks;
        total.completion_lock_waits += c.completion_lock_waits;
        total.other_deadlocks += c.other_deadlocks;
        total.other_lock_waits += c.other_lock_waits;
    }
    eprintln!("mysql: {total}");
    if total.hot_paths() > 0 {
        eprintln!("mysql: FAILED: the claim and completion paths must meet no deadlock or lock wait timeout");
        return ExitCode::FAILURE;
    }
    code
}
