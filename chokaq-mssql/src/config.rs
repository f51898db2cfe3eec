//! `MssqlConfig`: an ADO.NET-style connection string, parsed and validated early, with the
//! password kept out of every `Debug`, `Display`, log line and error.

use std::fmt;
use std::time::Duration;

use chokaq_core::{validate, Error, Result};

/// Default schema for the chokaq tables.
pub const DEFAULT_SCHEMA: &str = "chokaq";
/// Default pool size.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Default connect timeout (TCP + TLS + login).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time one statement may take before the call fails with `Unavailable` and its
/// connection is discarded.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// How the TDS stream is encrypted (`Encrypt=` in the connection string).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encrypt {
    /// `Encrypt=true|yes|mandatory|strict`: everything encrypted, fail if the server cannot.
    Required,
    /// `Encrypt=false|no|optional`: only the login packet is encrypted (TDS "encryption off").
    LoginOnly,
    /// `Encrypt=disabled|none|notsupported`: no TLS at all (the server must allow it).
    Disabled,
}

/// The parsed parts of a connection string. The password is only reachable inside the crate.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ConnParts {
    pub host: String,
    pub port: u16,
    pub instance: Option<String>,
    pub database: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub encrypt: Encrypt,
    pub trust_server_certificate: bool,
    pub application_name: Option<String>,
    pub connect_timeout: Option<Duration>,
}

