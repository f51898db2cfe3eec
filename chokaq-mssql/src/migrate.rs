//! Migrations. SQL Server has one migration, schema version 2 (version 1 schemas are upgraded
//! in place), sent as three batches: the compatibility-level check and the schema itself
//! (`CREATE SCHEMA` must be alone in its batch), then every table, index and the lease
//! sequence, then lock escalation disabled on the job tables. All are idempotent, and the
//! first two take the migration app lock, so many processes may migrate at once; the
//! statements are `sql::migrate`'s `MIGRATE_SCHEMA`, `MIGRATE_OBJECTS` and
//! `MIGRATE_LOCK_ESCALATION`.

use chokaq_core::Result;

use crate::backend::MssqlBackend;

/// Runs the migration (what [`chokaq_core::Backend::migrate`] does).
pub(crate) async fn run(backend: &MssqlBackend) -> Result<()> {
    backend.run("migrate", &backend.sql().migrate_schema, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_objects, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_lock_escalation, &[]).await?;
    Ok(())
}
