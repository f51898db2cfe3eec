//! The claim batch and `complete_and_claim` (the handoff), built from the same parts so that
//! the two can never drift apart: [`claim`] is the claim, [`complete_and_claim`] completes the
//! worker's jobs and claims in ONE transaction, handing the slots it freed on.
//!
//! Order of one claim (both statements):
//!
//! 0. Promotion (its own short autocommit statement, before the transaction): per requested
//!    queue, a range seek on `IX_JobsHot_Scheduled (Queue, DueAtUtc) WHERE Status = 3` for
//!    `DueAtUtc <= @Now`, oldest first, at most 1,000 rows in all (`@Promote`), turns Scheduled
//!    (3) into Pending (0). Rows another claimer is promoting are skipped (`READPAST`).
//! 1. The lock rows: every queue has two rows in `[schema].[QueueLocks]`, `Kind` 0 (the queue
//!    gate) and 1 (the cap). A missing row is inserted before the transaction (autocommit,
//!    `UPDLOCK, HOLDLOCK` against a racing inserter; looked for first without a lock, so a
//!    claim whose rows exist, all claims but a queue's first, writes nothing here). Rows are
//!    never deleted. Only a principal with rights on the table can lock its rows: an app lock
//!    (`sp_getapplock`, the design before schema version 8) could be held by any login of the
//!    database and stall every claim.
//! 2. Leases: `sys.sp_sequence_get_range` reserves `@Limit` consecutive values of `LeaseSeq`
//!    (`NEXT VALUE FOR` is not allowed in a statement with `TOP`); the k-th claimed row, in
//!    claim order, gets `@FirstLease + k - 1`. A range drawn by a claim that then rolls back
//!    (or claims fewer rows) leaves a gap: a sequence never hands a value out twice.
//! 3. (`complete_and_claim` only) The worker's own Fetched and Processing rows named by the
//!    leases are U-locked (`UPDLOCK, ROWLOCK, FORCESEEK`, the complete's guard) into `@Done`;
//!    `Freed` per requested queue is how many of them it holds. Nothing can move those rows
//!    before this transaction archives them, so `Freed` is exactly what it frees.
//! 4. The queue gates: the `Kind` 0 row of every requested queue, `Shared`
//!    (`REPEATABLEREAD`: held to the commit), in name order (a sorted `TOP` feeding a
//!    `LOOP JOIN` under `FORCE ORDER`). `control_queue` updates the same row (exclusive)
//!    before it changes the queue's settings, so the settings read next cannot change before
//!    this claim commits. A wait beyond the session's lock timeout is 1222 (retried).
//! 5. The settings: paused and inactive queues leave `@Q`; `MaxWorkers` is read.
//! 6. Capped queues, in name order:
//!    - unless the slots this call freed cover the whole claim (`Freed >= @Limit`), the cap
//!      row is read `WITH (XLOCK, ROWLOCK, READPAST)`: the counting lock, exclusive, never
//!      waited for (a row another transaction holds in any mode, a handoff's shared lock
//!      included, is skipped; an `UPDATE … WITH (READPAST)` would not skip a shared lock: its
//!      update lock is compatible with it, and it would then wait to convert), then stamped
//!      (`LastTakenAtUtc`) under that lock. Taken: the active jobs (Fetched + Processing) are counted
//!      `WITH (READCOMMITTEDLOCK)`, a locking read of committed rows even under
//!      READ_COMMITTED_SNAPSHOT, and `Slots = MaxWorkers - (Active - Freed)`;
//!    - not taken (another counting claimer holds it) and nothing freed: `Slots = 0`, the
//!      queue is skipped for this call, like PostgreSQL's `SKIP LOCKED`;
//!    - not taken (or not tried) and `Freed > 0`: THE HANDOFF. The cap row is read `Shared`
//!      (`REPEATABLEREAD`; handoffs share it, a counting claimer's exclusive lock excludes
//!      them: the handoff waits for that claimer's commit, a short transaction that never
//!      waits for a handoff), the active jobs are counted without waiting (`READPAST`), and
//!      `Slots = least(Freed, MaxWorkers - (Active - Freed))`, never below 0.
//! 7. (`complete_and_claim` only) The `@Done` rows move to `JobsArchive` (the complete's
//!    move), and the ids archived under the given leases and this worker are returned.
//! 8. Keyed and rate-limited ("guarded") queues (issue 25): their cap row was taken waiting
//!    and exclusive in step 6 (never the handoff); [`KEYS`] reads the claim time again, counts
//!    each key's running jobs and the rate windows after the locks, and chooses their rows in
//!    rounds that skip full keys (`docs/sqlserver.md`, keyed caps and rate limits).
//! 9. THE claim: one `UPDATE … OUTPUT INSERTED`, per queue a bounded `FORCESEEK` on
//!    `IX_JobsHot_Pending` (`TOP (min(limit, Slots))` inside `CROSS APPLY`,
//!    `UPDLOCK, READPAST, ROWLOCK`), the best `@Limit` across queues numbered by
//!    `ROW_NUMBER` over those few rows.
//!
//! Why the cap holds (see `docs/sqlserver.md`, "Why `max_workers` is strict"): a handoff
//! claims at most the slots its own transaction freed, in the same commit, so it never raises
//! a queue's active count, whatever it counted. A counting claimer holds the cap row
//! exclusively, so no handoff of that queue is in flight while it counts (a handoff holds
//! the row shared from before it archives until it commits), and every other transition
//! that is in flight (a complete, a fail, a rescue, a start) only lowers the count or moves a
//! row within the active states: the locking count is exact or too high. Unlike PostgreSQL,
//! where the counting claimer's snapshot sees a handoff whole or not at all, SQL Server's
//! locking read committed can miss a row that moves into the range it already passed while
//! still waiting on a row the handoff deleted, so a handoff and a count must not overlap.
//! A lowered cap hands nothing on: `MaxWorkers - (Active - Freed)` is 0 or less while what
//! runs is at or above the new cap.
//!
//! No deadlock: every lock wait of these batches is on a lock row (gates by name, then caps by
//! name, the only waiting cap request being a handoff's shared one, taken before it writes
//! any job row), and the holder of a conflicting lock row (a counting claimer or
//! `control_queue`) never waits for a lock row or a job row the waiter holds.

