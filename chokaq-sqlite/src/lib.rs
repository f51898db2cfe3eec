//! `chokaq-sqlite`: the chokaq backend for SQLite, on sqlx's SQLite driver.
//!
//! How it stays correct: SQLite has a single writer per database file. Every write (a claim,
//! a completion, every move between tables) runs inside `BEGIN IMMEDIATE`, which takes the
//! write lock *before* reading, so the read and the write of one operation can never
//! interleave with another writer's, whether that writer is a task of this process or another
//! process on the same file. Inside one process, writes go through one pooled connection
//! (queued fairly by the pool); across processes, SQLite's `busy_timeout` waits for the lock
//! and a bounded retry of `BEGIN IMMEDIATE` (in `SqliteBackend::begin_write`, the one place
//! that retries) absorbs longer waits. The database runs in WAL mode, so reads (stats,
//! listings) use their own connections and a consistent snapshot and never block writers.
//!
//! Consequences: `max_workers` caps are trivially strict (the active count is read inside
//! the claim's write transaction), leases come from a counter row incremented in the same
//! transaction, and moves are `INSERT ... SELECT` + `DELETE` inside one transaction.
//!
//! ```no_run
//! # async fn demo() -> chokaq_core::Result<()> {
//! use chokaq_core::Backend;
//! use chokaq_sqlite::{SqliteBackend, SqliteConfig};
//! let backend = SqliteBackend::connect(SqliteConfig::new("sqlite:///tmp/jobs.db")).await?;
//! backend.migrate().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! The rooms of every backend crate (`docs/architecture.md` has the table: file -> trait
//! methods):
//!
//! - `backend.rs`: [`SqliteBackend`] (pools, transactions) and `impl Backend`, which forwards
//!   to `enqueue.rs`, `claim.rs`, `lease.rs` (start, heartbeat, complete, fail, release),
//!   `admin.rs` (rescue, cancel, queue controls, requeue, purge), `inspect.rs` (settings,
//!   stats, `get_job`), `list.rs` (`list_jobs`), `workers.rs` (the workers table,
//!   throughput), `periodic.rs` (schedules) and `migrate.rs`;
//! - `sql.rs`: every statement, rendered once per backend from `{schema}` templates
//!   ([`all_statements`] lists them for the grammar check); `migrate.rs`: the DDL and the
//!   migration routine;
//! - `rows.rs`: rows to core types and back; `error.rs`: driver errors to
//!   [`chokaq_core::ErrorKind`]; `config.rs`: [`SqliteConfig`]; `file.rs`: the database file
//!   created owner-only, or required to exist;
//! - `testing.rs`: `impl chokaq_core::testing::TestSupport` (feature `testing`).

mod admin;
mod backend;
mod bounded;
mod claim;
mod config;
mod enqueue;
mod error;
mod file;
mod inspect;
mod lease;
mod list;
mod migrate;
mod output;
mod periodic;
mod rows;
mod sql;
#[cfg(feature = "testing")]
mod testing;
mod unique;
mod workers;

pub use backend::{Faults, SqliteBackend};
pub use config::SqliteConfig;
pub use sql::all_statements;
