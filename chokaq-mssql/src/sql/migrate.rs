//! The migration: four batches. The first creates the schema, the second the `Locks` table
//! and its two rows (each behind an existence check, a concurrent creator's "already exists"
//! error swallowed once the object is there); the third runs in a transaction that holds the
//! `migrate` row of `Locks` (an `UPDATE`, so a concurrent migration waits for the commit;
//! `SET LOCK_TIMEOUT 30000` bounds the wait, error 1222, retried as transient); the fourth only
//! sets a table option. Every object is created behind an existence check, so the migration
//! is idempotent and safe from many processes at once.
//!
//! The locks are rows of a table of the schema, not app locks: `sp_getapplock` on a name
//! derived from the schema can be taken by any login of the database (with the default
//! `@DbPrincipal = 'public'`), which would stall every migration or silently stop rescue. A
//! row of `[schema].[Locks]` can only be locked by a role with privileges on that table
//! (issue 16, finding 4).
//!
//! Schema version 2 (the Scheduled state and its index, the `Outcome` column, the per-queue
//! indexes of the archive and dead-letter tables, lock escalation disabled) upgrades a
//! version-1 schema in place; version 3 (idempotency keys unique per queue:
//! `UX_JobsHot_QueueIdempotencyKey (Queue, IdempotencyKey)` replaces
//! `UX_JobsHot_IdempotencyKey (IdempotencyKey)`; the `Locks` table) upgrades version 2 in
//! place. Keys unique over the schema are unique per queue, so the new index always builds;
//! it is created before the old one is dropped, in the same transaction. Version 7 (issue 24,
//! `ClaimMode::Hold`) adds `JobsHot.ExpiredHolds` (`INT NOT NULL`, default 0) and the filtered
//! index `IX_JobsHot_Held (HeartbeatUtc) WHERE Status = 1 AND HeartbeatUtc IS NOT NULL`, which
//! the rescue seeks for held jobs whose heartbeat expired.

/// Checks the database compatibility level (130 or higher, for `OPENJSON`: error 51001,
/// `Unsupported`, with the level found), then creates the schema itself (`CREATE SCHEMA` must
/// be alone in its batch, hence `EXEC`) in `TRY … CATCH`: when two processes race, the
/// loser's "already exists" is swallowed if the schema now exists, and anything else is
/// rethrown. The `SET`s of a batch sent through `sp_executesql` end with the batch.
pub(super) const MIGRATE_SCHEMA: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
DECLARE @Level INT = (SELECT [compatibility_level] FROM sys.databases WHERE [database_id] = DB_ID());
IF @Level < 130
BEGIN
    DECLARE @Message NVARCHAR(400) = CONCAT(
        N'chokaq: the database compatibility level is ', @Level,
        N'; chokaq needs 130 or higher (OPENJSON): ALTER DATABASE CURRENT SET COMPATIBILITY_LEVEL = 130'
    );
    THROW 51001, @Message, 1;
END;
IF SCHEMA_ID(N'{schema_text}') IS NULL
BEGIN
    BEGIN TRY
        EXEC (N'CREATE SCHEMA {schema}');
    END TRY
    BEGIN CATCH
        IF SCHEMA_ID(N'{schema_text}') IS NULL
            THROW;
    END CATCH;
END;";

/// Creates the `Locks` table and its rows `migrate` and `rescue`, in a batch of its own, once
/// the schema exists. The `CREATE TABLE` is in `TRY … CATCH` like the schema's; the rows go in
/// with one `INSERT … WHERE NOT EXISTS (… WITH (UPDLOCK, HOLDLOCK))`, whose key-range lock
/// serialises concurrent inserters.
pub(super) const MIGRATE_LOCKS: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
IF OBJECT_ID(N'{schema}.[Locks]', N'U') IS NULL
BEGIN
    BEGIN TRY
        CREATE TABLE {schema}.[Locks] (
            [Name] VARCHAR(32) COLLATE Latin1_General_BIN2 NOT NULL CONSTRAINT [PK_Locks] PRIMARY KEY CLUSTERED,
            [LastTakenAtUtc] DATETIME2(7) NULL
        );
    END TRY
    BEGIN CATCH
        IF OBJECT_ID(N'{schema}.[Locks]', N'U') IS NULL
            THROW;
    END CATCH;