/// The first lines of the claim: its parameters (`@P1` queues JSON, `@P2` worker, `@P3`
/// limit, `@P4` mode).
const CLAIM_PARAMS: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Queues NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Limit INT = @P3;
DECLARE @Mode SMALLINT = @P4;
";

/// The first lines of `complete_and_claim`: `@P1` leases JSON (`[{"id": "<32 hex>", "lease":
/// n}, …]`, as `complete`), `@P2` worker, `@P3` queues JSON, `@P4` limit, `@P5` mode.
const HANDOFF_PARAMS: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Queues NVARCHAR(MAX) = @P3;
DECLARE @Limit INT = @P4;
DECLARE @Mode SMALLINT = @P5;
";

/// Variables, the queue list, promotion, the lock rows and the lease range.
const PREPARE: &str = "DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Promote INT = 1000;
DECLARE @Name VARCHAR(128);
DECLARE @Got BIGINT;
DECLARE @RangeFirst SQL_VARIANT;
DECLARE @FirstLease BIGINT;
DECLARE @KeyMax INT;
DECLARE @RateJobs INT;
DECLARE @RatePerMs BIGINT;
DECLARE @RateByKey BIT;
DECLARE @KeyDefault BIGINT;
DECLARE @QueueRoom BIGINT;
DECLARE @Need BIGINT;
DECLARE @Round INT;
DECLARE @Counted BIGINT;
DECLARE @Since DATETIME2(7);
DECLARE @Q TABLE (
    [Name] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL PRIMARY KEY,
    [MaxWorkers] INT NULL,
    [Slots] INT NULL,
    [Freed] INT NOT NULL DEFAULT 0,
    [KeyMax] INT NULL,
    [RateJobs] INT NULL,
    [RatePerMs] BIGINT NULL,
    [RateByKey] BIT NULL,
    [Guarded] BIT NOT NULL DEFAULT 0
);
DECLARE @C TABLE (
    [Id] BINARY(16) NOT NULL PRIMARY KEY,
    [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
    [CKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL,
    [Priority] INT NOT NULL,
    [DueAtUtc] DATETIME2(7) NOT NULL
);
DECLARE @K TABLE (
    [CKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NOT NULL PRIMARY KEY,
    [Room] BIGINT NOT NULL
);
DECLARE @Done TABLE (
    [Id] BINARY(16) NOT NULL PRIMARY KEY,
    [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL
);
INSERT INTO @Q ([Name])
SELECT DISTINCT CAST(j.[value] AS VARCHAR(128)) COLLATE Latin1_General_BIN2 FROM OPENJSON(@Queues) AS j;
UPDATE s
SET s.[Status] = 0
FROM {schema}.[JobsHot] AS s WITH (FORCESEEK)
INNER JOIN (
    SELECT TOP (@Promote) d.[Id], d.[DueAtUtc]
    FROM @Q AS t
    CROSS APPLY (
        SELECT TOP (@Promote) r.[Id], r.[DueAtUtc]
        FROM {schema}.[JobsHot] AS r WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
        WHERE r.[Queue] = t.[Name] AND r.[Status] = 3 AND r.[DueAtUtc] <= @Now
        ORDER BY r.[DueAtUtc] ASC
    ) AS d
    ORDER BY d.[DueAtUtc] ASC
) AS p ON p.[Id] = s.[Id]
WHERE s.[Status] = 3;
IF EXISTS (
    SELECT 1
    FROM @Q AS t
    WHERE (SELECT COUNT_BIG(*) FROM {schema}.[QueueLocks] AS l WITH (NOLOCK) WHERE l.[Queue] = t.[Name]) < 2
)
    INSERT INTO {schema}.[QueueLocks] ([Queue], [Kind])
    SELECT t.[Name], k.[Kind]
    FROM @Q AS t
    CROSS JOIN (VALUES (0), (1)) AS k ([Kind])
    WHERE NOT EXISTS (
        SELECT 1
        FROM {schema}.[QueueLocks] AS l WITH (UPDLOCK, HOLDLOCK)
        WHERE l.[Queue] = t.[Name] AND l.[Kind] = k.[Kind]
    );
IF EXISTS (SELECT 1 FROM @Q)
BEGIN
    EXEC sys.sp_sequence_get_range @sequence_name = N'{schema}.[LeaseSeq]', @range_size = @Limit, \
    @range_first_value = @RangeFirst OUTPUT;
    SET @FirstLease = CAST(@RangeFirst AS BIGINT);
END;
BEGIN TRANSACTION;
";

/// `complete_and_claim` only: the worker's rows named by the leases, U-locked, and the slots
/// they free per requested queue.
const LOCK_DONE: &str = "INSERT INTO @Done ([Id], [Queue])
SELECT DISTINCT h.[Id], h.[Queue]
FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK)
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] IN (1, 2) AND h.[WorkerId] = @WorkerId;
UPDATE t
SET t.[Freed] = d.[Freed]
FROM @Q AS t
INNER JOIN (SELECT f.[Queue], COUNT_BIG(*) AS [Freed] FROM @Done AS f GROUP BY f.[Queue]) AS d ON d.[Queue] = t.[Name];
";

/// The gates, the settings, and the cap rows (counting lock or handoff).
const GATES_AND_CAPS: &str = "SELECT @Got = COUNT_BIG(*)
FROM (
    SELECT TOP (2147483647) t.[Name]
    FROM @Q AS t
    ORDER BY t.[Name]
) AS g
INNER LOOP JOIN {schema}.[QueueLocks] AS l WITH (REPEATABLEREAD, ROWLOCK, FORCESEEK)
    ON l.[Queue] = g.[Name] AND l.[Kind] = 0
OPTION (FORCE ORDER);
IF @Got < (SELECT COUNT_BIG(*) FROM @Q)
    THROW 51002, N'chokaq: a queue lock row is missing; retried', 1;
DELETE t
FROM @Q AS t
INNER JOIN {schema}.[Queues] AS q WITH (FORCESEEK) ON q.[Name] = t.[Name]
WHERE q.[IsPaused] = 1 OR q.[IsActive] = 0;
UPDATE t
SET
    t.[MaxWorkers] = q.[MaxWorkers],
    t.[KeyMax] = q.[KeyMaxWorkers],
    t.[RateJobs] = q.[RateJobs],
    t.[RatePerMs] = q.[RatePerMs],
    t.[RateByKey] = q.[RateByKey],
    t.[Guarded] = CASE WHEN q.[KeyMaxWorkers] IS NOT NULL OR q.[RateJobs] IS NOT NULL THEN 1 ELSE 0 END
FROM @Q AS t
INNER JOIN {schema}.[Queues] AS q WITH (FORCESEEK) ON q.[Name] = t.[Name]
WHERE q.[MaxWorkers] IS NOT NULL OR q.[KeyMaxWorkers] IS NOT NULL OR q.[RateJobs] IS NOT NULL;
SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [MaxWorkers] IS NOT NULL OR [Guarded] = 1);
WHILE @Name IS NOT NULL
BEGIN
    SET @Got = 0;
    IF (SELECT t.[Guarded] FROM @Q AS t WHERE t.[Name] = @Name) = 1
    BEGIN
        SELECT @Got = COUNT_BIG(*)
        FROM {schema}.[QueueLocks] AS l WITH (XLOCK, ROWLOCK)
        WHERE l.[Queue] = @Name AND l.[Kind] = 1;
        IF @Got = 0
            THROW 51002, N'chokaq: a queue lock row is missing; retried', 1;
        UPDATE l
        SET l.[LastTakenAtUtc] = @Now
        FROM {schema}.[QueueLocks] AS l WITH (ROWLOCK)
        WHERE l.[Queue] = @Name AND l.[Kind] = 1;
    END
    ELSE IF (SELECT t.[Freed] FROM @Q AS t WHERE t.[Name] = @Name) < @Limit
    BEGIN
        SELECT @Got = COUNT_BIG(*)
        FROM {schema}.[QueueLocks] AS l WITH (XLOCK, ROWLOCK, READPAST)
        WHERE l.[Queue] = @Name AND l.[Kind] = 1;
        IF @Got = 1
            UPDATE l
            SET l.[LastTakenAtUtc] = @Now
            FROM {schema}.[QueueLocks] AS l WITH (ROWLOCK)
            WHERE l.[Queue] = @Name AND l.[Kind] = 1;
    END;
    IF @Got = 1
        UPDATE t
        SET t.[Slots] = CASE
            WHEN t.[MaxWorkers] > a.[Active] - t.[Freed] THEN t.[MaxWorkers] - (a.[Active] - t.[Freed])
            ELSE 0
        END
        FROM @Q AS t
        CROSS APPLY (
            SELECT COUNT_BIG(*) AS [Active]
            FROM {schema}.[JobsHot] AS h WITH (READCOMMITTEDLOCK, FORCESEEK)
            WHERE h.[Queue] = t.[Name] AND h.[Status] IN (1, 2)
        ) AS a
        WHERE t.[Name] = @Name AND t.[MaxWorkers] IS NOT NULL;
    ELSE IF (SELECT t.[Freed] FROM @Q AS t WHERE t.[Name] = @Name) > 0
    BEGIN
        IF NOT EXISTS (
            SELECT 1
            FROM {schema}.[QueueLocks] AS l WITH (REPEATABLEREAD, ROWLOCK)
            WHERE l.[Queue] = @Name AND l.[Kind] = 1
        )
            THROW 51002, N'chokaq: a queue lock row is missing; retried', 1;
        UPDATE t
        SET t.[Slots] = CASE
            WHEN t.[MaxWorkers] <= a.[Active] - t.[Freed] THEN 0
            WHEN t.[MaxWorkers] - (a.[Active] - t.[Freed]) < t.[Freed] THEN t.[MaxWorkers] - (a.[Active] - t.[Freed])
            ELSE t.[Freed]
        END
        FROM @Q AS t
        CROSS APPLY (
            SELECT COUNT_BIG(*) AS [Active]
            FROM {schema}.[JobsHot] AS h WITH (READCOMMITTEDLOCK, READPAST, FORCESEEK)
            WHERE h.[Queue] = t.[Name] AND h.[Status] IN (1, 2)
        ) AS a
        WHERE t.[Name] = @Name;
    END
    ELSE
        UPDATE @Q SET [Slots] = 0 WHERE [Name] = @Name;
    SET @Name = (SELECT MIN([Name]) FROM @Q WHERE ([MaxWorkers] IS NOT NULL OR [Guarded] = 1) AND [Name] > @Name);
END;
";

/// Keyed and rate-limited queues ("guarded": `KeyMaxWorkers` or `RateJobs` set; issue 25):
/// their candidates, chosen under the cap row each holds since [`GATES_AND_CAPS`] (taken
/// waiting, exclusive), into `@C`. The claim's time is read again here (`@Now`), after every
/// lock is held: it is the stamp the starts log gets and Start mode's `StartedAtUtc`.
///
/// Per guarded queue, in name order: its per-key allowances into `@K` (a key's room: the cap
/// less its Fetched + Processing jobs, and, with a per-key rate limit, the limit less its
/// log entries stamped after `@Now - per`; the smaller), from statements that start after the
/// lock is held and read the latest committed rows (`READCOMMITTEDLOCK`, also under
/// READ_COMMITTED_SNAPSHOT); `@KeyDefault`, the room of a key with nothing running (and no
/// per-key rate limit); `@QueueRoom`, the queue's own room (the limit, the cap's `Slots`, and a
/// queue-wide rate limit less its log entries in the window). Then rounds: the next due
/// rows in claim order (`FORCESEEK` on `IX_JobsHot_Pending`, `UPDLOCK, READPAST, ROWLOCK` as
/// the plain claim) that are key-less or whose key still has room counting the rows `@C`
/// already holds; rows past a key's room (a round may take several of one key) are dropped
/// again, and their key is then full, so the next round skips it and takes the next keys: a
/// key at its cap never holds back other keys. At most 10 rounds; a round that drops nothing,
/// counts no new key and finds fewer rows than it asked for ends it (everything it may take is
/// in).
///
/// The count (issue 40, L7): a window is never counted row by row (a limit of 1000000/1d read
/// a million log entries in every claim). Every `StartsLog` entry carries its ordinal `N` in
/// its bucket under the limit in force (the queue's for a queue-wide limit, the key's for a
/// limit per key; 0 for a key-less entry under a limit per key), written by [`TAKE`] as the
/// bucket's last ordinal plus one while the claim holds the queue's cap row (exclusive, to its
/// commit). So a bucket's ordinals are consecutive and grow with the stamps, the rescue's
/// prune (under the same row) deletes a prefix of them, and a window's count is the last
/// ordinal less the first one stamped after `@Since`, plus one: two `TOP (1)` seeks of
/// `IX_StartsLog_QueueN` / `IX_StartsLog_KeyN`, whatever the window holds. With a per-key
/// limit, the running keys are counted up front and every other key when a round first meets
/// it: before each round, the keys of the next due rows not counted yet (at most `@Need + 16`
/// rows read) get their rooms in `@K`, and a row whose key is not in `@K` is not taken in that
/// round. A change of a limit's kind renumbers the queue's log (`CONTROL_QUEUE`).
const KEYS: &str = "IF EXISTS (SELECT 1 FROM @Q WHERE [Guarded] = 1)
    SET @Now = SYSUTCDATETIME();
SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [Guarded] = 1);
WHILE @Name IS NOT NULL
BEGIN
    SELECT
        @KeyMax = t.[KeyMax],
        @RateJobs = t.[RateJobs],
        @RatePerMs = t.[RatePerMs],
        @RateByKey = t.[RateByKey],
        @QueueRoom = CASE WHEN t.[Slots] IS NULL OR t.[Slots] > @Limit THEN @Limit ELSE t.[Slots] END
    FROM @Q AS t
    WHERE t.[Name] = @Name;
    SET @Since = DATEADD(MILLISECOND, -(@RatePerMs % 1000), DATEADD(SECOND, -(@RatePerMs / 1000), @Now));
    SET @KeyDefault = CASE
        WHEN @RateByKey = 1 AND @RateJobs IS NOT NULL AND (@KeyMax IS NULL OR @RateJobs < @KeyMax) THEN @RateJobs
        ELSE @KeyMax
    END;
    IF @RateJobs IS NOT NULL AND @RateByKey = 0
        SELECT @QueueRoom = CASE WHEN @RateJobs - w.[Started] < @QueueRoom THEN @RateJobs - w.[Started] ELSE @QueueRoom END
        FROM (SELECT ISNULL(
            (SELECT TOP (1) s.[N] FROM {schema}.[StartsLog] AS s WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_QueueN]))
             WHERE s.[Queue] = @Name ORDER BY s.[Stamp] DESC, s.[N] DESC)
            - (SELECT TOP (1) s.[N] FROM {schema}.[StartsLog] AS s WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_QueueN]))
               WHERE s.[Queue] = @Name AND s.[Stamp] > @Since ORDER BY s.[Stamp] ASC, s.[N] ASC) + 1, 0) AS [Started]) AS w;
    DELETE FROM @K;
    INSERT INTO @K ([CKey], [Room])
    SELECT h.[ConcurrencyKey], @KeyMax - COUNT_BIG(*)
    FROM {schema}.[JobsHot] AS h WITH (READCOMMITTEDLOCK, FORCESEEK)
    WHERE @KeyMax IS NOT NULL AND h.[Queue] = @Name AND h.[Status] IN (1, 2) AND h.[ConcurrencyKey] IS NOT NULL
    GROUP BY h.[ConcurrencyKey];
    IF @RateByKey = 1 AND @RateJobs IS NOT NULL
        UPDATE k
        SET k.[Room] = CASE WHEN @RateJobs - w.[Started] < k.[Room] THEN @RateJobs - w.[Started] ELSE k.[Room] END
        FROM @K AS k
        CROSS APPLY (SELECT ISNULL(
            (SELECT TOP (1) s.[N] FROM {schema}.[StartsLog] AS s WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_KeyN]))
             WHERE s.[Queue] = @Name AND s.[CKey] = k.[CKey] ORDER BY s.[Stamp] DESC, s.[N] DESC)
            - (SELECT TOP (1) s.[N] FROM {schema}.[StartsLog] AS s WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_KeyN]))
               WHERE s.[Queue] = @Name AND s.[CKey] = k.[CKey] AND s.[Stamp] > @Since
               ORDER BY s.[Stamp] ASC, s.[N] ASC) + 1, 0) AS [Started]) AS w;
    SET @Need = CASE WHEN @QueueRoom > 0 THEN @QueueRoom ELSE 0 END;
    SET @Round = 0;
    WHILE @Need > 0 AND @Round < 10
    BEGIN
        SET @Round = @Round + 1;
        SET @Counted = 0;
        IF @RateByKey = 1 AND @RateJobs IS NOT NULL
        BEGIN
            INSERT INTO @K ([CKey], [Room])
            SELECT d.[CKey], CASE WHEN @KeyMax IS NOT NULL AND @KeyMax < @RateJobs - w.[Started] THEN @KeyMax
                ELSE @RateJobs - w.[Started] END
            FROM (
                SELECT DISTINCT p.[ConcurrencyKey] AS [CKey]
                FROM (
                    SELECT TOP (@Need + 16) j.[ConcurrencyKey]
                    FROM {schema}.[JobsHot] AS j WITH (READPAST, FORCESEEK)
                    WHERE j.[Queue] = @Name AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now AND j.[ConcurrencyKey] IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM @C AS c WHERE c.[Id] = j.[Id])
                        AND NOT EXISTS (SELECT 1 FROM @K AS k WHERE k.[CKey] = j.[ConcurrencyKey])
                    ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC
                ) AS p
            ) AS d
            CROSS APPLY (SELECT ISNULL(
            (SELECT TOP (1) s.[N] FROM {schema}.[StartsLog] AS s WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_KeyN]))
             WHERE s.[Queue] = @Name AND s.[CKey] = d.[CKey] ORDER BY s.[Stamp] DESC, s.[N] DESC)
            - (SELECT TOP (1) s.[N] FROM {schema}.[StartsLog] AS s WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_KeyN]))
               WHERE s.[Queue] = @Name AND s.[CKey] = d.[CKey] AND s.[Stamp] > @Since
               ORDER BY s.[Stamp] ASC, s.[N] ASC) + 1, 0) AS [Started]) AS w;
            SET @Counted = @@ROWCOUNT;
        END;
        INSERT INTO @C ([Id], [Queue], [CKey], [Priority], [DueAtUtc])
        SELECT TOP (@Need) j.[Id], j.[Queue], j.[ConcurrencyKey], j.[Priority], j.[DueAtUtc]
        FROM {schema}.[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
        WHERE j.[Queue] = @Name AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now
            AND NOT EXISTS (SELECT 1 FROM @C AS c WHERE c.[Id] = j.[Id])
            AND (
                j.[ConcurrencyKey] IS NULL
                OR @KeyDefault IS NULL
                OR ISNULL(
                    (SELECT k.[Room] FROM @K AS k WHERE k.[CKey] = j.[ConcurrencyKey]),
                    CASE WHEN @RateByKey = 1 AND @RateJobs IS NOT NULL THEN 0 ELSE @KeyDefault END
                ) > (SELECT COUNT_BIG(*) FROM @C AS c WHERE c.[Queue] = @Name AND c.[CKey] = j.[ConcurrencyKey])
            )
        ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC;
        SET @Got = @@ROWCOUNT;
        IF @Got = 0 AND @Counted = 0
            BREAK;
        DELETE c
        FROM @C AS c
        INNER JOIN (
            SELECT
                r.[Id],
                ROW_NUMBER() OVER (PARTITION BY r.[CKey] ORDER BY r.[Priority] DESC, r.[DueAtUtc] ASC, r.[Id] ASC) AS [Rn]
            FROM @C AS r
            WHERE r.[Queue] = @Name AND r.[CKey] IS NOT NULL
        ) AS n ON n.[Id] = c.[Id]
        LEFT JOIN @K AS k ON k.[CKey] = c.[CKey]
        WHERE @KeyDefault IS NOT NULL
            AND n.[Rn] > ISNULL(k.[Room], CASE WHEN @RateByKey = 1 AND @RateJobs IS NOT NULL THEN 0 ELSE @KeyDefault END);
        IF @@ROWCOUNT = 0 AND @Got < @Need AND @Counted = 0
            BREAK;
        SET @Need = @QueueRoom - (SELECT COUNT_BIG(*) FROM @C AS c WHERE c.[Queue] = @Name);
    END;
    SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [Guarded] = 1 AND [Name] > @Name);
