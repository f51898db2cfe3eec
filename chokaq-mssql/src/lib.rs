//! `chokaq-mssql`: the SQL Server backend of chokaq (tiberius + bb8).
//!
//! Every T-SQL statement lives in [`sql`]; errors are mapped in [`error::map_error`]. See
//! `docs/sqlserver.md` for setup, permissions and how the claim keeps `max_workers` strict
//! with READ_COMMITTED_SNAPSHOT on and off.

mod config;
pub mod error;
pub mod sql;

pub use config::{is_connection_string, Encrypt, MssqlConfig, DEFAULT_SCHEMA};
pub use sql::all_statements;
mod backend;
mod pool;

pub use backend::MssqlBackend;
