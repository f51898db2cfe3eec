//! `chokaq::apptest` on PostgreSQL: each case on a fresh schema `chokaq_t_<hex>`, dropped
//! afterwards (the cases are in `apptest_cases`). The URL comes from
//! `CHOKAQ_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); when the
//! database is unreachable every case is ignored, unless `CHOKAQ_TEST_REQUIRE` names
//! `postgres`: then every case fails.

mod apptest_cases;

use std::sync::Arc;

use chokaq::postgres::{PgBackend, PgConfig};
use chokaq::Backend;
use chokaq_core::testing::TestSupport;

fn url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn connect(schema: &str) -> chokaq::Result<PgBackend> {
    PgBackend::connect(PgConfig::new(url()).schema(schema).max_connections(4)).await
}

fn main() -> std::process::ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let reachable = rt.block_on(async { connect("chokaq_probe").await.map(drop) });
    drop(rt);
    let required = std::env::var("CHOKAQ_TEST_REQUIRE").is_ok_and(|v| v.split(',').any(|s| s.trim() == "postgres"));
    let reachable = match reachable {
        Ok(()) => Ok(()),
        // Required: run the cases, which then fail on the connection error.
        Err(_) if required => Ok(()),
        Err(e) => Err(format!("PostgreSQL unreachable ({})", e.kind())),
    };
    apptest_cases::main_with(
        reachable,
        || async {
            let b = connect(&format!("chokaq_t_{:016x}", rand::random::<u64>())).await?;
            b.migrate().await?;
            Ok(Arc::new(b))
        },
        |b| async move {
            // The schema goes with the case: the cases share the server with other tests.
            if let Err(e) = b.drop_schema().await {
                eprintln!("could not drop schema {}: {e}", b.schema());
            }
        },
    )
}
