//! A small bb8 `ManageConnection` for tiberius over tokio.
//!
//! A connection is "poisoned until proven healthy": it is marked broken before each statement
//! and unmarked when the statement's results were fully read. A statement that fails, times
//! out or whose future is dropped half-way leaves it marked, and bb8 discards it instead of
//! handing a connection with unread results or an open transaction to the next caller.

use std::fmt;
use std::time::Duration;

use tiberius::{AuthMethod, Client, Config, EncryptionLevel};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};

use crate::config::{ConnParts, Encrypt};
use crate::sql;

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

    fn tiberius_config(&self) -> Config {
        let p = &self.parts;
        let mut c = Config::new();
        c.host(&p.host);
        c.port(p.port);
        if let Some(db) = &p.database {
            c.database(db);
        }
        c.application_name(&self.app_name);
        c.authentication(AuthMethod::sql_server(
            p.user.as_deref().unwrap_or_default(),
            p.password.as_deref().unwrap_or_default(),
        ));
        c.encryption(match p.encrypt {
            Encrypt::Required => EncryptionLevel::Required,
            Encrypt::LoginOnly => EncryptionLevel::Off,
            Encrypt::Disabled => EncryptionLevel::NotSupported,
        });
        if p.trust_server_certificate {
            c.trust_cert();
        }
        c
    }

    async fn open(&self) -> Result<Conn, tiberius::error::Error> {
        let config = self.tiberius_config();
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
