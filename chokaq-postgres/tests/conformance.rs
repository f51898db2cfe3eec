//! The shared conformance suite against PostgreSQL, in a fresh schema `chokaq_t_<hex>` that
//! is dropped at the end. URL from `CHOKAQ_TEST_POSTGRES_URL` (default: the local test
//! database); `CHOKAQ_TEST_REQUIRE=postgres` makes an unreachable server a failure.
//! Filter like any test: `cargo test -p chokaq-postgres --test conformance -- cap_`.

use std::sync::Arc;

use chokaq_conformance::{run_main, TestBackend, UrlHarness};
use chokaq_postgres::{PgBackend, PgConfig};

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn main() -> std::process::ExitCode {
    let url = std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    run_main(UrlHarness::new("postgres", Some(url), |url, schema| {
        Box::pin(async move {
            let backend = PgBackend::connect(PgConfig::new(url).schema(schema).max_connections(16)).await?;
            Ok(Arc::new(backend) as Arc<dyn TestBackend>)
        })
    }))
}
