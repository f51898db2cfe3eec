//! A small bb8 `ManageConnection` for tiberius over tokio.
//!
//! A connection is "poisoned until proven healthy": it is marked broken before each statement
//! and unmarked when the statement's results were fully read. A statement that fails, times
//! out or whose future is dropped half-way leaves it marked, and bb8 discards it instead of
//! handing a connection with unread results or an open transaction to the next caller.
//!
//! [`Pool::run`] is how every statement is sent: one batch, bound values, the statement
//! timeout, and transient failures retried.

use std::fmt;
use std::time::Duration;

use chokaq_core::{ErrorKind, Result};
use tiberius::{AuthMethod, Client, Config, EncryptionLevel, Row, ToSql};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};

use crate::connstr::{ConnParts, Encrypt};
use crate::error::{connect_error, keeps_session, map_error, pool_error, timeout};
use crate::reply::read_sets;
use crate::sql;

/// Transient failures (deadlock victim, lock timeout, snapshot conflict, Azure's transient
/// errors) are retried this many times with a short randomised back-off; every batch is
/// atomic, so a retry is safe.
const MAX_TRANSIENT_RETRIES: u32 = 4;

/// The TDS encryption level for `Encrypt=`: `Required` (TLS for everything; the certificate
/// is checked through the platform's TLS library unless `TrustServerCertificate=true`),
/// `Off` (TLS for the login packet only), `NotSupported` (no TLS at all).
pub(crate) fn encryption_level(e: Encrypt) -> EncryptionLevel {
    match e {
        Encrypt::Required => EncryptionLevel::Required,
        Encrypt::LoginOnly => EncryptionLevel::Off,
        Encrypt::Disabled => EncryptionLevel::NotSupported,
    }
}

/// The driver's configuration for the parsed connection string `parts`: the one way every
/// session of the crate is configured (the pool's, `ensure_database`'s, and with the
/// `testing` feature the raw sessions of the crate's tests, `MssqlConfig::open_session`).
pub(crate) fn tiberius_config(p: &ConnParts, app_name: &str) -> Config {
    let mut c = Config::new();
    c.host(&p.host);
    c.port(p.port);
    if let Some(db) = &p.database {
        c.database(db);
    }
    c.application_name(app_name);
    c.authentication(AuthMethod::sql_server(
        p.user.as_deref().unwrap_or_default(),
        p.password.as_deref().unwrap_or_default(),
    ));
    c.encryption(encryption_level(p.encrypt));
    if p.trust_server_certificate {
        c.trust_cert();
    }
    c
}

/// One pooled connection.
pub(crate) struct Conn {
    pub client: Client<Compat<TcpStream>>,
    pub broken: bool,
}

impl fmt::Debug for Conn {
    // tiberius' own Debug would print its Config, password included.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn").field("broken", &self.broken).finish_non_exhaustive()
    }
}

/// Opens connections for bb8.
pub(crate) struct Manager {
    parts: ConnParts,
    app_name: String,
    connect_timeout: Duration,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("host", &self.parts.host)
            .field("port", &self.parts.port)
            .field("app_name", &self.app_name)
            .finish_non_exhaustive()
    }
}

