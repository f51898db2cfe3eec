//! Queue controls, purge, stats and the read-only job lookups (`get_job`, `list_jobs`).
//!
//! Optional filters are static SQL over NULL-able parameters (`@Queue IS NULL OR [Queue] =
//! @Queue`): one statement per table, whatever filters the caller sets.
//!
//! A job record (`get_job`, `list_*`) has the same columns from every table: `Loc` (0 = hot,
//! 1 = archive, 2 = dead), the columns every job table shares, then `Status`,
//! `CancelRequested`, `FinishedAtUtc` and `Reason`, typed NULLs (or 0) where a table has no
//! such column.

/// Queue control as an upsert, behind the queue's gate row: the `Kind` 0 row of
/// `[schema].[QueueLocks]` (inserted first if missing, autocommit), updated in the transaction
/// (an exclusive row lock), the row every claim naming the queue holds `Shared` (see the claim
/// batch, `sql/claim_batch.rs`). It waits for in-flight claims of the queue, and claims that
/// start later wait for it, so every claim sees the settings from before or from after the
/// change, never both. Only a principal with rights on the table can lock the row (schema
/// version 8; it was an app lock any login could hold). Under that lock: update the row,
/// insert it if nothing was updated (no MERGE, no key-range lock: two controls of one queue
/// take turns on the gate row, controls of different queues do not touch each other). A wait
/// longer than the session's lock timeout is error 1222 (retried).
///
/// Parameters: `@P1` queue, `@P2` op (1 pause, 2 resume, 3 activate, 4 deactivate,
/// 5 set max workers, 6 set zombie timeout, 7 set zombie policy, 8 set fetched timeout,
/// 9 set the per-key cap, 10 set the rate limit), `@P3` max workers, `@P4` the timeout in ms
/// (zombie for op 6, fetched for op 8), `@P5` zombie policy, `@P6` the per-key cap
/// (`KeyMaxWorkers`), `@P7` / `@P8` / `@P9` the rate limit (`RateJobs`, `RatePerMs`,
/// `RateByKey`; op 10 with all NULL clears the limit: `RateByKey` back to 0). The claims
/// read these under the same gate row, so a per-key cap or a rate limit binds every claim
/// that commits after this call returned. Returns the row.
pub(super) const CONTROL_QUEUE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Name VARCHAR(128) = @P1;
DECLARE @Op SMALLINT = @P2;
DECLARE @MaxWorkers INT = @P3;
DECLARE @ZombieTimeoutMs BIGINT = @P4;
DECLARE @ZombiePolicy SMALLINT = @P5;
DECLARE @KeyMaxWorkers INT = @P6;
DECLARE @RateJobs INT = @P7;
DECLARE @RatePerMs BIGINT = @P8;
DECLARE @RateByKey BIT = @P9;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
IF NOT EXISTS (SELECT 1 FROM {schema}.[QueueLocks] AS l WITH (NOLOCK) WHERE l.[Queue] = @Name AND l.[Kind] = 0)
    INSERT INTO {schema}.[QueueLocks] ([Queue], [Kind])
    SELECT @Name, k.[Kind]
    FROM (VALUES (0), (1)) AS k ([Kind])
    WHERE NOT EXISTS (
        SELECT 1
        FROM {schema}.[QueueLocks] AS l WITH (UPDLOCK, HOLDLOCK)
        WHERE l.[Queue] = @Name AND l.[Kind] = k.[Kind]
    );
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = @Now
FROM {schema}.[QueueLocks] AS l WITH (ROWLOCK)
WHERE l.[Queue] = @Name AND l.[Kind] = 0;
IF @@ROWCOUNT = 0
    THROW 51002, N'chokaq: a queue lock row is missing; retried', 1;
UPDATE q
SET
    q.[IsPaused] = CASE @Op WHEN 1 THEN 1 WHEN 2 THEN 0 ELSE q.[IsPaused] END,
    q.[IsActive] = CASE @Op WHEN 3 THEN 1 WHEN 4 THEN 0 ELSE q.[IsActive] END,
    q.[MaxWorkers] = CASE WHEN @Op = 5 THEN @MaxWorkers ELSE q.[MaxWorkers] END,
    q.[ZombieTimeoutMs] = CASE WHEN @Op = 6 THEN @ZombieTimeoutMs ELSE q.[ZombieTimeoutMs] END,
    q.[ZombiePolicy] = CASE WHEN @Op = 7 THEN @ZombiePolicy ELSE q.[ZombiePolicy] END,
    q.[FetchedTimeoutMs] = CASE WHEN @Op = 8 THEN @ZombieTimeoutMs ELSE q.[FetchedTimeoutMs] END,
    q.[KeyMaxWorkers] = CASE WHEN @Op = 9 THEN @KeyMaxWorkers ELSE q.[KeyMaxWorkers] END,
    q.[RateJobs] = CASE WHEN @Op = 10 THEN @RateJobs ELSE q.[RateJobs] END,
    q.[RatePerMs] = CASE WHEN @Op = 10 THEN @RatePerMs ELSE q.[RatePerMs] END,
    q.[RateByKey] = CASE WHEN @Op = 10 THEN ISNULL(@RateByKey, 0) ELSE q.[RateByKey] END,
    q.[UpdatedAtUtc] = @Now
