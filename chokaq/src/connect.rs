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
                Ok(Arc::new(PgBackend::connect(cfg).await?))
            }
            #[cfg(feature = "sqlite")]
            BackendKind::Sqlite => {
                use chokaq_sqlite::{SqliteBackend, SqliteConfig};
                let mut cfg = SqliteConfig::new(url);
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
mod tests {
    use chokaq_core::ErrorKind;

    use super::*;

    const SECRET: &str = "hunter2-s3cret";

    #[test]
    fn dispatch_by_scheme() {
        use BackendKind::*;
        let cases = [
            ("postgres://u@h:5432/db", Postgres),
            ("postgresql://u:p@h/db", Postgres),
            ("  POSTGRES://h/db  ", Postgres),
            ("sqlite:///tmp/jobs.db", Sqlite),
            ("sqlite://jobs.db?mode=rwc", Sqlite),
            ("sqlite:jobs", Sqlite),
            ("/var/lib/app/jobs.db", Sqlite),
            ("jobs.sqlite3", Sqlite),
            ("./data/Jobs.SQLITE", Sqlite),
            ("server=tcp:h,1433;user=sa;password=x", Mssql),
            ("Data Source=h;User ID=sa", Mssql),
            ("mssql://sa:x@h:1433/db", Mssql),
            ("sqlserver://h", Mssql),
            ("mysql://root@127.0.0.1:3306/test", Mysql),
            ("MariaDB://u:p@h/db", Mysql),
        ];
        for (url, kind) in cases {
            assert_eq!(backend_kind(url).unwrap(), kind, "{url}");
        }
    }

    #[test]
    fn unknown_or_empty_is_invalid_input_without_the_url() {
        for url in
            ["", "   ", "redis://:hunter2-s3cret@h", "hunter2-s3cret", "/tmp/jobs.txt", "we!rd hunter2-s3cret://x"]
        {
            let e = backend_kind(url).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}");
            assert!(!e.to_string().contains(SECRET), "{e}");
            let e = ConnectOptions::new(url).check().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}");
        }
        let e = backend_kind("redis://:pw@h").unwrap_err();
        assert!(e.to_string().contains("\"redis\""), "{e}");
    }

    #[test]
    fn bad_schema_is_invalid_input() {
        for schema in ["", "1abc", "a-b", "x; DROP TABLE y", &"s".repeat(64)] {
            let e = ConnectOptions::new("postgres://h/db").schema(schema).check().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{schema}");
        }
    }

    #[test]
    fn missing_feature_is_unsupported_naming_it() {
        for (url, kind) in [
            (format!("postgres://u:{SECRET}@h/db"), BackendKind::Postgres),
            (format!("sqlite:///tmp/{SECRET}.db"), BackendKind::Sqlite),
            (format!("server=h;user=sa;password={SECRET}"), BackendKind::Mssql),
            (format!("mssql://sa:{SECRET}@h/db"), BackendKind::Mssql),
            (format!("mysql://root:{SECRET}@h/db"), BackendKind::Mysql),
            (format!("mariadb://root:{SECRET}@h/db"), BackendKind::Mysql),
        ] {
            let r = ConnectOptions::new(url.as_str()).schema("s").check();
            if kind.is_compiled_in() {
                assert_eq!(r.unwrap(), kind);
            } else {
                let e = r.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Unsupported, "{kind}");
                assert!(e.to_string().contains(&format!("feature \"{}\"", kind.feature())), "{e}");
                assert!(!e.to_string().contains(SECRET), "{e}");
            }
        }
    }

    #[test]
    fn debug_redacts_the_url() {
        let o = ConnectOptions::new(format!("postgres://u:{SECRET}@h/db")).schema("s");
        let d = format!("{o:?}");
        assert!(!d.contains(SECRET), "{d}");
        assert!(d.contains("Postgres"), "{d}");
    }

    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    fn test_schema() -> String {
        format!("chokaq_t_{:016x}", rand::random::<u64>())
    }

    /// A job in, stats out: the backend behind the `Arc<dyn Backend>` really works.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    async fn roundtrip(backend: &Arc<dyn Backend>) {
        use chokaq_core::{JobKind, NewJob, QueueName};
        let before = backend.stats().await.unwrap();
        let job = NewJob::new(QueueName::new("connect_test").unwrap(), JobKind::new("connect.test.v1").unwrap());
        chokaq_core::BackendExt::enqueue(backend, job).await.unwrap();
        let after = backend.stats().await.unwrap();
        let queue_pending = |s: &chokaq_core::StatsSnapshot| s.queue("connect_test").map_or(0, |q| q.pending);
        assert_eq!(after.pending, before.pending + 1);
        assert_eq!(queue_pending(&after), queue_pending(&before) + 1);
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_really_connects() {
        let dir = std::env::temp_dir().join(test_schema());
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jobs.db");
        let url = format!("sqlite://{}", path.display());
        // Not migrated yet: the tables do not exist.
        let b = connect(&url, "ignored_by_sqlite").await.unwrap();
        assert_eq!(b.name(), "sqlite");
        assert!(b.stats().await.is_err());
        drop(b);
        for url in [url.clone(), path.display().to_string()] {
            let b = connect_and_migrate(&url, "chokaq").await.unwrap();
            assert_eq!(b.name(), "sqlite");
            roundtrip(&b).await;
        }
        assert!(path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(feature = "postgres")]
    fn pg_url() -> String {
        std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres_really_connects() {
        use chokaq_core::testing::TestSupport;
        let url = pg_url();
        let schema = test_schema();
        let b = match ConnectOptions::new(&url).schema(&schema).max_connections(2).migrate(true).connect().await {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Unavailable && !require_postgres() => {
                eprintln!("postgres_really_connects: PostgreSQL unreachable, skipped ({})", e.kind());
                return;
            }
            Err(e) => panic!("connect: {e}"),
        };
        assert_eq!(b.name(), "postgres");
        roundtrip(&b).await;
        drop(b);
        let pg =
            chokaq_postgres::PgBackend::connect(chokaq_postgres::PgConfig::new(&url).schema(&schema)).await.unwrap();
        pg.drop_schema().await.unwrap();
    }

    #[cfg(feature = "postgres")]
    fn require_postgres() -> bool {
        std::env::var("CHOKAQ_TEST_REQUIRE").is_ok_and(|v| v.contains("postgres"))
    }

    /// A refused connection's error does not carry the password.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres_error_hides_the_password() {
        let url = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
        let opts = ConnectOptions::new(url).schema("s").connect_timeout(Duration::from_secs(1));
        let e = opts.connect().await.map(|_| ()).unwrap_err();
        assert!(e.kind().is_retryable(), "{e}");
        assert!(!e.to_string().contains(SECRET), "{e}");
        assert!(!format!("{e:?}").contains(SECRET), "{e:?}");
    }
}
