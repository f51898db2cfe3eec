//! Enqueue and the claim: the two statements that put jobs in and hand them out.

/// Enqueue one or many jobs in one round trip.
///
/// `@P1` NVARCHAR(MAX): a JSON array of jobs, one object per job:
/// `{"o": ordinal, "id": "<32 hex>", "q": queue, "k": kind, "p": "<payload JSON text>",
/// "t": "<tags JSON text>"|null, "key": key|null, "pr": priority, "ma": max_attempts,
/// "at": "yyyy-mm-ddThh:mm:ss.fffffff"|null, "ds": delay seconds|null, "dn": delay nanos,
/// "by": created_by|null}`.
///
/// A job due later than now is stored Scheduled (`Status` 3), outside the claim index, and
/// promoted to Pending by the claim once due (see [`CLAIM`]); a job due now is Pending (0).
///
/// Idempotency keys are scoped per queue (`docs/contract.md`, input limits): a key already
/// held by a hot job OF THE SAME QUEUE returns that job's id (`Duplicate = 1`); the same key
/// on another queue is another job. Concurrent enqueuers of one (queue, key) serialise on the
/// key-range lock that `WITH (UPDLOCK, HOLDLOCK)` takes on the (possibly missing) entry of the
/// filtered unique index `UX_JobsHot_QueueIdempotencyKey (Queue, IdempotencyKey)`. Every probe
/// names both columns, states the index's filter (`IdempotencyKey IS NOT NULL`) and is
/// `FORCESEEK`, so it can only be a seek on that index, never a scan that range-locks the
/// whole index. The (queue, key) pairs of the batch are locked first, in index order (a
/// sorted `TOP` feeding a `LOOP JOIN` under `FORCE ORDER`), so two batches whose keys overlap
/// in opposite orders queue behind each other instead of deadlocking. The unique index is the
/// backstop (2601 → Conflict → retried). Two jobs with one key on one queue in the same
/// batch: the first is inserted, the rest get its id.
///
/// A batch of up to 10,000 jobs stays one atomic statement; with `LOCK_ESCALATION = DISABLE`
/// on the table its row locks are never escalated to a table lock.
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
DECLARE @KeysLocked BIGINT;
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
        WHEN j.[Ord] = MIN(j.[Ord]) OVER (
            PARTITION BY j.[Queue] COLLATE Latin1_General_BIN2, j.[IdempotencyKey] COLLATE Latin1_General_BIN2
        ) THEN 1
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
SELECT @KeysLocked = COUNT_BIG(*)
FROM (
    SELECT TOP (2147483647) i.[Queue], i.[IdempotencyKey]
    FROM @In AS i
    WHERE i.[IdempotencyKey] IS NOT NULL AND i.[FirstOfKey] = 1
    ORDER BY i.[Queue], i.[IdempotencyKey]
) AS k
INNER LOOP JOIN {schema}.[JobsHot] AS h WITH (UPDLOCK, HOLDLOCK, FORCESEEK)
    ON h.[Queue] = k.[Queue] AND h.[IdempotencyKey] = k.[IdempotencyKey] AND h.[IdempotencyKey] IS NOT NULL
OPTION (FORCE ORDER);
INSERT INTO {schema}.[JobsHot] (
    [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Status], [Attempt], [MaxAttempts],
    [ScheduledAtUtc], [DueAtUtc], [CreatedAtUtc], [UpdatedAtUtc], [CancelRequested], [CreatedBy]
)
OUTPUT INSERTED.[Id] INTO @Inserted ([Id])
SELECT
    i.[Id], i.[Queue], i.[Kind], i.[Payload], i.[Tags], i.[IdempotencyKey], i.[Priority],
    CASE WHEN ISNULL(i.[ScheduledAtUtc], @Now) > @Now THEN 3 ELSE 0 END, 0, i.[MaxAttempts],
    i.[ScheduledAtUtc], ISNULL(i.[ScheduledAtUtc], @Now), @Now, @Now, 0, i.[CreatedBy]