END;
";

/// `complete_and_claim` only: the complete's move of the locked rows, then the ids archived
/// under the given leases and this worker (a repeat of a complete whose answer was lost finds
/// its rows there).
const ARCHIVE_DONE: &str = "DELETE h
OUTPUT DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Output], DELETED.[Tags], DELETED.[IdempotencyKey], \
    DELETED.[Priority], DELETED.[Attempt] + CASE WHEN DELETED.[Status] = 1 THEN 1 ELSE 0 END, \
    DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[WorkerId], DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], \
    DELETED.[CreatedAtUtc], CASE WHEN DELETED.[Status] = 1 THEN @Now ELSE DELETED.[StartedAtUtc] END, @Now, DELETED.[LastError], DELETED.[CreatedBy], @Now, \
    DELETED.[ConcurrencyKey] \
    INTO {schema}.[JobsArchive] ([Id], [Queue], [Kind], [Payload], [Output], [Tags], [IdempotencyKey], [Priority], [Attempt], \
    [MaxAttempts], [Lease], [WorkerId], [HeartbeatUtc], [ScheduledAtUtc], [CreatedAtUtc], [StartedAtUtc], \
    [UpdatedAtUtc], [LastError], [CreatedBy], [FinishedAtUtc], [ConcurrencyKey])
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN @Done AS d ON h.[Id] = d.[Id]
WHERE h.[Status] IN (1, 2) AND h.[WorkerId] = @WorkerId;
SELECT a.[Id]
FROM {schema}.[JobsArchive] AS a
INNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l \
    ON a.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND a.[Lease] = l.[Lease]
