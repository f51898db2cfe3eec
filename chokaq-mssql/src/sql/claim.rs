//! Enqueue and the claim: the two statements that put jobs in and hand them out.

/// Enqueue one or many jobs in one round trip.
///
/// `@P1` NVARCHAR(MAX): a JSON array of jobs, one object per job:
/// `{"o": ordinal, "id": "<32 hex>", "q": queue, "k": kind, "p": "<payload JSON text>",
/// "t": "<tags JSON text>"|null, "key": key|null, "pr": priority, "ma": max_attempts,
/// "at": "yyyy-mm-ddThh:mm:ss.fffffff"|null, "ds": delay seconds|null, "dn": delay nanos,
/// "by": created_by|null}`.
///
/// Idempotency: a key already held by a hot job returns that job's id (`Duplicate = 1`).
/// Concurrent enqueuers of one key serialise on the key-range lock that
/// `WITH (UPDLOCK, HOLDLOCK)` takes on the (possibly missing) index entry; the filtered
/// unique index `UX_JobsHot_IdempotencyKey` is the backstop (2601 → Conflict → retried).
/// Two jobs with one key in the same batch: the first is inserted, the rest get its id.
///
/// Returns one row per input job, in input order: `Ord, Id, Duplicate`.
pub(super) const ENQUEUE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Jobs NVARCHAR(MAX) = @P1;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @In TABLE (
    [Ord] INT NOT NULL PRIMARY KEY,
    [Id] BINARY(16) NOT NULL,
    [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
    [Kind] NVARCHAR(255) COLLATE Latin1_General_BIN2 NOT NULL,
    [Payload] NVARCHAR(MAX) NOT NULL,
    [Tags] NVARCHAR(MAX) NULL,
    [IdempotencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL,
    [Priority] INT NOT NULL,
    [MaxAttempts] INT NOT NULL,
    [ScheduledAtUtc] DATETIME2(7) NULL,
    [CreatedBy] NVARCHAR(255) NULL,
    [FirstOfKey] BIT NOT NULL
);
DECLARE @Inserted TABLE ([Id] BINARY(16) NOT NULL PRIMARY KEY);
INSERT INTO @In ([Ord], [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [MaxAttempts], \
    [ScheduledAtUtc], [CreatedBy], [FirstOfKey])
SELECT
    j.[Ord],
    CONVERT(BINARY(16), j.[Id], 2),
    j.[Queue],
    j.[Kind],
    j.[Payload],
    j.[Tags],
    j.[IdempotencyKey],
    j.[Priority],
    j.[MaxAttempts],
    CASE
        WHEN j.[At] IS NOT NULL THEN j.[At]
        WHEN j.[DelaySec] IS NOT NULL THEN DATEADD(NANOSECOND, ISNULL(j.[DelayNs], 0), DATEADD(SECOND, \
    j.[DelaySec], @Now))
    END,
    j.[CreatedBy],
    CASE
        WHEN j.[IdempotencyKey] IS NULL THEN 1
        WHEN j.[Ord] = MIN(j.[Ord]) OVER (PARTITION BY j.[IdempotencyKey] COLLATE Latin1_General_BIN2) THEN 1
        ELSE 0
    END
FROM OPENJSON(@Jobs) WITH (
    [Ord] INT '$.o',
    [Id] CHAR(32) '$.id',
    [Queue] VARCHAR(128) '$.q',
    [Kind] NVARCHAR(255) '$.k',
    [Payload] NVARCHAR(MAX) '$.p',
    [Tags] NVARCHAR(MAX) '$.t',
    [IdempotencyKey] NVARCHAR(255) '$.key',
    [Priority] INT '$.pr',
    [MaxAttempts] INT '$.ma',
    [At] DATETIME2(7) '$.at',
    [DelaySec] INT '$.ds',
    [DelayNs] INT '$.dn',
    [CreatedBy] NVARCHAR(255) '$.by'
) AS j;
BEGIN TRANSACTION;
INSERT INTO {schema}.[JobsHot] (
    [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Status], [Attempt], [MaxAttempts],
    [ScheduledAtUtc], [DueAtUtc], [CreatedAtUtc], [UpdatedAtUtc], [CancelRequested], [CreatedBy]
)
OUTPUT INSERTED.[Id] INTO @Inserted ([Id])
SELECT
    i.[Id], i.[Queue], i.[Kind], i.[Payload], i.[Tags], i.[IdempotencyKey], i.[Priority], 0, 0, i.[MaxAttempts],
    i.[ScheduledAtUtc], ISNULL(i.[ScheduledAtUtc], @Now), @Now, @Now, 0, i.[CreatedBy]
FROM @In AS i
WHERE i.[FirstOfKey] = 1
    AND (
        i.[IdempotencyKey] IS NULL
        OR NOT EXISTS (
            SELECT 1
            FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, HOLDLOCK)
            WHERE h.[IdempotencyKey] = i.[IdempotencyKey]
        )
    )
ORDER BY i.[Ord];
SELECT
    i.[Ord],
    CASE WHEN n.[Id] IS NOT NULL THEN n.[Id] ELSE h.[Id] END AS [Id],
    CAST(CASE WHEN n.[Id] IS NOT NULL THEN 0 ELSE 1 END AS BIT) AS [Duplicate]
FROM @In AS i
LEFT JOIN @Inserted AS n ON n.[Id] = i.[Id]
LEFT JOIN {schema}.[JobsHot] AS h ON i.[IdempotencyKey] IS NOT NULL AND h.[IdempotencyKey] = i.[IdempotencyKey]
ORDER BY i.[Ord];
COMMIT TRANSACTION;";

/// The claim: ONE `UPDATE … OUTPUT INSERTED` that takes due Pending jobs, preceded (in the
/// same transaction) by the queue gate.
///
/// Parameters: `@P1` JSON array of queue names, `@P2` worker id, `@P3` limit, `@P4` mode
/// (1 = reserve into Fetched, 2 = start into Processing).
///
/// 1. `@Q` gets the requested queues that are not paused or inactive. The queue rows are
///    read `WITH (HOLDLOCK)`: a shared key(-range) lock held to the end of the claim, which
///    never blocks another claimer (S is compatible with S and U) but makes a concurrent
///    `control_queue` (which needs X) wait, so a cap or a pause cannot appear in the middle
///    of a claim that has already decided the queue is uncapped or running.
/// 2. Capped queues only: their rows are locked `WITH (UPDLOCK, HOLDLOCK, ROWLOCK)`. U is
///    incompatible with U, so claims of ONE capped queue take turns here, from the count to
///    the commit. Uncapped queues never take this lock.
/// 3. For capped queues, the active jobs (Fetched + Processing) are counted
///    `WITH (READCOMMITTEDLOCK)`: a locking read of committed rows even when
///    READ_COMMITTED_SNAPSHOT is ON (a plain read under RCSI would count an old version).
///    Every transition that can raise a queue's active count is a claim, and claims of a
///    capped queue hold its U lock until they commit, so the count cannot go stale before
///    this claim commits: `Slots = MaxWorkers - Active` is exact, and the cap is strict with
///    RCSI ON or OFF.
/// 4. The UPDATE: for each queue, a bounded index seek (`TOP` inside `CROSS APPLY`, on
///    `IX_JobsHot_Pending`: Queue, Priority DESC, DueAtUtc, Id) reads at most
///    `min(limit, Slots)` rows `WITH (UPDLOCK, READPAST, ROWLOCK)`, skipping rows other
///    claimers hold; the outer `TOP (@Limit)` keeps the best across queues. Cost grows with
///    the number of requested queues and the limit, never with the backlog.
///
/// The lease is one `NEXT VALUE FOR` the sequence per claim: every job of this claim gets
/// it, and guarded writes match `(Id, Lease)`, so it fences per job and per claim.
pub(super) const CLAIM: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Queues NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Limit INT = @P3;
DECLARE @Mode SMALLINT = @P4;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Lease BIGINT;
DECLARE @Q TABLE (
    [Name] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL PRIMARY KEY,
    [MaxWorkers] INT NULL,
    [Slots] INT NULL
);
BEGIN TRANSACTION;
INSERT INTO @Q ([Name], [MaxWorkers])
SELECT r.[Name], q.[MaxWorkers]
FROM (SELECT DISTINCT CAST(j.[value] AS VARCHAR(128)) COLLATE Latin1_General_BIN2 AS [Name] FROM OPENJSON(@Queues) \
    AS j) AS r
LEFT JOIN {schema}.[Queues] AS q WITH (HOLDLOCK, ROWLOCK) ON q.[Name] = r.[Name]
WHERE q.[Name] IS NULL OR (q.[IsPaused] = 0 AND q.[IsActive] = 1);
IF EXISTS (SELECT 1 FROM @Q WHERE [MaxWorkers] IS NOT NULL)
BEGIN
    UPDATE t
    SET t.[MaxWorkers] = q.[MaxWorkers]
    FROM @Q AS t
    INNER JOIN {schema}.[Queues] AS q WITH (UPDLOCK, HOLDLOCK, ROWLOCK) ON q.[Name] = t.[Name]
    WHERE t.[MaxWorkers] IS NOT NULL;
    UPDATE t
    SET t.[Slots] = CASE WHEN t.[MaxWorkers] > a.[Active] THEN t.[MaxWorkers] - a.[Active] ELSE 0 END
    FROM @Q AS t
    CROSS APPLY (
        SELECT COUNT_BIG(*) AS [Active]
        FROM {schema}.[JobsHot] AS h WITH (READCOMMITTEDLOCK)
        WHERE h.[Queue] = t.[Name] AND h.[Status] IN (1, 2)
    ) AS a
    WHERE t.[MaxWorkers] IS NOT NULL;
END;
SET @Lease = NEXT VALUE FOR {schema}.[LeaseSeq];
UPDATE h
SET
    h.[Status] = @Mode,
    h.[WorkerId] = @WorkerId,
    h.[Lease] = @Lease,
    h.[Attempt] = CASE WHEN @Mode = 2 THEN h.[Attempt] + 1 ELSE h.[Attempt] END,
    h.[StartedAtUtc] = CASE WHEN @Mode = 2 THEN @Now ELSE h.[StartedAtUtc] END,
    h.[HeartbeatUtc] = CASE WHEN @Mode = 2 THEN @Now ELSE h.[HeartbeatUtc] END,
    h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id], INSERTED.[Queue], INSERTED.[Kind], INSERTED.[Payload], INSERTED.[Tags], \
    INSERTED.[IdempotencyKey], INSERTED.[Priority], INSERTED.[Attempt], INSERTED.[MaxAttempts], INSERTED.[Lease], \
    INSERTED.[WorkerId], INSERTED.[HeartbeatUtc], INSERTED.[ScheduledAtUtc], INSERTED.[CreatedAtUtc], \
    INSERTED.[StartedAtUtc], INSERTED.[UpdatedAtUtc], INSERTED.[LastError], INSERTED.[CreatedBy], INSERTED.[Status]
FROM {schema}.[JobsHot] AS h
INNER JOIN (
    SELECT TOP (@Limit) c.[Id], c.[Priority], c.[DueAtUtc]
    FROM @Q AS t
    CROSS APPLY (
        SELECT TOP (CASE WHEN t.[Slots] IS NULL OR t.[Slots] > @Limit THEN @Limit ELSE t.[Slots] END)
            j.[Id], j.[Priority], j.[DueAtUtc]
        FROM {schema}.[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK)
        WHERE j.[Queue] = t.[Name] AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now
        ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC
    ) AS c
    ORDER BY c.[Priority] DESC, c.[DueAtUtc] ASC, c.[Id] ASC
) AS p ON p.[Id] = h.[Id]
WHERE h.[Status] = 0;
COMMIT TRANSACTION;";

#[cfg(test)]
mod tests {
    use super::super::Statements;

    #[test]
    fn claim_is_one_update_with_the_right_hints() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.claim;
        assert_eq!(c.matches("UPDATE h").count(), 1, "one claim UPDATE");
        assert!(c.contains("OUTPUT INSERTED.[Id]"));
        assert!(c.contains("WITH (UPDLOCK, READPAST, ROWLOCK)"));
        assert!(c.contains("CROSS APPLY"));
        assert!(c.contains("WITH (READCOMMITTEDLOCK)"));
        assert!(c.contains("WITH (UPDLOCK, HOLDLOCK, ROWLOCK)"));
        assert!(c.contains("NEXT VALUE FOR [chokaq].[LeaseSeq]"));
        assert!(c.contains("ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC"));
        assert!(!c.contains("ROW_NUMBER"), "no window over every candidate");
    }
}