END;
INSERT INTO {schema}.[Locks] ([Name])
SELECT v.[Name]
FROM (VALUES ('migrate'), ('rescue')) AS v ([Name])
WHERE NOT EXISTS (SELECT 1 FROM {schema}.[Locks] AS l WITH (UPDLOCK, HOLDLOCK) WHERE l.[Name] = v.[Name]);";

/// Under the `migrate` row of `Locks`: creates every table, index and the lease sequence if
/// missing, upgrades a version-1 schema (adds `Outcome`, moves not-yet-due Pending rows to
/// Scheduled) and a version-2 one (the per-queue idempotency index replaces the global one),
/// creates the `Schedules` table of periodic jobs (version 4), adds `ExpiredHolds` and
/// `IX_JobsHot_Held` (version 7), creates `QueueLocks` (version 8: the claim's per-queue gate
/// and cap locks, rows `Kind` 0 and 1 of each queue, inserted on first use), and records
/// versions 1 to 4 and 6 to 8 in `SchemaVersions`. Schema version 9's columns and table are
/// added here too (`ConcurrencyKey` on the three job tables, `NVARCHAR(255)` in the binary
/// collation; `Queues.KeyMaxWorkers`, `RateJobs`, `RatePerMs`, `RateByKey`; the `StartsLog`
/// table of rate-limited claims), each only where it is missing, and nothing else in the batch
/// names them; their indexes and the version record are [`MIGRATE_KEYS`], the next batch.
///
/// `ExpiredHolds` counts how often a held Fetched job (claimed with `ClaimMode::Hold`: Fetched
/// with a heartbeat) expired, its worker gone before its start was recorded; the rescue adds 1
/// at each expiry (and, since issue 36, never dead-letters for it), the claim returns it,
/// `requeue_dead` starts it again at 0. Only the hot
/// table has it (the moves copy the shared columns). On editions other than Enterprise (and
/// Developer), adding a `NOT NULL` column with a default writes every existing row once; on
/// Enterprise it is a metadata-only change. No statement of this batch reads the column, so the
/// batch compiles against a version-6 table.
///
/// The three job tables share their first 18 columns (`Id` … `CreatedBy`, in this order:
/// the moves copy them with `OUTPUT DELETED.… INTO`). Indexes of the hot table are filtered
/// per status, so each stays as small as its state: Pending (0) rows are in
/// `IX_JobsHot_Pending`, the claim index; Scheduled (3) rows, not yet due, only in
/// `IX_JobsHot_Scheduled`, which the claim range-seeks by due time to promote them.
/// Filtered indexes need the session options of [`super::SESSION_SETUP`].
///
/// `Outcome` records what the current claim's own `fail` wrote, so that a repeated `fail`
/// with the same lease reports it: 1 retried, 2 snoozed (hot table), 3 dead-lettered (dead
/// letters); NULL otherwise (every claim clears it; cancel and rescue never set it).
pub(super) const MIGRATE_OBJECTS: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF OBJECT_ID(N'{schema}.[SchemaVersions]', N'U') IS NULL
    CREATE TABLE {schema}.[SchemaVersions] (
        [Version] INT NOT NULL CONSTRAINT [PK_SchemaVersions] PRIMARY KEY CLUSTERED,
        [AppliedAtUtc] DATETIME2(7) NOT NULL
    );
IF OBJECT_ID(N'{schema}.[LeaseSeq]', N'SO') IS NULL
    CREATE SEQUENCE {schema}.[LeaseSeq] AS BIGINT START WITH 1 INCREMENT BY 1 CACHE 100;
IF OBJECT_ID(N'{schema}.[Queues]', N'U') IS NULL
    CREATE TABLE {schema}.[Queues] (
        [Name] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL CONSTRAINT [PK_Queues] PRIMARY KEY CLUSTERED,
        [MaxWorkers] INT NULL,
        [IsPaused] BIT NOT NULL CONSTRAINT [DF_Queues_IsPaused] DEFAULT (0),
        [IsActive] BIT NOT NULL CONSTRAINT [DF_Queues_IsActive] DEFAULT (1),
        [ZombieTimeoutMs] BIGINT NULL,
        [ZombiePolicy] SMALLINT NOT NULL CONSTRAINT [DF_Queues_ZombiePolicy] DEFAULT (0),
        [CreatedAtUtc] DATETIME2(7) NOT NULL,
        [UpdatedAtUtc] DATETIME2(7) NOT NULL
    );
