//! [`MysqlConfig`]: the server URL, the schema (a MySQL database) and the pool's limits. The URL
//! is redacted in `Debug`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chokaq_core::{validate, Error, Result};
use sqlx::mysql::MySqlConnectOptions;

/// The schema (MySQL database) used when none is given.
pub const DEFAULT_SCHEMA: &str = "chokaq";

/// How to reach a MariaDB or MySQL server, and which database holds the job tables.
///
/// ```
/// # use chokaq_mysql::MysqlConfig;
/// let cfg = MysqlConfig::new("mysql://app:secret@db:3306/app").schema("jobs").max_connections(20);
/// assert!(!format!("{cfg:?}").contains("secret"));
/// ```
///
/// `mariadb://` is accepted as a synonym of `mysql://`. The job tables live in their own
/// database (`schema`, default `chokaq`), created by [`chokaq_core::Backend::migrate`]; the
/// URL's database is only where the sessions start.
#[derive(Clone)]
pub struct MysqlConfig {
    pub(crate) url: String,
    pub(crate) schema: String,
    pub(crate) max_connections: u32,
    pub(crate) acquire_timeout: Duration,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_output_bytes: usize,
}

impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("url", &"<redacted>")
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish()
    }
}

impl MysqlConfig {
    /// A `mysql://user:password@host:port/database` (or `mariadb://...`) URL.
    pub fn new(url: impl Into<String>) -> Self {
        MysqlConfig {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_string(),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            max_output_bytes: validate::DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// The database (MySQL's name for a schema) holding the job tables; validated at connect.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Connections of the main pool (default 10). Two more serve the lease counter.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long an operation waits for a pooled connection (default 30 s).
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.acquire_timeout = d;
        self
    }

    /// The largest serialized payload accepted (default 1 MiB).
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }

    /// The largest serialized job output accepted (default 1 MiB, `docs/outputs.md`).
    pub fn max_output_bytes(mut self, n: usize) -> Self {
        self.max_output_bytes = n;
        self
    }

    /// The connect options for this configuration. The error never quotes the URL.
    pub(crate) fn connect_options(&self) -> Result<MySqlConnectOptions> {
        let t = self.url.trim();
        let rest = if let Some(r) = t.strip_prefix("mariadb://") {
            r
        } else if let Some(r) = t.strip_prefix("mysql://") {
            r
        } else {
            return Err(Error::invalid("mysql: the URL must start with mysql:// or mariadb://"));
        };
        let url = format!("mysql://{rest}");
        crate::tls::check_url(&url)?;
        let opts = MySqlConnectOptions::from_str(&url).map_err(|_| Error::invalid("mysql: cannot parse the URL"))?;
        Ok(opts.charset("utf8mb4"))
    }
}

/// Whether `url` names a MariaDB or MySQL server (`mysql://` or `mariadb://`).
pub fn is_mysql_url(url: &str) -> bool {
    let lower = url.trim_start().get(..10).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("mysql://") || lower.starts_with("mariadb://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_url() {
        let cfg = MysqlConfig::new("mysql://app:hunter2@secret-host/db");
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("hunter2") && !dbg.contains("secret-host"), "{dbg}");
    }

    #[test]
    fn schemes() {
        assert!(MysqlConfig::new("mariadb://root@127.0.0.1:3306/test").connect_options().is_ok());
        assert!(MysqlConfig::new("mysql://root@127.0.0.1/test").connect_options().is_ok());
        let e = MysqlConfig::new("postgres://u:hunter2@h/db").connect_options().unwrap_err();
        assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput);
        assert!(!e.to_string().contains("hunter2"));
        assert!(is_mysql_url("MariaDB://x") && is_mysql_url("mysql://x") && !is_mysql_url("postgres://x"));
    }
}