FROM @In AS i
WHERE i.[FirstOfKey] = 1
    AND (
        i.[IdempotencyKey] IS NULL
        OR NOT EXISTS (
            SELECT 1
            FROM {schema}.[JobsHot] AS h WITH (UPDLOCK, HOLDLOCK, FORCESEEK)
            WHERE h.[Queue] = i.[Queue] AND h.[IdempotencyKey] = i.[IdempotencyKey] AND h.[IdempotencyKey] IS NOT NULL
        )
    )
ORDER BY i.[Ord];
SELECT
    i.[Ord],
    CASE WHEN n.[Id] IS NOT NULL THEN n.[Id] ELSE h.[Id] END AS [Id],
    CAST(CASE WHEN n.[Id] IS NOT NULL THEN 0 ELSE 1 END AS BIT) AS [Duplicate]
FROM @In AS i
LEFT JOIN @Inserted AS n ON n.[Id] = i.[Id]
LEFT JOIN {schema}.[JobsHot] AS h WITH (FORCESEEK)
    ON i.[IdempotencyKey] IS NOT NULL AND h.[Queue] = i.[Queue] AND h.[IdempotencyKey] = i.[IdempotencyKey]
        AND h.[IdempotencyKey] IS NOT NULL
ORDER BY i.[Ord];
COMMIT TRANSACTION;";

/// The claim: due Scheduled jobs are promoted, then ONE `UPDATE … OUTPUT INSERTED` takes due
/// Pending jobs, behind the queue gate, in one transaction.
///
/// Parameters: `@P1` JSON array of queue names, `@P2` worker id, `@P3` limit, `@P4` mode
/// (1 = reserve into Fetched, `HeartbeatUtc` NULL; 2 = start into Processing; 3 = hold: into
/// Fetched with `HeartbeatUtc` now, the claim being the job's first heartbeat). Reserve sets
/// `HeartbeatUtc` NULL explicitly: a job claimed again may carry an earlier run's value, and
/// a Fetched row with a heartbeat is a held one to `cancel` and `rescue`.
///
/// 0. Promotion (its own short autocommit statement, before the transaction): per requested
///    queue, a range seek on `IX_JobsHot_Scheduled (Queue, DueAtUtc) WHERE Status = 3` for
///    `DueAtUtc <= @Now`, oldest first, at most 1,000 rows in all (`@Promote`: a burst of
///    jobs falling due at once costs each claim a bounded amount), turns Scheduled (3) into
///    Pending (0). Rows another claimer is promoting are skipped (`READPAST`). So a
///    not-yet-due job costs the claim nothing: it is in neither the claim index nor the seek.
/// 1. Queue locks: a transaction-owned `sp_getapplock` in `Shared` mode on
///    `chokaq:queue:<schema>:<queue>` for every requested queue, in name order. `control_queue`
///    takes the same resource `Exclusive` before it changes the queue's row, so the settings
///    read next cannot change before this claim commits: a pause or a cap never lands in the
///    middle of a claim that decided the queue runs uncapped. Claims share these locks, and
///    nobody takes a row lock on `Queues` in the claim, so claims and `control_queue` cannot
///    deadlock (control takes one app lock, then its row; claims take app locks in one global
///    order). A wait longer than the session's lock timeout is error 51002 (retried).
/// 2. The settings: paused and inactive queues leave `@Q`; `MaxWorkers` is read.
/// 3. Capped queues only, in name order: `sp_getapplock` in `Exclusive` mode on
///    `chokaq:cap:<schema>:<queue>` with `@LockTimeout = 0`. A claimer that does not get it at
///    once skips that queue for this call (`Slots = 0`), like PostgreSQL's `SKIP LOCKED` on the
///    queue row: claims of one capped queue never wait for each other. The holder counts the
///    active jobs (Fetched + Processing) `WITH (READCOMMITTEDLOCK)`, a locking read of committed
///    rows even when READ_COMMITTED_SNAPSHOT is ON. Every transition that raises a queue's
///    active count is a claim, and claims of a capped queue hold its cap lock until they
///    commit, so `Slots = MaxWorkers - Active` is exact and the cap is strict with RCSI ON or
///    OFF.
/// 4. Leases: `sys.sp_sequence_get_range` reserves `@Limit` consecutive values of `LeaseSeq`
///    (`NEXT VALUE FOR` is not allowed in a statement with `TOP`); the k-th claimed row, in
///    claim order, gets `@FirstLease + k - 1`. Every claimed job has its own lease, unique
///    across claims, sessions and restarts (a sequence never hands a value out twice, and a
///    restart only skips cached values).
/// 5. The UPDATE: for each queue, a bounded `FORCESEEK` (`TOP` inside `CROSS APPLY`, on
///    `IX_JobsHot_Pending`: Queue, Priority DESC, DueAtUtc, Id) reads at most
///    `min(limit, Slots)` rows `WITH (UPDLOCK, READPAST, ROWLOCK)`, skipping rows other
///    claimers hold; the outer `TOP (@Limit)` keeps the best across queues and numbers them
///    (`ROW_NUMBER` over those few rows only, never over the backlog). Cost grows with the
///    number of requested queues and the limit, never with the backlog; the claim clears
///    `Outcome`.
pub(super) const CLAIM: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Queues NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Limit INT = @P3;
DECLARE @Mode SMALLINT = @P4;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Promote INT = 1000;
DECLARE @Name VARCHAR(128);
DECLARE @Resource NVARCHAR(255);
DECLARE @LockResult INT;
DECLARE @RangeFirst SQL_VARIANT;
DECLARE @FirstLease BIGINT;
DECLARE @Q TABLE (
    [Name] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL PRIMARY KEY,
    [MaxWorkers] INT NULL,
    [Slots] INT NULL
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
IF EXISTS (SELECT 1 FROM @Q)
BEGIN
    EXEC sys.sp_sequence_get_range @sequence_name = N'{schema}.[LeaseSeq]', @range_size = @Limit, \
    @range_first_value = @RangeFirst OUTPUT;
    SET @FirstLease = CAST(@RangeFirst AS BIGINT);
END;
BEGIN TRANSACTION;
SET @Name = (SELECT MIN([Name]) FROM @Q);
WHILE @Name IS NOT NULL
BEGIN
    SET @Resource = CONCAT(N'chokaq:queue:{schema_text}:', @Name);
    EXEC @LockResult = sp_getapplock @Resource = @Resource, @LockMode = N'Shared', @LockOwner = N'Transaction';
    IF @LockResult < 0
        THROW 51002, N'chokaq: a queue lock was not granted within the lock timeout', 1;
    SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [Name] > @Name);
