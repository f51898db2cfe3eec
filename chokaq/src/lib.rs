//! # chokaq
//!
//! Database-backed background jobs: many workers claim jobs from one SQL table; no job is
//! ever taken twice, a queue's `max_workers` cap is strict, and leases fence stale workers.
//!
//! This crate is the facade and the worker runtime. One dependency line gives both the
//! runtime and a backend:
//!
//! ```toml
//! chokaq = { version = "0.1", features = ["postgres"] }
//! ```
//!
//! Then `chokaq::postgres::{PgBackend, PgConfig}` connects, [`Client`] enqueues typed jobs
//! and [`Worker`] runs their handlers. See `docs/runtime.md` for the design.
//!
//! Delivery is at least once: a handler may run twice if its process dies after the
//! handler's side effects and before the completion is written. Handlers must be idempotent.

#[cfg(feature = "apptest")]
pub mod apptest;
mod client;
mod connect;
mod job;
pub mod metrics_names;
pub mod periodic;
mod registry;
mod signal;
mod worker;

pub use client::{Client, IntoNewJob, JobBuilder};
pub use connect::{backend_kind, connect, connect_and_migrate, BackendKind, ConnectOptions};
pub use job::{Job, JobContext, JobError, JobResult};
pub use signal::{shutdown_token, wait_for_signal};
pub use worker::{
    MaintenanceConfig, StatsHandle, Worker, WorkerBuilder, WorkerConfig, WorkerReport, MAX_SETTING_DURATION,
    MIN_WORKER_STALE_AFTER, SHUTDOWN_ERROR,
};

/// The core contract: value types, the [`core::Backend`] trait, errors, the retry policy.
pub use chokaq_core as core;
pub use chokaq_core::{
    Backend, BackendExt, ClaimMode, DeadReason, Enqueued, Error, ErrorKind, FailAction, JobId, JobKind, JobRecord,
    NewJob, QueueName, Result, RetryPolicy, UniqueOpts, UniqueState, UniqueStates, WorkerId,
};
pub use tokio_util::sync::CancellationToken;

/// The PostgreSQL backend (feature `postgres`): [`PgBackend`](postgres::PgBackend) and its
/// [`PgConfig`](postgres::PgConfig), plus the sqlx types its API takes (`PgConnection` for
/// [`Client::enqueue_in_tx`], `PgPool` for [`PgBackend::from_pool`](postgres::PgBackend::from_pool)).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use chokaq_postgres::{map_sqlx_error, Migration, PgBackend, PgConfig, MIGRATIONS};
    pub use sqlx::{PgConnection, PgPool};
}

/// The SQL Server backend (feature `mssql`): [`MssqlBackend`](mssql::MssqlBackend) and its
/// [`MssqlConfig`](mssql::MssqlConfig).
#[cfg(feature = "mssql")]
pub mod mssql {
    pub use chokaq_mssql::{is_connection_string, Encrypt, MssqlBackend, MssqlConfig, DEFAULT_SCHEMA};
}

/// The SQLite backend (feature `sqlite`): [`SqliteBackend`](sqlite::SqliteBackend) and its
/// [`SqliteConfig`](sqlite::SqliteConfig).
#[cfg(feature = "sqlite")]
pub mod sqlite {
    pub use chokaq_sqlite::{SqliteBackend, SqliteConfig};
}

/// The Rust snippets of the repository's Markdown files, compiled (and run, unless marked
/// `no_run`) by `cargo test --doc`, so the docs stay true to the code. Shell, TOML and
/// output blocks carry their language and are not compiled. The snippets use the PostgreSQL
/// backend, hence the feature.
#[cfg(all(doctest, feature = "postgres"))]
mod markdown_snippets {
    #[doc = include_str!("../../README.md")]
    struct Readme;

    #[doc = include_str!("../../docs/runtime.md")]
    struct RuntimeDoc;
}

/// `docs/testing.md` (the `apptest` feature's guide): its Rust snippets are compiled and run
/// by `cargo test --doc --features apptest,sqlite,postgres` (and `--all-features`).
#[cfg(all(doctest, feature = "apptest", feature = "sqlite", feature = "postgres"))]
mod apptest_doc_snippets {
    #[doc = include_str!("../../docs/testing.md")]
    struct Testing;
}

/// The other pages of `docs/` (`docs/conformance.md` is compiled by `chokaq-conformance`):
/// their Rust snippets are compiled by `cargo test --doc --all-features`, so the docs run as
/// written. Snippets that need a server are `no_run`.
#[cfg(all(doctest, feature = "postgres", feature = "sqlite", feature = "mssql"))]
mod backend_doc_snippets {
    #[doc = include_str!("../../docs/architecture.md")]
    struct Architecture;

    #[doc = include_str!("../../docs/contract.md")]
    struct Contract;

    #[doc = include_str!("../../docs/limits.md")]
    struct Limits;

    #[doc = include_str!("../../docs/performance.md")]
    struct Performance;

    #[doc = include_str!("../../docs/periodic.md")]
    struct Periodic;

    #[doc = include_str!("../../docs/postgres.md")]
    struct Postgres;

    #[doc = include_str!("../../docs/security.md")]
    struct Security;

    #[doc = include_str!("../../docs/sqlite.md")]
    struct Sqlite;

    #[doc = include_str!("../../docs/sqlserver.md")]
    struct SqlServer;

    #[doc = include_str!("../../docs/unique.md")]
    struct Unique;

    #[doc = include_str!("../../docs/outputs.md")]
    struct Outputs;

    #[doc = include_str!("../../docs/workflows.md")]
    struct Workflows;
}
