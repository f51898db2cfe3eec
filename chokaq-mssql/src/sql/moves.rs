//! The guarded writes of a claimed job: `start`, `heartbeat`, `complete`, `fail`, `release`,
//! plus `rescue`, `cancel` and `requeue_dead`. Every move between tables is
//! `DELETE … OUTPUT DELETED … INTO <target>` inside one `SET XACT_ABORT ON` transaction.
//!
//! The lease-list statements take `@P1`, a JSON array `[{"id": "<32 hex>", "lease": n}, …]`
//! read with `OPENJSON`, and `@P2`, the worker id. The guard is Id + Lease + WorkerId + Status.

/// Fetched → Processing (`Attempt + 1`). Returns the ids written.
pub(super) const START: &str = "SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE h
SET h.[Status] = 2, h.[Attempt] = h.[Attempt] + 1, h.[StartedAtUtc] = @Now, h.[HeartbeatUtc] \
    = @Now, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id]
FROM {schema}.[JobsHot] AS h
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId;";

/// Bumps `HeartbeatUtc` of Processing jobs still held. Returns `Id, CancelRequested`.
pub(super) const HEARTBEAT: &str = "SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE h
SET h.[HeartbeatUtc] = @Now, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id], INSERTED.[CancelRequested]
FROM {schema}.[JobsHot] AS h
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 2 AND h.[WorkerId] = @WorkerId;";

/// Processing → archive: `DELETE … OUTPUT DELETED … INTO JobsArchive`, one statement in one
/// `XACT_ABORT` transaction. Then returns the ids now in the archive under these leases and
/// this worker (so a retried call after a lost answer still reports them done).
pub(super) const COMPLETE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
BEGIN TRANSACTION;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now \
    INTO {schema}.[JobsArchive] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc])
FROM {schema}.[JobsHot] AS h
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 2 AND h.[WorkerId] = @WorkerId;
SELECT a.[Id]
FROM {schema}.[JobsArchive] AS a
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON a.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND a.[Lease] = l.[Lease]
WHERE a.[WorkerId] = @WorkerId;
COMMIT TRANSACTION;";

/// Ends a Processing attempt that did not succeed, in one transaction.
///
/// Parameters: `@P1` id (BINARY(16)), `@P2` lease, `@P3` worker, `@P4` action
/// (0 = retry, 1 = snooze, 2 = dead-letter), `@P5`/`@P6` delay seconds / nanoseconds,
/// `@P7` error text (NULL keeps the last one), `@P8` dead-letter reason.
///
/// Retry and snooze put the job back to Pending (`WorkerId` cleared, due after the delay);
/// a retry with no attempts left, and the dead-letter action, move it to `JobsDlq` with
/// `DELETE … OUTPUT DELETED … INTO`. Returns `Result` (0 = lease lost, 1 = retried,
/// 2 = snoozed, 3 = dead-lettered), `DueAtUtc`, `Reason`.
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
BEGIN TRANSACTION;
IF @Action IN (0, 1)
BEGIN
    UPDATE h
    SET
        h.[Status] = 0,
        h.[WorkerId] = NULL,
        h.[HeartbeatUtc] = NULL,
        h.[ScheduledAtUtc] = @Due,
        h.[DueAtUtc] = @Due,
        h.[UpdatedAtUtc] = @Now,
        h.[CancelRequested] = 0,
        h.[LastError] = CASE WHEN @Action = 0 THEN ISNULL(@Error, h.[LastError]) ELSE h.[LastError] END,
        h.[Attempt] = CASE WHEN @Action = 1 AND h.[Attempt] > 0 THEN h.[Attempt] - 1 ELSE h.[Attempt] END
    FROM {schema}.[JobsHot] AS h
    WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2
        AND (@Action = 1 OR h.[Attempt] < h.[MaxAttempts]);
    IF @@ROWCOUNT = 1
        SET @Result = @Action + 1;
