//! The guarded writes of a claimed job: `start`, `heartbeat`, `complete`, `fail`, `release`,
//! plus `rescue`, `cancel` and `requeue_dead`. Every move between tables is
//! `DELETE … OUTPUT DELETED … INTO <target>` inside one `SET XACT_ABORT ON` transaction.
//!
//! The lease-list statements take `@P1`, a JSON array `[{"id": "<32 hex>", "lease": n}, …]`
//! read with `OPENJSON`, and `@P2`, the worker id. The guard is Id + Lease + WorkerId + Status.
//! Every read of the hot table here is `FORCESEEK` (on the primary key, or on the index of
//! the state it looks for): whatever the optimizer estimates for the JSON list, no plan can
//! scan the table under update locks.
//!
//! Held jobs (issue 24): a job claimed with `ClaimMode::Hold` is Fetched with a heartbeat, and
//! its worker may run it before its start is recorded. So `heartbeat`, `complete` and `fail`
//! take a Fetched row as well as a Processing one, and count a Fetched row's run as `start`
//! would have (`Attempt + 1`); `start` is repeatable; a cancel of a held job is a request; a
//! held job expires by its queue's zombie timeout, and `ExpiredHolds` counts its expiries.

/// Fetched → Processing (`Attempt + 1`), then returns the ids Processing under these leases
/// and this worker: the ones this call started and the ones a start with the same lease
/// already had (a repeated `start`, whose first answer was lost, is done again and writes
/// nothing: the attempt is counted once). One transaction, so a row this call started is
/// still its own when the ids are read.
pub(super) const START: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
BEGIN TRANSACTION;
UPDATE h
SET h.[Status] = 2, h.[Attempt] = h.[Attempt] + 1, h.[StartedAtUtc] = @Now, h.[HeartbeatUtc] \
    = @Now, h.[UpdatedAtUtc] = @Now
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId;
SELECT h.[Id]
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 2 AND h.[WorkerId] = @WorkerId;
COMMIT TRANSACTION;";

/// Bumps `HeartbeatUtc` of Fetched or Processing jobs still held. Returns `Id,
/// CancelRequested`.
pub(super) const HEARTBEAT: &str = "SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE h
SET h.[HeartbeatUtc] = @Now, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id], INSERTED.[CancelRequested]
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] IN (1, 2) AND h.[WorkerId] = @WorkerId;";

/// Fetched or Processing → archive: `DELETE … OUTPUT DELETED … INTO JobsArchive`, one
/// statement in one `XACT_ABORT` transaction. A Fetched row (held, its start not recorded) is
/// archived as if started first: `Attempt + 1`, `StartedAtUtc` now when it has none. Then
/// returns the ids now in the archive under these leases and this worker: a repeated
/// `complete` with the lease that archived the job (a client retry after a lost answer, or two
/// copies racing) reports it done again and writes nothing twice, while another or a stale
/// lease matches no archive row and is lost. Only `complete` writes the archive, and every
/// lease is unique, so (Id, Lease) names exactly one completion.
pub(super) const COMPLETE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
BEGIN TRANSACTION;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt] + CASE WHEN DELETED.[Status] = 1 THEN 1 ELSE 0 END, \
    DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], \
    DELETED.[CreatedAtUtc], ISNULL(DELETED.[StartedAtUtc], @Now), @Now, DELETED.[LastError], DELETED.[CreatedBy], @Now, \
    DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsArchive] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] IN (1, 2) AND h.[WorkerId] = @WorkerId;
SELECT a.[Id]
FROM {schema}.[JobsArchive] AS a
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON a.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND a.[Lease] = l.[Lease]
WHERE a.[WorkerId] = @WorkerId;
COMMIT TRANSACTION;";

/// Ends a Processing attempt that did not succeed, in one transaction. A held Fetched job (its
/// start not recorded) is started first in the same transaction (`Attempt + 1`, as `start`
/// would have counted its run), and the rules below then apply to that effective attempt: a
/// retry dead-letters it `failed` when no attempt is left, a snooze leaves its attempt as it
/// was, a dead letter files the counted attempt.
///
/// Parameters: `@P1` id (BINARY(16)), `@P2` lease, `@P3` worker, `@P4` action
/// (0 = retry, 1 = snooze, 2 = dead-letter), `@P5`/`@P6` delay seconds / nanoseconds,
/// `@P7` error text (NULL keeps the last one), `@P8` dead-letter reason.
///
/// Retry and snooze put the job back to Pending (`WorkerId` cleared, due after the delay:
/// stored Scheduled, `Status` 3, when that is later than now), with `Outcome` 1 or 2; a retry
/// with no attempts left, and the dead-letter action, move it to `JobsDlq` with
/// `DELETE … OUTPUT DELETED … INTO` and `Outcome` 3.
///
/// An accepted cancel is final (`docs/contract.md`, states and transitions): a retry or
/// snooze of a job whose `CancelRequested` is set never puts it back; the row is read again
/// under an update lock (so the flag cannot change before the move) and dead-lettered with
/// reason `cancelled`, which the call reports. A dead-letter action keeps its own reason.
///
/// When the guard matches nothing, the call may repeat one that already wrote its outcome:
/// the hot row with this id and lease whose `Outcome` says retried or snoozed (still
/// Pending or Scheduled: the claim that would replace the lease clears `Outcome`), or the
/// dead letter with this id, lease and worker that `fail` wrote (`Outcome` 3; cancel and
/// rescue leave it NULL). That outcome is reported again, read from the row, and nothing is
/// written; anything else is a lost lease.
///
/// Returns `Result` (0 = lease lost, 1 = retried, 2 = snoozed, 3 = dead-lettered),
/// `DueAtUtc`, `Reason`, `Repeated` (1 when the outcome was already there).
pub(super) const FAIL: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Lease BIGINT = @P2;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P3;
DECLARE @Action SMALLINT = @P4;
DECLARE @DelaySec INT = @P5;
DECLARE @DelayNs INT = @P6;
DECLARE @Error NVARCHAR(MAX) = @P7;
DECLARE @Reason VARCHAR(32) = @P8;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Due DATETIME2(7) = DATEADD(NANOSECOND, @DelayNs, DATEADD(SECOND, @DelaySec, @Now));
DECLARE @Result INT = 0;
DECLARE @Repeated BIT = 0;
BEGIN TRANSACTION;
UPDATE h
SET h.[Status] = 2, h.[Attempt] = h.[Attempt] + 1, h.[StartedAtUtc] = @Now, h.[HeartbeatUtc] = @Now, \
    h.[UpdatedAtUtc] = @Now
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 1;
IF @Action IN (0, 1)
BEGIN
    UPDATE h
    SET
        h.[Status] = CASE WHEN @Due > @Now THEN 3 ELSE 0 END,
        h.[WorkerId] = NULL,
        h.[HeartbeatUtc] = NULL,
        h.[ScheduledAtUtc] = @Due,
        h.[DueAtUtc] = @Due,
        h.[UpdatedAtUtc] = @Now,
        h.[LastError] = CASE WHEN @Action = 0 THEN ISNULL(@Error, h.[LastError]) ELSE h.[LastError] END,
        h.[Attempt] = CASE WHEN @Action = 1 AND h.[Attempt] > 0 THEN h.[Attempt] - 1 ELSE h.[Attempt] END,
        h.[Outcome] = @Action + 1
    FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
    WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2
        AND h.[CancelRequested] = 0
        AND (@Action = 1 OR h.[Attempt] < h.[MaxAttempts]);
    IF @@ROWCOUNT = 1
        SET @Result = @Action + 1;
    ELSE
        SELECT @Reason = 'cancelled'
        FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, FORCESEEK)
        WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2
            AND h.[CancelRequested] = 1;