WHERE a.[WorkerId] = @WorkerId;
";

/// THE claim, the starts log, and the commit. The candidates are the plain queues' bounded
/// seeks (`CROSS APPLY`, as before issue 25) and the guarded queues' rows chosen in [`KEYS`]
/// (`@C`), the best `@Limit` of them numbered for their leases. Then every claimed row of a
/// rate-limited queue gets its entry in `StartsLog` (queue, key, `@Now`: the stamp, equal to
/// Start mode's `StartedAtUtc`; its ordinal after its bucket's last, [`KEYS`], "The count": an
/// `INSERT` that reads the table it writes reads it whole first, Halloween protection), in
/// this transaction: the rows this UPDATE claimed are the ones of `@C` that now carry this
/// worker and a lease of this claim's range.
const TAKE: &str = "UPDATE h
SET
    h.[Status] = CASE WHEN @Mode = 2 THEN 2 ELSE 1 END,
    h.[WorkerId] = @WorkerId,
    h.[Lease] = @FirstLease + p.[Rn] - 1,
    h.[Attempt] = CASE WHEN @Mode = 2 THEN h.[Attempt] + 1 ELSE h.[Attempt] END,
    h.[StartedAtUtc] = CASE WHEN @Mode = 2 THEN @Now ELSE h.[StartedAtUtc] END,
    h.[HeartbeatUtc] = CASE WHEN @Mode = 1 THEN NULL ELSE @Now END,
    h.[UpdatedAtUtc] = @Now,
    h.[Outcome] = NULL
