//! Versioned migrations, embedded in the crate from `migrations/*.sql`, and the one
//! repeatable script, `migrations/functions.sql` (every plpgsql function of the schema).

use futures::future::BoxFuture;
use sqlx::PgPool;

use crate::sql::Statements;

/// One schema migration: its version and SQL (with `{schema}` placeholders).
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Declares [`MIGRATIONS`] (from `migrations/<file>.sql`) and, in the same order, the name of
/// each in [`all_statements`](crate::all_statements).
macro_rules! migrations {
    ($($version:literal, $name:literal, $file:literal;)*) => {
        /// Every migration, in version order.
        pub const MIGRATIONS: &[Migration] = &[
            $(Migration {
                version: $version,
                name: $name,
                sql: include_str!(concat!("../migrations/", $file, ".sql")),
            },)*
        ];

        /// The statement name of each of [`MIGRATIONS`], e.g. `migration_0001_init`.
        pub(crate) const MIGRATION_NAMES: &[&str] = &[$(concat!("migration_", $file),)*];
    };
}

migrations! {
    1, "init", "0001_init";
    2, "complete_and_claim", "0002_complete_and_claim";
    4, "harden", "0004_harden";
    5, "hot_heartbeats", "0005_hot_heartbeats";
    6, "schedules", "0006_schedules";
    7, "workers", "0007_workers";
    8, "fetched_timeout", "0008_fetched_timeout";
    9, "scheduled", "0009_scheduled";
    10, "handoff", "0010_handoff";
    11, "hold", "0011_hold";
    12, "list_kind", "0012_list_kind";
    13, "keys", "0013_keys";
    14, "key_counts", "0014_key_counts";
    15, "key_walks", "0015_key_walks";
    16, "start_ordinals", "0016_start_ordinals";
    17, "uniques", "0017_uniques";
    18, "outputs", "0018_outputs";
    19, "workflows", "0019_workflows";
    20, "fan_in_parts", "0020_fan_in_parts";
}

/// Every plpgsql function of the schema (`CREATE OR REPLACE`, `{schema}` placeholders): the
/// repeatable script [`migrate`] applies after the versioned ones whenever its checksum differs
/// from the one the schema records. A function changes here, in one diff; a change of a
/// signature also needs a versioned migration that drops the old one. One script in two files
/// (`functions.sql`: `key_depth` and `claim`; `functions_keys.sql`: the keyed walk,
/// `promote_blocked` and `complete_and_claim`; `functions_flows.sql`: the workflows' trigger), concatenated: its checksum is the whole text's.
pub const FUNCTIONS: &str = concat!(
    include_str!("../migrations/functions.sql"),
    include_str!("../migrations/functions_keys.sql"),
    include_str!("../migrations/functions_flows.sql")
);

/// The name of [`FUNCTIONS`] in the schema's `repeatables` table.
const FUNCTIONS_NAME: &str = "functions";

/// Applies the missing migrations in one transaction under a schema-specific lock, so
/// many processes may call it at once: the first creates, the others wait and find nothing to do.
/// Then, under the same lock and in the same transaction, the functions script, when its
/// checksum differs from the recorded one and this build knows every version the schema has
/// applied (an older build, started beside a newer one, never puts its functions back).
pub(crate) async fn migrate(pool: &PgPool, sql: &Statements, schema: &str) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(&sql.migrate_lock_timeout).execute(&mut *tx).await?;
    sqlx::query(&sql.no_statement_timeout).execute(&mut *tx).await?;
    // Before anything else: CREATE SCHEMA IF NOT EXISTS itself races between sessions. Once
    // the schema has its `locks` table, the lock is its `migrate` row, which only roles with
    // privileges on the schema can hold; before that (the first migration), an advisory lock.
    let has_locks: bool = sqlx::query_scalar(&sql.locks_table_exists).fetch_one(&mut *tx).await?;
    if has_locks {
        sqlx::query(&sql.migrate_row_lock).execute(&mut *tx).await?;
    } else {
        sqlx::query(&sql.migrate_lock).bind(format!("chokaq:migrate:{schema}")).execute(&mut *tx).await?;
    }
    sqlx::query(&sql.create_schema).execute(&mut *tx).await?;
    sqlx::query(&sql.create_versions).execute(&mut *tx).await?;
    // Every version not applied yet, not only those above the highest applied: migrations
    // written on parallel branches may land with versions below one already applied.
    let applied: Vec<i32> = sqlx::query_scalar(&sql.current_version).fetch_one(&mut *tx).await?;
    for (m, script) in MIGRATIONS.iter().zip(&sql.migrations).filter(|(m, _)| !applied.contains(&m.version)) {
        tracing::info!(schema, version = m.version, name = m.name, "applying migration");
        run_script(&mut tx, script).await?;
        sqlx::query(&sql.insert_version).bind(m.version).bind(m.name).execute(&mut *tx).await?;
    }
    let ours = MIGRATIONS.iter().map(|m| m.version).max().unwrap_or(0);
    if applied.iter().all(|v| *v <= ours) {
        let checksum = crate::sql::short_hash(&sql.functions);
        let stored: Option<String> =
            sqlx::query_scalar(&sql.repeatable_checksum).bind(FUNCTIONS_NAME).fetch_optional(&mut *tx).await?;
        if stored.as_deref() != Some(checksum.as_str()) {
            tracing::info!(schema, checksum, "applying the functions script");
            run_script(&mut tx, &sql.functions).await?;
            sqlx::query(&sql.repeatable_record)
                .bind(FUNCTIONS_NAME)
                .bind(&checksum)
                .bind(ours)
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Runs a multi-statement script (a `&str` with no arguments goes over the simple query
/// protocol). Not `sqlx::raw_sql`: its future is not provably `Send` inside async-trait's.
fn run_script<'c>(conn: &'c mut sqlx::PgConnection, script: &'c str) -> BoxFuture<'c, Result<(), sqlx::Error>> {
    Box::pin(async move { sqlx::Executor::execute(conn, script).await.map(|_| ()) })
}