END;
IF @Result = 0
BEGIN
    DELETE h
    OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], \
    DELETED.[IdempotencyKey], DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], \
    DELETED.[WorkerId], DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], \
    DELETED.[StartedAtUtc], @Now, ISNULL(@Error, DELETED.[LastError]), DELETED.[CreatedBy], @Now, @Reason, 3, \
    DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [Outcome], [ConcurrencyKey])
    FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
    WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2;
    IF @@ROWCOUNT = 1
        SET @Result = 3;
END;
IF @Result = 0
BEGIN
    SELECT @Result = h.[Outcome], @Due = h.[DueAtUtc]
    FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
    WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[Status] IN (0, 3) AND h.[Outcome] IN (1, 2);
    IF @Result = 0
        SELECT @Result = 3, @Reason = d.[Reason]
        FROM {schema}.[JobsDlq] AS d WITH (FORCESEEK)
        WHERE d.[Id] = @Id AND d.[Lease] = @Lease AND d.[WorkerId] = @WorkerId AND d.[Outcome] = 3;
    IF @Result <> 0
        SET @Repeated = 1;
END;
COMMIT TRANSACTION;
SELECT @Result AS [Result], @Due AS [DueAtUtc], @Reason AS [Reason], @Repeated AS [Repeated];";

/// Fetched → Pending for leases still held (`HeartbeatUtc` cleared: no longer held); the
/// attempt is unchanged. An accepted cancel is final: a held job whose `CancelRequested` is
/// set is not put back but moved to `JobsDlq` (reason `cancelled`), read first under an update
/// lock so the flag cannot change before the move. One transaction. Returns the ids of both.
pub(super) const RELEASE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Released TABLE ([Id] BINARY(16) NOT NULL);
DECLARE @Cancelled TABLE ([Id] BINARY(16) NOT NULL PRIMARY KEY);
BEGIN TRANSACTION;
UPDATE h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[HeartbeatUtc] = NULL, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id] INTO @Released ([Id])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId AND h.[CancelRequested] = 0;
INSERT INTO @Cancelled ([Id])
SELECT DISTINCT h.[Id]
FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK)
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId AND h.[CancelRequested] = 1;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @Cancelled AS c ON c.[Id] = h.[Id]
WHERE h.[Status] = 1 AND h.[CancelRequested] = 1;
COMMIT TRANSACTION;
SELECT r.[Id] FROM @Released AS r
UNION ALL
SELECT c.[Id] FROM @Cancelled AS c;";

/// Maintenance, one instance at a time: the `rescue` row of `[schema].[Locks]`, updated
/// `WITH (ROWLOCK, READPAST)` (its `LastTakenAtUtc` records the run) and so held until the
/// commit. A second instance skips the locked row, updates nothing and returns `Ran = 0` at
/// once instead of waiting. Only a role with `UPDATE` on the schema's `Locks` table can hold
/// that row, unlike an app lock, which any login can take (issue 16, finding 4). No row (a
/// schema not migrated to version 3) also returns `Ran = 0`; the backend warns when rescue
/// has not run for several calls in a row.
///
/// Parameters: `@P1` default fetched timeout (ms), `@P2` default zombie timeout (ms) (each
/// for queues whose `Queues` row sets none), `@P3` limit,
/// capped at 4,000 rows of each kind per call, fewer row locks than lock escalation would
/// ever consider, whatever `RescueParams::limit` says (the next call moves the rest), `@P4`
/// `chokaq_core::MAX_EXPIRED_HOLDS`.
/// Expired reserved Fetched jobs (no heartbeat; older than their queue's `FetchedTimeoutMs` or
/// the default) go back to Pending: a `FORCESEEK` range seek on `IX_JobsHot_Fetched
/// (UpdatedAtUtc) WHERE Status = 1` up to the latest cutoff any queue can have, then checked
/// against their own queue's.
/// Held Fetched jobs (a heartbeat: their handler may be running) expire by the zombie timeout
/// instead, from their last heartbeat: a `FORCESEEK` range seek on `IX_JobsHot_Held
/// (HeartbeatUtc) WHERE Status = 1 AND HeartbeatUtc IS NOT NULL`, as for zombies below. The
/// zombie policy does not apply to them: one whose cancel was accepted goes to `JobsDlq` as
/// `cancelled`, one expiring for the `@P4`-th time (`ExpiredHolds + 1`) as `zombie` with
/// the error "held N times by workers that stopped before its start was recorded" (both
/// counted in `ZombiesDead`); any other goes back to Pending with its attempt unspent and
/// `ExpiredHolds + 1` (counted in `FetchedReleased`). Zombies (Processing, heartbeat older
/// than their queue's `ZombieTimeoutMs` or the default) are found by a `FORCESEEK` range seek
/// on `IX_JobsHot_Processing (HeartbeatUtc) WHERE Status = 2` up to the latest cutoff any
/// queue can have (the smallest timeout), oldest heartbeat first, then checked against their
/// own queue's cutoff; a row without a heartbeat falls back to `UpdatedAtUtc`. They go back to
/// Pending when attempts remain, the queue's policy is Retry (0) and no cancel was accepted,
/// else to `JobsDlq`: reason `cancelled` when `CancelRequested` is set (an accepted cancel is
/// final), else `zombie`. The three reads take `UPDLOCK, READPAST, ROWLOCK`, as the claim
/// does: rows locked by others are skipped.
///
/// Last, the starts log of rate limits (issue 25) is pruned: per queue that has entries
/// (found `READPAST`, so an uncommitted claim's entries are never waited for), only when this
/// call can take, without waiting (`READPAST`), the queue's gate row `UPDLOCK` (so no
/// `control_queue` can change its rate limit meanwhile; claims share the gate) and its cap row
/// `XLOCK` (the row every counting claimer of a rate-limited queue holds from before it stamps
/// its starts until it commits, so no claim is between its stamp and its count): a queue
/// with a rate limit loses the entries at or before now minus its window (no claim stamped
/// after this commits can count them), a queue without one loses them all. A queue whose rows
/// are held is left for the next call. The rows stay held to the commit, right after.
/// Returns `Ran, FetchedReleased, ZombiesRetried, ZombiesDead`.
pub(super) const RESCUE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @FetchedTimeoutMs BIGINT = @P1;
DECLARE @DefaultZombieMs BIGINT = @P2;
DECLARE @Limit INT = CASE WHEN @P3 > 4000 THEN 4000 ELSE @P3 END;
DECLARE @MaxExpiredHolds INT = @P4;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @MinFetchedMs BIGINT;
DECLARE @FetchedCutoff DATETIME2(7);
DECLARE @MinZombieMs BIGINT;
DECLARE @ZombieCutoff DATETIME2(7);
DECLARE @FetchedReleased INT = 0;
DECLARE @ZombiesRetried INT = 0;
DECLARE @ZombiesDead INT = 0;
DECLARE @Z TABLE ([Id] BINARY(16) NOT NULL PRIMARY KEY, [Retry] BIT NOT NULL);
DECLARE @H TABLE ([Id] BINARY(16) NOT NULL PRIMARY KEY, [Dead] BIT NOT NULL);
DECLARE @PruneQueue VARCHAR(128);
DECLARE @PrunePerMs BIGINT;
DECLARE @Got BIGINT;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = @Now
FROM {schema}.[Locks] AS l WITH (ROWLOCK, READPAST)
WHERE l.[Name] = 'rescue';
IF @@ROWCOUNT = 0
BEGIN
    ROLLBACK TRANSACTION;
    SELECT CAST(0 AS BIT) AS [Ran], 0 AS [FetchedReleased], 0 AS [ZombiesRetried], 0 AS [ZombiesDead];
    RETURN;
