//! Connect by URL: the backend is picked from the URL at run time, among the backends whose
//! features are compiled in.
//!
//! | URL | backend | feature |
//! |---|---|---|
//! | `postgres://…`, `postgresql://…` | PostgreSQL, tables in `schema` | `postgres` |
//! | `sqlite:…`, or a path ending in `.db`, `.sqlite`, `.sqlite3` | SQLite, the file is the store (`schema` is validated, then unused) | `sqlite` |
//! | `server=…;…` (ADO.NET), `mssql://…`, `sqlserver://…` | SQL Server, tables in `schema` | `mssql` |
//! | `mysql://…`, `mariadb://…` | MariaDB 10.6+ / MySQL 8.0+, tables in the database `schema` | `mysql` |
//!
//! A URL whose backend is not compiled in is an [`ErrorKind::Unsupported`] error naming the
//! feature to enable; anything else unrecognised is [`ErrorKind::InvalidInput`]. Neither the
//! URL nor its password ever appears in an error or in `Debug` output.
//!
//! [`ErrorKind::Unsupported`]: chokaq_core::ErrorKind::Unsupported
//! [`ErrorKind::InvalidInput`]: chokaq_core::ErrorKind::InvalidInput

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{validate, Backend, Error, Result};

/// The backend a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// `postgres://`, `postgresql://`.
    Postgres,
    /// `sqlite:`, or a `*.db` / `*.sqlite` / `*.sqlite3` path.
    Sqlite,
    /// `server=…` ADO.NET connection strings, `mssql://`, `sqlserver://`.
    Mssql,
    /// `mysql://`, `mariadb://` (MariaDB 10.6+, MySQL 8.0+).
    Mysql,
}

impl BackendKind {
    /// The cargo feature of `chokaq` that compiles this backend in.
    pub fn feature(self) -> &'static str {
        match self {
            BackendKind::Postgres => "postgres",
            BackendKind::Sqlite => "sqlite",
            BackendKind::Mssql => "mssql",
            BackendKind::Mysql => "mysql",
        }
    }

    /// Whether this build has the backend.
    pub fn is_compiled_in(self) -> bool {
        match self {
            BackendKind::Postgres => cfg!(feature = "postgres"),
            BackendKind::Sqlite => cfg!(feature = "sqlite"),
            BackendKind::Mssql => cfg!(feature = "mssql"),
            BackendKind::Mysql => cfg!(feature = "mysql"),
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Postgres => "PostgreSQL",
            BackendKind::Sqlite => "SQLite",
            BackendKind::Mssql => "SQL Server",
            BackendKind::Mysql => "MySQL/MariaDB",
        })
    }
}

const EXPECTED: &str =
    "expected postgres://…, sqlite:…, a *.db file path, server=…;… (SQL Server), mssql://… or mysql://… / mariadb://… \
     (the URL is not shown)";

/// Which backend `url` names, whatever this build has compiled in (no I/O). An empty or
/// unrecognised URL is an `InvalidInput` error that does not quote the URL.
pub fn backend_kind(url: &str) -> Result<BackendKind> {
    let url = url.trim();
    if url.is_empty() {
        return Err(Error::invalid(format!("empty database URL: {EXPECTED}")));
    }
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
        return Ok(BackendKind::Postgres);
    }
    if lower.starts_with("sqlite:") {
        return Ok(BackendKind::Sqlite);
    }
    if lower.starts_with("mssql://") || lower.starts_with("sqlserver://") {
        return Ok(BackendKind::Mssql);
    }
    if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
        return Ok(BackendKind::Mysql);
    }
    if let Some((scheme, _)) = url.split_once("://") {
        // A scheme never holds a secret; print it only if it looks like one.
        let looks_like_scheme = !scheme.is_empty()
            && scheme.len() <= 32
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        return Err(if looks_like_scheme {
            Error::invalid(format!("unknown database URL scheme {:?}: {EXPECTED}", scheme.to_ascii_lowercase()))
        } else {
            Error::invalid(format!("unrecognised database URL: {EXPECTED}"))
        });
    }
    if is_ado_connection_string(url) {
        return Ok(BackendKind::Mssql);
    }
    let path = lower.split_once('?').map_or(lower.as_str(), |(p, _)| p);
    if [".db", ".sqlite", ".sqlite3"].iter().any(|ext| path.ends_with(ext)) {
        return Ok(BackendKind::Sqlite);
    }
    Err(Error::invalid(format!("unrecognised database URL: {EXPECTED}")))
}