OUTPUT INSERTED.[Id], INSERTED.[Queue], INSERTED.[Kind], INSERTED.[Payload], INSERTED.[Tags], \
    INSERTED.[IdempotencyKey], INSERTED.[Priority], INSERTED.[Attempt], INSERTED.[MaxAttempts], INSERTED.[Lease], \
    INSERTED.[WorkerId], INSERTED.[HeartbeatUtc], INSERTED.[ScheduledAtUtc], INSERTED.[CreatedAtUtc], \
    INSERTED.[StartedAtUtc], INSERTED.[UpdatedAtUtc], INSERTED.[LastError], INSERTED.[CreatedBy], INSERTED.[Status], \
    INSERTED.[ConcurrencyKey], INSERTED.[ExpiredHolds]
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN (
    SELECT TOP (@Limit)
        u.[Id],
        ROW_NUMBER() OVER (ORDER BY u.[Priority] DESC, u.[DueAtUtc] ASC, u.[Id] ASC) AS [Rn]
    FROM (
        SELECT c.[Id], c.[Priority], c.[DueAtUtc]
        FROM @Q AS t
        CROSS APPLY (
            SELECT TOP (CASE WHEN t.[Slots] IS NULL OR t.[Slots] > @Limit THEN @Limit ELSE t.[Slots] END)
                j.[Id], j.[Priority], j.[DueAtUtc]
            FROM {schema}.[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
            WHERE j.[Queue] = t.[Name] AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now
            ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC
        ) AS c
        WHERE t.[Guarded] = 0
        UNION ALL
        SELECT g.[Id], g.[Priority], g.[DueAtUtc]
        FROM @C AS g
    ) AS u
    ORDER BY u.[Priority] DESC, u.[DueAtUtc] ASC, u.[Id] ASC
) AS p ON p.[Id] = h.[Id]
WHERE h.[Status] = 0;
INSERT INTO {schema}.[StartsLog] ([Queue], [CKey], [Stamp], [N])
SELECT h.[Queue], h.[ConcurrencyKey], @Now,
    CASE
        WHEN t.[RateByKey] = 1 AND h.[ConcurrencyKey] IS NULL THEN 0
        ELSE ISNULL(CASE WHEN t.[RateByKey] = 1 THEN bk.[Last] ELSE bq.[Last] END, 0)
            + ROW_NUMBER() OVER (
                PARTITION BY h.[Queue], CASE WHEN t.[RateByKey] = 1 THEN h.[ConcurrencyKey] END ORDER BY h.[Id] ASC
            )
    END
FROM @C AS g
INNER JOIN @Q AS t ON t.[Name] = g.[Queue]
INNER JOIN {schema}.[JobsHot] AS h WITH (FORCESEEK) ON h.[Id] = g.[Id]
OUTER APPLY (
    SELECT TOP (1) s.[N] AS [Last]
    FROM {schema}.[StartsLog] AS s WITH (INDEX ([IX_StartsLog_QueueN]))
    WHERE t.[RateByKey] = 0 AND s.[Queue] = h.[Queue]
    ORDER BY s.[Stamp] DESC, s.[N] DESC
) AS bq
OUTER APPLY (
    SELECT TOP (1) s.[N] AS [Last]
    FROM {schema}.[StartsLog] AS s WITH (INDEX ([IX_StartsLog_KeyN]))
    WHERE t.[RateByKey] = 1 AND s.[Queue] = h.[Queue] AND s.[CKey] = h.[ConcurrencyKey]
    ORDER BY s.[Stamp] DESC, s.[N] DESC
) AS bk
WHERE t.[RateJobs] IS NOT NULL AND h.[WorkerId] = @WorkerId AND h.[Lease] >= @FirstLease \
    AND h.[Lease] < @FirstLease + @Limit;
COMMIT TRANSACTION;";

/// The claim: `@P1` JSON array of queue names, `@P2` worker id, `@P3` limit, `@P4` mode
/// (1 = reserve into Fetched, `HeartbeatUtc` NULL; 2 = start into Processing; 3 = hold: into
/// Fetched with `HeartbeatUtc` now, the claim being the job's first heartbeat). Returns the
/// claimed rows. Nothing is freed (`@Done` stays empty), so every capped queue takes the
/// counting lock or is skipped.
pub(super) fn claim() -> String {
    [CLAIM_PARAMS, PREPARE, GATES_AND_CAPS, KEYS, TAKE].concat()
}

/// `complete_and_claim` in one batch and one transaction: `@P1` leases JSON, `@P2` worker,
/// `@P3` queues JSON, `@P4` limit, `@P5` mode. Returns two result sets: the ids archived
/// under the given leases (`Id`), then the claimed rows (as [`claim`]).
pub(super) fn complete_and_claim() -> String {
    [HANDOFF_PARAMS, PREPARE, LOCK_DONE, GATES_AND_CAPS, ARCHIVE_DONE, KEYS, TAKE].concat()
}

#[cfg(test)]
#[path = "claim_tests.rs"]
mod tests;
