//! Statements of the test support (`TestSupport`, behind the crate's `testing` feature) and of
//! the conformance harness's database setup. Built with the others so that the grammar check
//! covers them; sent only by `testing.rs` and [`crate::MssqlBackend::ensure_database`].

/// The database clock.
pub(super) const DB_NOW: &str = "SELECT SYSUTCDATETIME() AS [Now];";

/// `TestSupport::add_starts`: `@P3` starts of queue `@P1`, key `@P2`, stamped `@P4`, numbered
/// after the bucket's last under the queue's limit (at most 1,000,000: six tables of ten
/// digits). Fails (50000 + a message) when the queue has no limit, a key-less start is asked for
/// under a limit per key, or `@P4` is earlier than the bucket's latest entry. Returns `Changed`.
pub(super) const ADD_STARTS: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Name VARCHAR(128) = @P1;
DECLARE @Key NVARCHAR(255) = @P2;
DECLARE @Count BIGINT = @P3;
DECLARE @At DATETIME2(7) = @P4;
DECLARE @Jobs INT;
DECLARE @ByKey BIT;
DECLARE @Last BIGINT;
DECLARE @LastStamp DATETIME2(7);
BEGIN TRANSACTION;
SELECT @Jobs = q.[RateJobs], @ByKey = q.[RateByKey]
FROM {schema}.[Queues] AS q WITH (UPDLOCK, HOLDLOCK)
WHERE q.[Name] = @Name;
IF @Jobs IS NULL
    THROW 51010, N'add_starts: the queue has no rate limit', 1;
IF @ByKey = 1 AND @Key IS NULL
    THROW 51010, N'add_starts: a key-less start is in no bucket of a by-key limit', 1;
SELECT TOP (1) @Last = s.[N], @LastStamp = s.[Stamp]
FROM {schema}.[StartsLog] AS s
WHERE s.[Queue] = @Name AND (@ByKey = 0 OR s.[CKey] = @Key)
ORDER BY s.[Stamp] DESC, s.[N] DESC;
IF @LastStamp > @At
    THROW 51010, N'add_starts: a stamp earlier than the bucket''s latest entry', 1;
WITH d AS (SELECT v.[D] FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS v ([D]))
INSERT INTO {schema}.[StartsLog] ([Queue], [CKey], [Stamp], [N])
SELECT TOP (@Count) @Name, @Key, @At, ISNULL(@Last, 0) + ROW_NUMBER() OVER (ORDER BY a.[D], b.[D], c.[D], e.[D], f.[D], g.[D])
FROM d AS a CROSS JOIN d AS b CROSS JOIN d AS c CROSS JOIN d AS e CROSS JOIN d AS f CROSS JOIN d AS g;
COMMIT TRANSACTION;
SELECT CAST(1 AS INT) AS [Changed];";