END;
SELECT @MinFetchedMs = MIN(v.[Ms])
FROM (
    SELECT @FetchedTimeoutMs AS [Ms]
    UNION ALL
    SELECT q.[FetchedTimeoutMs] FROM {schema}.[Queues] AS q WHERE q.[FetchedTimeoutMs] IS NOT NULL
) AS v;
SET @FetchedCutoff = DATEADD(MILLISECOND, -(@MinFetchedMs % 1000), DATEADD(SECOND, -(@MinFetchedMs / 1000), @Now));
UPDATE TOP (@Limit) h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[UpdatedAtUtc] = @Now
FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
LEFT JOIN {schema}.[Queues] AS q ON q.[Name] = h.[Queue]
WHERE h.[Status] = 1
    AND h.[UpdatedAtUtc] < @FetchedCutoff
    AND h.[UpdatedAtUtc] < DATEADD(
        MILLISECOND,
        -(ISNULL(q.[FetchedTimeoutMs], @FetchedTimeoutMs) % 1000),
        DATEADD(SECOND, -(ISNULL(q.[FetchedTimeoutMs], @FetchedTimeoutMs) / 1000), @Now)
    )
    AND h.[HeartbeatUtc] IS NULL;
SET @FetchedReleased = @@ROWCOUNT;
SELECT @MinZombieMs = MIN(v.[Ms])
FROM (
    SELECT @DefaultZombieMs AS [Ms]
    UNION ALL
    SELECT q.[ZombieTimeoutMs] FROM {schema}.[Queues] AS q WHERE q.[ZombieTimeoutMs] IS NOT NULL
) AS v;
SET @ZombieCutoff = DATEADD(MILLISECOND, -(@MinZombieMs % 1000), DATEADD(SECOND, -(@MinZombieMs / 1000), @Now));
INSERT INTO @H ([Id], [Dead])
SELECT TOP (@Limit)
    h.[Id],
    CASE WHEN h.[CancelRequested] = 1 OR h.[ExpiredHolds] + 1 >= @MaxExpiredHolds THEN 1 ELSE 0 END
FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
LEFT JOIN {schema}.[Queues] AS q ON q.[Name] = h.[Queue]
WHERE h.[Status] = 1
    AND h.[HeartbeatUtc] IS NOT NULL
    AND h.[HeartbeatUtc] < @ZombieCutoff
    AND h.[HeartbeatUtc] < DATEADD(
        MILLISECOND,
        -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) % 1000),
        DATEADD(SECOND, -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) / 1000), @Now)
    )
ORDER BY h.[HeartbeatUtc] ASC;
UPDATE h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[HeartbeatUtc] = NULL, h.[ExpiredHolds] = h.[ExpiredHolds] + 1, \
    h.[UpdatedAtUtc] = @Now
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @H AS x ON x.[Id] = h.[Id]
WHERE x.[Dead] = 0 AND h.[Status] = 1 AND h.[CancelRequested] = 0;
SET @FetchedReleased = @FetchedReleased + @@ROWCOUNT;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    CASE WHEN DELETED.[CancelRequested] = 1 THEN DELETED.[LastError] ELSE CONCAT(N'held ', \
    DELETED.[ExpiredHolds] + 1, N' times by workers that stopped before its start was recorded') END, \
    DELETED.[CreatedBy], @Now, CASE WHEN DELETED.[CancelRequested] = 1 THEN 'cancelled' ELSE 'zombie' END, \
    DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @H AS x ON x.[Id] = h.[Id]
WHERE x.[Dead] = 1 AND h.[Status] = 1;
SET @ZombiesDead = @@ROWCOUNT;
INSERT INTO @Z ([Id], [Retry])
SELECT TOP (@Limit)
    h.[Id],
    CASE
        WHEN h.[CancelRequested] = 0 AND h.[Attempt] < h.[MaxAttempts] AND ISNULL(q.[ZombiePolicy], 0) = 0 THEN 1
        ELSE 0
    END
FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
LEFT JOIN {schema}.[Queues] AS q ON q.[Name] = h.[Queue]
WHERE h.[Status] = 2
    AND (h.[HeartbeatUtc] IS NULL OR h.[HeartbeatUtc] < @ZombieCutoff)
    AND ISNULL(h.[HeartbeatUtc], h.[UpdatedAtUtc]) < DATEADD(
        MILLISECOND,
        -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) % 1000),
        DATEADD(SECOND, -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) / 1000), @Now)
    )
