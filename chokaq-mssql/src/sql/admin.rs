//! The statements of the admin room: queue controls, purge, `rescue`, `cancel` and
//! `requeue_dead`. The moves between tables are `DELETE … OUTPUT DELETED … INTO <target>`
//! inside one `SET XACT_ABORT ON` transaction, as in [`super::lease`].
//!
//! Optional filters are static SQL over NULL-able parameters (`@Queue IS NULL OR [Queue] =
//! @Queue`): one statement per table, whatever filters the caller sets.

/// Queue control as an upsert, behind the queue's gate row: the `Kind` 0 row of
/// `[schema].[QueueLocks]` (inserted first if missing, autocommit), updated in the transaction
/// (an exclusive row lock), the row every claim naming the queue holds `Shared` (see the claim
/// batch, `sql/claim.rs`). It waits for in-flight claims of the queue, and claims that
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
/// that commits after this call returned. A rate limit whose kind changes (queue-wide / per
/// key, or set where there was none) numbers the queue's `StartsLog` again for the new
/// buckets (issue 40, L7; `claim::KEYS`, "The count"), under the gate row, which every claim
/// of the queue holds shared to its commit and the rescue's prune takes first. Returns the row.
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
IF @Op = 10 AND @RateJobs IS NOT NULL AND NOT EXISTS (
    SELECT 1
    FROM {schema}.[Queues] AS q WITH (FORCESEEK)
    WHERE q.[Name] = @Name AND q.[RateJobs] IS NOT NULL AND q.[RateByKey] = ISNULL(@RateByKey, 0)
)
BEGIN
    WITH r AS (
        SELECT
            s.[N],
            CASE
                WHEN @RateByKey = 1 AND s.[CKey] IS NULL THEN 0
                ELSE ROW_NUMBER() OVER (PARTITION BY CASE WHEN @RateByKey = 1 THEN s.[CKey] END ORDER BY s.[Stamp] ASC)
            END AS [Rn]
        FROM {schema}.[StartsLog] AS s WITH (FORCESEEK)
        WHERE s.[Queue] = @Name
    )
    UPDATE r SET [N] = [Rn];
END;
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
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
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
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, CASE WHEN DELETED.[CancelRequested] = 1 THEN 'cancelled' \
    ELSE 'zombie' END, DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
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
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt], DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], \
    DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
    DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsDlq] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
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
    DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey],
    DELETED.[Priority], 0, DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[CreatedAtUtc], @Now, \
    DELETED.[LastError],
    DELETED.[CreatedBy], 0, DELETED.[CreatedAtUtc], 0, 0, DELETED.[ConcurrencyKey]
INTO {schema}.[JobsHot] (
    [Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey],
    [Priority], [Attempt], [MaxAttempts], [Lease], [CreatedAtUtc], [UpdatedAtUtc], [LastError],
    [CreatedBy], [Status], [DueAtUtc], [CancelRequested], [ExpiredHolds], [ConcurrencyKey]
)
FROM {schema}.[JobsDlq] AS d WITH (FORCESEEK)
WHERE d.[Id] = @Id;
SET @Moved = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @Moved AS [Moved];";