FROM {schema}.[Queues] AS q WITH (FORCESEEK)
WHERE q.[Name] = @Name;
IF @@ROWCOUNT = 0
    INSERT INTO {schema}.[Queues] ([Name], [MaxWorkers], [IsPaused], [IsActive], [ZombieTimeoutMs], [ZombiePolicy], \
    [FetchedTimeoutMs], [KeyMaxWorkers], [RateJobs], [RatePerMs], [RateByKey], [CreatedAtUtc], [UpdatedAtUtc])
    VALUES (
        @Name,
        CASE WHEN @Op = 5 THEN @MaxWorkers END,
        CASE WHEN @Op = 1 THEN 1 ELSE 0 END,
        CASE WHEN @Op = 4 THEN 0 ELSE 1 END,
        CASE WHEN @Op = 6 THEN @ZombieTimeoutMs END,
        CASE WHEN @Op = 7 THEN @ZombiePolicy ELSE 0 END,
        CASE WHEN @Op = 8 THEN @ZombieTimeoutMs END,
        CASE WHEN @Op = 9 THEN @KeyMaxWorkers END,
        CASE WHEN @Op = 10 THEN @RateJobs END,
        CASE WHEN @Op = 10 THEN @RatePerMs END,
        CASE WHEN @Op = 10 THEN ISNULL(@RateByKey, 0) ELSE 0 END,
        @Now,
        @Now
    );
COMMIT TRANSACTION;
SELECT [Name], [MaxWorkers], [IsPaused], [IsActive], [ZombieTimeoutMs], [ZombiePolicy], \
    [FetchedTimeoutMs], [KeyMaxWorkers], [RateJobs], [RatePerMs], [RateByKey], [UpdatedAtUtc] \
    FROM {schema}.[Queues] WHERE [Name] = @Name;";

/// One queue's row (none when it has no control row). `@P1` queue.
pub(super) const QUEUE_SETTINGS: &str = "DECLARE @Name VARCHAR(128) = @P1;
SELECT [Name], [MaxWorkers], [IsPaused], [IsActive], [ZombieTimeoutMs], [ZombiePolicy], \
    [FetchedTimeoutMs], [KeyMaxWorkers], [RateJobs], [RatePerMs], [RateByKey], [UpdatedAtUtc] \
    FROM {schema}.[Queues] WHERE [Name] = @Name;";

/// Maintenance purges (`@Locked` = 1): the batch's transaction takes the `rescue` row of
/// `Locks` with `READPAST`; held by another instance, nothing is deleted and `Deleted` is -1.
macro_rules! purge_lock {
    () => {
        "IF @Locked = 1
BEGIN
    BEGIN TRANSACTION;
    UPDATE l
    SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
    FROM {schema}.[Locks] AS l WITH (ROWLOCK, READPAST)
    WHERE l.[Name] = 'rescue';
    IF @@ROWCOUNT = 0
    BEGIN
        ROLLBACK TRANSACTION;
        SELECT CAST(-1 AS BIGINT) AS [Deleted];
        RETURN;
    END;
END;
"
    };
}

/// The end of a purge batch: the maintenance transaction commits, then the count.
macro_rules! purge_commit {
    () => {
        "IF @Locked = 1
    COMMIT TRANSACTION;
SELECT @Deleted AS [Deleted];"
    };
}