END;
DELETE t
FROM @Q AS t
INNER JOIN {schema}.[Queues] AS q WITH (FORCESEEK) ON q.[Name] = t.[Name]
WHERE q.[IsPaused] = 1 OR q.[IsActive] = 0;
UPDATE t
SET t.[MaxWorkers] = q.[MaxWorkers]
FROM @Q AS t
INNER JOIN {schema}.[Queues] AS q WITH (FORCESEEK) ON q.[Name] = t.[Name]
WHERE q.[MaxWorkers] IS NOT NULL;
SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [MaxWorkers] IS NOT NULL);
WHILE @Name IS NOT NULL
BEGIN
    SET @Resource = CONCAT(N'chokaq:cap:{schema_text}:', @Name);
    EXEC @LockResult = sp_getapplock @Resource = @Resource, @LockMode = N'Exclusive', @LockOwner = N'Transaction', \
    @LockTimeout = 0;
    IF @LockResult < 0
        UPDATE @Q SET [Slots] = 0 WHERE [Name] = @Name;
    ELSE
        UPDATE t
        SET t.[Slots] = CASE WHEN t.[MaxWorkers] > a.[Active] THEN t.[MaxWorkers] - a.[Active] ELSE 0 END
        FROM @Q AS t
        CROSS APPLY (
            SELECT COUNT_BIG(*) AS [Active]
            FROM {schema}.[JobsHot] AS h WITH (READCOMMITTEDLOCK, FORCESEEK)
            WHERE h.[Queue] = t.[Name] AND h.[Status] IN (1, 2)
        ) AS a
        WHERE t.[Name] = @Name;
    SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [MaxWorkers] IS NOT NULL AND [Name] > @Name);
