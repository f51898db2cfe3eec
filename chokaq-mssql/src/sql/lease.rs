//! The statements of the lease room, the guarded writes of a claimed job: `start`,
//! `heartbeat`, `complete`, `fail`, `release` (and the dead-lettering of a claimed row that
//! cannot be decoded; `rescue`, `cancel` and `requeue_dead` are in [`super::admin`]). Every
//! move between tables is
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
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt] + CASE WHEN DELETED.[Status] = 1 THEN 1 ELSE 0 END, \
    DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], \
    DELETED.[CreatedAtUtc], CASE WHEN DELETED.[Status] = 1 THEN @Now ELSE DELETED.[StartedAtUtc] END, @Now, DELETED.[LastError], DELETED.[CreatedBy], @Now, \
    DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsArchive] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
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
    OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], \
    DELETED.[IdempotencyKey], DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], \
    DELETED.[WorkerId], DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], \
    DELETED.[StartedAtUtc], @Now, ISNULL(@Error, DELETED.[LastError]), DELETED.[CreatedBy], @Now, @Reason, 3, \
    DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
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
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @Cancelled AS c ON c.[Id] = h.[Id]
WHERE h.[Status] = 1 AND h.[CancelRequested] = 1;
COMMIT TRANSACTION;
SELECT r.[Id] FROM @Released AS r
UNION ALL
SELECT c.[Id] FROM @Cancelled AS c;";

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
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    @Error, DELETED.[CreatedBy], @Now, 'failed', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] IN (1, 2);
SET @Moved = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @Moved AS [Moved];";

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