/// Forces fields of a hot job, bypassing every guard. `@P1` id, then for each field a
/// "set" flag and a value: `@P2/@P3` status, `@P4/@P5` attempt, `@P6/@P7` scheduled,
/// `@P8/@P9` heartbeat, `@P10/@P11` updated, `@P12/@P13` created; `@P14` the payload's raw
/// text, stored as is (NULL keeps it: how a test makes a row a read cannot decode, e.g.
/// nested past serde_json's recursion limit). `DueAtUtc` follows, and so
/// does the internal state of a job that is Pending afterwards: Scheduled (3) while its due
/// time is later than now, else Pending (0). Returns `Changed`.
pub(super) const FORCE: &str = "SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @SetStatus BIT = @P2;
DECLARE @Status SMALLINT = @P3;
DECLARE @SetAttempt BIT = @P4;
DECLARE @Attempt INT = @P5;
DECLARE @SetScheduled BIT = @P6;
DECLARE @Scheduled DATETIME2(7) = @P7;
DECLARE @SetHeartbeat BIT = @P8;
DECLARE @Heartbeat DATETIME2(7) = @P9;
DECLARE @SetUpdated BIT = @P10;
DECLARE @Updated DATETIME2(7) = @P11;
DECLARE @SetCreated BIT = @P12;
DECLARE @Created DATETIME2(7) = @P13;
DECLARE @RawPayload NVARCHAR(MAX) = @P14;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE {schema}.[JobsHot]
SET
    [Status] = CASE
        WHEN (CASE WHEN @SetStatus = 1 THEN @Status ELSE [Status] END) NOT IN (0, 3)
            THEN CASE WHEN @SetStatus = 1 THEN @Status ELSE [Status] END
        WHEN ISNULL(
            CASE WHEN @SetScheduled = 1 THEN @Scheduled ELSE [ScheduledAtUtc] END,
            CASE WHEN @SetCreated = 1 THEN @Created ELSE [CreatedAtUtc] END
        ) > @Now THEN 3
        ELSE 0
    END,
    [Attempt] = CASE WHEN @SetAttempt = 1 THEN @Attempt ELSE [Attempt] END,
    [ScheduledAtUtc] = CASE WHEN @SetScheduled = 1 THEN @Scheduled ELSE [ScheduledAtUtc] END,
    [HeartbeatUtc] = CASE WHEN @SetHeartbeat = 1 THEN @Heartbeat ELSE [HeartbeatUtc] END,
    [UpdatedAtUtc] = CASE WHEN @SetUpdated = 1 THEN @Updated ELSE [UpdatedAtUtc] END,
    [CreatedAtUtc] = CASE WHEN @SetCreated = 1 THEN @Created ELSE [CreatedAtUtc] END,
    [Payload] = ISNULL(@RawPayload, [Payload]),
    [DueAtUtc] = ISNULL(
        CASE WHEN @SetScheduled = 1 THEN @Scheduled ELSE [ScheduledAtUtc] END,
        CASE WHEN @SetCreated = 1 THEN @Created ELSE [CreatedAtUtc] END
    )
WHERE [Id] = @Id;
SELECT @@ROWCOUNT AS [Changed];";

/// Raw row counts per table for a JSON array of ids (`@P1`, 32-hex strings), in one
/// statement (under SNAPSHOT when the database allows it; the `SET` ends with the batch).
/// Returns `Id, Hot, Archive, Dead`.
pub(super) const PRESENCE_MANY: &str = "SET NOCOUNT ON;
DECLARE @Ids NVARCHAR(MAX) = @P1;
IF EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [snapshot_isolation_state] = 1)
    SET TRANSACTION ISOLATION LEVEL SNAPSHOT;
BEGIN TRANSACTION;
SELECT
    i.[Id],
    (SELECT COUNT_BIG(*) FROM {schema}.[JobsHot] AS h WHERE h.[Id] = i.[Id]) AS [Hot],
    (SELECT COUNT_BIG(*) FROM {schema}.[JobsArchive] AS a WHERE a.[Id] = i.[Id]) AS [Archive],
    (SELECT COUNT_BIG(*) FROM {schema}.[JobsDlq] AS d WHERE d.[Id] = i.[Id]) AS [Dead]
FROM (SELECT DISTINCT CONVERT(BINARY(16), CAST(j.[value] AS CHAR(32)), 2) AS [Id] FROM OPENJSON(@Ids) AS j) AS i;
COMMIT TRANSACTION;";

/// Kills the sessions of this backend's pool, found by their program name (`@P1`, unique
/// per backend instance), except the session running this. Needs `VIEW SERVER STATE` and
/// `ALTER ANY CONNECTION`. Returns `Killed`.
pub(super) const KILL_CONNECTIONS: &str = "SET NOCOUNT ON;
DECLARE @ProgramName NVARCHAR(128) = @P1;
DECLARE @Spid INT;
DECLARE @Killed INT = 0;
DECLARE @Cmd NVARCHAR(64);
DECLARE victims CURSOR LOCAL FAST_FORWARD FOR
    SELECT [session_id] FROM sys.dm_exec_sessions WHERE [program_name] = @ProgramName AND [session_id] <> @@SPID;
