//! `chokaq-mysql`: the chokaq backend for MariaDB (10.6+) and MySQL (8.0+), on sqlx's MySQL
//! driver and InnoDB.
//!
//! How it stays correct without `UPDATE ... RETURNING`, LISTEN/NOTIFY or sequences:
//!
//! - **Isolation is pinned.** Every session the backend opens runs
//!   `SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED` (InnoDB's default is REPEATABLE
//!   READ): each statement reads the latest committed rows, and InnoDB takes no gap locks for
//!   searches. Readers that need one consistent view (stats, `get_job`, presence) open a
//!   read-only REPEATABLE READ transaction, whose plain reads take no locks.
//! - **The claim** locks due rows `FOR UPDATE SKIP LOCKED` in priority and due order, gives
//!   them leases reserved from a counter row (an autocommitted statement on a pool of its own,
//!   after the rows are locked), and reads back exactly the rows it took, by lease. A guarded
//!   queue's control row (a queue cap, a per-key cap or a rate limit set) is locked
//!   `FOR UPDATE` first (queues in name order) and its counts read after, each in a statement
//!   of its own (a fresh READ COMMITTED snapshot): the active jobs, the running jobs per key,
//!   the starts in the rate window. Every cap and window is strict; the claimers of a guarded
//!   queue take turns, one claim transaction at a time.
//! - **Moves** (complete, dead-letter, requeue) lock the row, `INSERT ... SELECT` it into the
//!   target table and delete it, in one transaction.
//! - **Deadlocks** (1213) and lock wait timeouts (1205) are retried inside the call and
//!   counted per path ([`MysqlBackend::lock_retries`]); the lock orders above keep the claim
//!   and completion paths at zero in the conformance suite's races.
//!
//! ```no_run
//! # async fn demo() -> chokaq_core::Result<()> {
//! use chokaq_core::Backend;
//! use chokaq_mysql::{MysqlBackend, MysqlConfig};
//! let backend = MysqlBackend::connect(MysqlConfig::new("mysql://app:secret@127.0.0.1:3306/app").schema("jobs")).await?;
//! backend.migrate().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! The rooms of every backend crate (`docs/architecture.md` has the table: file -> trait
//! methods):
//!
//! - `backend.rs`: [`MysqlBackend`] (pools, transactions, the retry loop) and `impl Backend`,
//!   which forwards to `enqueue.rs`, `claim.rs`, `lease.rs` (start, heartbeat, complete, fail,
//!   release), `admin.rs` (rescue, cancel, queue controls, requeue, purge), `inspect.rs`
//!   (settings, stats, `get_job`), `list.rs` (`list_jobs`), `workers.rs` (the workers table,
//!   throughput), `periodic.rs` (schedules) and `migrate.rs`;
//! - `sql.rs`: every statement, rendered once per backend from `{schema}` templates
//!   ([`all_statements`] lists them for the grammar check); `sql/list.rs`: the listing
//!   statement, built per call with sea-query from the filters given; `migrate.rs`: the DDL;
//! - `rows.rs`: rows to core types; `error.rs`: driver errors to [`chokaq_core::ErrorKind`] by
//!   error number, and the lock-retry counters; `config.rs`: [`MysqlConfig`];
//! - `testing.rs`: `impl chokaq_core::testing::TestSupport` (feature `testing`).

mod admin;
mod backend;
mod bounded;
mod claim;
mod config;
mod enqueue;
mod error;
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
mod tls;
mod unique;
mod workers;

#[cfg(feature = "fault-injection")]
pub use backend::Faults;
pub use backend::MysqlBackend;
pub use config::{is_mysql_url, MysqlConfig, DEFAULT_SCHEMA};
pub use error::{LockRetryCounts, Path};
pub use sql::all_statements;
pub use tls::{check_url, tls_failure};

/// `docs/mysql.md`: its Rust snippets are compiled by `cargo test --doc -p chokaq-mysql`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/mysql.md")]
struct MysqlDoc;
