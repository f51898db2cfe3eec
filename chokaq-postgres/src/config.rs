//! Connection settings.

use std::fmt;
use std::time::Duration;

use chokaq_core::validate;
use sqlx::postgres::PgConnectOptions;

/// Settings of a [`PgBackend`](crate::PgBackend). The URL is a secret: `Debug` never shows it.
#[derive(Clone)]
pub struct PgConfig {
    /// `postgres://user:password@host:port/database`.
    pub url: String,
    /// The schema that holds chokaq's tables (default `chokaq`); validated as a plain identifier.
    pub schema: String,
    /// Pool size (default 10).
    pub max_connections: u32,
    /// Largest accepted payload, bytes of serialized JSON.
    pub max_payload_bytes: usize,
    /// Largest accepted job output, bytes of serialized JSON (`docs/outputs.md`; default 1 MiB).
    pub max_output_bytes: usize,
    /// How long to wait for a connection (default 10 s).
    pub connect_timeout: Duration,
    /// `statement_timeout` of every session, if set.
    pub statement_timeout: Option<Duration>,
}

impl PgConfig {
    /// Defaults for everything but the URL.
    pub fn new(url: impl Into<String>) -> Self {
        PgConfig {
            url: url.into(),
            schema: "chokaq".to_owned(),
            max_connections: 10,
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            max_output_bytes: validate::DEFAULT_MAX_OUTPUT_BYTES,
            connect_timeout: Duration::from_secs(10),
            statement_timeout: None,
        }
    }

    /// Sets the schema name (validated by [`PgBackend::connect`](crate::PgBackend::connect)).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the pool size.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    /// Sets the payload limit.
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }

    /// Sets the job output limit (`docs/outputs.md`).
    pub fn max_output_bytes(mut self, n: usize) -> Self {
        self.max_output_bytes = n;
        self
    }

    /// Sets how long to wait for a connection.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Sets the sessions' `statement_timeout`.
    pub fn statement_timeout(mut self, d: Option<Duration>) -> Self {
        self.statement_timeout = d;
        self
    }

    /// The startup options of every session of the pool. They override the server's, the
    /// database's and the role's defaults:
    /// - `default_transaction_isolation` READ COMMITTED: the claim's cap count needs a fresh
    ///   snapshot per statement (`docs/contract.md`, Database rules);
    /// - `jit` off: no statement or function of chokaq's gains from JIT, and at a large backlog
    ///   the claim's generic plan passes `jit_above_cost`: compiling it took ~25 ms per claim
    ///   at 1,000,000 Pending jobs (`docs/postgres.md`, "No JIT"; `tests/jit.rs`);
    /// - `statement_timeout`, if set.
    pub(crate) fn session_options(&self, opts: PgConnectOptions) -> PgConnectOptions {
        let mut opts = opts
            .application_name(&self.application_name())
            .options([("default_transaction_isolation", r"read\ committed"), ("jit", "off")]);
        if let Some(t) = self.statement_timeout {
            opts = opts.options([("statement_timeout", format!("{}ms", t.as_millis().max(1)))]);
        }
        opts
    }

    /// The `application_name` that marks this backend's sessions.
    pub(crate) fn application_name(&self) -> String {
        format!("chokaq:{}", self.schema)
    }
}

impl fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &"<redacted>")
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_url() {
        let c = PgConfig::new("postgres://u:hunter2@h/db").schema("s1");
        let d = format!("{c:?}");
        assert!(!d.contains("hunter2"), "{d}");
        assert!(d.contains("s1"));
    }
}