OPEN victims;
FETCH NEXT FROM victims INTO @Spid;
WHILE @@FETCH_STATUS = 0
BEGIN
    SET @Cmd = N'KILL ' + CAST(@Spid AS NVARCHAR(12));
    EXEC (@Cmd);
    SET @Killed = @Killed + 1;
    FETCH NEXT FROM victims INTO @Spid;
END;
CLOSE victims;
DEALLOCATE victims;
SELECT @Killed AS [Killed];";

/// Drops every object of the schema, then the schema.
pub(super) const DROP_SCHEMA: &str = "DROP TABLE IF EXISTS {schema}.[JobsHot];
DROP TABLE IF EXISTS {schema}.[JobsArchive];
DROP TABLE IF EXISTS {schema}.[JobsDlq];
DROP TABLE IF EXISTS {schema}.[Queues];
DROP TABLE IF EXISTS {schema}.[SchemaVersions];
DROP TABLE IF EXISTS {schema}.[Locks];
DROP TABLE IF EXISTS {schema}.[QueueLocks];
DROP TABLE IF EXISTS {schema}.[StartsLog];
DROP TABLE IF EXISTS {schema}.[Workers];
DROP TABLE IF EXISTS {schema}.[Schedules];
DROP SEQUENCE IF EXISTS {schema}.[LeaseSeq];
DROP SCHEMA IF EXISTS {schema};";

/// Creates database `{database}` if missing and sets its row-versioning options, only when
/// they differ (so a second run never kicks other sessions out). Used by the conformance suite
/// to run in three configurations: READ_COMMITTED_SNAPSHOT ON or OFF with
/// ALLOW_SNAPSHOT_ISOLATION ON, and both OFF (the on-premises default). `@P1` is 1 for RCSI
/// ON, `@P2` 1 for snapshot isolation ON. Needs CREATE DATABASE and ALTER on it. Returns
/// `Rcsi`, `Snapshot` (`snapshot_isolation_state`: 0 off, 1 on, 2 and 3 in transition).
pub(super) const ENSURE_TEST_DATABASE: &str = "DECLARE @Rcsi BIT = @P1;
DECLARE @AllowSnapshot BIT = @P2;
IF DB_ID(N'{database_text}') IS NULL
    CREATE DATABASE {database};
IF @AllowSnapshot = 1 AND EXISTS (SELECT 1 FROM sys.databases \
    WHERE [name] = N'{database_text}' AND [snapshot_isolation_state] = 0)
    ALTER DATABASE {database} SET ALLOW_SNAPSHOT_ISOLATION ON;
IF @AllowSnapshot = 0 AND EXISTS (SELECT 1 FROM sys.databases \
    WHERE [name] = N'{database_text}' AND [snapshot_isolation_state] = 1)
    ALTER DATABASE {database} SET ALLOW_SNAPSHOT_ISOLATION OFF;
IF @Rcsi = 1 AND EXISTS (SELECT 1 FROM sys.databases \
    WHERE [name] = N'{database_text}' AND [is_read_committed_snapshot_on] = 0)
    ALTER DATABASE {database} SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE;
IF @Rcsi = 0 AND EXISTS (SELECT 1 FROM sys.databases \
    WHERE [name] = N'{database_text}' AND [is_read_committed_snapshot_on] = 1)
    ALTER DATABASE {database} SET READ_COMMITTED_SNAPSHOT OFF WITH ROLLBACK IMMEDIATE;
SELECT CAST([is_read_committed_snapshot_on] AS BIT) AS [Rcsi], CAST([snapshot_isolation_state] AS INT) AS [Snapshot]
FROM sys.databases WHERE [name] = N'{database_text}';";
