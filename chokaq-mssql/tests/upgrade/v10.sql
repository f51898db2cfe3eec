-- chokaq-mssql schema version 10: the migration batches of commit 4c9fc64, in the order they ran.
-- {schema} is the quoted schema, {schema_text} its bare name. Each batch starts with a "-- batch:" line.
-- batch: migrate_schema
SET XACT_ABORT ON;
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
END;
-- batch: migrate_locks
SET XACT_ABORT ON;
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
WHERE NOT EXISTS (SELECT 1 FROM {schema}.[Locks] AS l WITH (UPDLOCK, HOLDLOCK) WHERE l.[Name] = v.[Name]);
-- batch: migrate_objects
SET XACT_ABORT ON;
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
    ALTER TABLE {schema}.[JobsHot] ADD [ExpiredHolds] INT NOT NULL CONSTRAINT [DF_JobsHot_ExpiredHolds] DEFAULT (0);
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_Pending' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Pending] ON {schema}.[JobsHot] ([Queue], [Priority] DESC, [DueAtUtc], [Id]) WHERE [Status] = 0;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_Scheduled' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Scheduled] ON {schema}.[JobsHot] ([Queue], [DueAtUtc]) WHERE [Status] = 3;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_Fetched' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Fetched] ON {schema}.[JobsHot] ([UpdatedAtUtc]) INCLUDE ([Queue]) WHERE [Status] = 1;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_Processing' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Processing] ON {schema}.[JobsHot] ([HeartbeatUtc]) INCLUDE ([Queue], [Attempt], [MaxAttempts]) WHERE [Status] = 2;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_Held' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Held] ON {schema}.[JobsHot] ([HeartbeatUtc]) INCLUDE ([Queue]) WHERE [Status] = 1 AND [HeartbeatUtc] IS NOT NULL;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_Active' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_Active] ON {schema}.[JobsHot] ([Queue], [Status]) WHERE [Status] IN (1, 2);
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'UX_JobsHot_QueueIdempotencyKey' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE UNIQUE NONCLUSTERED INDEX [UX_JobsHot_QueueIdempotencyKey] ON {schema}.[JobsHot] ([Queue], [IdempotencyKey]) WHERE [IdempotencyKey] IS NOT NULL;
IF EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'UX_JobsHot_IdempotencyKey' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    DROP INDEX [UX_JobsHot_IdempotencyKey] ON {schema}.[JobsHot];
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsArchive_FinishedAtUtc' AND [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]'))
    CREATE NONCLUSTERED INDEX [IX_JobsArchive_FinishedAtUtc] ON {schema}.[JobsArchive] ([FinishedAtUtc]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsDlq_FinishedAtUtc' AND [object_id] = OBJECT_ID(N'{schema}.[JobsDlq]'))
    CREATE NONCLUSTERED INDEX [IX_JobsDlq_FinishedAtUtc] ON {schema}.[JobsDlq] ([FinishedAtUtc]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsArchive_Queue' AND [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]'))
    CREATE NONCLUSTERED INDEX [IX_JobsArchive_Queue] ON {schema}.[JobsArchive] ([Queue]) INCLUDE ([FinishedAtUtc]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsDlq_Queue' AND [object_id] = OBJECT_ID(N'{schema}.[JobsDlq]'))
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
COMMIT TRANSACTION;
-- batch: migrate_keys
SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_ActiveKey' AND [object_id] = OBJECT_ID(N'{schema}.[JobsHot]'))
    CREATE NONCLUSTERED INDEX [IX_JobsHot_ActiveKey] ON {schema}.[JobsHot] ([Queue], [ConcurrencyKey]) WHERE [Status] IN (1, 2) AND [ConcurrencyKey] IS NOT NULL;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'CX_StartsLog' AND [object_id] = OBJECT_ID(N'{schema}.[StartsLog]'))
    CREATE CLUSTERED INDEX [CX_StartsLog] ON {schema}.[StartsLog] ([Queue], [Stamp]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 9)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (9, SYSUTCDATETIME());
COMMIT TRANSACTION;
-- batch: migrate_lock_escalation
SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
IF EXISTS (SELECT 1 FROM sys.tables WHERE [object_id] = OBJECT_ID(N'{schema}.[JobsHot]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[JobsHot] SET (LOCK_ESCALATION = DISABLE);
IF EXISTS (SELECT 1 FROM sys.tables WHERE [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[JobsArchive] SET (LOCK_ESCALATION = DISABLE);
IF EXISTS (SELECT 1 FROM sys.tables WHERE [object_id] = OBJECT_ID(N'{schema}.[JobsDlq]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[JobsDlq] SET (LOCK_ESCALATION = DISABLE);
IF EXISTS (SELECT 1 FROM sys.tables WHERE [object_id] = OBJECT_ID(N'{schema}.[StartsLog]') AND [lock_escalation] <> 1)
    ALTER TABLE {schema}.[StartsLog] SET (LOCK_ESCALATION = DISABLE);
-- batch: migrate_workers
SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF OBJECT_ID(N'{schema}.[Workers]', N'U') IS NULL
    CREATE TABLE {schema}.[Workers] (
        [WorkerId] UNIQUEIDENTIFIER NOT NULL CONSTRAINT [PK_Workers] PRIMARY KEY CLUSTERED,
        [Host] NVARCHAR(255) NOT NULL,
        [Pid] BIGINT NOT NULL,
        [Queues] NVARCHAR(MAX) NOT NULL,
        [Concurrency] BIGINT NOT NULL,
        [StartedAtUtc] DATETIME2(7) NOT NULL,
        [LastSeenAtUtc] DATETIME2(7) NOT NULL
    );
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsArchive_FinishedAtUtcQueue' AND [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]'))
    CREATE NONCLUSTERED INDEX [IX_JobsArchive_FinishedAtUtcQueue] ON {schema}.[JobsArchive] ([FinishedAtUtc], [Queue]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 5)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (5, SYSUTCDATETIME());
COMMIT TRANSACTION;
-- batch: migrate_start_ordinals
SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_StartsLog_QueueN' AND [object_id] = OBJECT_ID(N'{schema}.[StartsLog]'))
    CREATE NONCLUSTERED INDEX [IX_StartsLog_QueueN] ON {schema}.[StartsLog] ([Queue], [Stamp], [N]);
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_StartsLog_KeyN' AND [object_id] = OBJECT_ID(N'{schema}.[StartsLog]'))
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
COMMIT TRANSACTION;
-- batch: migrate_uniques
SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF OBJECT_ID(N'{schema}.[Uniques]', N'U') IS NULL
    CREATE TABLE {schema}.[Uniques] (
        [UniqueKey] VARCHAR(64) COLLATE Latin1_General_BIN2 NOT NULL CONSTRAINT [PK_Uniques] PRIMARY KEY CLUSTERED,
        [JobId] BINARY(16) NOT NULL,
        [States] INT NOT NULL,
        [Settings] NVARCHAR(MAX) NOT NULL,
        [ExpiresAtUtc] DATETIME2(7) NULL,
        [CreatedAtUtc] DATETIME2(7) NOT NULL
    );
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_Uniques_JobId' AND [object_id] = OBJECT_ID(N'{schema}.[Uniques]'))
    CREATE NONCLUSTERED INDEX [IX_Uniques_JobId] ON {schema}.[Uniques] ([JobId]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 10)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (10, SYSUTCDATETIME());
COMMIT TRANSACTION;
