//! Migrations. SQL Server has one migration, schema version 3 (version 1 and 2 schemas are
//! upgraded in place), sent as four batches: the compatibility-level check and the schema
//! itself (`CREATE SCHEMA` must be alone in its batch), the `Locks` table and its rows, then
//! every table, index and the lease sequence under the `migrate` row of `Locks`, then lock
//! escalation disabled on the job tables. All are idempotent and safe from many processes at
//! once; the statements are `sql::migrate`'s `MIGRATE_SCHEMA`, `MIGRATE_LOCKS`,
//! `MIGRATE_OBJECTS` and `MIGRATE_LOCK_ESCALATION`. Schema version 5 (the `Workers` table and
//! the archive's `(FinishedAtUtc, Queue)` index) is a fifth batch of its own, `sql::workers`'s
//! `MIGRATE_WORKERS`, under the same lock row. Schema version 7 (`JobsHot.ExpiredHolds` and the
//! index `IX_JobsHot_Held`, for `ClaimMode::Hold`) and schema version 8 (the `QueueLocks`
//! table: the claim's per-queue gate and cap rows) are part of `MIGRATE_OBJECTS`. Schema version 9
//! (issue 25: `ConcurrencyKey` on the job tables, the per-key cap and rate-limit columns of
//! `Queues`, the `StartsLog` table) adds its columns and table in `MIGRATE_OBJECTS` and their
//! indexes in `MIGRATE_KEYS`, a batch of its own sent right after it (a batch cannot name a
//! column it adds itself). Schema version 10 (issue 40, L7: `StartsLog.N`, the ordinal of an
//! entry in its bucket) adds its column in `MIGRATE_OBJECTS` and its indexes, the numbering of
//! older entries and the version record in `MIGRATE_START_ORDINALS`, sent last. Every
//! earlier version's batches are kept in `tests/upgrade/` and the upgrade from each is tested
//! (`tests/upgrade.rs`). Schema version 10 (issue 42: the `Uniques` table of unique jobs) is
//! a batch of its own after `MIGRATE_WORKERS`, `sql::unique`'s `MIGRATE_UNIQUES`, under the
//! same lock row. Schema version 11 (issue 41: the `Output` column of the three job tables,
//! docs/outputs.md) is a batch of its own after that, `sql::output`'s `MIGRATE_OUTPUTS`, under
//! the same lock row.

use chokaq_core::Result;

use crate::backend::MssqlBackend;

/// Runs the migration (what [`chokaq_core::Backend::migrate`] does).
pub(crate) async fn run(backend: &MssqlBackend) -> Result<()> {
    backend.run("migrate", &backend.sql().migrate_schema, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_locks, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_objects, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_keys, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_lock_escalation, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_workers, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_start_ordinals, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_uniques, &[]).await?;
    backend.run("migrate", &backend.sql().migrate_outputs, &[]).await?;
    Ok(())
}