/// Why opening a connection failed.
#[derive(Debug)]
pub(crate) enum ConnectError {
    Timeout(Duration),
    Driver(tiberius::error::Error),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Timeout(d) => write!(f, "no answer within {d:?}"),
            ConnectError::Driver(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

impl Manager {
    pub fn new(parts: ConnParts, app_name: String, connect_timeout: Duration) -> Self {
        Manager { parts, app_name, connect_timeout }
    }

    async fn open(&self) -> Result<Conn, tiberius::error::Error> {
        let config = tiberius_config(&self.parts, &self.app_name);
        let tcp = TcpStream::connect((self.parts.host.as_str(), self.parts.port)).await?;
        tcp.set_nodelay(true)?;
        let mut client = Client::connect(config, tcp.compat_write()).await?;
        client.simple_query(sql::SESSION_SETUP).await?.into_results().await?;
        Ok(Conn { client, broken: false })
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = ConnectError;

    async fn connect(&self) -> Result<Conn, ConnectError> {
        match tokio::time::timeout(self.connect_timeout, self.open()).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(ConnectError::Driver(e)),
            Err(_) => Err(ConnectError::Timeout(self.connect_timeout)),
        }
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), ConnectError> {
        conn.broken = true;
        let r = async { conn.client.simple_query(sql::PING).await?.into_results().await }.await;
        match r {
            Ok(_) => {
                conn.broken = false;
                Ok(())
            }
            Err(e) => Err(ConnectError::Driver(e)),
        }
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken
    }
}

/// The connection pool of one backend, and the one way statements reach the server.
pub(crate) struct Pool {
    pool: bb8::Pool<Manager>,
    statement_timeout: Duration,
}

impl Pool {
    /// Opens and checks one connection at once (so a wrong address fails here with
    /// `Unavailable` within the connect timeout), then builds the pool around it.
    pub async fn open(manager: Manager, max_connections: u32, statement_timeout: Duration) -> Result<Pool> {
        let connect_timeout = manager.connect_timeout;
        let first = bb8::ManageConnection::connect(&manager).await.map_err(connect_error)?;
        let pool = bb8::Pool::builder()
            .max_size(max_connections)
            .connection_timeout((connect_timeout + Duration::from_secs(5)).max(Duration::from_secs(30)))
            .test_on_check_out(false)
            .retry_connection(false)
            .build_unchecked(manager);
        let _ = pool.add(first);
        Ok(Pool { pool, statement_timeout })
    }

    /// A pool that has opened nothing yet (unit tests: a call that gets past its input checks
    /// fails to connect, one that does not never reaches the network).
    #[cfg(test)]
    pub fn unopened(manager: Manager, statement_timeout: Duration) -> Pool {
        let pool = bb8::Pool::builder()
            .max_size(1)
            .connection_timeout(Duration::from_secs(2))
            .retry_connection(false)
            .build_unchecked(manager);
        Pool { pool, statement_timeout }
    }

    /// Runs one batch, retrying transient failures. With a `deadline` (a bounded read), the
    /// wait for a connection and for the answer end when it passes (the deadline's error); the
    /// connection is then discarded, like one dropped mid-batch.
    pub async fn run(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&dyn ToSql],
        deadline: Option<std::time::Instant>,
    ) -> Result<Vec<Vec<Row>>> {
        let mut attempt = 0;
        loop {
            match self.run_once(op, sql, params, deadline).await {
                Err(e) if e.kind() == ErrorKind::Transient && attempt < MAX_TRANSIENT_RETRIES => {
                    attempt += 1;
                    let base = 5u64 << attempt;
                    let jitter = rand::random::<u64>() % (base + 1);
                    tracing::debug!(target: "chokaq_mssql", op, attempt, error = %e, "retrying transient failure");
                    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
                }
                other => return other,
            }
        }
    }

    async fn run_once(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&dyn ToSql],
        deadline: Option<std::time::Instant>,
    ) -> Result<Vec<Vec<Row>>> {
        let (limit, bounded) = match deadline {
            Some(d) => {
                let left = chokaq_core::deadline::remaining(d)?;
                (left.min(self.statement_timeout), left <= self.statement_timeout)
            }
            None => (self.statement_timeout, false),
        };
        let mut conn = match deadline {
            // A bounded read waits for a connection no longer than its deadline.
            Some(d) => match tokio::time::timeout_at(d.into(), self.pool.get()).await {
                Ok(c) => c.map_err(pool_error)?,
                Err(_) => return Err(chokaq_core::deadline::passed()),
            },
            None => self.pool.get().await.map_err(pool_error)?,
        };
        // Dropped before the answer (or timed out), the connection is discarded.
        conn.broken = true;
        let limit = match deadline {
            Some(d) => chokaq_core::deadline::remaining(d)?.min(limit),
            None => limit,
        };
        let res = tokio::time::timeout(limit, async { read_sets(conn.client.query(sql, params).await?).await }).await;
        match res {
            Err(_) if bounded => Err(chokaq_core::deadline::passed()),
            Err(_) => Err(timeout(op, limit)),
            Ok(Ok(rows)) => {
                conn.broken = false;
                Ok(rows)
            }
            Ok(Err(e)) => {
                // Deadlock victims, lock timeouts and duplicate keys roll the XACT_ABORT batch
                // back and leave the session clean; anything else (Azure's session-ending
                // errors included): discard the connection.
                conn.broken = !keeps_session(&e);
                Err(map_error(op, e))
            }
        }
    }
}

#[cfg(test)]
mod tls_tests {
    use super::*;
    use crate::connstr::{mssql_url_to_ado, parse_ado};