/// The same test as `chokaq_mssql::is_connection_string`, available without the `mssql`
/// feature so that such a string is reported as "enable feature mssql", not as unknown.
fn is_ado_connection_string(s: &str) -> bool {
    !s.contains("://")
        && s.split(';').any(|kv| {
            kv.split_once('=').is_some_and(|(k, _)| {
                matches!(
                    k.trim().to_ascii_lowercase().replace(' ', "").as_str(),
                    "server" | "datasource" | "address" | "addr" | "networkaddress"
                )
            })
        })
}

/// How to connect: a URL, a schema and a few knobs. [`ConnectOptions::connect`] opens the
/// backend; [`connect`] and [`connect_and_migrate`] are the one-line forms.
///
/// ```no_run
/// # async fn demo() -> chokaq::Result<()> {
/// let backend = chokaq::ConnectOptions::new("sqlite:///var/lib/app/jobs.db")
///     .schema("jobs")
///     .migrate(true)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ConnectOptions {
    url: String,
    schema: String,
    max_connections: Option<u32>,
    connect_timeout: Option<Duration>,
    migrate: bool,
    create_if_missing: bool,
    fail_fast: bool,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("url", &"<redacted>")
            .field("backend", &backend_kind(&self.url).ok())
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("migrate", &self.migrate)
            .field("create_if_missing", &self.create_if_missing)
            .field("fail_fast", &self.fail_fast)
            .finish()
    }
}

impl ConnectOptions {
    /// Options for `url`, schema `chokaq`, the backend's default pool size, no migration.
    pub fn new(url: impl Into<String>) -> Self {
        ConnectOptions {
            url: url.into(),
            schema: "chokaq".to_string(),
            max_connections: None,
            connect_timeout: None,
            migrate: false,
            create_if_missing: true,
            fail_fast: false,
        }
    }

    /// The schema holding the tables (PostgreSQL, SQL Server). Validated with
    /// [`validate::schema_name`] for every backend; SQLite has no schemas and ignores it.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Pool size (PostgreSQL, SQL Server); SQLite uses one writer and its reader pool.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// How long to wait for a connection (each backend's default otherwise: 10 s for
    /// PostgreSQL and SQL Server, 30 s for a pooled SQLite connection).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// Also run [`Backend::migrate`] after connecting (idempotent). Default: no.
    pub fn migrate(mut self, yes: bool) -> Self {
        self.migrate = yes;
        self
    }

    /// SQLite: create the database file when it does not exist (default `true`; the file is
    /// created owner-only). With `false` a missing file is an [`ErrorKind::InvalidInput`]
    /// error that says so, for tools that only read. Other backends ignore it.
    ///
    /// [`ErrorKind::InvalidInput`]: chokaq_core::ErrorKind::InvalidInput
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// PostgreSQL: report a refused connection at once, as [`ErrorKind::Unavailable`],
    /// instead of trying again until the connect timeout (the default, so that an application
    /// started together with its database waits for it). For tools a person waits on, like
    /// the command line. Costs one extra connection, opened and closed before the pool's.
    ///
    /// [`ErrorKind::Unavailable`]: chokaq_core::ErrorKind::Unavailable
    pub fn fail_fast(mut self, yes: bool) -> Self {
        self.fail_fast = yes;
        self
    }

    /// Which backend the URL names (no I/O).
    pub fn backend_kind(&self) -> Result<BackendKind> {
        backend_kind(&self.url)
    }

    /// Checks everything that can be checked without connecting: the schema name, the URL's
    /// backend and that it is compiled in.
    pub fn check(&self) -> Result<BackendKind> {
        validate::schema_name(&self.schema)?;
        let kind = backend_kind(&self.url)?;
        if !kind.is_compiled_in() {
            return Err(Error::unsupported(format!(
                "the URL names the {kind} backend, which this build does not include: enable feature \"{}\" of \
                 chokaq (e.g. --features {})",
                kind.feature(),
                kind.feature()
            )));
        }
        Ok(kind)
    }

    /// Opens the backend (and migrates if asked).
    pub async fn connect(&self) -> Result<Arc<dyn Backend>> {
        let kind = self.check()?;
        let backend = self.open(kind).await?;
        if self.migrate {
            backend.migrate().await?;
        }
        Ok(backend)
    }

