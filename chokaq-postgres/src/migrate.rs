//! Versioned migrations embedded in the crate.

use futures::future::BoxFuture;
use sqlx::PgPool;

use crate::sql::{quoted, render};

/// One schema migration: its version and SQL (with `{schema}` placeholders).
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in version order.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "init", sql: include_str!("../migrations/0001_init.sql") },
    Migration {
        version: 2,
        name: "complete_and_claim",
        sql: include_str!("../migrations/0002_complete_and_claim.sql"),
    },
];

/// Applies the missing migrations in one transaction under a schema-specific advisory lock, so
/// many processes may call it at once: the first creates, the others wait and find nothing to do.
pub(crate) async fn migrate(pool: &PgPool, schema: &str) -> Result<(), sqlx::Error> {
    let q = quoted(schema);
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL lock_timeout = '10s'").execute(&mut *tx).await?;
    // Before anything else: CREATE SCHEMA IF NOT EXISTS itself races between sessions.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("chokaq:migrate:{schema}"))
        .execute(&mut *tx)
        .await?;
    let create_schema = format!("CREATE SCHEMA IF NOT EXISTS {q}");
    sqlx::query(&create_schema).execute(&mut *tx).await?;
    let create_versions = format!(
        "CREATE TABLE IF NOT EXISTS {q}.versions (version integer PRIMARY KEY, name text NOT NULL, \
         applied_at timestamptz NOT NULL DEFAULT now())"
    );
    sqlx::query(&create_versions).execute(&mut *tx).await?;
    let current: i32 =
        sqlx::query_scalar(&format!("SELECT coalesce(max(version), 0) FROM {q}.versions")).fetch_one(&mut *tx).await?;
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        tracing::info!(schema, version = m.version, name = m.name, "applying migration");
        let ddl = render(m.sql, schema);
        run_script(&mut tx, &ddl).await?;
        sqlx::query(&format!("INSERT INTO {q}.versions (version, name) VALUES ($1, $2)"))
            .bind(m.version)
            .bind(m.name)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Runs a multi-statement script (a `&str` with no arguments goes over the simple query
/// protocol). Not `sqlx::raw_sql`: its future is not provably `Send` inside async-trait's.
fn run_script<'c>(conn: &'c mut sqlx::PgConnection, script: &'c str) -> BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move { sqlx::Executor::execute(conn, script).await.map(|_| ()) })
}
