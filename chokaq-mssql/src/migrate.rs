//! Migrations. SQL Server has one migration (schema version 1), sent as two batches: the
//! schema itself (`CREATE SCHEMA` must be alone in its batch), then every table, index and the
//! lease sequence. Both are idempotent and take the migration app lock, so many processes may
//! migrate at once; the statements are `sql::migrate`'s `MIGRATE_SCHEMA` and `MIGRATE_OBJECTS`.

use chokaq_core::Result;

use crate::backend::MssqlBackend;

/// Runs the migration (what [`chokaq_core::Backend::migrate`] does).
pub(crate) async fn run(backend: &MssqlBackend) -> Result<()> {
    backend.run("migrate", &backend.sql().migrate_schema, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_objects, &[]).await?;
    Ok(())
}
