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
/// archived as if started first: `Attempt + 1`, `StartedAtUtc` now (its own run's start, not an
/// earlier attempt's: conformance `hold_held_outcome_records_its_own_start`). Then
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
    DELETED.[CreatedAtUtc], CASE WHEN DELETED.[Status] = 1 THEN @Now ELSE DELETED.[StartedAtUtc] END, @Now, DELETED.[LastError], DELETED.[CreatedBy], @Now, \
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
/// ever consider, whatever `RescueParams::limit` says (the next call moves the rest).
/// Expired reserved Fetched jobs (no heartbeat; older than their queue's `FetchedTimeoutMs` or
/// the default) go back to Pending: a `FORCESEEK` range seek on `IX_JobsHot_Fetched
/// (UpdatedAtUtc) WHERE Status = 1` up to the latest cutoff any queue can have, then checked
/// against their own queue's.
/// Held Fetched jobs (a heartbeat: their handler may be running) expire by the zombie timeout
/// instead, from their last heartbeat: a `FORCESEEK` range seek on `IX_JobsHot_Held
/// (HeartbeatUtc) WHERE Status = 1 AND HeartbeatUtc IS NOT NULL`, as for zombies below. The
/// zombie policy does not apply to them: one whose cancel was accepted goes to `JobsDlq` as
/// `cancelled` (counted in `ZombiesDead`); any other goes back to Pending with its attempt
/// unspent and `ExpiredHolds + 1` (counted in `FetchedReleased`), however often it expired
/// (issue 36: an expiry never dead-letters; the count goes out with the job's next claim,
/// `ClaimedJob::expired_holds`). Zombies (Processing, heartbeat older
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
    h.[CancelRequested]
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
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @H AS x ON x.[Id] = h.[Id]
WHERE x.[Dead] = 1 AND h.[Status] = 1 AND h.[CancelRequested] = 1;
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
#[path = "moves_tests.rs"]
mod tests;
