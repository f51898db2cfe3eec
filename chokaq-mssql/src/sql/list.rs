//! The statements of the list room: one page of each table, in id order.

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
