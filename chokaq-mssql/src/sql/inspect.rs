//! The statements of the inspect room: stats and a job by id.
//!
//! A job record (`get_job`, `list_*`) has the same columns from every table: `Loc` (0 = hot,
//! 1 = archive, 2 = dead), the columns every job table shares, then `Status`,
//! `CancelRequested`, `FinishedAtUtc` and `Reason`, typed NULLs (or 0) where a table has no
//! such column.

/// Counts per queue and state, in ONE statement. The batch switches to SNAPSHOT isolation
/// when the database has `ALLOW_SNAPSHOT_ISOLATION ON` (a transaction-consistent view);
/// otherwise the single statement runs under READ COMMITTED, which is statement-consistent
/// when READ_COMMITTED_SNAPSHOT is ON, and a locking read (that can see a job mid-move)
/// when both are off (documented in docs/sqlserver.md). Returns the `IsSnapshot` flag and
/// the clock, then one row per queue.
///
/// Every queue with a job or a control row (`Queues`) is listed, with its control row's columns
/// (`Name` NULL when it has none); `Cancelled` counts the dead letters of reason `cancelled`.
/// Every count is `COUNT_BIG` (`BIGINT`), so no count overflows at 2^31 rows. Each branch
/// reads the narrowest index that holds its rows: the filtered `IX_JobsHot_Pending`,
/// `IX_JobsHot_Scheduled` and `IX_JobsHot_Active` for the hot table (Scheduled rows count as
/// Pending, and those already due count for `OldestDue`), `IX_JobsArchive_Queue` and
/// `IX_JobsDlq_Queue` (queue and finish time only) for the two history tables: the scans
/// still grow with the tables, but read a small fraction of their pages, which keeps the
/// snapshot short. The `SET` ends with the batch (`sp_executesql`).
///
/// `BusiestKeys` (issue 25) is each queue's busiest concurrency keys as a JSON array
/// `[{"k": key, "n": running}, …]` (NULL when none runs): the keys with the most Fetched +
/// Processing jobs, at most 5 (`chokaq_core::MAX_BUSIEST_KEYS`), most running first, ties by
/// key (binary collation order), a seek per queue on `IX_JobsHot_ActiveKey`. It is a
/// subquery of the same statement, so it reads the same snapshot as the counts.
pub(super) const STATS: &str = "SET NOCOUNT ON;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Snapshot BIT = 0;
IF EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [snapshot_isolation_state] = 1)
BEGIN
    SET TRANSACTION ISOLATION LEVEL SNAPSHOT;
    SET @Snapshot = 1;
END;
BEGIN TRANSACTION;
SELECT @Snapshot AS [IsSnapshot], @Now AS [Now];
SELECT y.[Queue], y.[Pending], y.[Fetched], y.[Processing], y.[Archived], y.[Dead], y.[Cancelled], y.[OldestDue],
    c.[Name], c.[MaxWorkers], c.[IsPaused], c.[IsActive], c.[ZombieTimeoutMs], c.[ZombiePolicy], c.[FetchedTimeoutMs],
    c.[KeyMaxWorkers], c.[RateJobs], c.[RatePerMs], c.[RateByKey], c.[UpdatedAtUtc],
    (
        SELECT TOP (5) b.[ConcurrencyKey] AS [k], COUNT_BIG(*) AS [n]
        FROM {schema}.[JobsHot] AS b
        WHERE b.[Queue] = y.[Queue] AND b.[Status] IN (1, 2) AND b.[ConcurrencyKey] IS NOT NULL
        GROUP BY b.[ConcurrencyKey]
        ORDER BY COUNT_BIG(*) DESC, b.[ConcurrencyKey] ASC
        FOR JSON PATH
    ) AS [BusiestKeys]
