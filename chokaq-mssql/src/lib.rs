//! `chokaq-mssql`: the SQL Server backend of chokaq (tiberius + bb8).
//!
//! [`MssqlBackend`] implements [`chokaq_core::Backend`]; [`MssqlConfig`] takes an ADO.NET
//! connection string ([`MssqlConfig::new`]) or either that or an `mssql://` / `sqlserver://`
//! URL ([`MssqlConfig::from_url`]); [`all_statements`] lists every T-SQL statement the backend
//! sends. See `docs/sqlserver.md` for setup, permissions and how the claim keeps `max_workers`
//! strict with READ_COMMITTED_SNAPSHOT on and off.
//!
//! Inside: `backend.rs` (the struct; `impl Backend` in `backend/ops.rs`), `sql/` (every statement), `rows/`
//! (values and rows), `error.rs` (SQL Server errors to `chokaq_core::ErrorKind`),
//! `config.rs` and `connstr.rs` (configuration, connection strings and URLs), `pool.rs`
//! (connections and running a batch), `reply.rs` (a batch's reply read into its result
//! sets), `migrate.rs`, and `testing.rs` (`TestSupport`, feature `testing`).

mod backend;
mod config;
mod connstr;
mod error;
mod handoff;
mod migrate;
mod periodic;
mod pool;
mod reply;
mod rows;
mod sql;
#[cfg(feature = "testing")]
mod testing;

pub use backend::MssqlBackend;
pub use config::{MssqlConfig, DEFAULT_SCHEMA, MAX_DATABASE_NAME_LEN};
pub use connstr::{is_connection_string, Encrypt};
pub use sql::all_statements;
#[cfg(feature = "testing")]
pub use testing::RawSession;
