//! `chokaq-postgres`: the PostgreSQL backend of chokaq, on sqlx.
//!
//! * Claims are one call of a plpgsql function (`<schema>.claim`, in `migrations/functions.sql`,
//!   the one file of every function): one bounded, skip-locked index seek per requested queue,
//!   and for capped queues a lock on the queue's control row followed by a count in a fresh
//!   snapshot, so `max_workers` is a strict cap; uncapped queues hold their row `FOR KEY SHARE`,
//!   so a cap or a pause binds every claim that commits after the control returned.
//! * Every guarded write names the lease (fencing token) and reports lost leases per id.
//! * Every move between tables is one statement with data-modifying CTEs.
//! * Enqueue wakes idle workers with `pg_notify` on channel `<schema>_jobs`.
//!
//! ```no_run
//! use chokaq_core::Backend;
//! use chokaq_postgres::{PgBackend, PgConfig};
//!
//! # async fn run() -> chokaq_core::Result<()> {
//! let db = PgBackend::connect(PgConfig::new("postgres://app@db/app").schema("jobs")).await?;
//! db.migrate().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The source has the rooms of every backend crate (`docs/architecture.md` has the table:
//! file -> trait methods): `backend.rs` ([`PgBackend`] and its `impl Backend`, which forwards
//! to) `enqueue.rs`, `claim.rs`, `lease.rs` (start, heartbeat, complete, fail, release),
//! `admin.rs` (rescue, cancel, queue controls, requeue, purge), `inspect.rs` (settings, stats,
//! `get_job`), `list.rs` (`list_jobs`), `workers.rs` (the workers table, throughput),
//! `periodic.rs` (schedules) and `migrate.rs` (with `migrations/*.sql`); `sql.rs` (every
//! statement, by room in `sql/*.rs`; the broken ones of the `fault-injection` feature in
//! `sql/faults.rs`), `rows.rs`, `error.rs`, `config.rs` and `testing.rs` (`TestSupport`,
//! feature `testing`). PostgreSQL's extras: `listen.rs` (wake-ups, on a connection of their
//! own), `tls.rs` (the URL's `sslmode`), `notify.rs` (wake-ups sent after the commit), `kept.rs` (pooled sessions kept
//! between statements) and `bounded.rs` (reads bounded by a deadline: `statement_timeout`, and
//! `pg_cancel_backend` when dropped).
//!
//! See `docs/postgres.md` for the schema and the reasoning behind each statement.

mod admin;
mod backend;
mod batch;
mod bounded;
mod claim;
mod config;
mod enqueue;
mod error;
mod inspect;
mod kept;
mod lease;
mod list;
mod listen;
mod migrate;
mod notify;
mod output;
mod periodic;
mod rows;
mod sql;
#[cfg(feature = "testing")]
mod testing;
mod tls;
mod unique;
mod workers;
mod workflow;

pub use backend::PgBackend;
pub use config::PgConfig;
pub use error::map_sqlx_error;
pub use migrate::{Migration, FUNCTIONS, MIGRATIONS};
pub use sql::all_statements;
#[cfg(feature = "fault-injection")]
pub use sql::Faults;
pub use tls::{check_url, tls_failure};