ORDER BY h.[HeartbeatUtc] ASC;
UPDATE h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[HeartbeatUtc] = NULL, h.[UpdatedAtUtc] = @Now
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @Z AS z ON z.[Id] = h.[Id]
WHERE z.[Retry] = 1 AND h.[Status] = 2 AND h.[CancelRequested] = 0;
SET @ZombiesRetried = @@ROWCOUNT;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, CASE WHEN DELETED.[CancelRequested] = 1 THEN 'cancelled' \
    ELSE 'zombie' END, DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @Z AS z ON z.[Id] = h.[Id]
WHERE z.[Retry] = 0 AND h.[Status] = 2;
SET @ZombiesDead = @ZombiesDead + @@ROWCOUNT;
SET @PruneQueue = (SELECT MIN(s.[Queue]) FROM {schema}.[StartsLog] AS s WITH (READPAST));
WHILE @PruneQueue IS NOT NULL
BEGIN
    SET @Got = 0;
    SELECT @Got = COUNT_BIG(*)
    FROM {schema}.[QueueLocks] AS l WITH (UPDLOCK, ROWLOCK, READPAST)
    WHERE l.[Queue] = @PruneQueue AND l.[Kind] = 0;
    IF @Got = 1
        SELECT @Got = COUNT_BIG(*)
        FROM {schema}.[QueueLocks] AS l WITH (XLOCK, ROWLOCK, READPAST)
        WHERE l.[Queue] = @PruneQueue AND l.[Kind] = 1;
    IF @Got = 1
    BEGIN
        SET @PrunePerMs = NULL;
        SELECT @PrunePerMs = q.[RatePerMs]
        FROM {schema}.[Queues] AS q WITH (FORCESEEK)
        WHERE q.[Name] = @PruneQueue AND q.[RateJobs] IS NOT NULL;
        DELETE s
        FROM {schema}.[StartsLog] AS s WITH (ROWLOCK, READPAST, FORCESEEK)
        WHERE s.[Queue] = @PruneQueue
            AND (
                @PrunePerMs IS NULL
                OR s.[Stamp] <= DATEADD(MILLISECOND, -(@PrunePerMs % 1000), DATEADD(SECOND, -(@PrunePerMs / 1000), @Now))
            );
    END;
    SET @PruneQueue = (SELECT MIN(s.[Queue]) FROM {schema}.[StartsLog] AS s WITH (READPAST) WHERE s.[Queue] > @PruneQueue);
END;
COMMIT TRANSACTION;
SELECT CAST(1 AS BIT) AS [Ran], @FetchedReleased AS [FetchedReleased], @ZombiesRetried AS [ZombiesRetried], \
    @ZombiesDead AS [ZombiesDead];";

/// Dead-letters ONE claimed row that the backend could not decode (issue 16, finding 1): the
/// claim decodes each row on its own, keeps the good ones, and sends this for each bad one,
/// fenced by id, lease, worker and a claimed state (Fetched or Processing), so it can only
/// move the row this claim just leased. Reason `failed`, `LastError` the decoding error
/// (`@P4`, never the payload). `@P1` id, `@P2` lease, `@P3` worker. Returns `Moved` (0 or 1).
pub(super) const DEAD_LETTER_UNDECODABLE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Lease BIGINT = @P2;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P3;
DECLARE @Error NVARCHAR(MAX) = @P4;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Moved INT;
BEGIN TRANSACTION;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    @Error, DELETED.[CreatedBy], @Now, 'failed', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] IN (1, 2);
SET @Moved = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @Moved AS [Moved];";

/// Cancels a live job. `@P1` id. Pending, Scheduled or reserved Fetched (`HeartbeatUtc` NULL):
/// moved to `JobsDlq` (reason `cancelled`) by `DELETE … OUTPUT DELETED … INTO`; Processing or
/// held Fetched (a heartbeat: its worker may be running it): `CancelRequested = 1`, a request
/// its worker sees in the heartbeat.
/// Returns `Result` (0 = not live, 1 = cancelled, 2 = requested).
///
/// Lock order: a claim (and the promotion) locks a job's entry in `IX_JobsHot_Pending` (or
/// `IX_JobsHot_Scheduled`) first, then its clustered row; a plain `DELETE` by id would take
/// them the other way round and could deadlock with a claim. So cancel first reads where the
/// job is without locking it, then locks that index entry (`UPDLOCK`, the index named), and
/// only then deletes by id. If the job moved in between, the index read locks nothing and
/// the `DELETE`/`UPDATE` that follow still decide on the row's state then; the only deadlock
/// left is that narrow race, and it is retried (1205).
pub(super) const CANCEL: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Result INT = 0;
DECLARE @Status SMALLINT;
DECLARE @Queue VARCHAR(128);
DECLARE @Priority INT;
DECLARE @Due DATETIME2(7);
DECLARE @Seen INT;
BEGIN TRANSACTION;
SELECT @Status = h.[Status], @Queue = h.[Queue], @Priority = h.[Priority], @Due = h.[DueAtUtc]
FROM {schema}.[JobsHot] AS h
WHERE h.[Id] = @Id;
IF @Status = 0
    SELECT @Seen = COUNT(*)
    FROM {schema}.[JobsHot] AS p WITH (UPDLOCK, ROWLOCK, INDEX([IX_JobsHot_Pending]))
    WHERE p.[Queue] = @Queue AND p.[Priority] = @Priority AND p.[DueAtUtc] = @Due AND p.[Id] = @Id AND p.[Status] = 0;
IF @Status = 3
    SELECT @Seen = COUNT(*)
    FROM {schema}.[JobsHot] AS p WITH (UPDLOCK, ROWLOCK, INDEX([IX_JobsHot_Scheduled]))
    WHERE p.[Queue] = @Queue AND p.[DueAtUtc] = @Due AND p.[Id] = @Id AND p.[Status] = 3;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
WHERE h.[Id] = @Id AND (h.[Status] IN (0, 3) OR (h.[Status] = 1 AND h.[HeartbeatUtc] IS NULL));
IF @@ROWCOUNT = 1
    SET @Result = 1;
IF @Result = 0
BEGIN
    UPDATE {schema}.[JobsHot]
    SET [CancelRequested] = 1, [UpdatedAtUtc] = @Now
    WHERE [Id] = @Id AND ([Status] = 2 OR ([Status] = 1 AND [HeartbeatUtc] IS NOT NULL));
    IF @@ROWCOUNT = 1
        SET @Result = 2;
END;
COMMIT TRANSACTION;
SELECT @Result AS [Result];";