impl fmt::Debug for ConnParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnParts")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("instance", &self.instance)
            .field("database", &self.database)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("encrypt", &self.encrypt)
            .field("trust_server_certificate", &self.trust_server_certificate)
            .field("application_name", &self.application_name)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

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
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        })
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

    /// Sets the database (`Database=` / `Initial Catalog=`), validated like a schema name.
    pub fn database(mut self, name: &str) -> Result<Self> {
        validate::schema_name(name).map_err(|_| Error::invalid(format!("invalid database name {name:?}")))?;
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

/// Whether `s` looks like an ADO.NET SQL Server connection string (`server=...;...`) rather
/// than a URL: no `://`, and a `server` / `data source` / `address` key. Lets a tool pick this
/// backend from a user's string without parsing (or printing) it.
pub fn is_connection_string(s: &str) -> bool {
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

/// Splits a connection string into `(key, value)` pairs, honouring `{...}`, `"..."` and
/// `'...'` quoting. Errors name the key, never a value.
pub(crate) fn split_pairs(s: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        // key
        let start = i;
        while i < chars.len() && chars[i] != '=' && chars[i] != ';' {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect::<String>().trim().to_string();
        if i >= chars.len() || chars[i] == ';' {
            if !key.is_empty() {
                return Err(Error::invalid(format!("connection string: key {key:?} has no value")));
            }
            i += 1;
            continue;
        }
        if key.is_empty() {
            return Err(Error::invalid("connection string: empty key before '='"));
        }
        i += 1; // '='
        while i < chars.len() && chars[i] == ' ' {
            i += 1;
        }
        let mut value = String::new();
        if i < chars.len() && matches!(chars[i], '{' | '"' | '\'') {
            let close = if chars[i] == '{' { '}' } else { chars[i] };
            i += 1;
            let mut closed = false;
            while i < chars.len() {
                if chars[i] == close {
                    if i + 1 < chars.len() && chars[i + 1] == close {
                        value.push(close);
                        i += 2;
                        continue;
                    }
                    i += 1;
                    closed = true;
                    break;
                }
                value.push(chars[i]);
                i += 1;
            }
            if !closed {
                return Err(Error::invalid(format!("connection string: unterminated quoted value for key {key:?}")));
            }
            while i < chars.len() && chars[i] == ' ' {
                i += 1;
            }
            if i < chars.len() && chars[i] != ';' {
                return Err(Error::invalid(format!(
                    "connection string: unexpected text after the quoted value of key {key:?}"
                )));
            }
        } else {
            while i < chars.len() && chars[i] != ';' {
                value.push(chars[i]);
                i += 1;
            }
            value = value.trim().to_string();
        }
        i += 1; // ';'
        out.push((key, value));
    }
    Ok(out)
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err(Error::invalid(format!("connection string: {key} must be true or false"))),
    }
}

pub(crate) fn parse_ado(s: &str) -> Result<ConnParts> {
    let mut parts = ConnParts {
        host: String::new(),
        port: 1433,
        instance: None,
        database: None,
        user: None,
        password: None,
        encrypt: Encrypt::Required,
        trust_server_certificate: false,
        application_name: None,
        connect_timeout: None,
    };
    let mut saw_server = false;
    for (key, value) in split_pairs(s)? {
        let k = key.to_ascii_lowercase().replace(' ', "");
        match k.as_str() {
            "server" | "datasource" | "address" | "addr" | "networkaddress" => {
                saw_server = true;
                parse_server(&value, &mut parts)?;
            }
            "database" | "initialcatalog" => parts.database = Some(value).filter(|v| !v.is_empty()),
            "user" | "userid" | "uid" | "username" => parts.user = Some(value),
            "password" | "pwd" => parts.password = Some(value),
            "encrypt" => {
                parts.encrypt = match value.to_ascii_lowercase().as_str() {
                    "true" | "yes" | "mandatory" | "strict" => Encrypt::Required,
                    "false" | "no" | "optional" => Encrypt::LoginOnly,
                    "disabled" | "none" | "notsupported" => Encrypt::Disabled,
                    _ => {
                        return Err(Error::invalid(
                            "connection string: Encrypt must be true, false or disabled".to_string(),
                        ))
                    }
                }
            }
            "trustservercertificate" => parts.trust_server_certificate = parse_bool("TrustServerCertificate", &value)?,
            "applicationname" | "app" => parts.application_name = Some(value),
            "connecttimeout" | "connectiontimeout" | "timeout" => {
                let secs: u64 = value
                    .parse()
                    .map_err(|_| Error::invalid("connection string: Connect Timeout must be whole seconds"))?;
                parts.connect_timeout = Some(Duration::from_secs(secs.max(1)));
            }
            "integratedsecurity" | "trustedconnection" => {
                if parse_bool(&key, &value)? {
                    return Err(Error::unsupported("integrated security is not supported; use user and password"));
                }
            }
            // Accepted and ignored: pooling is chokaq's own.
            "pooling" | "multipleactiveresultsets" | "maxpoolsize" | "minpoolsize" => {}
            _ => return Err(Error::invalid(format!("connection string: unknown key {key:?}"))),
        }
    }
    if !saw_server || parts.host.is_empty() {
        return Err(Error::invalid("connection string: server is required (server=tcp:host,1433)"));
    }
    if parts.user.is_none() {
        return Err(Error::invalid("connection string: user is required (SQL Server authentication)"));
    }
    Ok(parts)
}

fn parse_server(value: &str, parts: &mut ConnParts) -> Result<()> {
    let mut v = value.trim();
    if let Some(rest) = v.strip_prefix("tcp:").or_else(|| v.strip_prefix("TCP:")) {
        v = rest;
    }
    let (hostpart, port) = match v.split_once(',') {
        Some((h, p)) => {
            let port: u16 = p
                .trim()
                .parse()
                .map_err(|_| Error::invalid("connection string: server port must be a number from 1 to 65535"))?;
            if port == 0 {
                return Err(Error::invalid("connection string: server port must be a number from 1 to 65535"));
            }
            (h.trim(), Some(port))
        }
        None => (v, None),
    };
    let (host, instance) = match hostpart.split_once('\\') {
        Some((h, i)) => (h, Some(i.to_string())),
        None => (hostpart, None),
    };
    let host = if host == "." || host.eq_ignore_ascii_case("(local)") { "localhost" } else { host };
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '/' || c == '@') {
        return Err(Error::invalid("connection string: server host is empty or malformed"));
    }
    if instance.is_some() && port.is_none() {
        return Err(Error::invalid(
            "connection string: a named instance needs an explicit port (server=tcp:host\\instance,port)",
        ));
    }
    parts.host = host.to_string();
    parts.port = port.unwrap_or(1433);
    parts.instance = instance;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "Sup3r;Secr=t}";

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
    fn quoting_and_case() {
        let p = parse_ado(
            "Data Source=db.example,14330; User ID = app ; PWD={Sup3r;Secr=t}}};Initial Catalog='a b';ENCRYPT=disabled",
        )
        .unwrap();
        assert_eq!(p.host, "db.example");
        assert_eq!(p.port, 14330);
        assert_eq!(p.user.as_deref(), Some("app"));
        assert_eq!(p.password.as_deref(), Some(SECRET));
        assert_eq!(p.database.as_deref(), Some("a b"));
        assert_eq!(p.encrypt, Encrypt::Disabled);
        let p = parse_ado("server=h;user=u;password=\"a\"\"b\"").unwrap();
        assert_eq!(p.password.as_deref(), Some("a\"b"));
        assert_eq!(p.port, 1433);
        assert_eq!(p.encrypt, Encrypt::Required);
        let p = parse_ado("server=h\\SQLEXPRESS,1500;user=u;password=p;").unwrap();
        assert_eq!(p.instance.as_deref(), Some("SQLEXPRESS"));
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
    fn recognises_connection_strings() {
        assert!(is_connection_string("server=tcp:127.0.0.1,1433;user=sa;password=x;TrustServerCertificate=true"));
        assert!(is_connection_string("Data Source=h;User ID=u"));
        assert!(!is_connection_string("postgres://u:p@h/db"));
        assert!(!is_connection_string("sqlite:jobs.db"));
        assert!(!is_connection_string(""));
    }

    #[test]
    fn schema_is_validated() {
        let c = MssqlConfig::new("server=h;user=u;password=p").unwrap();
        for bad in ["", "a]b", "x;drop", "1a", "a b", "[x]"] {
            let e = c.clone().schema(bad).unwrap_err();
            assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput);
        }
        assert_eq!(c.clone().schema("_ok_1").unwrap().schema_name(), "_ok_1");
        assert_eq!(c.max_connections(0).max_connections, 1);
    }
}
