//! [`SqliteConfig`]: how to open the database file (path redacted in `Debug`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chokaq_core::{validate, Error, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

/// How to open a SQLite job database.
///
/// ```
/// # use chokaq_sqlite::SqliteConfig;
/// let cfg = SqliteConfig::new("sqlite:///var/lib/app/jobs.db").max_payload_bytes(64 * 1024);
/// ```
///
/// The path or URL is never printed: `Debug` redacts it.
#[derive(Clone)]
pub struct SqliteConfig {
    pub(crate) target: String,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_output_bytes: usize,
    pub(crate) busy_timeout: Duration,
    pub(crate) max_readers: u32,
    pub(crate) acquire_timeout: Duration,
    pub(crate) synchronous_full: bool,
    pub(crate) create_if_missing: bool,
}

impl fmt::Debug for SqliteConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteConfig")
            .field("target", &"<redacted>")
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("busy_timeout", &self.busy_timeout)
            .field("max_readers", &self.max_readers)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("synchronous_full", &self.synchronous_full)
            .field("create_if_missing", &self.create_if_missing)
            .finish()
    }
}

impl SqliteConfig {
    /// A database file, as a `sqlite:` URL (`sqlite:///tmp/jobs.db`, `sqlite://jobs.db?mode=rwc`)
    /// or a plain path. The file is created if missing (owner-only, `0600` on Unix, whatever
    /// the umask; see [`SqliteConfig::create_if_missing`]). In-memory databases are rejected
    /// at connect time: the backend uses several connections, which must share one file.
    pub fn new(url_or_path: impl Into<String>) -> Self {
        SqliteConfig {
            target: url_or_path.into(),
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            max_output_bytes: validate::DEFAULT_MAX_OUTPUT_BYTES,
            busy_timeout: Duration::from_secs(5),
            max_readers: 4,
            acquire_timeout: Duration::from_secs(30),
            synchronous_full: true,
            create_if_missing: true,
        }
    }

    /// Whether connecting creates the database file when it does not exist (default `true`).
    /// A new file is created owner-only (`0600` on Unix, whatever the umask), and SQLite gives
    /// its `-wal` and `-shm` files the same mode: the jobs' payloads are not for other users
    /// of the machine. With `false`, connecting to a missing file is an `InvalidInput` error
    /// that says so (a tool that only reads should not leave an empty database behind a
    /// mistyped path).
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
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

    /// How long SQLite waits for another process's write lock before reporting BUSY
    /// (default 5 s). The backend then retries `BEGIN IMMEDIATE` a few times with back-off.
    pub fn busy_timeout(mut self, d: Duration) -> Self {
        self.busy_timeout = d;
        self
    }

    /// Connections used for reads (stats, listings); default 4. Writes use one connection.
    pub fn max_readers(mut self, n: u32) -> Self {
        self.max_readers = n.max(1);
        self
    }

    /// How long an operation waits for a pooled connection (default 30 s).
    pub fn acquire_timeout(mut self, d: Duration) -> Self {
        self.acquire_timeout = d;
        self
    }

    /// `PRAGMA synchronous`: `FULL` (the default: a committed enqueue survives power loss)
    /// or, with `false`, `NORMAL` (faster; WAL stays consistent, but the last commits can be
    /// lost on power failure).
    pub fn synchronous_full(mut self, full: bool) -> Self {
        self.synchronous_full = full;
        self
    }

    /// The connect options for this configuration.
    pub(crate) fn connect_options(&self) -> Result<SqliteConnectOptions> {
        let t = self.target.trim();
        if t.is_empty() {
            return Err(Error::invalid("sqlite: empty database path"));
        }
        let lower = t.to_ascii_lowercase();
        if lower.contains(":memory:") || lower.contains("mode=memory") {
            return Err(Error::invalid(
                "sqlite: in-memory databases are not supported; the backend needs a database file",
            ));
        }
        if t.contains('\0') {
            return Err(Error::invalid("sqlite: database path contains NUL"));
        }
        let opts = if lower.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(t).map_err(|_| Error::invalid("sqlite: cannot parse the database URL"))?
        } else {
            SqliteConnectOptions::new().filename(t)
        };
        Ok(opts
            .create_if_missing(self.create_if_missing)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if self.synchronous_full { SqliteSynchronous::Full } else { SqliteSynchronous::Normal })
            .busy_timeout(self.busy_timeout)
            .foreign_keys(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_path() {
        let cfg = SqliteConfig::new("sqlite:///secret/place.db?password=hunter2");
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("secret"), "{dbg}");
        assert!(!dbg.contains("hunter2"), "{dbg}");
    }

    #[test]
    fn memory_is_rejected() {
        for t in ["sqlite::memory:", ":memory:", "sqlite://?mode=memory", ""] {
            let e = SqliteConfig::new(t).connect_options().unwrap_err();
            assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput, "{t}");
        }
        assert!(SqliteConfig::new("/tmp/x.db").connect_options().is_ok());
        assert!(SqliteConfig::new("sqlite:///tmp/x.db").connect_options().is_ok());
    }
}