/// Dead letter → Pending (due now: `Status` 0, `ScheduledAtUtc` cleared), same id, priority
/// and key, attempt 0, `ExpiredHolds` 0 (a fresh row): `DELETE … OUTPUT DELETED … INTO
/// JobsHot` in one transaction; `Outcome` stays NULL, so no `fail` of the old lease can report
/// anything for the requeued job. A live job of the SAME QUEUE holding the key (keys are
/// scoped per queue: the unique index is `UX_JobsHot_QueueIdempotencyKey (Queue,
/// IdempotencyKey)`) makes the insert fail with 2601 (→ Conflict) and the whole move rolls
/// back; a job of another queue with that key does not. `@P1` id. Returns `Moved` (0 or 1).
pub(super) const REQUEUE_DEAD: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Moved INT;
BEGIN TRANSACTION;
DELETE d
OUTPUT
    DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey],
    DELETED.[Priority], 0, DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[CreatedAtUtc], @Now, \
    DELETED.[LastError],
    DELETED.[CreatedBy], 0, DELETED.[CreatedAtUtc], 0, 0, DELETED.[ConcurrencyKey]
INTO {schema}.[JobsHot] (
    [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey],
    [Priority], [Attempt], [MaxAttempts], [Lease], [CreatedAtUtc], [UpdatedAtUtc], [LastError],
    [CreatedBy], [Status], [DueAtUtc], [CancelRequested], [ExpiredHolds], [ConcurrencyKey]
)
FROM {schema}.[JobsDlq] AS d WITH (FORCESEEK)
WHERE d.[Id] = @Id;
SET @Moved = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @Moved AS [Moved];";

#[cfg(test)]
mod tests {
    use super::super::Statements;

    fn at(sql: &str, what: &str) -> usize {
        sql.find(what).unwrap_or_else(|| panic!("missing: {what}"))
    }

    #[test]
    fn moves_are_delete_output_into_under_xact_abort() {
        let st = Statements::new("chokaq").unwrap();
        for (name, sql, target) in [
            ("complete", &st.complete, "[chokaq].[JobsArchive]"),
            ("fail", &st.fail, "[chokaq].[JobsDlq]"),
            ("cancel", &st.cancel, "[chokaq].[JobsDlq]"),
            ("rescue", &st.rescue, "[chokaq].[JobsDlq]"),
            ("requeue_dead", &st.requeue_dead, "[chokaq].[JobsHot]"),
            ("dead_letter_undecodable", &st.dead_letter_undecodable, "[chokaq].[JobsDlq]"),
        ] {
            assert!(sql.starts_with("SET XACT_ABORT ON;"), "{name}");
            assert!(sql.contains("BEGIN TRANSACTION;"), "{name}");
            assert!(sql.contains(&format!("INTO {target}")), "{name}");
            assert!(sql.contains("DELETE "), "{name}");
        }
        assert!(st.migrate_objects.contains("SET LOCK_TIMEOUT 30000"));
        assert!(st.purge_archive.contains("DELETE TOP (@Chunk)"));
        assert!(st.enqueue.contains("WITH (UPDLOCK, HOLDLOCK, FORCESEEK)"));
        assert!(st.control_queue.contains("FROM [chokaq].[QueueLocks] AS l WITH (ROWLOCK)"));
    }

