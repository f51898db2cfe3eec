//! The SQL Server conformance harness shared by `tests/conformance.rs` (READ_COMMITTED_SNAPSHOT
//! OFF) and `tests/conformance_rcsi.rs` (ON).
//!
//! `CHOKAQ_TEST_MSSQL_URL` is an ADO connection string to a server where the login may
//! create databases, e.g.
//! `server=tcp:127.0.0.1,1433;user=sa;password=...;TrustServerCertificate=true;Encrypt=false`.
//! The harness creates (once) the database `chokaq_conformance_rcsi_off` or
//! `chokaq_conformance_rcsi_on`, turns ALLOW_SNAPSHOT_ISOLATION on and sets
//! READ_COMMITTED_SNAPSHOT (only when it differs, so a running suite is never kicked out),
//! then runs every case in a fresh schema `chokaq_t_<hex>` that is dropped at the end.
//! Without the variable every case is ignored with the reason; `CHOKAQ_TEST_REQUIRE=mssql`
//! turns that into failures.

use std::sync::Arc;

use async_trait::async_trait;
use chokaq_conformance::{run_main, Harness, TestBackend, UrlHarness, ENV_REQUIRE};
use chokaq_core::{Error, ErrorKind, Result};
use chokaq_mssql::{MssqlBackend, MssqlConfig};

pub const ENV_URL: &str = "CHOKAQ_TEST_MSSQL_URL";

struct MssqlHarness {
    inner: UrlHarness,
    rcsi: bool,
}

#[async_trait]
impl Harness for MssqlHarness {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn unavailable_reason(&self) -> Option<String> {
        self.inner.unavailable_reason().map(|_| {
            format!(
                "no SQL Server is configured for the READ_COMMITTED_SNAPSHOT {} run: these cases stay ignored until \
                 {ENV_URL} is set to an ADO.NET connection string of a server where the login may create \
                 databases, e.g. {ENV_URL}='server=tcp:127.0.0.1,1433;user=sa;password=...;\
                 TrustServerCertificate=true;Encrypt=false' ({ENV_REQUIRE}=mssql turns this into a failure)",
                if self.rcsi { "ON" } else { "OFF" }
            )
        })
    }

    async fn open(&self) -> Result<Arc<dyn TestBackend>> {
        self.inner.open().await
    }

    fn child_env(&self) -> Vec<(String, String)> {
        self.inner.child_env()
    }

    async fn finish(&self) -> Result<()> {
        self.inner.finish().await
    }
}

pub fn main_for(rcsi: bool) -> std::process::ExitCode {
    let url = std::env::var(ENV_URL).ok().filter(|s| !s.trim().is_empty());
    let db = if rcsi { "chokaq_conformance_rcsi_on" } else { "chokaq_conformance_rcsi_off" };
    let inner = UrlHarness::new("mssql", url, move |url, schema| {
        Box::pin(async move {
            let cfg = MssqlConfig::new(&url)?.schema(&schema)?.max_connections(16);
            let (cfg, now_on, _) = MssqlBackend::ensure_database(cfg, db, rcsi, true).await?;
            if now_on != rcsi {
                return Err(Error::new(
                    ErrorKind::Other,
                    format!("could not set READ_COMMITTED_SNAPSHOT {} on {db}", if rcsi { "ON" } else { "OFF" }),
                ));
            }
            let backend = MssqlBackend::connect(cfg).await?;
            Ok(Arc::new(backend) as Arc<dyn TestBackend>)
        })
    });
    run_main(MssqlHarness { inner, rcsi })
}