END;
IF @Result = 0
BEGIN
    DELETE h
    OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], \
    DELETED.[IdempotencyKey], DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], \
    DELETED.[WorkerId], DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], \
    DELETED.[StartedAtUtc], @Now, ISNULL(@Error, DELETED.[LastError]), DELETED.[CreatedBy], @Now, @Reason \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason])
    FROM {schema}.[JobsHot] AS h
    WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2;
    IF @@ROWCOUNT = 1
        SET @Result = 3;
END;
COMMIT TRANSACTION;
SELECT @Result AS [Result], @Due AS [DueAtUtc], @Reason AS [Reason];";

/// Fetched → Pending for leases still held; the attempt is unchanged. Returns the ids.
pub(super) const RELEASE: &str = "SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id]
FROM {schema}.[JobsHot] AS h
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId;";

/// Maintenance, one instance at a time: `sp_getapplock` with `@LockTimeout = 0` (a second
/// instance returns `Ran = 0` at once instead of waiting).
///
/// Parameters: `@P1` fetched timeout (ms), `@P2` default zombie timeout (ms), `@P3` limit.
/// Expired Fetched jobs go back to Pending; zombies (Processing, heartbeat older than their
/// queue's `ZombieTimeoutMs` or the default) go back to Pending when attempts remain and the
/// queue's policy is Retry (0), else to `JobsDlq` (reason `zombie`). Rows locked by others
/// are skipped (READPAST). Returns `Ran, FetchedReleased, ZombiesRetried, ZombiesDead`.
pub(super) const RESCUE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @FetchedTimeoutMs BIGINT = @P1;
DECLARE @DefaultZombieMs BIGINT = @P2;
DECLARE @Limit INT = @P3;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @LockResult INT;
DECLARE @FetchedReleased INT = 0;
DECLARE @ZombiesRetried INT = 0;
DECLARE @ZombiesDead INT = 0;
DECLARE @Z TABLE ([Id] BINARY(16) NOT NULL PRIMARY KEY, [Retry] BIT NOT NULL);
BEGIN TRANSACTION;
EXEC @LockResult = sp_getapplock @Resource = N'chokaq:rescue:{schema_text}', @LockMode = N'Exclusive', @LockOwner \
    = N'Transaction', @LockTimeout = 0;
IF @LockResult < 0
BEGIN
    ROLLBACK TRANSACTION;
    SELECT CAST(0 AS BIT) AS [Ran], 0 AS [FetchedReleased], 0 AS [ZombiesRetried], 0 AS [ZombiesDead];
    RETURN;
END;
UPDATE TOP (@Limit) h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[UpdatedAtUtc] = @Now
FROM {schema}.[JobsHot] AS h WITH (READPAST, ROWLOCK)
WHERE h.[Status] = 1
    AND h.[UpdatedAtUtc] < DATEADD(MILLISECOND, -(@FetchedTimeoutMs % 1000), DATEADD(SECOND, \
    -(@FetchedTimeoutMs / 1000), @Now));
SET @FetchedReleased = @@ROWCOUNT;
INSERT INTO @Z ([Id], [Retry])
SELECT TOP (@Limit)
    h.[Id],
    CASE WHEN h.[Attempt] < h.[MaxAttempts] AND ISNULL(q.[ZombiePolicy], 0) = 0 THEN 1 ELSE 0 END
FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, READPAST, ROWLOCK)
LEFT JOIN {schema}.[Queues] AS q ON q.[Name] = h.[Queue]
WHERE h.[Status] = 2
    AND ISNULL(h.[HeartbeatUtc], h.[UpdatedAtUtc]) < DATEADD(
        MILLISECOND,
        -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) % 1000),
        DATEADD(SECOND, -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) / 1000), @Now)
    )