    /// Item 2: a repeated `complete` with the lease that archived the job reports it done; the
    /// lookup matches id AND lease AND worker, so another or a stale lease stays lost.
    #[test]
    fn a_repeated_complete_reports_done_only_for_the_lease_that_archived_it() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.complete;
        assert!(c.contains(
            "SELECT a.[Id]\nFROM [chokaq].[JobsArchive] AS a\nINNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', \
             [Lease] BIGINT '$.lease') AS l ON a.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND a.[Lease] = l.[Lease]\n\
             WHERE a.[WorkerId] = @WorkerId;"
        ));
        assert!(at(c, "DELETE h") < at(c, "SELECT a.[Id]"), "the lookup sees this call's own move too");
    }

    /// Item 2 for `fail`: the first call records its outcome (`Outcome` 1 retried, 2 snoozed in
    /// the hot row, 3 dead-lettered in the dead letter); a repeat with the same lease reads it
    /// back by id AND lease (and worker for the dead letter) and writes nothing.
    #[test]
    fn a_repeated_fail_reports_the_outcome_that_stands() {
        let st = Statements::new("chokaq").unwrap();
        let f = &st.fail;
        assert!(f.contains("h.[Outcome] = @Action + 1"), "retry records 1, snooze 2");
        assert!(f.contains("DELETED.[CreatedBy], @Now, @Reason, 3, DELETED.[ConcurrencyKey] INTO [chokaq].[JobsDlq]"));
        assert!(f.contains("[FinishedAtUtc], [Reason], [Outcome], [ConcurrencyKey])"));
        let repeat = &f[at(f, "SELECT @Result = h.[Outcome], @Due = h.[DueAtUtc]")..];
        assert!(repeat
            .contains("WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[Status] IN (0, 3) AND h.[Outcome] IN (1, 2);"));
        assert!(repeat.contains(
            "SELECT @Result = 3, @Reason = d.[Reason]\n        FROM [chokaq].[JobsDlq] AS d WITH (FORCESEEK)\n        \
             WHERE d.[Id] = @Id AND d.[Lease] = @Lease AND d.[WorkerId] = @WorkerId AND d.[Outcome] = 3;"
        ));
        // The repeat path only reads.
        let repeat_block = &repeat[..at(repeat, "COMMIT TRANSACTION;")];
        for write in ["UPDATE ", "DELETE ", "INSERT "] {
            assert!(!repeat_block.contains(write), "a repeated fail writes nothing: {write}");
        }
        assert!(f.ends_with(
            "SELECT @Result AS [Result], @Due AS [DueAtUtc], @Reason AS [Reason], @Repeated AS [Repeated];"
        ));
        // Only fail's own dead letters can be read back: cancel and rescue leave Outcome NULL.
        for (name, sql) in [("cancel", &st.cancel), ("rescue", &st.rescue)] {
            assert!(!sql.contains("[Outcome]"), "{name}");
        }
        // A retry or snooze due later goes to Scheduled.
        assert!(f.contains("h.[Status] = CASE WHEN @Due > @Now THEN 3 ELSE 0 END,"));
    }

    /// Issue 11 item 1: an accepted cancel is final. A retry or snooze of a job whose cancel
    /// was accepted never puts it back: the hot-table update requires `CancelRequested = 0`,
    /// and the dead-letter move that follows writes reason `cancelled` (read under an update
    /// lock, so the flag cannot change in between), which the call returns.
    #[test]
    fn a_retry_or_snooze_of_a_cancelled_job_dead_letters_it_as_cancelled() {
        let st = Statements::new("chokaq").unwrap();
        let f = &st.fail;
        let update = at(f, "h.[Outcome] = @Action + 1");
        let guard =
            "WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2\n        \
                     AND h.[CancelRequested] = 0\n        AND (@Action = 1 OR h.[Attempt] < h.[MaxAttempts]);";
        assert!(f[update..].starts_with(&format!(
            "h.[Outcome] = @Action + 1\n    FROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)\n    {guard}"
        )));
        let cancelled = at(
            f,
            "    ELSE\n        SELECT @Reason = 'cancelled'\n        FROM [chokaq].[JobsHot] AS h WITH (UPDLOCK, FORCESEEK)\n        \
             WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2\n            \
             AND h.[CancelRequested] = 1;",
        );
        let delete = at(f, "DELETE h");
        assert!(update < cancelled && cancelled < delete, "decided before the move");
        // The move writes @Reason and the result row reports it.
        assert!(f.contains("DELETED.[CreatedBy], @Now, @Reason, 3, DELETED.[ConcurrencyKey] INTO [chokaq].[JobsDlq]"));
        assert!(
            f.contains("WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2;\n")
        );
        assert!(f.ends_with("@Reason AS [Reason], @Repeated AS [Repeated];"));
        // Nothing in fail clears the request any more.
        assert!(!f.contains("[CancelRequested] = 0,"), "a retry no longer clears the request");
        // Rescue: a zombie whose cancel was accepted is never retried; it is dead-lettered as
        // cancelled, whatever the queue's policy or the attempts left.
        let r = &st.rescue;
        assert!(r.contains(
            "WHEN h.[CancelRequested] = 0 AND h.[Attempt] < h.[MaxAttempts] AND ISNULL(q.[ZombiePolicy], 0) = 0 THEN 1"
        ));
        assert!(r.contains("WHERE z.[Retry] = 1 AND h.[Status] = 2 AND h.[CancelRequested] = 0;"));
        assert!(r.contains("CASE WHEN DELETED.[CancelRequested] = 1 THEN 'cancelled' ELSE 'zombie' END"));
        assert!(!r.contains("h.[CancelRequested] = 0\nFROM"), "the retry no longer clears the request");
        assert!(!r.contains("[CancelRequested] = 0, "));
    }

    /// Issue 16 finding 1: an undecodable claimed row is dead-lettered on its own, fenced by
    /// the lease this claim gave it, with the decoding error as its last error.
    #[test]
    fn an_undecodable_row_is_dead_lettered_by_id_and_lease() {
        let st = Statements::new("chokaq").unwrap();
        let d = &st.dead_letter_undecodable;
        assert!(d.contains(
            "WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] IN (1, 2);"
        ));
        assert!(d.contains(
            "DELETED.[StartedAtUtc], @Now, @Error, DELETED.[CreatedBy], @Now, 'failed', DELETED.[ConcurrencyKey] INTO \
             [chokaq].[JobsDlq]"
        ));
        assert!(d.contains("FROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)"));
        assert!(d.ends_with("SELECT @Moved AS [Moved];"));
        assert_eq!(d.matches("DELETE h").count(), 1, "one row, never a batch");
    }

    /// Item 11: no read of the hot table in a write can become a scan under U/X locks.
    #[test]
    fn every_write_to_the_hot_table_seeks() {
        let st = Statements::new("chokaq").unwrap();
        for (name, sql) in [
            ("start", &st.start),
            ("heartbeat", &st.heartbeat),
            ("complete", &st.complete),
            ("release", &st.release),
            ("fail", &st.fail),
            ("rescue", &st.rescue),
            ("cancel", &st.cancel),
            ("claim", &st.claim),
            ("enqueue", &st.enqueue),
            ("dead_letter_undecodable", &st.dead_letter_undecodable),
        ] {
            for (i, _) in sql.match_indices("[chokaq].[JobsHot] AS ") {
                let line = &sql[i..sql[i..].find('\n').map_or(sql.len(), |n| i + n)];
                let seeks = line.contains("FORCESEEK") || line.contains("INDEX([IX_JobsHot_");
                // cancel's first read takes no lock at all (it only learns where the job is).
                let unlocked_lookup = name == "cancel" && line == "[chokaq].[JobsHot] AS h";
                assert!(seeks || unlocked_lookup, "{name}: {line}");
            }
        }
    }

    /// Item 13: cancel locks the claim-index entry before the clustered row, as a claim does.
    #[test]
    fn cancel_locks_the_index_entry_before_the_row() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.cancel;
        let read = at(c, "SELECT @Status = h.[Status]");
        let pending = at(c, "WITH (UPDLOCK, ROWLOCK, INDEX([IX_JobsHot_Pending]))");
        let scheduled = at(c, "WITH (UPDLOCK, ROWLOCK, INDEX([IX_JobsHot_Scheduled]))");
        let delete = at(c, "DELETE h");
        assert!(read < pending && pending < scheduled && scheduled < delete);
        assert!(!c[read..pending].contains("WITH ("), "the first read takes no lock hint");
        assert!(
            c.contains(
                "WHERE h.[Id] = @Id AND (h.[Status] IN (0, 3) OR (h.[Status] = 1 AND h.[HeartbeatUtc] IS NULL));"
            ),
            "Scheduled and reserved Fetched jobs are cancelled too"
        );
    }

    /// Items 6 and 11: rescue seeks by the indexed time columns, takes U locks like the claim,
    /// and moves at most 4,000 rows of each kind per call.
    #[test]
    fn rescue_seeks_its_indexes_with_the_claims_hints() {
        let st = Statements::new("chokaq").unwrap();
        let r = &st.rescue;
        assert!(r.contains("DECLARE @Limit INT = CASE WHEN @P3 > 4000 THEN 4000 ELSE @P3 END;"));
        assert!(r.contains(
            "UPDATE TOP (@Limit) h\nSET h.[Status] = 0, h.[WorkerId] = NULL, h.[UpdatedAtUtc] = @Now\n\
             FROM [chokaq].[JobsHot] AS h WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)\n\
             LEFT JOIN [chokaq].[Queues] AS q ON q.[Name] = h.[Queue]\n\
             WHERE h.[Status] = 1\n    AND h.[UpdatedAtUtc] < @FetchedCutoff\n"
        ));
        // Issue 11 item 10: each queue's fetched timeout, else the default (`@P1`).
        assert!(r.contains("-(ISNULL(q.[FetchedTimeoutMs], @FetchedTimeoutMs) % 1000)"));
        assert!(r.contains("AND (h.[HeartbeatUtc] IS NULL OR h.[HeartbeatUtc] < @ZombieCutoff)"));
        assert!(r.contains("ORDER BY h.[HeartbeatUtc] ASC;"));
        assert!(!r.contains("ORDER BY h.[Id]"));
        assert_eq!(r.matches("WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)").count(), 3);
        // The seek bound is the latest cutoff any queue can have: the smallest timeout.
        assert!(r.contains("SELECT @MinZombieMs = MIN(v.[Ms])"));
    }

    /// Issue 24: `start` is repeatable. The rows this call starts and the rows this lease and
    /// worker already started are reported alike (read in the same transaction, after the
    /// update); a repeat writes nothing, so the attempt is counted once.
    #[test]
    fn start_is_repeatable_and_counts_the_attempt_once() {
        let st = Statements::new("chokaq").unwrap();
        let s = &st.start;
        assert!(s.starts_with("SET XACT_ABORT ON;\nSET NOCOUNT ON;"));
        let update = at(s, "UPDATE h\nSET h.[Status] = 2, h.[Attempt] = h.[Attempt] + 1,");
        assert!(s[update..].contains("WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId;\nSELECT h.[Id]\n"));
        let select =
            at(s, "SELECT h.[Id]\nFROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)\nINNER JOIN OPENJSON(@Leases)");
        assert!(s[select..].contains("WHERE h.[Status] = 2 AND h.[WorkerId] = @WorkerId;\nCOMMIT TRANSACTION;"));
        assert!(at(s, "BEGIN TRANSACTION;") < update && update < select);
        assert!(!s.contains("OUTPUT"), "the ids come from the one SELECT, the last result set");
        assert_eq!(s.matches("UPDATE ").count(), 1, "a repeat writes nothing");
    }

    /// Issue 24: heartbeat and complete take a held job in either status; a Fetched row is
    /// archived as if started first (its run counted, a start time).
    #[test]
    fn heartbeat_and_complete_take_held_fetched_jobs() {
        let st = Statements::new("chokaq").unwrap();
        assert!(st.heartbeat.ends_with("WHERE h.[Status] IN (1, 2) AND h.[WorkerId] = @WorkerId;"));
        let c = &st.complete;
        assert!(c.contains("WHERE h.[Status] IN (1, 2) AND h.[WorkerId] = @WorkerId;\nSELECT a.[Id]"));
        assert!(c.contains(
            "DELETED.[Priority], DELETED.[Attempt] + CASE WHEN DELETED.[Status] = 1 THEN 1 ELSE 0 END, \
             DELETED.[MaxAttempts],"
        ));
        assert!(c.contains("DELETED.[CreatedAtUtc], ISNULL(DELETED.[StartedAtUtc], @Now), @Now, DELETED.[LastError],"));
    }

    /// Issue 24: `fail` of a held Fetched job starts it first, in its transaction, and only then
    /// applies the outcome, so every rule sees the counted attempt (a retry with none left dies
    /// `failed`, a snooze gives the attempt back, a dead letter files it).
    #[test]
    fn fail_of_a_held_fetched_job_starts_it_first() {
        let st = Statements::new("chokaq").unwrap();
        let f = &st.fail;
        let start = at(
            f,
            "UPDATE h\nSET h.[Status] = 2, h.[Attempt] = h.[Attempt] + 1, h.[StartedAtUtc] = @Now, h.[HeartbeatUtc] = \
             @Now, h.[UpdatedAtUtc] = @Now\nFROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)\nWHERE h.[Id] = @Id AND \
             h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 1;\nIF @Action IN (0, 1)",
        );
        assert!(at(f, "BEGIN TRANSACTION;") < start && start < at(f, "h.[Outcome] = @Action + 1"));
        assert_eq!(f.matches("h.[Status] = 1;").count(), 1, "only the start looks at Fetched rows");
    }

    /// Issue 24: a release puts back only jobs without a cancel request (clearing the
    /// heartbeat); a held job whose cancel was accepted is dead-lettered `cancelled`, read
    /// first under an update lock; both are reported done, in one transaction.
    #[test]
    fn release_dead_letters_a_cancel_requested_job() {
        let st = Statements::new("chokaq").unwrap();
        let r = &st.release;
        assert!(r.starts_with("SET XACT_ABORT ON;\nSET NOCOUNT ON;"));
        let back = at(r, "SET h.[Status] = 0, h.[WorkerId] = NULL, h.[HeartbeatUtc] = NULL, h.[UpdatedAtUtc] = @Now\n");
        assert!(r.contains("WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId AND h.[CancelRequested] = 0;"));
        let read = at(r, "SELECT DISTINCT h.[Id]\nFROM [chokaq].[JobsHot] AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK)");
        assert!(r.contains("WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId AND h.[CancelRequested] = 1;"));
        let delete = at(r, "DELETE h\n");
        assert!(r.contains(
            "DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey] INTO [chokaq].[JobsDlq]"
        ));
        assert!(r.contains(
            "INNER JOIN @Cancelled AS c ON c.[Id] = h.[Id]\nWHERE h.[Status] = 1 AND h.[CancelRequested] = 1;"
        ));
        let commit = at(r, "COMMIT TRANSACTION;");
        assert!(at(r, "BEGIN TRANSACTION;") < back && back < read && read < delete && delete < commit);
        assert!(r.ends_with(
            "COMMIT TRANSACTION;\nSELECT r.[Id] FROM @Released AS r\nUNION ALL\nSELECT c.[Id] FROM @Cancelled AS c;"
        ));
        assert!(!r.contains("[Outcome]"), "no fail of the old lease can report this move");
    }

    /// Issue 24: a cancel of a held job (Fetched with a heartbeat) is a request, like one of a
    /// Processing job; a reserved Fetched job is still cancelled at once.
    #[test]
    fn cancel_of_a_held_job_is_a_request() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.cancel;
        let delete =
            at(c, "WHERE h.[Id] = @Id AND (h.[Status] IN (0, 3) OR (h.[Status] = 1 AND h.[HeartbeatUtc] IS NULL));");
        let request = at(
            c,
            "SET [CancelRequested] = 1, [UpdatedAtUtc] = @Now\n    WHERE [Id] = @Id AND ([Status] = 2 OR ([Status] = 1 \
             AND [HeartbeatUtc] IS NOT NULL));",
        );
        assert!(delete < request);
    }

    /// Issue 24: the rescue of held jobs. Reserved Fetched jobs only expire by the fetched
    /// timeout; held ones by the zombie timeout from their heartbeat, sought on
    /// `IX_JobsHot_Held`'s range, and then die (`cancelled`, or `zombie` at the
    /// `MAX_EXPIRED_HOLDS`-th expiry, `@P4`) or go back to Pending with `ExpiredHolds + 1`.
    #[test]
    fn rescue_expires_held_jobs_by_the_zombie_timeout() {
        let st = Statements::new("chokaq").unwrap();
        let r = &st.rescue;
        assert!(r.contains("DECLARE @MaxExpiredHolds INT = @P4;"));
        assert!(r.contains(
            "DATEADD(SECOND, -(ISNULL(q.[FetchedTimeoutMs], @FetchedTimeoutMs) / 1000), @Now)\n    )\n    AND \
             h.[HeartbeatUtc] IS NULL;\nSET @FetchedReleased = @@ROWCOUNT;"
        ));
        let pick = at(
            r,
            "INSERT INTO @H ([Id], [Dead])\nSELECT TOP (@Limit)\n    h.[Id],\n    CASE WHEN h.[CancelRequested] = 1 OR \
             h.[ExpiredHolds] + 1 >= @MaxExpiredHolds THEN 1 ELSE 0 END\nFROM [chokaq].[JobsHot] AS h WITH (UPDLOCK, \
             READPAST, ROWLOCK, FORCESEEK)\nLEFT JOIN [chokaq].[Queues] AS q ON q.[Name] = h.[Queue]\nWHERE h.[Status] \
             = 1\n    AND h.[HeartbeatUtc] IS NOT NULL\n    AND h.[HeartbeatUtc] < @ZombieCutoff\n",
        );
        assert!(r[pick..].contains("-(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) % 1000),"));
        assert!(at(r, "SET @ZombieCutoff =") < pick);
        let back = at(
            r,
            "SET h.[Status] = 0, h.[WorkerId] = NULL, h.[HeartbeatUtc] = NULL, h.[ExpiredHolds] = \
             h.[ExpiredHolds] + 1, h.[UpdatedAtUtc] = @Now\nFROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)\n\
             INNER JOIN @H AS x ON x.[Id] = h.[Id]\nWHERE x.[Dead] = 0 AND h.[Status] = 1 AND h.[CancelRequested] = 0;\nSET @FetchedReleased = \
             @FetchedReleased + @@ROWCOUNT;",
        );
        let dead = at(
            r,
            "INNER JOIN @H AS x ON x.[Id] = h.[Id]\nWHERE x.[Dead] = 1 AND h.[Status] = 1;\n\
             SET @ZombiesDead = @@ROWCOUNT;",
        );
        assert!(r.contains(
            "CASE WHEN DELETED.[CancelRequested] = 1 THEN DELETED.[LastError] ELSE CONCAT(N'held ', \
             DELETED.[ExpiredHolds] + 1, N' times by workers that stopped before its start was recorded') END"
        ));
        // Held jobs first, then the zombies, whose dead add to the count.
        let zombies = at(r, "INSERT INTO @Z ([Id], [Retry])");
        assert!(pick < back && back < dead && dead < zombies);
        assert!(r.contains("WHERE z.[Retry] = 0 AND h.[Status] = 2;\nSET @ZombiesDead = @ZombiesDead + @@ROWCOUNT;"));
        // The zombie policy does not apply to held jobs.
        assert!(!r[pick..zombies].contains("ZombiePolicy"));
        // The seek's index: held rows only.
        assert!(st.migrate_objects.contains(
            "CREATE NONCLUSTERED INDEX [IX_JobsHot_Held] ON [chokaq].[JobsHot] ([HeartbeatUtc]) INCLUDE ([Queue]) \
             WHERE [Status] = 1 AND [HeartbeatUtc] IS NOT NULL;"
        ));
    }

    /// Issue 24: a requeued job is a fresh row, its expired holds forgotten.
    #[test]
    fn requeue_resets_expired_holds() {
        let st = Statements::new("chokaq").unwrap();
        let q = &st.requeue_dead;
        assert!(q.contains(
            "DELETED.[CreatedBy], 0, DELETED.[CreatedAtUtc], 0, 0, DELETED.[ConcurrencyKey]\nINTO [chokaq].[JobsHot] ("
        ));
        assert!(q.contains("[CreatedBy], [Status], [DueAtUtc], [CancelRequested], [ExpiredHolds], [ConcurrencyKey]\n)"));
    }

    /// Issue 25: rescue prunes the starts log last, per queue that has entries, only under
    /// that queue's gate row (`UPDLOCK`) and cap row (`XLOCK`), both taken without waiting: a
    /// queue with a rate limit keeps the entries after now minus its window, one without loses
    /// them all; a queue whose rows are held is left for the next call.
    #[test]
    fn rescue_prunes_the_starts_log_under_the_queues_rows_without_waiting() {
        let st = Statements::new("chokaq").unwrap();
        let r = &st.rescue;
        let first = at(r, "SET @PruneQueue = (SELECT MIN(s.[Queue]) FROM [chokaq].[StartsLog] AS s WITH (READPAST));");
        let gate = at(
            r,
            "    SELECT @Got = COUNT_BIG(*)\n    FROM [chokaq].[QueueLocks] AS l WITH (UPDLOCK, ROWLOCK, READPAST)\n    WHERE \
             l.[Queue] = @PruneQueue AND l.[Kind] = 0;\n    IF @Got = 1\n        SELECT @Got = COUNT_BIG(*)\n        FROM \
             [chokaq].[QueueLocks] AS l WITH (XLOCK, ROWLOCK, READPAST)\n        WHERE l.[Queue] = @PruneQueue AND \
             l.[Kind] = 1;\n    IF @Got = 1\n",
        );
        let delete =
            at(r, "        DELETE s\n        FROM [chokaq].[StartsLog] AS s WITH (ROWLOCK, READPAST, FORCESEEK)\n");
        assert!(r[gate..delete].contains("WHERE q.[Name] = @PruneQueue AND q.[RateJobs] IS NOT NULL;"));
        assert!(r[delete..].contains(
            "                @PrunePerMs IS NULL\n                OR s.[Stamp] <= DATEADD(MILLISECOND, -(@PrunePerMs % 1000), \
             DATEADD(SECOND, -(@PrunePerMs / 1000), @Now))\n"
        ));
        let next = at(
            r,
            "    SET @PruneQueue = (SELECT MIN(s.[Queue]) FROM [chokaq].[StartsLog] AS s WITH (READPAST) WHERE s.[Queue] > \
             @PruneQueue);",
        );
        let zombies = at(r, "WHERE z.[Retry] = 0 AND h.[Status] = 2;");
        assert!(
            zombies < first && first < gate && gate < delete && delete < next && next < at(r, "COMMIT TRANSACTION;")
        );
    }
}
