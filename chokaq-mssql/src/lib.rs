//! `chokaq-mssql`: the SQL Server backend of chokaq (tiberius + bb8).
//!
//! [`MssqlBackend`] implements [`chokaq_core::Backend`]; [`MssqlConfig`] takes an ADO.NET
//! connection string ([`MssqlConfig::new`]) or either that or an `mssql://` / `sqlserver://`
//! URL ([`MssqlConfig::from_url`]); [`all_statements`] lists every T-SQL statement the backend
//! sends. See `docs/sqlserver.md` for setup, permissions and how the claim keeps `max_workers`
//! strict with READ_COMMITTED_SNAPSHOT on and off.
//!
//! Inside, the rooms of every backend crate (`docs/architecture.md` has the table: file ->
//! trait methods): `backend.rs` (the struct and `impl Backend`, which forwards to)
//! `enqueue.rs`, `claim.rs` (with the completions' slot handoff of `complete_and_claim`),
//! `lease.rs`, `admin.rs`, `inspect.rs`, `list.rs`, `workers.rs`, `periodic.rs` and
//! `migrate.rs`; `sql.rs` and `sql/` (every statement, by room), `rows.rs` and `rows/` (values
//! and rows), `error.rs` (SQL Server errors to `chokaq_core::ErrorKind`), `config.rs` and
//! `testing.rs` (`TestSupport`, feature `testing`). SQL Server's extras: `connstr.rs`
//! (connection strings and URLs), `pool.rs` (connections and running a batch) and `reply.rs`
//! (a batch's reply read into its result sets).

mod admin;
mod backend;
mod claim;
mod config;
mod connstr;
mod enqueue;
mod error;
mod inspect;
mod lease;
mod list;
mod migrate;
mod output;
mod periodic;
mod pool;
mod reply;
mod rows;
mod sql;
#[cfg(feature = "testing")]
mod testing;
mod unique;
mod workers;

pub use backend::MssqlBackend;
pub use config::{MssqlConfig, DEFAULT_SCHEMA, MAX_DATABASE_NAME_LEN};
pub use connstr::{is_connection_string, Encrypt};
pub use sql::all_statements;
#[cfg(feature = "testing")]
pub use testing::RawSession;
