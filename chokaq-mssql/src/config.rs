//! `MssqlConfig`: a connection string (ADO.NET `server=…;…`, or an `mssql://` /
//! `sqlserver://` URL; parsed in `connstr.rs`) validated early, plus the backend's knobs, with
//! the password kept out of every `Debug`, `Display`, log line and error.

use std::fmt;
use std::time::Duration;

use chokaq_core::{validate, Error, Result};

use crate::connstr::{is_connection_string, mssql_url_to_ado, parse_ado, ConnParts};

/// The longest database name [`MssqlConfig::database`] accepts: SQL Server's `sysname` is 128
/// characters.
pub const MAX_DATABASE_NAME_LEN: usize = 128;

/// Default schema for the chokaq tables.
pub const DEFAULT_SCHEMA: &str = "chokaq";
/// Default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Default connect timeout (TCP + TLS + login).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time one statement may take before the call fails with `Unavailable` and its
/// connection is discarded.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Configuration of [`crate::MssqlBackend`].
///
/// ```
/// # use chokaq_mssql::MssqlConfig;
/// let cfg = MssqlConfig::new("server=tcp:db.local,1433;user=app;password={se;cret};TrustServerCertificate=true;Database=jobs")?
///     .schema("chokaq")?
///     .max_connections(8);
/// assert!(!format!("{cfg:?}").contains("se;cret"));
/// # Ok::<(), chokaq_core::Error>(())
/// ```
#[derive(Clone)]
pub struct MssqlConfig {
    pub(crate) parts: ConnParts,
    pub(crate) schema: String,
    pub(crate) max_connections: u32,
    pub(crate) max_payload_bytes: usize,
    pub(crate) max_output_bytes: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) statement_timeout: Duration,
}

impl fmt::Debug for MssqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MssqlConfig")
            .field("server", &self.display_target())
            .field("user", &self.parts.user)
            .field("password", &self.parts.password.as_ref().map(|_| "<redacted>"))
            .field("encrypt", &self.parts.encrypt)
            .field("trust_server_certificate", &self.parts.trust_server_certificate)
            .field("schema", &self.schema)
            .field("max_connections", &self.max_connections)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

impl fmt::Display for MssqlConfig {
    /// `host,port/database` (schema `s`): never the user's password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (schema {})", self.display_target(), self.schema)
    }
}

