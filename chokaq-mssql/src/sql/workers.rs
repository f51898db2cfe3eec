//! The workers table (live worker processes), finished-jobs throughput, and the migration
//! batch that creates the table: schema version 5, self-contained (run after the others).

/// Schema version 5, under the `migrate` row of `Locks` in one transaction: the `Workers`
/// table (one row per running worker process, upserted with its heartbeat) and an index on
/// the archive's `(FinishedAtUtc, Queue)`: throughput reads a range of it and nothing else.
pub(super) const MIGRATE_WORKERS: &str = "SET XACT_ABORT ON;
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
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_JobsArchive_FinishedAtUtcQueue' AND [object_id] = OBJECT_ID(N'{schema}.[JobsArchive]'))
    CREATE NONCLUSTERED INDEX [IX_JobsArchive_FinishedAtUtcQueue] ON {schema}.[JobsArchive] ([FinishedAtUtc], [Queue]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 5)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (5, SYSUTCDATETIME());
COMMIT TRANSACTION;";

/// Upserts a worker's row: `@P1` worker id, `@P2` host, `@P3` pid, `@P4` queues (a JSON array),
/// `@P5` concurrency. The first registration sets `StartedAtUtc`; every one sets
/// `LastSeenAtUtc`. Update first, insert when no row was there, in one serializable
/// transaction (no MERGE).
pub(super) const REGISTER_WORKER: &str = "SET NOCOUNT ON;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P1;
DECLARE @Host NVARCHAR(255) = @P2;
DECLARE @Pid BIGINT = @P3;
DECLARE @Queues NVARCHAR(MAX) = @P4;
DECLARE @Concurrency BIGINT = @P5;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
BEGIN TRANSACTION;
UPDATE {schema}.[Workers] WITH (UPDLOCK, SERIALIZABLE)
SET [Host] = @Host, [Pid] = @Pid, [Queues] = @Queues, [Concurrency] = @Concurrency, [LastSeenAtUtc] = @Now
WHERE [WorkerId] = @WorkerId;
IF @@ROWCOUNT = 0
    INSERT INTO {schema}.[Workers] ([WorkerId], [Host], [Pid], [Queues], [Concurrency], [StartedAtUtc], \
        [LastSeenAtUtc])
    VALUES (@WorkerId, @Host, @Pid, @Queues, @Concurrency, @Now, @Now);
COMMIT TRANSACTION;";

/// `@P1` worker id. Returns `Deleted`.
pub(super) const DEREGISTER_WORKER: &str = "SET NOCOUNT ON;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P1;
DELETE FROM {schema}.[Workers] WHERE [WorkerId] = @WorkerId;
SELECT @@ROWCOUNT AS [Deleted];";

/// Every worker row, newest start first.
pub(super) const LIST_WORKERS: &str = "SELECT [WorkerId], [Host], [Pid], [Queues], [Concurrency], [StartedAtUtc], \
    [LastSeenAtUtc] FROM {schema}.[Workers] ORDER BY [StartedAtUtc] DESC, [WorkerId];";

/// `@P1` stale after (ms): deletes rows last seen before now minus that. Returns `Deleted`.
pub(super) const PRUNE_WORKERS: &str = "SET NOCOUNT ON;
DECLARE @StaleMs BIGINT = @P1;
DECLARE @Cutoff DATETIME2(7) = DATEADD(MILLISECOND, -(@StaleMs % 1000), DATEADD(SECOND, -(@StaleMs / 1000), \
    SYSUTCDATETIME()));
DELETE FROM {schema}.[Workers] WHERE [LastSeenAtUtc] < @Cutoff;
SELECT @@ROWCOUNT AS [Deleted];";

/// Per minute and queue over the last `@P1` ms: jobs archived as done (through
/// `IX_JobsArchive_FinishedAtUtcQueue`, a covering range), failures dead-lettered (cancels
/// left out) and failed attempts waiting for a retry (the hot table: live jobs only). Minutes
/// are counted from a fixed epoch, so each is whole. `$queue` narrows each branch to `@Queue`.
macro_rules! throughput {
    ($declare:literal, $queue:literal) => {
        concat!(
            "SET NOCOUNT ON;
DECLARE @WindowMs BIGINT = @P1;
",
            $declare,
            "DECLARE @Epoch DATETIME2(7) = '2000-01-01T00:00:00';
DECLARE @Since DATETIME2(7) = DATEADD(MILLISECOND, -(@WindowMs % 1000), DATEADD(SECOND, -(@WindowMs / 1000), \
    SYSUTCDATETIME()));
SELECT m.[Queue], m.[Minute], SUM(m.[F]) AS [Finished], SUM(m.[D]) AS [Failed], SUM(m.[R]) AS [Retried]
FROM (
    SELECT a.[Queue], DATEADD(MINUTE, DATEDIFF(MINUTE, @Epoch, a.[FinishedAtUtc]), @Epoch) AS [Minute],
        CAST(1 AS BIGINT) AS [F], CAST(0 AS BIGINT) AS [D], CAST(0 AS BIGINT) AS [R]
    FROM {schema}.[JobsArchive] AS a
    WHERE a.[FinishedAtUtc] >= @Since",
            $queue,
            "
    UNION ALL
    SELECT d.[Queue], DATEADD(MINUTE, DATEDIFF(MINUTE, @Epoch, d.[FinishedAtUtc]), @Epoch), 0, 1, 0
    FROM {schema}.[JobsDlq] AS d
    WHERE d.[FinishedAtUtc] >= @Since AND d.[Reason] <> 'cancelled'",
            $queue,
            "
    UNION ALL
    SELECT h.[Queue], DATEADD(MINUTE, DATEDIFF(MINUTE, @Epoch, h.[UpdatedAtUtc]), @Epoch), 0, 0, 1
    FROM {schema}.[JobsHot] AS h
    WHERE h.[Status] IN (0, 3) AND h.[Attempt] > 0 AND h.[LastError] IS NOT NULL AND h.[UpdatedAtUtc] >= @Since",
            $queue,
            "
) AS m
GROUP BY m.[Minute], m.[Queue]
ORDER BY m.[Minute], m.[Queue];"
        )
    };
}

/// Every queue.
pub(super) const THROUGHPUT_ALL: &str = throughput!("", "");

/// Queue `@P2` (the same ranges, the queue checked in the index).
pub(super) const THROUGHPUT_QUEUE: &str = throughput!("DECLARE @Queue VARCHAR(128) = @P2;\n", " AND [Queue] = @Queue");

/// Test support: `@P1` worker id, `@P2` last seen. Returns `Changed`.
pub(super) const FORCE_WORKER_SEEN: &str = "SET NOCOUNT ON;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P1;
DECLARE @LastSeen DATETIME2(7) = @P2;
UPDATE {schema}.[Workers] SET [LastSeenAtUtc] = @LastSeen WHERE [WorkerId] = @WorkerId;
SELECT @@ROWCOUNT AS [Changed];";

/// Test support: `@P1` id, `@P2` finish time of an archived job. Returns `Changed`.
pub(super) const FORCE_FINISHED_AT: &str = "SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Finished DATETIME2(7) = @P2;
UPDATE {schema}.[JobsArchive] SET [FinishedAtUtc] = @Finished WHERE [Id] = @Id;
SELECT @@ROWCOUNT AS [Changed];";