IF COL_LENGTH(N'{schema}.[Queues]', N'FetchedTimeoutMs') IS NULL
    ALTER TABLE {schema}.[Queues] ADD [FetchedTimeoutMs] BIGINT NULL;
IF OBJECT_ID(N'{schema}.[JobsHot]', N'U') IS NULL
    CREATE TABLE {schema}.[JobsHot] (
    [Id] BINARY(16) NOT NULL,
    [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
    [Kind] NVARCHAR(255) COLLATE Latin1_General_BIN2 NOT NULL,
    [Payload] NVARCHAR(MAX) NOT NULL,
    [Tags] NVARCHAR(MAX) NULL,
    [IdempotencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL,
    [Priority] INT NOT NULL,
    [Attempt] INT NOT NULL,
    [MaxAttempts] INT NOT NULL,
    [Lease] BIGINT NULL,
    [WorkerId] UNIQUEIDENTIFIER NULL,
    [HeartbeatUtc] DATETIME2(7) NULL,
    [ScheduledAtUtc] DATETIME2(7) NULL,
    [CreatedAtUtc] DATETIME2(7) NOT NULL,
    [StartedAtUtc] DATETIME2(7) NULL,
    [UpdatedAtUtc] DATETIME2(7) NOT NULL,
    [LastError] NVARCHAR(MAX) NULL,
    [CreatedBy] NVARCHAR(255) NULL,
    CONSTRAINT [PK_JobsHot] PRIMARY KEY CLUSTERED ([Id]),
    [Status] SMALLINT NOT NULL,
    [DueAtUtc] DATETIME2(7) NOT NULL,
    [CancelRequested] BIT NOT NULL CONSTRAINT [DF_JobsHot_CancelRequested] DEFAULT (0),
    [Outcome] SMALLINT NULL
    );
IF OBJECT_ID(N'{schema}.[JobsArchive]', N'U') IS NULL
    CREATE TABLE {schema}.[JobsArchive] (
    [Id] BINARY(16) NOT NULL,
    [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
    [Kind] NVARCHAR(255) COLLATE Latin1_General_BIN2 NOT NULL,
    [Payload] NVARCHAR(MAX) NOT NULL,
    [Tags] NVARCHAR(MAX) NULL,
    [IdempotencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL,
    [Priority] INT NOT NULL,
    [Attempt] INT NOT NULL,
    [MaxAttempts] INT NOT NULL,
    [Lease] BIGINT NULL,
    [WorkerId] UNIQUEIDENTIFIER NULL,
    [HeartbeatUtc] DATETIME2(7) NULL,
    [ScheduledAtUtc] DATETIME2(7) NULL,
    [CreatedAtUtc] DATETIME2(7) NOT NULL,
    [StartedAtUtc] DATETIME2(7) NULL,
    [UpdatedAtUtc] DATETIME2(7) NOT NULL,
    [LastError] NVARCHAR(MAX) NULL,
    [CreatedBy] NVARCHAR(255) NULL,
    CONSTRAINT [PK_JobsArchive] PRIMARY KEY CLUSTERED ([Id]),
    [FinishedAtUtc] DATETIME2(7) NOT NULL
    );
IF OBJECT_ID(N'{schema}.[JobsDlq]', N'U') IS NULL
    CREATE TABLE {schema}.[JobsDlq] (
    [Id] BINARY(16) NOT NULL,
    [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
    [Kind] NVARCHAR(255) COLLATE Latin1_General_BIN2 NOT NULL,
    [Payload] NVARCHAR(MAX) NOT NULL,
    [Tags] NVARCHAR(MAX) NULL,
    [IdempotencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL,
    [Priority] INT NOT NULL,
    [Attempt] INT NOT NULL,
    [MaxAttempts] INT NOT NULL,
    [Lease] BIGINT NULL,
    [WorkerId] UNIQUEIDENTIFIER NULL,
    [HeartbeatUtc] DATETIME2(7) NULL,
    [ScheduledAtUtc] DATETIME2(7) NULL,
    [CreatedAtUtc] DATETIME2(7) NOT NULL,
    [StartedAtUtc] DATETIME2(7) NULL,
    [UpdatedAtUtc] DATETIME2(7) NOT NULL,
    [LastError] NVARCHAR(MAX) NULL,
    [CreatedBy] NVARCHAR(255) NULL,
    CONSTRAINT [PK_JobsDlq] PRIMARY KEY CLUSTERED ([Id]),
    [FinishedAtUtc] DATETIME2(7) NOT NULL,
    [Reason] VARCHAR(32) COLLATE Latin1_General_BIN2 NOT NULL,
    [Outcome] SMALLINT NULL
    );
IF COL_LENGTH(N'{schema}.[JobsHot]', N'Outcome') IS NULL
    ALTER TABLE {schema}.[JobsHot] ADD [Outcome] SMALLINT NULL;
IF COL_LENGTH(N'{schema}.[JobsDlq]', N'Outcome') IS NULL
    ALTER TABLE {schema}.[JobsDlq] ADD [Outcome] SMALLINT NULL;
IF COL_LENGTH(N'{schema}.[JobsHot]', N'ExpiredHolds') IS NULL
    ALTER TABLE {schema}.[JobsHot] ADD [ExpiredHolds] INT NOT NULL \
    CONSTRAINT [DF_JobsHot_ExpiredHolds] DEFAULT (0);
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsHot_Pending' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Pending] \
    ON {schema}.[JobsHot] ([Queue], [Priority] DESC, [DueAtUtc], [Id]) WHERE [Status] = 0;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsHot_Scheduled' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Scheduled] \
    ON {schema}.[JobsHot] ([Queue], [DueAtUtc]) WHERE [Status] = 3;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsHot_Fetched' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Fetched] \
    ON {schema}.[JobsHot] ([UpdatedAtUtc]) INCLUDE ([Queue]) WHERE [Status] = 1;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsHot_Processing' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Processing] \
    ON {schema}.[JobsHot] ([HeartbeatUtc]) INCLUDE ([Queue], [Attempt], [MaxAttempts]) WHERE [Status] = 2;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsHot_Held' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Held] \
    ON {schema}.[JobsHot] ([HeartbeatUtc]) INCLUDE ([Queue]) WHERE [Status] = 1 AND [HeartbeatUtc] IS NOT NULL;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsHot_Active' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Active] \
    ON {schema}.[JobsHot] ([Queue], [Status]) WHERE [Status] IN (1, 2);
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'UX_JobsHot_QueueIdempotencyKey' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE UNIQUE NONCLUSTERED INDEX [UX_JobsHot_QueueIdempotencyKey] \
    ON {schema}.[JobsHot] ([Queue], [IdempotencyKey]) WHERE [IdempotencyKey] IS NOT NULL;
IF EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'UX_JobsHot_IdempotencyKey' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    DROP INDEX [UX_JobsHot_IdempotencyKey] ON {schema}.[JobsHot];
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsArchive_FinishedAtUtc' AND [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]'))
    CREATE NONCLUSTERED INDEX [IX_JobsArchive_FinishedAtUtc] ON {schema}.[JobsArchive] ([FinishedAtUtc]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsDlq_FinishedAtUtc' AND [object_id] = OBJECT_ID(N'{schema}.[JobsDlq]'))
    CREATE NONCLUSTERED INDEX [IX_JobsDlq_FinishedAtUtc] ON {schema}.[JobsDlq] ([FinishedAtUtc]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsArchive_Queue' AND [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]'))
    CREATE NONCLUSTERED INDEX [IX_JobsArchive_Queue] ON {schema}.[JobsArchive] ([Queue]) INCLUDE ([FinishedAtUtc]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsDlq_Queue' AND [object_id] = OBJECT_ID(N'{schema}.[JobsDlq]'))
    CREATE NONCLUSTERED INDEX [IX_JobsDlq_Queue] ON {schema}.[JobsDlq] ([Queue]) INCLUDE ([FinishedAtUtc]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 1)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (1, SYSUTCDATETIME());
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 2)
BEGIN
    UPDATE {schema}.[JobsHot] SET [Status] = 3 WHERE [Status] = 0 AND [DueAtUtc] > SYSUTCDATETIME();
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (2, SYSUTCDATETIME());
END;
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 3)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (3, SYSUTCDATETIME());
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 6)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (6, SYSUTCDATETIME());
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 7)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (7, SYSUTCDATETIME());
IF OBJECT_ID(N'{schema}.[Schedules]', N'U') IS NULL
    CREATE TABLE {schema}.[Schedules] (
        [Name] NVARCHAR(200) COLLATE Latin1_General_BIN2 NOT NULL CONSTRAINT [PK_Schedules] PRIMARY KEY CLUSTERED,
        [Spec] NVARCHAR(200) COLLATE Latin1_General_BIN2 NOT NULL,
        [TimeZone] NVARCHAR(64) COLLATE Latin1_General_BIN2 NOT NULL,
        [GroupName] NVARCHAR(100) COLLATE Latin1_General_BIN2 NOT NULL,
        [NextTickUtc] DATETIME2(7) NULL,
        [LastEnqueuedTickUtc] DATETIME2(7) NULL,
        [Enabled] BIT NOT NULL CONSTRAINT [DF_Schedules_Enabled] DEFAULT (1),
        [Stale] BIT NOT NULL CONSTRAINT [DF_Schedules_Stale] DEFAULT (0),
        [CreatedAtUtc] DATETIME2(7) NOT NULL,
        [UpdatedAtUtc] DATETIME2(7) NOT NULL
    );
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 4)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (4, SYSUTCDATETIME());
IF OBJECT_ID(N'{schema}.[QueueLocks]', N'U') IS NULL
    CREATE TABLE {schema}.[QueueLocks] (
        [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
        [Kind] SMALLINT NOT NULL,
        [LastTakenAtUtc] DATETIME2(7) NULL,
        CONSTRAINT [PK_QueueLocks] PRIMARY KEY CLUSTERED ([Queue], [Kind])
    );
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 8)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (8, SYSUTCDATETIME());
IF COL_LENGTH(N'{schema}.[JobsHot]', N'ConcurrencyKey') IS NULL
    ALTER TABLE {schema}.[JobsHot] ADD [ConcurrencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL;
IF COL_LENGTH(N'{schema}.[JobsArchive]', N'ConcurrencyKey') IS NULL
    ALTER TABLE {schema}.[JobsArchive] ADD [ConcurrencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL;
IF COL_LENGTH(N'{schema}.[JobsDlq]', N'ConcurrencyKey') IS NULL
    ALTER TABLE {schema}.[JobsDlq] ADD [ConcurrencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL;
IF COL_LENGTH(N'{schema}.[Queues]', N'KeyMaxWorkers') IS NULL
    ALTER TABLE {schema}.[Queues] ADD [KeyMaxWorkers] INT NULL;
IF COL_LENGTH(N'{schema}.[Queues]', N'RateJobs') IS NULL
    ALTER TABLE {schema}.[Queues] ADD [RateJobs] INT NULL;
IF COL_LENGTH(N'{schema}.[Queues]', N'RatePerMs') IS NULL
    ALTER TABLE {schema}.[Queues] ADD [RatePerMs] BIGINT NULL;
IF COL_LENGTH(N'{schema}.[Queues]', N'RateByKey') IS NULL
    ALTER TABLE {schema}.[Queues] ADD [RateByKey] BIT NOT NULL CONSTRAINT [DF_Queues_RateByKey] DEFAULT (0);
IF OBJECT_ID(N'{schema}.[StartsLog]', N'U') IS NULL
    CREATE TABLE {schema}.[StartsLog] (
        [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
        [CKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL,
        [Stamp] DATETIME2(7) NOT NULL
    );
IF COL_LENGTH(N'{schema}.[StartsLog]', N'N') IS NULL
    ALTER TABLE {schema}.[StartsLog] ADD [N] BIGINT NOT NULL CONSTRAINT [DF_StartsLog_N] DEFAULT (0);
COMMIT TRANSACTION;";

/// Schema version 10 (issue 40, L7: the starts log numbered per bucket), a batch of its own run
/// last, under the `migrate` row of `Locks`: `StartsLog.N` (added by [`MIGRATE_OBJECTS`]: a
/// batch cannot name a column it adds) is an entry's ordinal in its bucket under the queue's
/// limit in force (the queue's queue-wide, its key's per key; 0 for a key-less entry under a
/// limit per key), so a window's count is two `TOP (1)` seeks of these indexes
/// (`claim::KEYS`, "The count"): `IX_StartsLog_QueueN (Queue, Stamp, N)` and
/// `IX_StartsLog_KeyN (Queue, CKey, Stamp, N)`. The entries an older version logged are
/// numbered once, when the version is recorded, in stamp order for each queue's limit.
pub(super) const MIGRATE_START_ORDINALS: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_StartsLog_QueueN' AND [object_id] = OBJECT_ID(N'{schema}.[StartsLog]'))
    CREATE NONCLUSTERED INDEX [IX_StartsLog_QueueN] ON {schema}.[StartsLog] ([Queue], [Stamp], [N]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_StartsLog_KeyN' AND [object_id] = OBJECT_ID(N'{schema}.[StartsLog]'))
    CREATE NONCLUSTERED INDEX [IX_StartsLog_KeyN] ON {schema}.[StartsLog] ([Queue], [CKey], [Stamp], [N]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 10)
BEGIN
    WITH r AS (
        SELECT
            s.[N],
            CASE
                WHEN ISNULL(q.[RateByKey], 0) = 1 AND s.[CKey] IS NULL THEN 0
                ELSE ROW_NUMBER() OVER (
                    PARTITION BY s.[Queue], CASE WHEN ISNULL(q.[RateByKey], 0) = 1 THEN s.[CKey] END
                    ORDER BY s.[Stamp] ASC
                )
            END AS [Rn]
        FROM {schema}.[StartsLog] AS s
        LEFT JOIN {schema}.[Queues] AS q ON q.[Name] = s.[Queue]
    )
    UPDATE r SET [N] = [Rn];
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (10, SYSUTCDATETIME());
END;
COMMIT TRANSACTION;";

/// Disables lock escalation on the three job tables (only where it is not disabled yet, so a
/// second run takes no schema lock). With the default (`TABLE`), a statement that holds about
/// 5,000 locks on one table (an `enqueue_many` of 10,000 jobs, a claim over many queues) would
/// be escalated to one table lock, and READPAST skips row locks only: every claimer would
/// stall behind it. A batch of its own: sqlfluff 4.5.0 cannot parse
/// `ALTER TABLE … SET (LOCK_ESCALATION = …)`, valid T-SQL since SQL Server 2008, so the
/// grammar check leaves out exactly this batch (see `tests/grammar.rs`).
pub(super) const MIGRATE_LOCK_ESCALATION: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
IF EXISTS (SELECT 1 FROM sys.tables WHERE [object_id] = OBJECT_ID(N'{schema}.[JobsHot]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[JobsHot] SET (LOCK_ESCALATION = DISABLE);
IF EXISTS (SELECT 1 FROM sys.tables \
    WHERE [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[JobsArchive] SET (LOCK_ESCALATION = DISABLE);
IF EXISTS (SELECT 1 FROM sys.tables WHERE [object_id] = OBJECT_ID(N'{schema}.[JobsDlq]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[JobsDlq] SET (LOCK_ESCALATION = DISABLE);
IF EXISTS (SELECT 1 FROM sys.tables \
    WHERE [object_id] = OBJECT_ID(N'{schema}.[StartsLog]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[StartsLog] SET (LOCK_ESCALATION = DISABLE);";

/// Schema version 9 (issue 25: concurrency keys, per-key caps, rate limits), a batch of its own
/// run right after [`MIGRATE_OBJECTS`], under the same `migrate` row of `Locks` in one
/// transaction: the indexes on the columns [`MIGRATE_OBJECTS`] adds (`ConcurrencyKey`, and the
/// `StartsLog` table it creates), which cannot be in that batch: SQL Server binds a batch's
/// columns when it compiles the batch, so a statement naming a column that an earlier
/// statement of the same batch adds to an existing table fails to compile (error 207).
///
/// - `IX_JobsHot_ActiveKey (Queue, ConcurrencyKey) WHERE Status IN (1, 2) AND ConcurrencyKey
///   IS NOT NULL`: the per-key running count of a keyed claim (a range seek on the queue, one
///   entry per running keyed job) and `stats`' busiest keys.
/// - `CX_StartsLog (Queue, Stamp)`, clustered: the rate window of a queue is one range seek
///   (`Queue = @Name AND Stamp > now - per`), and rescue's prune another.
pub(super) const MIGRATE_KEYS: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsHot_ActiveKey' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_ActiveKey] \
    ON {schema}.[JobsHot] ([Queue], [ConcurrencyKey]) WHERE [Status] IN (1, 2) AND [ConcurrencyKey] IS NOT NULL;
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'CX_StartsLog' AND [object_id] = OBJECT_ID(N'{schema}.[StartsLog]'))
    CREATE CLUSTERED INDEX [CX_StartsLog] ON {schema}.[StartsLog] ([Queue], [Stamp]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 9)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (9, SYSUTCDATETIME());
COMMIT TRANSACTION;";
