//! SQL Server connection strings: the ADO.NET form (`server=…;user=…;password=…`) parsed into
//! [`ConnParts`], and the URL form (`mssql://user:password@host:port/database?key=value`,
//! `sqlserver://…`) turned into the ADO.NET form first. Errors name keys and parts, never
//! values, so a password never reaches a message.

use std::fmt;
use std::time::Duration;

use chokaq_core::{Error, Result};

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
fn split_pairs(s: &str) -> Result<Vec<(String, String)>> {
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

/// `mssql://user:password@host[:port][/database][?key=value&…]` (or `sqlserver://`) as an
/// ADO.NET connection string: `server=tcp:host,port;user id=…;password=…;database=…;key=value`.
/// User, password, database and query values are percent-decoded; every value is `{…}`-quoted.
/// Query keys are ADO keys (`encrypt`, `trustservercertificate`, `connect timeout`, …), so
/// [`parse_ado`] validates them. Errors never quote the URL.
pub(crate) fn mssql_url_to_ado(url: &str) -> Result<String> {
    let rest = url.split_once("://").map(|(_, r)| r).ok_or_else(|| Error::invalid("SQL Server URL: missing ://"))?;
    let (main, query) = rest.split_once('?').map_or((rest, None), |(m, q)| (m, Some(q)));
    if main.contains(';') {
        return Err(Error::invalid(
            "SQL Server URL: JDBC-style ';key=value' parts are not supported; use mssql://user:password@host:port/database?key=value or an ADO.NET string server=…;…",
        ));
    }
    let (authority, database) = main.split_once('/').map_or((main, None), |(a, d)| (a, Some(d)));
    let (userinfo, hostport) = authority.rsplit_once('@').map_or((None, authority), |(u, h)| (Some(u), h));
    let (host, port) = if let Some(after) = hostport.strip_prefix('[') {
        let (h, tail) = after.split_once(']').ok_or_else(|| Error::invalid("SQL Server URL: unclosed '[' in host"))?;
        (h, tail.strip_prefix(':'))
    } else {
        hostport.rsplit_once(':').map_or((hostport, None), |(h, p)| (h, Some(p)))
    };
    if host.is_empty() {
        return Err(Error::invalid("SQL Server URL: missing host"));
    }
    let port: u16 = match port {
        None | Some("") => 1433,
        Some(p) => p.parse().map_err(|_| Error::invalid("SQL Server URL: the port must be a number 1-65535"))?,
    };
    let host = percent_decode(host, "host")?;
    let mut out = format!("server=tcp:{},{port}", quote_host(&host)?);
    if let Some(ui) = userinfo {
        let (user, password) = ui.split_once(':').map_or((ui, None), |(u, p)| (u, Some(p)));
        if !user.is_empty() {
            out.push_str(&format!(";user id={}", ado_quote(&percent_decode(user, "user")?)));
        }
        if let Some(p) = password {
            out.push_str(&format!(";password={}", ado_quote(&percent_decode(p, "password")?)));
        }
    }
    if let Some(db) = database.map(|d| d.trim_end_matches('/')).filter(|d| !d.is_empty()) {
        out.push_str(&format!(";database={}", ado_quote(&percent_decode(db, "database")?)));
    }
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) =
            pair.split_once('=').ok_or_else(|| Error::invalid("SQL Server URL: a query parameter has no '='"))?;
        let k = percent_decode(k, "query key")?;
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '_') {
            return Err(Error::invalid("SQL Server URL: query keys must be ADO.NET keys (letters, digits, spaces)"));
        }
        out.push_str(&format!(";{k}={}", ado_quote(&percent_decode(v, "query value")?)));
    }
    Ok(out)
}

/// A host for `server=tcp:host,port`: no quoting is possible there, so reject separators.
fn quote_host(host: &str) -> Result<&str> {
    if host.chars().any(|c| matches!(c, ';' | ',' | '=' | '{' | '}' | '\'' | '"') || c.is_control()) {
        return Err(Error::invalid("SQL Server URL: the host contains a character not allowed in a host name"));
    }
    Ok(host)
}

/// `{value}` with `}` doubled: ADO.NET quoting that any character survives.
fn ado_quote(v: &str) -> String {
    format!("{{{}}}", v.replace('}', "}}"))
}

/// Decodes `%XX` escapes (and nothing else). Errors name the part, never its text.
fn percent_decode(s: &str, what: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let b = hex
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| Error::invalid(format!("SQL Server URL: bad %-escape in the {what}")))?;
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::invalid(format!("SQL Server URL: the {what} is not UTF-8 once decoded")))
}

#[cfg(test)]
mod tests {
    use chokaq_core::ErrorKind;

    use super::*;

    const SECRET: &str = "Sup3r;Secr=t}";

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
    fn recognises_connection_strings() {
        assert!(is_connection_string("server=tcp:127.0.0.1,1433;user=sa;password=x;TrustServerCertificate=true"));
        assert!(is_connection_string("Data Source=h;User ID=u"));
        assert!(!is_connection_string("postgres://u:p@h/db"));
        assert!(!is_connection_string("sqlite:jobs.db"));
        assert!(!is_connection_string(""));
    }

    /// Moved from `chokaq/src/connect.rs` with the conversion itself.
    #[test]
    fn mssql_url_becomes_ado() {
        const SECRET: &str = "hunter2-s3cret";
        let ado = mssql_url_to_ado(
            "mssql://sa:p%40ss%3Bw%7Drd@db.local:14330/jobs?encrypt=false&TrustServerCertificate=true",
        )
        .unwrap();
        assert_eq!(
            ado,
            "server=tcp:db.local,14330;user id={sa};password={p@ss;w}}rd};database={jobs};encrypt={false};\
             TrustServerCertificate={true}"
        );
        assert_eq!(mssql_url_to_ado("sqlserver://h").unwrap(), "server=tcp:h,1433");
        assert_eq!(mssql_url_to_ado("mssql://u@[::1]:1/").unwrap(), "server=tcp:::1,1;user id={u}");
        for bad in [
            format!("mssql://sa:{SECRET}@/db"),
            format!("mssql://sa:{SECRET}@h:99999/db"),
            format!("mssql://sa:{SECRET}%zz@h/db"),
            format!("sqlserver://h:1433;databaseName=x;password={SECRET}"),
            format!("mssql://sa:{SECRET}@h/db?novalue"),
            format!("mssql://sa:{SECRET}@h/db?bad;key=1"),
        ] {
            let e = mssql_url_to_ado(&bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
            assert!(!e.to_string().contains(SECRET), "{e}");
        }
    }
}