impl MssqlConfig {
    /// Parses and validates an ADO.NET connection string, e.g.
    /// `server=tcp:host,1433;user=sa;password=...;TrustServerCertificate=true;Database=jobs;Encrypt=false`.
    ///
    /// Keys are case-insensitive; values may be quoted with `{...}` (a `}` inside is written
    /// `}}`), `"..."` or `'...'`. Unknown keys are rejected so a typo cannot silently weaken
    /// TLS. Errors never contain the password.
    pub fn new(conn_str: &str) -> Result<Self> {
        let parts = parse_ado(conn_str)?;
        Ok(MssqlConfig {
            connect_timeout: parts.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            parts,
            schema: DEFAULT_SCHEMA.to_string(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_payload_bytes: validate::DEFAULT_MAX_PAYLOAD_BYTES,
            max_output_bytes: validate::DEFAULT_MAX_OUTPUT_BYTES,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        })
    }

    /// Parses a SQL Server address in either form a user may write it:
    ///
    /// - an ADO.NET connection string (`server=…;…`, see [`is_connection_string`]), exactly
    ///   as [`MssqlConfig::new`];
    /// - a URL `mssql://user:password@host[:port][/database][?key=value&…]` (or
    ///   `sqlserver://…`): port 1433 by default, user, password, database and values
    ///   percent-decoded, query keys being ADO.NET keys (`encrypt=false`,
    ///   `TrustServerCertificate=true`, `Connect Timeout=5`, …; unknown keys are rejected).
    ///
    /// JDBC-style `;key=value` parts and other schemes are `InvalidInput`. Errors never quote
    /// the URL.
    ///
    /// ```
    /// # use chokaq_mssql::MssqlConfig;
    /// let url = MssqlConfig::from_url("mssql://app:s%3Bcret@db.local:14330/jobs?encrypt=false")?;
    /// let ado = MssqlConfig::from_url("server=tcp:db.local,14330;user=app;password={s;cret};Database=jobs;Encrypt=false")?;
    /// assert_eq!(url.to_string(), ado.to_string());
    /// assert_eq!(url.to_string(), "db.local,14330/jobs (schema chokaq)");
    /// # Ok::<(), chokaq_core::Error>(())
    /// ```
    ///
    /// [`is_connection_string`]: crate::is_connection_string
    pub fn from_url(url: &str) -> Result<Self> {
        let url = url.trim();
        if is_connection_string(url) {
            return MssqlConfig::new(url);
        }
        let lower = url.get(..12).unwrap_or(url).to_ascii_lowercase();
        if !(lower.starts_with("mssql://") || lower.starts_with("sqlserver://")) {
            return Err(Error::invalid(
                "not a SQL Server address: expected server=…;… (ADO.NET), mssql://… or sqlserver://… (the URL is not shown)",
            ));
        }
        MssqlConfig::new(&mssql_url_to_ado(url)?)
    }

    /// Sets the schema (default `chokaq`), validated with
    /// [`chokaq_core::validate::schema_name`].
    pub fn schema(mut self, name: &str) -> Result<Self> {
        validate::schema_name(name)?;
        self.schema = name.to_string();
        Ok(self)
    }

    /// Sets the pool size (at least 1; 0 is treated as 1).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets the largest accepted payload, in bytes of serialized JSON.
    pub fn max_payload_bytes(mut self, n: usize) -> Self {
        self.max_payload_bytes = n;
        self
    }

    /// Sets the largest accepted job output, in bytes of serialized JSON (default 1 MiB,
    /// `docs/outputs.md`).
    pub fn max_output_bytes(mut self, n: usize) -> Self {
        self.max_output_bytes = n;
        self
    }

    /// Sets the connect timeout (TCP connect, TLS and login). Default 10 s, or the
    /// string's `Connect Timeout`.
    pub fn connect_timeout(mut self, t: Duration) -> Self {
        self.connect_timeout = t;
        self
    }

    /// Sets how long one statement may run before the call fails with `Unavailable`.
    pub fn statement_timeout(mut self, t: Duration) -> Self {
        self.statement_timeout = t;
        self
    }

    /// Sets the database (`Database=` / `Initial Catalog=`), validated as an identifier of at
    /// most [`MAX_DATABASE_NAME_LEN`] bytes (`validate::identifier`; not the schema rule, which
    /// refuses names such as `dbo` and anything over 48 bytes).
    pub fn database(mut self, name: &str) -> Result<Self> {
        validate::identifier("database name", name, MAX_DATABASE_NAME_LEN)?;
        self.parts.database = Some(name.to_string());
        Ok(self)
    }

    /// The schema name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    fn display_target(&self) -> String {
        let mut s = format!("{},{}", self.parts.host, self.parts.port);
        if let Some(i) = &self.parts.instance {
            s = format!("{}\\{i},{}", self.parts.host, self.parts.port);
        }
        if let Some(db) = &self.parts.database {
            s.push('/');
            s.push_str(db);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connstr::Encrypt;

    #[test]
    fn parses_the_brief_example() {
        let c = MssqlConfig::new(
            "server=tcp:127.0.0.1,1433;user=sa;password=x;TrustServerCertificate=true;Database=jobs;Encrypt=false",
        )
        .unwrap();
        assert_eq!(c.parts.host, "127.0.0.1");
        assert_eq!(c.parts.port, 1433);
        assert_eq!(c.parts.user.as_deref(), Some("sa"));
        assert_eq!(c.parts.password.as_deref(), Some("x"));
        assert_eq!(c.parts.database.as_deref(), Some("jobs"));
        assert!(c.parts.trust_server_certificate);
        assert_eq!(c.parts.encrypt, Encrypt::LoginOnly);
        assert_eq!(c.schema, "chokaq");
    }

    #[test]
    fn rejects_bad_strings_without_leaking() {
        for bad in [
            "",
            "user=u;password=Sup3r;Secr",
            "server=h,notaport;user=u;password=Sup3rSecr",
            "server=h,0;user=u",
            "server=h;password=Sup3rSecr",
            "server=h;user=u;password={Sup3rSecr",
            "server=h;user=u;password={Sup3rSecr}x",
            "server=h;user=u;Encrypt=maybe",
            "server=h;user=u;Colour=blue",
            "server=h;user=u;=x",
            "server=h\\inst;user=u;password=Sup3rSecr",
            "server=h;user=u;TrustServerCertificate=perhaps;password=Sup3rSecr",
        ] {
            let e = MssqlConfig::new(bad).unwrap_err();
            assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput, "{bad}: {e}");
            assert!(!e.to_string().contains("Sup3r"), "{e}");
            assert!(!format!("{e:?}").contains("Sup3r"), "{e:?}");
        }
        let e = MssqlConfig::new("server=h;user=u;Integrated Security=true").unwrap_err();
        assert_eq!(e.kind(), chokaq_core::ErrorKind::Unsupported);
    }

    #[test]
    fn password_is_redacted_everywhere() {
        let c = MssqlConfig::new("server=tcp:h,1433;user=sa;password={Sup3r;Secr=t}}};TrustServerCertificate=true")
            .unwrap()
            .schema("jobs_1")
            .unwrap();
        for s in [format!("{c:?}"), format!("{c:#?}"), c.to_string(), format!("{:?}", c.parts)] {
            assert!(!s.contains("Sup3r"), "{s}");
            assert!(!s.contains("Secr"), "{s}");
        }
        assert!(format!("{c:?}").contains("<redacted>"));
        assert_eq!(c.to_string(), "h,1433 (schema jobs_1)");
    }

    #[test]
    fn schema_is_validated() {
        let c = MssqlConfig::new("server=h;user=u;password=p").unwrap();
        for bad in ["", "a]b", "x;drop", "1a", "a b", "[x]"] {
            let e = c.clone().schema(bad).unwrap_err();
            assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput);
        }
        assert_eq!(c.clone().schema("_ok_1").unwrap().schema_name(), "_ok_1");
        // The database's own schemas and names over 48 bytes are refused as schemas ...
        for reserved in ["dbo", "sys", "DBO", "guest", "db_owner"] {
            assert_eq!(c.clone().schema(reserved).unwrap_err().kind(), chokaq_core::ErrorKind::InvalidInput);
        }
        assert!(c.clone().schema(&"s".repeat(49)).is_err());
        assert_eq!(c.max_connections(0).max_connections, 1);
    }