/// One bounded purge batch of the archive: `DELETE TOP (@n)` in a loop of autocommitted
/// statements of at most 4,000 rows each, stopping at the batch size or at a short statement:
/// a purge batch (`PurgeParams::batch_size`, up to 100,000) is several short transactions,
/// none near lock escalation's 5,000 locks. `@P1` batch size, `@P2` older than (ms), `@P3` queue or NULL, `@P4`
/// kind or NULL, `@P5` locked: 1 for maintenance, whose batch (of `PurgeParams::batch_size`
/// rows, 1,000 by default) runs in one transaction holding the `rescue` row of `Locks`, taken
/// with `READPAST` (held elsewhere: nothing deleted, `Deleted` = -1). Returns `Deleted`.
pub(super) const PURGE_ARCHIVE: &str = concat!(
    "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @BatchSize INT = @P1;
DECLARE @OlderThanMs BIGINT = @P2;
DECLARE @Queue VARCHAR(128) = @P3;
DECLARE @Kind NVARCHAR(255) = @P4;
DECLARE @Locked BIT = @P5;
DECLARE @Cutoff DATETIME2(7) = DATEADD(MILLISECOND, -(@OlderThanMs % 1000), DATEADD(SECOND, -(@OlderThanMs / 1000), \
    SYSUTCDATETIME()));
DECLARE @Deleted BIGINT = 0;
DECLARE @Chunk INT;
DECLARE @Step INT;
",
    purge_lock!(),
    "WHILE @Deleted < @BatchSize
BEGIN
    SET @Chunk = CASE WHEN @BatchSize - @Deleted > 4000 THEN 4000 ELSE @BatchSize - @Deleted END;
    DELETE TOP (@Chunk)
    FROM {schema}.[JobsArchive]
    WHERE [FinishedAtUtc] < @Cutoff
        AND (@Queue IS NULL OR [Queue] = @Queue)
        AND (@Kind IS NULL OR [Kind] = @Kind);
    SET @Step = @@ROWCOUNT;
    SET @Deleted = @Deleted + @Step;
    IF @Step < @Chunk
        BREAK;
END;
",
    purge_commit!()
);

/// [`PURGE_ARCHIVE`] for the dead letters, with `@P5` reason or NULL and `@P6` locked.
pub(super) const PURGE_DLQ: &str = concat!(
    "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @BatchSize INT = @P1;
DECLARE @OlderThanMs BIGINT = @P2;
DECLARE @Queue VARCHAR(128) = @P3;
DECLARE @Kind NVARCHAR(255) = @P4;
DECLARE @Reason VARCHAR(32) = @P5;
DECLARE @Locked BIT = @P6;
DECLARE @Cutoff DATETIME2(7) = DATEADD(MILLISECOND, -(@OlderThanMs % 1000), DATEADD(SECOND, -(@OlderThanMs / 1000), \
    SYSUTCDATETIME()));
DECLARE @Deleted BIGINT = 0;
DECLARE @Chunk INT;
DECLARE @Step INT;
",
    purge_lock!(),
    "WHILE @Deleted < @BatchSize
BEGIN
    SET @Chunk = CASE WHEN @BatchSize - @Deleted > 4000 THEN 4000 ELSE @BatchSize - @Deleted END;
    DELETE TOP (@Chunk)
    FROM {schema}.[JobsDlq]
    WHERE [FinishedAtUtc] < @Cutoff
        AND (@Queue IS NULL OR [Queue] = @Queue)
        AND (@Kind IS NULL OR [Kind] = @Kind)
        AND (@Reason IS NULL OR [Reason] = @Reason);
    SET @Step = @@ROWCOUNT;
    SET @Deleted = @Deleted + @Step;
    IF @Step < @Chunk
        BREAK;
END;
",
    purge_commit!()
);

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

/// A filtered page of the hot table, keyset-paged on the clustered `Id` (UUID v7 bytes, so id
/// order is creation order). `@P1` limit (the caller asks one more to know if a next page
/// exists), `@P2` after id or NULL, `@P3` queue, `@P4` status (Pending, 0, also matches the
/// internal Scheduled state, 3), `@P5` kind, `@P6` tag,
/// `@P7` created from, `@P8` created to: every filter NULL when unset. `OPTION (RECOMPILE)`
/// so each combination of filters gets its own plan.
pub(super) const LIST_HOT: &str = "DECLARE @Limit INT = @P1;
DECLARE @After BINARY(16) = @P2;
DECLARE @Queue VARCHAR(128) = @P3;
DECLARE @Status SMALLINT = @P4;
DECLARE @Kind NVARCHAR(255) = @P5;
DECLARE @Tag NVARCHAR(100) = @P6;
DECLARE @CreatedFrom DATETIME2(7) = @P7;
DECLARE @CreatedTo DATETIME2(7) = @P8;
SELECT TOP (@Limit) 0 AS [Loc], t.[Id], t.[Queue], t.[Kind], t.[Payload], t.[Tags], t.[IdempotencyKey], \
    t.[Priority], t.[Attempt], t.[MaxAttempts], t.[Lease], t.[WorkerId], t.[HeartbeatUtc], t.[ScheduledAtUtc], \
    t.[CreatedAtUtc], t.[StartedAtUtc], t.[UpdatedAtUtc], t.[LastError], t.[CreatedBy], t.[ConcurrencyKey], t.[Status] AS [Status], \
    t.[CancelRequested] AS [CancelRequested], CAST(NULL AS DATETIME2(7)) AS [FinishedAtUtc], \
    CAST(NULL AS VARCHAR(32)) AS [Reason]
