//! The statement of the enqueue room: one batch puts one or many jobs in.

/// Enqueue one or many jobs in one round trip.
///
/// `@P1` NVARCHAR(MAX): a JSON array of jobs, one object per job:
/// `{"o": ordinal, "id": "<32 hex>", "q": queue, "k": kind, "p": "<payload JSON text>",
/// "t": "<tags JSON text>"|null, "key": key|null, "pr": priority, "ma": max_attempts,
/// "at": "yyyy-mm-ddThh:mm:ss.fffffff"|null, "ds": delay seconds|null, "dn": delay nanos,
/// "by": created_by|null, "ck": concurrency key|null}`. The concurrency key is stored as given
/// (`NVARCHAR(255)`, binary collation; core validated it: at most 255 bytes, text rules).
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
    [FirstOfKey] BIT NOT NULL,
    [ConcurrencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL
);
DECLARE @Inserted TABLE ([Id] BINARY(16) NOT NULL PRIMARY KEY);
DECLARE @KeysLocked BIGINT;
INSERT INTO @In ([Ord], [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [MaxAttempts], \
    [ScheduledAtUtc], [CreatedBy], [FirstOfKey], [ConcurrencyKey])
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
    END,
    j.[ConcurrencyKey]
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
    [CreatedBy] NVARCHAR(255) '$.by',
    [ConcurrencyKey] NVARCHAR(255) '$.ck'
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
    [ScheduledAtUtc], [DueAtUtc], [CreatedAtUtc], [UpdatedAtUtc], [CancelRequested], [CreatedBy], [ConcurrencyKey]
)
OUTPUT INSERTED.[Id] INTO @Inserted ([Id])
SELECT
    i.[Id], i.[Queue], i.[Kind], i.[Payload], i.[Tags], i.[IdempotencyKey], i.[Priority],
    CASE WHEN ISNULL(i.[ScheduledAtUtc], @Now) > @Now THEN 3 ELSE 0 END, 0, i.[MaxAttempts],
    i.[ScheduledAtUtc], ISNULL(i.[ScheduledAtUtc], @Now), @Now, @Now, 0, i.[CreatedBy], i.[ConcurrencyKey]
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

// The claim batch itself is built in `claim.rs`, with `complete_and_claim` from the same parts.

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
            "FROM [chokaq].[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)\n            \
             WHERE j.[Queue] = t.[Name] AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now\n            \
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
        let numbered = order.replace("c.[", "u.[");
        assert!(c.contains(&format!(
            "SELECT TOP (@Limit)\n        u.[Id],\n        ROW_NUMBER() OVER ({numbered}) AS [Rn]"
        )));
        assert!(c.contains(&format!(") AS u\n    {numbered}\n) AS p ON p.[Id] = h.[Id]")));
        // The numbering runs over the few rows the per-queue seeks (and the guarded queues'
        // chosen rows, `@C`) returned, never the backlog; the only other ROW_NUMBERs rank the
        // guarded queues' candidates per key (issue 25) and number the starts a claim logs in
        // their bucket (issue 40, L7).
        assert_eq!(c.matches("ROW_NUMBER").count(), 3);
        assert_eq!(c.matches("ROW_NUMBER() OVER (\n                PARTITION BY h.[Queue]").count(), 1);
        assert_eq!(c.matches("ROW_NUMBER() OVER (PARTITION BY r.[CKey]").count(), 1);
        assert!(at(c, "ROW_NUMBER() OVER (ORDER BY u.") < at(c, "CROSS APPLY (\n            SELECT TOP (CASE"));
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

    /// Item 9 (issue 13), moved to rows by issue 27 item 2: the queue gate is the queue's
    /// `Kind` 0 row of `QueueLocks`, shared in name order (control updates the same row), and
    /// the cap is its `Kind` 1 row, updated without waiting (a busy capped queue is skipped for
    /// this call). No app lock is left in the claim or the control, and no row lock is held
    /// on `Queues`.
    #[test]
    fn claim_gates_queues_with_lock_rows_that_cannot_deadlock_with_control() {
        let st = Statements::new("chokaq").unwrap();
        let c = &st.claim;
        assert!(!c.contains("[Queues] AS q WITH (UPDLOCK") && !c.contains("[Queues] AS q WITH (HOLDLOCK"));
        assert!(!c.contains("sp_getapplock") && !st.control_queue.contains("sp_getapplock"));
        assert!(c.contains(
            "INNER LOOP JOIN [chokaq].[QueueLocks] AS l WITH (REPEATABLEREAD, ROWLOCK, FORCESEEK)\n    \
             ON l.[Queue] = g.[Name] AND l.[Kind] = 0\nOPTION (FORCE ORDER);"
        ));
        assert!(c.contains("    SELECT TOP (2147483647) t.[Name]\n    FROM @Q AS t\n    ORDER BY t.[Name]\n) AS g"));
        assert!(c.contains(
            "        SELECT @Got = COUNT_BIG(*)\n        FROM [chokaq].[QueueLocks] AS l WITH (XLOCK, ROWLOCK, READPAST)\n        \
             WHERE l.[Queue] = @Name AND l.[Kind] = 1;\n        IF @Got = 1\n            UPDATE l\n"
        ));
        // Not an UPDATE with READPAST: its update lock is compatible with a handoff's shared
        // lock, so it would not skip the row but wait to convert.
        assert!(!c.contains("[QueueLocks] AS l WITH (ROWLOCK, READPAST)"));
        assert!(c.contains("    ELSE\n        UPDATE @Q SET [Slots] = 0 WHERE [Name] = @Name;"));
        // Name order: the cap loop walks MIN(Name) upwards.
        assert!(
            c.contains("SET @Name = (SELECT MIN([Name]) FROM @Q WHERE ([MaxWorkers] IS NOT NULL OR [Guarded] = 1) AND [Name] > @Name);")
        );
        // Shared queue gates, then settings, then cap rows, then the claim.
        let shared = at(c, "AND l.[Kind] = 0");
        let settings = at(c, "WHERE q.[IsPaused] = 1 OR q.[IsActive] = 0;");
        let cap = at(c, "AND l.[Kind] = 1;");
        let update = at(c, "UPDATE h\nSET");
        assert!(shared < settings && settings < cap && cap < update);
        let control = &st.control_queue;
        let lock = at(
            control,
            "UPDATE l\nSET l.[LastTakenAtUtc] = @Now\nFROM [chokaq].[QueueLocks] AS l WITH (ROWLOCK)\n\
             WHERE l.[Queue] = @Name AND l.[Kind] = 0;\nIF @@ROWCOUNT = 0\n    THROW 51002,",
        );
        assert!(at(control, "BEGIN TRANSACTION;") < lock && lock < at(control, "UPDATE q"));
        assert!(!control.contains("READPAST"), "a control waits for the claims in flight");
        assert!(!control[at(control, "BEGIN TRANSACTION;")..].contains("HOLDLOCK"), "no key-range locks held");
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