ORDER BY h.[Id];
UPDATE h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[HeartbeatUtc] = NULL, h.[UpdatedAtUtc] = @Now, h.[CancelRequested] = 0
FROM {schema}.[JobsHot] AS h
INNER JOIN @Z AS z ON z.[Id] = h.[Id]
WHERE z.[Retry] = 1 AND h.[Status] = 2;
SET @ZombiesRetried = @@ROWCOUNT;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'zombie' \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason])
FROM {schema}.[JobsHot] AS h
INNER JOIN @Z AS z ON z.[Id] = h.[Id]
WHERE z.[Retry] = 0 AND h.[Status] = 2;
SET @ZombiesDead = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT CAST(1 AS BIT) AS [Ran], @FetchedReleased AS [FetchedReleased], @ZombiesRetried AS [ZombiesRetried], \
    @ZombiesDead AS [ZombiesDead];";

/// Cancels a live job. `@P1` id. Pending/Fetched: moved to `JobsDlq` (reason `cancelled`) by
/// `DELETE … OUTPUT DELETED … INTO`; Processing: `CancelRequested = 1`. Returns `Result`
/// (0 = not live, 1 = cancelled, 2 = requested).
pub(super) const CANCEL: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Result INT = 0;
BEGIN TRANSACTION;
DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled' \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [Reason])
FROM {schema}.[JobsHot] AS h
WHERE h.[Id] = @Id AND h.[Status] IN (0, 1);
IF @@ROWCOUNT = 1
    SET @Result = 1;
IF @Result = 0
BEGIN
    UPDATE {schema}.[JobsHot]
    SET [CancelRequested] = 1, [UpdatedAtUtc] = @Now
    WHERE [Id] = @Id AND [Status] = 2;
    IF @@ROWCOUNT = 1
        SET @Result = 2;
END;
COMMIT TRANSACTION;
SELECT @Result AS [Result];";

/// Dead letter → Pending, same id, priority and key, attempt 0: `DELETE … OUTPUT DELETED …
/// INTO JobsHot` in one transaction. A live job holding the key makes the insert fail with
/// 2601 (→ Conflict) and the whole move rolls back. `@P1` id. Returns `Moved` (0 or 1).
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
    DELETED.[CreatedBy], 0, DELETED.[CreatedAtUtc], 0
INTO {schema}.[JobsHot] (
    [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey],
    [Priority], [Attempt], [MaxAttempts], [Lease], [CreatedAtUtc], [UpdatedAtUtc], [LastError],
    [CreatedBy], [Status], [DueAtUtc], [CancelRequested]
)
FROM {schema}.[JobsDlq] AS d
WHERE d.[Id] = @Id;
SET @Moved = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @Moved AS [Moved];";

#[cfg(test)]
mod tests {
    use super::super::Statements;

    #[test]
    fn moves_are_delete_output_into_under_xact_abort() {
        let st = Statements::new("chokaq").unwrap();
        for (name, sql, target) in [
            ("complete", &st.complete, "[chokaq].[JobsArchive]"),
            ("fail", &st.fail, "[chokaq].[JobsDlq]"),
            ("cancel", &st.cancel, "[chokaq].[JobsDlq]"),
            ("rescue", &st.rescue, "[chokaq].[JobsDlq]"),
            ("requeue_dead", &st.requeue_dead, "[chokaq].[JobsHot]"),
        ] {
            assert!(sql.starts_with("SET XACT_ABORT ON;"), "{name}");
            assert!(sql.contains("BEGIN TRANSACTION;"), "{name}");
            assert!(sql.contains(&format!("INTO {target}")), "{name}");
            assert!(sql.contains("DELETE "), "{name}");
        }
        assert!(st.rescue.contains("@LockTimeout = 0"));
        assert!(st.migrate_objects.contains("sp_getapplock"));
        assert!(st.migrate_objects.contains("SET LOCK_TIMEOUT 30000"));
        assert!(st.purge_archive.contains("DELETE TOP (@BatchSize)"));
        assert!(st.enqueue.contains("WITH (UPDLOCK, HOLDLOCK)"));
        assert!(st.control_queue.contains("WITH (UPDLOCK, HOLDLOCK)"));
    }
}