FROM {schema}.[JobsHot] AS t
WHERE (@After IS NULL OR t.[Id] > @After)
    AND (@Queue IS NULL OR t.[Queue] = @Queue)
    AND (@Status IS NULL OR t.[Status] = @Status OR (@Status = 0 AND t.[Status] = 3))
    AND (@Kind IS NULL OR t.[Kind] = @Kind)
    AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(t.[Tags]) AS g \
    WHERE g.[value] COLLATE Latin1_General_BIN2 = @Tag))
    AND (@CreatedFrom IS NULL OR t.[CreatedAtUtc] >= @CreatedFrom)
    AND (@CreatedTo IS NULL OR t.[CreatedAtUtc] < @CreatedTo)
ORDER BY t.[Id]
OPTION (RECOMPILE);";

/// [`LIST_HOT`] for the archive (`@P4`, the status, is declared and unused: every list
/// statement binds the same eight values).
pub(super) const LIST_ARCHIVE: &str = "DECLARE @Limit INT = @P1;
DECLARE @After BINARY(16) = @P2;
DECLARE @Queue VARCHAR(128) = @P3;
DECLARE @Status SMALLINT = @P4;
DECLARE @Kind NVARCHAR(255) = @P5;
DECLARE @Tag NVARCHAR(100) = @P6;
DECLARE @CreatedFrom DATETIME2(7) = @P7;
DECLARE @CreatedTo DATETIME2(7) = @P8;
SELECT TOP (@Limit) 1 AS [Loc], t.[Id], t.[Queue], t.[Kind], t.[Payload], t.[Tags], t.[IdempotencyKey], \
    t.[Priority], t.[Attempt], t.[MaxAttempts], t.[Lease], t.[WorkerId], t.[HeartbeatUtc], t.[ScheduledAtUtc], \
    t.[CreatedAtUtc], t.[StartedAtUtc], t.[UpdatedAtUtc], t.[LastError], t.[CreatedBy], t.[ConcurrencyKey], \
    CAST(NULL AS SMALLINT) AS [Status], CAST(0 AS BIT) AS [CancelRequested], t.[FinishedAtUtc] AS [FinishedAtUtc], \
    CAST(NULL AS VARCHAR(32)) AS [Reason]
FROM {schema}.[JobsArchive] AS t
WHERE (@After IS NULL OR t.[Id] > @After)
    AND (@Queue IS NULL OR t.[Queue] = @Queue)
    AND (@Kind IS NULL OR t.[Kind] = @Kind)
    AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(t.[Tags]) AS g \
    WHERE g.[value] COLLATE Latin1_General_BIN2 = @Tag))
    AND (@CreatedFrom IS NULL OR t.[CreatedAtUtc] >= @CreatedFrom)
    AND (@CreatedTo IS NULL OR t.[CreatedAtUtc] < @CreatedTo)
ORDER BY t.[Id]
OPTION (RECOMPILE);";

/// [`LIST_HOT`] for the dead letters (`@P4` unused, as in [`LIST_ARCHIVE`]).
pub(super) const LIST_DLQ: &str = "DECLARE @Limit INT = @P1;
DECLARE @After BINARY(16) = @P2;
DECLARE @Queue VARCHAR(128) = @P3;
DECLARE @Status SMALLINT = @P4;
DECLARE @Kind NVARCHAR(255) = @P5;
DECLARE @Tag NVARCHAR(100) = @P6;
DECLARE @CreatedFrom DATETIME2(7) = @P7;
DECLARE @CreatedTo DATETIME2(7) = @P8;
SELECT TOP (@Limit) 2 AS [Loc], t.[Id], t.[Queue], t.[Kind], t.[Payload], t.[Tags], t.[IdempotencyKey], \
    t.[Priority], t.[Attempt], t.[MaxAttempts], t.[Lease], t.[WorkerId], t.[HeartbeatUtc], t.[ScheduledAtUtc], \
    t.[CreatedAtUtc], t.[StartedAtUtc], t.[UpdatedAtUtc], t.[LastError], t.[CreatedBy], t.[ConcurrencyKey], \
    CAST(NULL AS SMALLINT) AS [Status], CAST(0 AS BIT) AS [CancelRequested], t.[FinishedAtUtc] AS [FinishedAtUtc], \
    t.[Reason] AS [Reason]
FROM {schema}.[JobsDlq] AS t
WHERE (@After IS NULL OR t.[Id] > @After)
    AND (@Queue IS NULL OR t.[Queue] = @Queue)
    AND (@Kind IS NULL OR t.[Kind] = @Kind)
    AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(t.[Tags]) AS g \
    WHERE g.[value] COLLATE Latin1_General_BIN2 = @Tag))
    AND (@CreatedFrom IS NULL OR t.[CreatedAtUtc] >= @CreatedFrom)
    AND (@CreatedTo IS NULL OR t.[CreatedAtUtc] < @CreatedTo)
ORDER BY t.[Id]
OPTION (RECOMPILE);";