FROM (
SELECT
    x.[Queue],
    SUM(x.[Pending]) AS [Pending],
    SUM(x.[Fetched]) AS [Fetched],
    SUM(x.[Processing]) AS [Processing],
    SUM(x.[Archived]) AS [Archived],
    SUM(x.[Dead]) AS [Dead],
    SUM(x.[Cancelled]) AS [Cancelled],
    MIN(x.[OldestDue]) AS [OldestDue]
FROM (
    SELECT
        p.[Queue],
        COUNT_BIG(*) AS [Pending],
        CAST(0 AS BIGINT) AS [Fetched],
        CAST(0 AS BIGINT) AS [Processing],
        CAST(0 AS BIGINT) AS [Archived],
        CAST(0 AS BIGINT) AS [Dead],
        CAST(0 AS BIGINT) AS [Cancelled],
        MIN(CASE WHEN p.[DueAtUtc] <= @Now THEN p.[DueAtUtc] END) AS [OldestDue]
    FROM {schema}.[JobsHot] AS p
    WHERE p.[Status] = 0
    GROUP BY p.[Queue]
    UNION ALL
    SELECT s.[Queue], COUNT_BIG(*), 0, 0, 0, 0, 0, MIN(CASE WHEN s.[DueAtUtc] <= @Now THEN s.[DueAtUtc] END)
    FROM {schema}.[JobsHot] AS s
    WHERE s.[Status] = 3
    GROUP BY s.[Queue]
    UNION ALL
    SELECT
        h.[Queue],
        0,
        SUM(CASE WHEN h.[Status] = 1 THEN CAST(1 AS BIGINT) ELSE 0 END),
        SUM(CASE WHEN h.[Status] = 2 THEN CAST(1 AS BIGINT) ELSE 0 END),
        0,
        0,
        0,
        NULL
    FROM {schema}.[JobsHot] AS h
    WHERE h.[Status] IN (1, 2)
    GROUP BY h.[Queue]
    UNION ALL
    SELECT a.[Queue], 0, 0, 0, COUNT_BIG(*), 0, 0, NULL
    FROM {schema}.[JobsArchive] AS a
    GROUP BY a.[Queue]
    UNION ALL
    SELECT d.[Queue], 0, 0, 0, 0, COUNT_BIG(*), SUM(CASE WHEN d.[Reason] = 'cancelled' THEN CAST(1 AS BIGINT) ELSE 0 END),
        NULL
    FROM {schema}.[JobsDlq] AS d
    GROUP BY d.[Queue]
    UNION ALL
    SELECT q.[Name], 0, 0, 0, 0, 0, 0, NULL
    FROM {schema}.[Queues] AS q
) AS x
GROUP BY x.[Queue]
) AS y
LEFT JOIN {schema}.[Queues] AS c ON c.[Name] = y.[Queue]
ORDER BY y.[Queue];
COMMIT TRANSACTION;";

/// A job wherever it is, from ONE consistent view. `@P1` id. The batch reads under SNAPSHOT
/// when the database allows it, under READ COMMITTED when READ_COMMITTED_SNAPSHOT is ON (one
/// statement, one statement-level snapshot), and otherwise (both off, the on-premises default)
/// under SERIALIZABLE: the three key lookups hold their key(-range) locks to the end, so a
/// move between tables cannot slip between them (seen twice, or nowhere). The reader runs at
/// `DEADLOCK_PRIORITY LOW`: if it deadlocks with a move, it is the victim and is retried
/// (1205). The `SET`s end with the batch. At most one row; more would mean a broken invariant
/// and are reported.
pub(super) const GET_JOB: &str = "SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
IF EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [snapshot_isolation_state] = 1)
    SET TRANSACTION ISOLATION LEVEL SNAPSHOT;
ELSE IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [is_read_committed_snapshot_on] = 1)
    SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;
SET DEADLOCK_PRIORITY LOW;
BEGIN TRANSACTION;
SELECT 0 AS [Loc], h.[Id], h.[Queue], h.[Kind], h.[Payload], h.[Tags], h.[IdempotencyKey], h.[Priority], \
    h.[Attempt], h.[MaxAttempts], h.[Lease], h.[WorkerId], h.[HeartbeatUtc], h.[ScheduledAtUtc], h.[CreatedAtUtc], \
    h.[StartedAtUtc], h.[UpdatedAtUtc], h.[LastError], h.[CreatedBy], h.[ConcurrencyKey], h.[Status] AS [Status], \
    h.[CancelRequested] AS [CancelRequested], CAST(NULL AS DATETIME2(7)) AS [FinishedAtUtc], \
    CAST(NULL AS VARCHAR(32)) AS [Reason] FROM {schema}.[JobsHot] AS h WHERE h.[Id] = @Id
UNION ALL
SELECT 1 AS [Loc], a.[Id], a.[Queue], a.[Kind], a.[Payload], a.[Tags], a.[IdempotencyKey], a.[Priority], \
    a.[Attempt], a.[MaxAttempts], a.[Lease], a.[WorkerId], a.[HeartbeatUtc], a.[ScheduledAtUtc], a.[CreatedAtUtc], \
    a.[StartedAtUtc], a.[UpdatedAtUtc], a.[LastError], a.[CreatedBy], a.[ConcurrencyKey], CAST(NULL AS SMALLINT) AS [Status], \
    CAST(0 AS BIT) AS [CancelRequested], a.[FinishedAtUtc] AS [FinishedAtUtc], \
    CAST(NULL AS VARCHAR(32)) AS [Reason] FROM {schema}.[JobsArchive] AS a WHERE a.[Id] = @Id
UNION ALL
SELECT 2 AS [Loc], d.[Id], d.[Queue], d.[Kind], d.[Payload], d.[Tags], d.[IdempotencyKey], d.[Priority], \
    d.[Attempt], d.[MaxAttempts], d.[Lease], d.[WorkerId], d.[HeartbeatUtc], d.[ScheduledAtUtc], d.[CreatedAtUtc], \
    d.[StartedAtUtc], d.[UpdatedAtUtc], d.[LastError], d.[CreatedBy], d.[ConcurrencyKey], CAST(NULL AS SMALLINT) AS [Status], \
    CAST(0 AS BIT) AS [CancelRequested], d.[FinishedAtUtc] AS [FinishedAtUtc], \
    d.[Reason] AS [Reason] FROM {schema}.[JobsDlq] AS d WHERE d.[Id] = @Id;
COMMIT TRANSACTION;";