    /// Issue 27 item 6: `Encrypt=true`, `strict` and `false` in both string forms reach the
    /// TLS setup as the level they name (TLS itself is the platform library's, through
    /// tiberius' native-tls: no rustls in the build).
    #[test]
    fn encrypt_true_strict_and_false_set_the_tls_level() {
        let level = |s: &str| encryption_level(parse_ado(s).unwrap().encrypt) as u8;
        let url = |s: &str| encryption_level(parse_ado(&mssql_url_to_ado(s).unwrap()).unwrap().encrypt) as u8;
        let required = EncryptionLevel::Required as u8;
        let off = EncryptionLevel::Off as u8;
        for v in ["true", "True", "yes", "mandatory", "strict", "Strict"] {
            assert_eq!(level(&format!("server=h;user=u;password=p;Encrypt={v}")), required, "Encrypt={v}");
            assert_eq!(url(&format!("mssql://u:p@h/db?encrypt={v}")), required, "?encrypt={v}");
        }
        for v in ["false", "no", "optional"] {
            assert_eq!(level(&format!("server=h;user=u;password=p;Encrypt={v}")), off, "Encrypt={v}");
            assert_eq!(url(&format!("mssql://u:p@h/db?encrypt={v}")), off, "?encrypt={v}");
        }
        // The default is TLS for everything; `disabled` is no TLS at all.
        assert_eq!(level("server=h;user=u;password=p"), required);
        assert_eq!(level("server=h;user=u;password=p;Encrypt=disabled"), EncryptionLevel::NotSupported as u8);
        // A value that is none of these is refused, never read as "off".
        for v in ["maybe", "1", ""] {
            let e = parse_ado(&format!("server=h;user=u;password=p;Encrypt={v}")).unwrap_err();
            assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput, "Encrypt={v}: {e}");
        }
        // TrustServerCertificate is read as given, and only then skips the certificate check.
        assert!(
            parse_ado("server=h;user=u;password=p;Encrypt=strict;TrustServerCertificate=true")
                .unwrap()
                .trust_server_certificate
        );
        assert!(!parse_ado("server=h;user=u;password=p;Encrypt=strict").unwrap().trust_server_certificate);
    }

    /// Issue 37: the driver configuration chokaq builds from its own parse (the one every
    /// session of the crate uses, the tests' raw sessions included) is the one tiberius builds
    /// from its own parse of the same settings, for a string without TLS (`Encrypt=disabled`,
    /// which tiberius' parser spells `DANGER_PLAINTEXT` and chokaq's refuses), with TLS for
    /// the login only (`Encrypt=false`) and with TLS (`Encrypt=true`, trusted certificate or
    /// not). No server needed: the two `Config`s are compared whole (their `Debug`, every
    /// field).
    #[test]
    fn chokaq_parse_gives_the_driver_config_tiberius_would() {
        let app = "chokaq-test";
        let base = "server=tcp:db.example,14330;user=app;password=pw;Database=jobs";
        for (ours, theirs) in [
            ("Encrypt=disabled", "encrypt=DANGER_PLAINTEXT"),
            ("Encrypt=false", "encrypt=false"),
            ("Encrypt=false;TrustServerCertificate=true", "encrypt=false;TrustServerCertificate=true"),
            ("Encrypt=true", "encrypt=true"),
            ("Encrypt=strict;TrustServerCertificate=true", "encrypt=true;TrustServerCertificate=true"),
        ] {
            let cfg = crate::MssqlConfig::new(&format!("{base};{ours}")).unwrap();
            let got = tiberius_config(&cfg.parts, app);
            let want = Config::from_ado_string(&format!("{base};{theirs};Application Name={app}")).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{ours}");
            assert_eq!(got.get_addr(), "db.example:14330", "{ours}");
            // The URL form gives the same configuration.
            let url = format!("mssql://app:pw@db.example:14330/jobs?{}", ours.replace(';', "&"));
            let from_url = crate::MssqlConfig::from_url(&url).unwrap();
            assert_eq!(format!("{:?}", tiberius_config(&from_url.parts, app)), format!("{want:?}"), "{url}");
        }
        // And tiberius' own parser refuses chokaq's spelling: one test URL could not serve
        // both parsers without TLS.
        assert!(Config::from_ado_string(&format!("{base};encrypt=disabled")).is_err());
    }
}