END;
UPDATE h
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
    INSERTED.[StartedAtUtc], INSERTED.[UpdatedAtUtc], INSERTED.[LastError], INSERTED.[CreatedBy], INSERTED.[Status]
FROM {schema}.[JobsHot] AS h WITH (FORCESEEK)
INNER JOIN (
    SELECT TOP (@Limit)
        c.[Id],
        ROW_NUMBER() OVER (ORDER BY c.[Priority] DESC, c.[DueAtUtc] ASC, c.[Id] ASC) AS [Rn]
    FROM @Q AS t
    CROSS APPLY (
        SELECT TOP (CASE WHEN t.[Slots] IS NULL OR t.[Slots] > @Limit THEN @Limit ELSE t.[Slots] END)
            j.[Id], j.[Priority], j.[DueAtUtc]
        FROM {schema}.[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)
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

    fn at(sql: &str, what: &str) -> usize {
        sql.find(what).unwrap_or_else(|| panic!("missing: {what}"))
    }

    #[test]
    fn claim_is_one_update_with_the_right_hints() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.claim;
        assert_eq!(c.matches("UPDATE h").count(), 1, "one claim UPDATE");
        assert!(c.contains("OUTPUT INSERTED.[Id]"));
        assert!(c.contains("CROSS APPLY"));
        // The per-queue seek: skip-locked, U-locked, and a seek whatever the plan.
        assert!(c.contains(
            "FROM [chokaq].[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)\n        \
             WHERE j.[Queue] = t.[Name] AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now\n        \
             ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC"
        ));
        assert!(c.contains("FROM [chokaq].[JobsHot] AS h WITH (READCOMMITTEDLOCK, FORCESEEK)"));
        assert!(c.contains("FROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)\nINNER JOIN ("));
        assert!(c.contains("h.[Outcome] = NULL"), "a claim clears what an earlier fail recorded");
        // Issue 24: reserve (1) Fetched without a heartbeat, start (2) Processing, hold (3)
        // Fetched with the claim as its first heartbeat.
        assert!(c.contains("DECLARE @Mode SMALLINT = @P4;"));
        assert!(c.contains("    h.[Status] = CASE WHEN @Mode = 2 THEN 2 ELSE 1 END,\n"));
        assert!(c.contains("    h.[Attempt] = CASE WHEN @Mode = 2 THEN h.[Attempt] + 1 ELSE h.[Attempt] END,\n"));
        assert!(c.contains("    h.[HeartbeatUtc] = CASE WHEN @Mode = 1 THEN NULL ELSE @Now END,\n"));
        assert!(!c.contains("h.[Status] = @Mode"), "the mode is not a status any more");
        assert!(c.starts_with("SET XACT_ABORT ON;\nSET NOCOUNT ON;\nSET TRANSACTION ISOLATION LEVEL READ COMMITTED;"));
    }

    /// Item 1 of issue 13: every claimed row gets its own lease, drawn from a range reserved
    /// for this claim, numbered in claim order.
    #[test]
    fn claim_gives_each_row_its_own_lease_from_a_reserved_range() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.claim;
        assert!(!c.contains("NEXT VALUE FOR"), "NEXT VALUE FOR is not allowed with TOP, and was one value per claim");
        assert!(!c.contains("@Lease"), "no single lease variable for the whole claim");
        // The range: as many values as the claim can take rows (TOP (@Limit)).
        assert!(c.contains(
            "EXEC sys.sp_sequence_get_range @sequence_name = N'[chokaq].[LeaseSeq]', @range_size = @Limit, \
             @range_first_value = @RangeFirst OUTPUT;"
        ));
        assert!(c.contains("DECLARE @RangeFirst SQL_VARIANT;"), "the output parameter is sql_variant");
        assert!(c.contains("SET @FirstLease = CAST(@RangeFirst AS BIGINT);"));
        // Row k of the claim, in claim order, gets first + k - 1: distinct, inside the range.
        assert!(c.contains("h.[Lease] = @FirstLease + p.[Rn] - 1,"));
        let order = "ORDER BY c.[Priority] DESC, c.[DueAtUtc] ASC, c.[Id] ASC";
        assert!(
            c.contains(&format!("SELECT TOP (@Limit)\n        c.[Id],\n        ROW_NUMBER() OVER ({order}) AS [Rn]"))
        );
        assert!(c.contains(&format!(") AS c\n    {order}\n) AS p ON p.[Id] = h.[Id]")));
        // The numbering runs over the few rows the per-queue seeks returned, never the backlog.
        assert_eq!(c.matches("ROW_NUMBER").count(), 1);
        assert!(at(c, "ROW_NUMBER") < at(c, "CROSS APPLY (\n        SELECT TOP (CASE"));
        // The range is reserved before the transaction, after the queue list is known.
        assert!(at(c, "sp_sequence_get_range") < at(c, "BEGIN TRANSACTION;"));
        // A model of the numbering: k rows from first get k distinct leases in [first, first + limit).
        let (first, limit) = (1_000_i64, 10_i64);
        let leases: Vec<i64> = (1..=7).map(|rn| first + rn - 1).collect();
        let distinct: std::collections::BTreeSet<_> = leases.iter().collect();
        assert_eq!(distinct.len(), leases.len());
        assert!(leases.iter().all(|l| (first..first + limit).contains(l)));
    }

    /// Item 3: not-yet-due jobs live in the Scheduled state (3), outside the claim index; the
    /// claim promotes the due ones with a bounded range seek on their own index, before its
    /// transaction.
    #[test]
    fn claim_promotes_due_scheduled_jobs_with_a_bounded_seek() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.claim;
        assert!(c.contains("DECLARE @Promote INT = 1000;"));
        assert!(c.contains(
            "SELECT TOP (@Promote) r.[Id], r.[DueAtUtc]\n        \
             FROM [chokaq].[JobsHot] AS r WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)\n        \
             WHERE r.[Queue] = t.[Name] AND r.[Status] = 3 AND r.[DueAtUtc] <= @Now\n        \
             ORDER BY r.[DueAtUtc] ASC"
        ));
        assert!(c.contains("SET s.[Status] = 0\nFROM [chokaq].[JobsHot] AS s WITH (FORCESEEK)"));
        assert!(at(c, "SET s.[Status] = 0") < at(c, "BEGIN TRANSACTION;"), "promotion commits on its own");
        // The claim seek itself reads Pending rows only.
        assert_eq!(c.matches("[Status] = 3").count(), 2, "only the promotion looks at Scheduled rows");
        assert!(st.migrate_objects.contains(
            "CREATE NONCLUSTERED INDEX [IX_JobsHot_Scheduled] ON [chokaq].[JobsHot] ([Queue], [DueAtUtc]) WHERE [Status] = 3;"
        ));
        assert!(st
            .migrate_objects
            .contains("ON [chokaq].[JobsHot] ([Queue], [Priority] DESC, [DueAtUtc], [Id]) WHERE [Status] = 0;"));
        // Enqueue stores a job due later as Scheduled.
        assert!(st.enqueue.contains("CASE WHEN ISNULL(i.[ScheduledAtUtc], @Now) > @Now THEN 3 ELSE 0 END"));
    }

    /// Item 9: the queue gate is app locks, never row locks on `Queues`: shared per queue in
    /// name order (control takes the same resource exclusive), and an exclusive cap lock taken
    /// without waiting (a busy capped queue is skipped for this call).
    #[test]
    fn claim_gates_queues_with_app_locks_that_cannot_deadlock_with_control() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.claim;
        assert!(!c.contains("HOLDLOCK") && !c.contains("[Queues] AS q WITH (UPDLOCK"), "no row locks held on Queues");
        assert!(c.contains("SET @Resource = CONCAT(N'chokaq:queue:chokaq:', @Name);"));
        assert!(c.contains(
            "EXEC @LockResult = sp_getapplock @Resource = @Resource, @LockMode = N'Shared', @LockOwner = N'Transaction';"
        ));
        assert!(c.contains("SET @Resource = CONCAT(N'chokaq:cap:chokaq:', @Name);"));
        assert!(c.contains("@LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 0;"));
        assert!(c.contains("IF @LockResult < 0\n        UPDATE @Q SET [Slots] = 0 WHERE [Name] = @Name;"));
        // Name order: each loop walks MIN(Name) upwards.
        assert!(c.contains("SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [Name] > @Name);"));
        // Shared queue locks, then settings, then cap locks, then the claim.
        let shared = at(c, "N'Shared'");
        let settings = at(c, "WHERE q.[IsPaused] = 1 OR q.[IsActive] = 0;");
        let cap = at(c, "N'chokaq:cap:");
        let update = at(c, "UPDATE h\nSET");
        assert!(shared < settings && settings < cap && cap < update);
        let control = &st.control_queue;
        assert!(control.contains("DECLARE @Resource NVARCHAR(255) = CONCAT(N'chokaq:queue:chokaq:', @Name);"));
        assert!(control.contains("@LockMode = N'Exclusive', @LockOwner = N'Transaction';"));
        assert!(at(control, "sp_getapplock") < at(control, "UPDATE q"));
        assert!(!control.contains("HOLDLOCK"), "the app lock serialises controls of a queue; no key-range locks");
    }

    /// Items 5 and 13: the idempotency probe can only seek the filtered unique index, and the
    /// batch's keys are locked first, in key order. Issue 16 finding 3: keys are per queue, so
    /// every probe names the queue (the index's first column) and the key, and the lock order
    /// is the index's order (queue, key).
    #[test]
    fn enqueue_probes_keys_by_seek_and_locks_them_in_key_order() {
        let st = Statements::new("chokaq").unwrap();
        let e = &st.enqueue;
        let mut probes = 0;
        for (i, _) in e.match_indices("h.[IdempotencyKey] = ") {
            let start = e[..i].rfind('\n').map_or(0, |n| n + 1);
            let clause = &e[start..e[i..].find('\n').map_or(e.len(), |n| i + n)];
            let next = &e[i..];
            let next = &next[..next.find('\n').unwrap_or(next.len())];
            let tail = e[i..].split('\n').nth(1).unwrap_or_default();
            assert!(
                next.contains("h.[IdempotencyKey] IS NOT NULL") || tail.contains("h.[IdempotencyKey] IS NOT NULL"),
                "filter stated: {clause}"
            );
            assert!(clause.contains("h.[Queue] = "), "the probe is per queue: {clause}");
            probes += 1;
        }
        assert_eq!(probes, 3, "the key lock, the NOT EXISTS probe and the result lookup");
        assert!(e.contains(
            "SELECT TOP (2147483647) i.[Queue], i.[IdempotencyKey]\n    FROM @In AS i\n    \
             WHERE i.[IdempotencyKey] IS NOT NULL AND i.[FirstOfKey] = 1\n    ORDER BY i.[Queue], i.[IdempotencyKey]"
        ));
        assert!(e.contains(
            "ON h.[Queue] = k.[Queue] AND h.[IdempotencyKey] = k.[IdempotencyKey] AND h.[IdempotencyKey] IS NOT NULL"
        ));
        // One key twice on one queue in a batch: the first wins; on two queues: two jobs.
        assert!(e.contains(
            "PARTITION BY j.[Queue] COLLATE Latin1_General_BIN2, j.[IdempotencyKey] COLLATE Latin1_General_BIN2"
        ));
        assert!(!e.contains("PARTITION BY j.[IdempotencyKey]"));
        assert_eq!(e.matches("[JobsHot] AS h WITH (UPDLOCK, HOLDLOCK, FORCESEEK)").count(), 2);
        assert!(e.contains("LEFT JOIN [chokaq].[JobsHot] AS h WITH (FORCESEEK)"));
        assert!(e.contains("ORDER BY i.[Queue], i.[IdempotencyKey]\n) AS k\nINNER LOOP JOIN [chokaq].[JobsHot] AS h"));
        assert!(e.contains("OPTION (FORCE ORDER);"));
        assert!(at(e, "INNER LOOP JOIN") < at(e, "INSERT INTO [chokaq].[JobsHot]"), "keys locked before the insert");
        assert!(at(e, "BEGIN TRANSACTION;") < at(e, "INNER LOOP JOIN"), "and held to the commit");
    }
}