    /// A database name is an identifier of up to 128 bytes, not a schema name: `dbo`-like
    /// names and long names are fine; anything that could leave `[...]` is not.
    #[test]
    fn database_names_are_identifiers_not_schema_names() {
        let c = MssqlConfig::new("server=h;user=u;password=p").unwrap();
        let long = format!("d{}", "b".repeat(MAX_DATABASE_NAME_LEN - 1));
        for ok in ["chokaq_conformance_rcsi_on", "dbo", "sys", "pg_jobs", long.as_str()] {
            assert_eq!(c.clone().database(ok).unwrap().parts.database.as_deref(), Some(ok), "{ok}");
        }
        let too_long = format!("{long}x");
        for bad in ["", "a]b", "x;drop", "1a", "a b", "[x]", "a'b", too_long.as_str()] {
            let e = c.clone().database(bad).unwrap_err();
            assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().contains("database name"), "{e}");
        }
    }

    /// The URL forms `chokaq::connect` accepts (moved here from `chokaq/src/connect.rs`).
    #[test]
    fn urls_and_connection_strings_give_the_same_config() {
        const SECRET: &str = "hunter2-s3cret";
        let cfg = MssqlConfig::from_url(&format!("mssql://sa:{SECRET}@h:1433/jobs?encrypt=false")).unwrap();
        let cfg = cfg.schema("s").unwrap();
        assert!(!format!("{cfg:?}").contains(SECRET));
        assert_eq!(cfg.parts.password.as_deref(), Some(SECRET));
        assert_eq!((cfg.parts.host.as_str(), cfg.parts.port), ("h", 1433));
        assert_eq!(cfg.parts.database.as_deref(), Some("jobs"));
        assert_eq!(cfg.parts.encrypt, Encrypt::LoginOnly);
        let e = MssqlConfig::from_url("mssql://h/db?bogus=1").unwrap_err();
        assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput);

        let ado = "server=tcp:h,1433;user=sa;password=x;TrustServerCertificate=true";
        let a = MssqlConfig::from_url(&format!("  {ado}  ")).unwrap();
        let b = MssqlConfig::new(ado).unwrap();
        assert_eq!(a.parts, b.parts);
        let c = MssqlConfig::from_url("SQLSERVER://sa:x@h?TrustServerCertificate=true").unwrap();
        assert_eq!(c.parts, b.parts);

        for bad in [
            format!("postgres://sa:{SECRET}@h/db"),
            format!("sqlite:///tmp/{SECRET}.db"),
            SECRET.to_string(),
            String::new(),
            format!("mssql://sa:{SECRET}@h:99999/db"),
            format!("sqlserver://h:1433;databaseName=x;password={SECRET}"),
        ] {
            let e = MssqlConfig::from_url(&bad).unwrap_err();
            assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput, "{bad}");
            assert!(!e.to_string().contains(SECRET), "{e}");
            assert!(!format!("{e:?}").contains(SECRET), "{e:?}");
        }
    }
}
