//! The SQL Server conformance harness shared by the three conformance binaries, one per
//! database configuration: `conformance` (READ_COMMITTED_SNAPSHOT OFF, ALLOW_SNAPSHOT_ISOLATION
//! ON), `conformance_rcsi` (RCSI ON, snapshot isolation ON) and `conformance_defaults` (both
//! OFF: the on-premises default).
//!
//! Where the server comes from is decided by `source::decide` (a URL in
//! `CHOKAQ_TEST_MSSQL_URL`, else with `CHOKAQ_TEST_MSSQL_DOCKER=1` a SQL Server 2022 container
//! through testcontainers, else nothing and every case ignored with the reason). The harness
//! creates (once) the configuration's database, sets its two row-versioning options (only
//! when they differ, so a running suite is never kicked out), then runs every case in a fresh
//! schema `chokaq_t_<hex>` that is dropped at the end. `CHOKAQ_TEST_REQUIRE=mssql` turns
//! "not available" into failures.

// Each test binary uses part of this module.
#![allow(dead_code)]

mod docker;
pub mod server;
pub mod source;

use std::sync::Arc;

use async_trait::async_trait;
use chokaq_conformance::{run_main, Harness, TestBackend, UrlHarness};
use chokaq_core::{Error, ErrorKind, Result};
use chokaq_mssql::{MssqlBackend, MssqlConfig};

use self::source::{decide, probe_docker, Inputs, Source};

/// One database configuration of the suite.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The database the harness creates for it.
    pub database: &'static str,
    /// READ_COMMITTED_SNAPSHOT.
    pub rcsi: bool,
    /// ALLOW_SNAPSHOT_ISOLATION.
    pub snapshot: bool,
}

impl Config {
    fn label(&self) -> String {
        let on = |b: bool| if b { "ON" } else { "OFF" };
        format!("READ_COMMITTED_SNAPSHOT {}, ALLOW_SNAPSHOT_ISOLATION {}", on(self.rcsi), on(self.snapshot))
    }
}

// Each binary uses one of the three configurations.
/// RCSI OFF, snapshot isolation ON.
#[allow(dead_code)]
pub const RCSI_OFF: Config = Config { database: "chokaq_conformance_rcsi_off", rcsi: false, snapshot: true };
/// RCSI ON, snapshot isolation ON.
#[allow(dead_code)]
pub const RCSI_ON: Config = Config { database: "chokaq_conformance_rcsi_on", rcsi: true, snapshot: true };
/// Both OFF: SQL Server's own default, where reads are locking reads.
#[allow(dead_code)]
pub const DEFAULTS: Config = Config { database: "chokaq_conformance_defaults", rcsi: false, snapshot: false };

struct MssqlHarness {
    inner: UrlHarness,
    why_not: Option<String>,
    config: Config,
}

#[async_trait]
impl Harness for MssqlHarness {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn unavailable_reason(&self) -> Option<String> {
        let why = self.why_not.clone().or_else(|| self.inner.unavailable_reason())?;
        Some(format!("{} run: {why}", self.config.label()))
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

fn run(config: Config, url: Option<String>, why_not: Option<String>) -> std::process::ExitCode {
    let inner = UrlHarness::new("mssql", url, move |url, schema| {
        Box::pin(async move {
            let cfg = MssqlConfig::from_url(&url)?.schema(&schema)?.max_connections(16);
            let (cfg, rcsi, snapshot) =
                MssqlBackend::ensure_database(cfg, config.database, config.rcsi, config.snapshot).await?;
            if (rcsi, snapshot) != (config.rcsi, config.snapshot) {
                return Err(Error::new(
                    ErrorKind::Other,
                    format!("could not set {} on {}", config.label(), config.database),
                ));
            }
            let backend = MssqlBackend::connect(cfg).await?;
            Ok(Arc::new(backend) as Arc<dyn TestBackend>)
        })
    });
    run_main(MssqlHarness { inner, why_not, config })
}

/// The `main` of a conformance binary for `config`.
pub fn main_for(config: Config) -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match decide(&Inputs::from_env(&args), probe_docker) {
        Source::Url(url) => run(config, Some(url), None),
        // UrlHarness reads the URL its parent handed down.
        Source::Parent => run(config, None, None),
        Source::Unavailable(why) => run(config, None, Some(why)),
        Source::Docker => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a tokio runtime for the container");
            match rt.block_on(docker::start()) {
                Ok(server) => {
                    let code = run(config, Some(server.url.clone()), None);
                    rt.block_on(server.stop());
                    code
                }
                Err(e) => run(config, None, Some(format!("Docker answers, but SQL Server did not start: {e}"))),
            }
        }
    }
}