    #[allow(unused_variables, clippy::unused_async)]
    async fn open(&self, kind: BackendKind) -> Result<Arc<dyn Backend>> {
        let url = self.url.trim();
        match kind {
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => {
                use chokaq_postgres::{PgBackend, PgConfig};
                let mut cfg = PgConfig::new(url).schema(&self.schema);
                if let Some(n) = self.max_connections {
                    cfg = cfg.max_connections(n);
                }
                if let Some(d) = self.connect_timeout {
                    cfg = cfg.connect_timeout(d);
                }
                if self.fail_fast {
                    pg::probe(url, cfg.connect_timeout).await?;
                }
                Ok(Arc::new(PgBackend::connect(cfg).await.map_err(pg::login_error)?))
            }
            #[cfg(feature = "sqlite")]
            BackendKind::Sqlite => {
                use chokaq_sqlite::{SqliteBackend, SqliteConfig};
                let mut cfg = SqliteConfig::new(url).create_if_missing(self.create_if_missing);
                if let Some(d) = self.connect_timeout {
                    cfg = cfg.acquire_timeout(d);
                }
                Ok(Arc::new(SqliteBackend::connect(cfg).await?))
            }
            #[cfg(feature = "mssql")]
            BackendKind::Mssql => {
                use chokaq_mssql::{MssqlBackend, MssqlConfig};
                let mut cfg = MssqlConfig::from_url(url)?.schema(&self.schema)?;
                if let Some(n) = self.max_connections {
                    cfg = cfg.max_connections(n);
                }
                if let Some(d) = self.connect_timeout {
                    cfg = cfg.connect_timeout(d);
                }
                Ok(Arc::new(MssqlBackend::connect(cfg).await?))
            }
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => {
                use chokaq_mysql::{MysqlBackend, MysqlConfig};
                let mut cfg = MysqlConfig::new(url).schema(&self.schema);
                if let Some(n) = self.max_connections {
                    cfg = cfg.max_connections(n);
                }
                if let Some(d) = self.connect_timeout {
                    cfg = cfg.acquire_timeout(d);
                }
                Ok(Arc::new(MysqlBackend::connect(cfg).await?))
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::unsupported(format!("enable feature \"{}\" of chokaq", kind.feature()))),
        }
    }
}

#[cfg(feature = "postgres")]
mod pg {
    use std::str::FromStr;
    use std::time::Duration;

    use chokaq_core::{Error, ErrorKind, Result};
    use sqlx::postgres::PgConnectOptions;
    use sqlx::{ConnectOptions as _, Connection as _};

    /// One connection, opened and closed before the pool's: the pool tries a refused
    /// connection again and again until its acquire timeout, and then reports only that it
    /// timed out; this reports the refusal at once.
    pub(super) async fn probe(url: &str, timeout: Duration) -> Result<()> {
        chokaq_postgres::check_url(url)?;
        let opts = PgConnectOptions::from_str(url).map_err(|_| Error::invalid("invalid PostgreSQL connection URL"))?;
        match tokio::time::timeout(timeout, opts.connect()).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                Ok(())
            }
            Ok(Err(e)) => Err(login_error(chokaq_postgres::map_sqlx_error(e))),
            Err(_) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("database unreachable: no connection within {}", humantime(timeout)),
            )),
        }
    }

    fn humantime(d: Duration) -> String {
        if d.subsec_millis() == 0 {
            format!("{} s", d.as_secs())
        } else {
            format!("{} ms", d.as_millis())
        }
    }

    /// A database or role the server does not have, or a refused login (SQLSTATE `3D000`,
    /// `28000`, `28P01`): `InvalidInput`, since trying again cannot fix the URL. Any other
    /// error is returned as it is.
    pub(super) fn login_error(e: Error) -> Error {
        let code = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<sqlx::Error>()).and_then(|s| match s {
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        });
        let what = match code.as_deref() {
            Some("3D000") => "the database the URL names does not exist",
            Some("28000" | "28P01") => "the server refused the login (the role or the password of the URL)",
            _ => return e,
        };
        let message = format!("{what} ({})", e.message());
        Error::with_source(ErrorKind::InvalidInput, message, e)
    }
}

/// Connects to the backend `url` names, tables in `schema` (see the module docs for the URL
/// forms). Does not migrate: call [`Backend::migrate`], or use [`connect_and_migrate`].
pub async fn connect(url: &str, schema: &str) -> Result<Arc<dyn Backend>> {
    ConnectOptions::new(url).schema(schema).connect().await
}

/// [`connect`], then [`Backend::migrate`] (creates or upgrades the tables; safe to repeat).
pub async fn connect_and_migrate(url: &str, schema: &str) -> Result<Arc<dyn Backend>> {
    ConnectOptions::new(url).schema(schema).migrate(true).connect().await
}

#[cfg(test)]
mod tests;
