//! The statements of job outputs (issue 41, `docs/outputs.md`): schema version 11 (the
//! `Output` column of the three job tables), `record_output` and `get_output`. Every move
//! between the job tables (`DELETE … OUTPUT DELETED.… INTO`) carries `[Output]`.

/// Schema version 11, a batch of its own after `migrate_uniques`, under the `migrate` row of
/// `Locks`: `[Output] NVARCHAR(MAX) NULL` on `JobsHot`, `JobsArchive` and `JobsDlq`, each
/// added only where missing (`COL_LENGTH`). A nullable column with no default is a change of
/// metadata only: no row is rewritten. No index: it is read by id only.
pub(super) const MIGRATE_OUTPUTS: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF COL_LENGTH(N'{schema}.[JobsHot]', N'Output') IS NULL
    ALTER TABLE {schema}.[JobsHot] ADD [Output] NVARCHAR(MAX) NULL;
IF COL_LENGTH(N'{schema}.[JobsArchive]', N'Output') IS NULL
    ALTER TABLE {schema}.[JobsArchive] ADD [Output] NVARCHAR(MAX) NULL;
IF COL_LENGTH(N'{schema}.[JobsDlq]', N'Output') IS NULL
    ALTER TABLE {schema}.[JobsDlq] ADD [Output] NVARCHAR(MAX) NULL;
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 11)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (11, SYSUTCDATETIME());
COMMIT TRANSACTION;";

/// Writes the output on the hot row this lease and worker hold, Fetched or Processing (the
/// guard of `heartbeat`). `@P1` id (BINARY(16)), `@P2` lease, `@P3` worker, `@P4` the output
/// (JSON text). Returns the id when written, no row when the lease was lost.
pub(super) const RECORD_OUTPUT: &str = "SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Lease BIGINT = @P2;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P3;
DECLARE @Output NVARCHAR(MAX) = @P4;
UPDATE h
SET h.[Output] = @Output
OUTPUT INSERTED.[Id]
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] IN (1, 2);";

/// The output of a job wherever it is, from ONE consistent view, as `get_job` reads it (the
/// same isolation choice: SNAPSHOT where allowed, else one statement under READ COMMITTED
/// SNAPSHOT, else SERIALIZABLE; `DEADLOCK_PRIORITY LOW`). `@P1` id. One row (`[Output]` NULL
/// when none was recorded) when the job exists, none otherwise.
pub(super) const GET_OUTPUT: &str = "SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
IF EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [snapshot_isolation_state] = 1)
    SET TRANSACTION ISOLATION LEVEL SNAPSHOT;
ELSE IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [is_read_committed_snapshot_on] = 1)
    SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;
SET DEADLOCK_PRIORITY LOW;
BEGIN TRANSACTION;
SELECT h.[Output] AS [Output] FROM {schema}.[JobsHot] AS h WHERE h.[Id] = @Id
UNION ALL
SELECT a.[Output] AS [Output] FROM {schema}.[JobsArchive] AS a WHERE a.[Id] = @Id
UNION ALL
SELECT d.[Output] AS [Output] FROM {schema}.[JobsDlq] AS d WHERE d.[Id] = @Id;
COMMIT TRANSACTION;";
