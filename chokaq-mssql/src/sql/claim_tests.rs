//! Unit tests of the claim batch and `complete_and_claim` (issue 27 items 1, 2 and 5): the
//! text of each step, their order, and models of the slot and lease arithmetic pinned to
//! the statement's own expressions.

use super::super::Statements;

fn at(sql: &str, what: &str) -> usize {
    sql.find(what).unwrap_or_else(|| panic!("missing: {what}"))
}

/// The counting claimer's allowance (`@Got = 1`): `MaxWorkers - (Active - Freed)`, at least 0.
const COUNTING: &str = "        SET t.[Slots] = CASE
            WHEN t.[MaxWorkers] > a.[Active] - t.[Freed] THEN t.[MaxWorkers] - (a.[Active] - t.[Freed])
            ELSE 0
        END";

/// The handoff's allowance: `least(Freed, MaxWorkers - (Active - Freed))`, at least 0.
const HANDOFF: &str = "        SET t.[Slots] = CASE
            WHEN t.[MaxWorkers] <= a.[Active] - t.[Freed] THEN 0
            WHEN t.[MaxWorkers] - (a.[Active] - t.[Freed]) < t.[Freed] THEN t.[MaxWorkers] - (a.[Active] - t.[Freed])
            ELSE t.[Freed]
        END";

/// What the two `CASE`s above compute, in Rust.
fn counting(max: i64, active: i64, freed: i64) -> i64 {
    if max > active - freed {
        max - (active - freed)
    } else {
        0
    }
}

fn handoff(max: i64, active: i64, freed: i64) -> i64 {
    if max <= active - freed {
        0
    } else if max - (active - freed) < freed {
        max - (active - freed)
    } else {
        freed
    }
}

/// Item 1: `complete_and_claim` is ONE batch and one transaction, in this order: the worker's
/// own rows U-locked (the complete's guard), the gates, the settings, the cap rows, the move to
/// the archive, the ids archived, the claim, the commit.
#[test]
fn complete_and_claim_is_one_transaction_in_the_handoff_order() {
    let st = Statements::new("chokaq").unwrap();
    let h = &st.complete_and_claim;
    assert_eq!(h.matches("BEGIN TRANSACTION;").count(), 1);
    assert_eq!(h.matches("COMMIT TRANSACTION;").count(), 1);
    assert!(h.ends_with("COMMIT TRANSACTION;"));
    for (n, what) in ["@Leases", "@WorkerId", "@Queues", "@Limit", "@Mode"].iter().enumerate() {
        assert!(h.contains(&format!("DECLARE {what} ")), "{what}");
        assert!(h.contains(&format!("= @P{};", n + 1)), "{what} is @P{}", n + 1);
    }
    let lock_own = at(
        h,
        "FROM [chokaq].[JobsHot] AS h WITH (UPDLOCK, ROWLOCK, FORCESEEK)\nINNER JOIN OPENJSON(@Leases) WITH ([Id] CHAR(32) \
         '$.id', [Lease] BIGINT '$.lease') AS l ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = \
         l.[Lease]\nWHERE h.[Status] IN (1, 2) AND h.[WorkerId] = @WorkerId;",
    );
    let begin = at(h, "BEGIN TRANSACTION;");
    let gates = at(h, "AND l.[Kind] = 0\nOPTION (FORCE ORDER);");
    let settings = at(h, "WHERE q.[IsPaused] = 1 OR q.[IsActive] = 0;");
    let caps = at(h, "WHILE @Name IS NOT NULL");
    let archive = at(h, "INTO [chokaq].[JobsArchive] (");
    let done = at(h, "SELECT a.[Id]\nFROM [chokaq].[JobsArchive] AS a");
    let take = at(h, "UPDATE h\nSET\n    h.[Status] = CASE WHEN @Mode = 2");
    assert!(begin < lock_own && lock_own < gates && gates < settings && settings < caps);
    assert!(caps < archive && archive < done && done < take);
    // The move is the complete's: the same columns into the archive, the same guard, only the
    // rows locked above.
    let complete = &st.complete;
    let cols =
        &complete[at(complete, "OUTPUT DELETED.[Id]")..at(complete, "FROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)")];
    assert!(h.contains(cols), "archived like complete");
    assert!(h.contains(
        "FROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)\nINNER JOIN @Done AS d ON h.[Id] = d.[Id]\nWHERE h.[Status] IN (1, \
         2) AND h.[WorkerId] = @WorkerId;"
    ));
    // Two result sets: the archived ids, then the claimed rows.
    assert_eq!(h.matches("SELECT a.[Id]").count(), 1);
    assert_eq!(h.matches("OUTPUT INSERTED.[Id]").count(), 1);
    // The freed slots: per requested queue, the locked rows of that queue.
    assert!(h.contains(
        "INNER JOIN (SELECT f.[Queue], COUNT_BIG(*) AS [Freed] FROM @Done AS f GROUP BY f.[Queue]) AS d ON d.[Queue] = \
         t.[Name];"
    ));
    // The claim is the same batch without the completion's parts.
    let c = &st.claim;
    assert!(!c.contains("@Leases") && !c.contains("INTO [chokaq].[JobsArchive]"));
    let claim_tail = &c[at(c, "DECLARE @Now")..];
    let handoff_without_done = h[at(h, "DECLARE @Now")..]
        .replace(&h[at(h, "INSERT INTO @Done")..at(h, "SELECT @Got = COUNT_BIG(*)")], "")
        .replace(&h[at(h, "DELETE h\nOUTPUT")..at(h, "IF EXISTS (SELECT 1 FROM @Q WHERE [Guarded] = 1)")], "");
    assert_eq!(claim_tail, handoff_without_done, "the claim and the handoff share every other line");
}

/// Item 1: the cap step. The counting lock is tried (never waited for) unless the freed
/// slots cover the whole claim; without it, a call that freed slots reads the cap row shared
/// and hands on at most what it freed; a call that freed nothing skips the queue.
#[test]
fn the_cap_step_counts_under_the_lock_or_hands_on_at_most_the_freed_slots() {
    let st = Statements::new("chokaq").unwrap();
    let h = &st.complete_and_claim;
    let try_count = at(
        h,
        "    ELSE IF (SELECT t.[Freed] FROM @Q AS t WHERE t.[Name] = @Name) < @Limit\n    BEGIN\n        SELECT @Got = \
         COUNT_BIG(*)\n        FROM [chokaq].[QueueLocks] AS l WITH (XLOCK, ROWLOCK, READPAST)",
    );
    let counting = at(h, "    IF @Got = 1\n        UPDATE t\n");
    let shared = at(
        h,
        "    ELSE IF (SELECT t.[Freed] FROM @Q AS t WHERE t.[Name] = @Name) > 0\n    BEGIN\n        IF NOT EXISTS (\n            \
         SELECT 1\n            FROM [chokaq].[QueueLocks] AS l WITH (REPEATABLEREAD, ROWLOCK)\n            WHERE \
         l.[Queue] = @Name AND l.[Kind] = 1\n        )",
    );
    let skip = at(h, "    END\n    ELSE\n        UPDATE @Q SET [Slots] = 0 WHERE [Name] = @Name;");
    assert!(try_count < counting && counting < shared && shared < skip);
    assert_eq!(h.matches(COUNTING).count(), 1);
    assert_eq!(h.matches(HANDOFF).count(), 1);
    assert!(at(h, COUNTING) < shared && shared < at(h, HANDOFF));
    // The counting claimer counts with a locking read; the handoff never waits for a row.
    assert!(h[counting..shared].contains("FROM [chokaq].[JobsHot] AS h WITH (READCOMMITTEDLOCK, FORCESEEK)"));
    assert!(h[shared..skip].contains("FROM [chokaq].[JobsHot] AS h WITH (READCOMMITTEDLOCK, READPAST, FORCESEEK)"));
    // The plain claim runs the same step with nothing freed.
    assert!(st.claim.contains(COUNTING) && st.claim.contains(HANDOFF));
    // Every lock step of both batches is a row of QueueLocks, never an app lock.
    for sql in [h, &st.claim] {
        assert!(!sql.contains("sp_getapplock") && !sql.contains("chokaq:cap:") && !sql.contains("chokaq:queue:"));
    }
}

/// Item 1, the argument in numbers: a handoff never claims more than it freed (so it cannot
/// raise the count), never more than the cap's room, and nothing while what runs is at or
/// above a lowered cap; with the counting lock the room is exact.
#[test]
fn the_slot_arithmetic_never_raises_the_count_and_a_lowered_cap_hands_nothing() {
    for max in 0..8_i64 {
        for active in 0..10_i64 {
            for freed in 0..=active {
                let after = active - freed;
                let h = handoff(max, active, freed);
                assert!((0..=freed).contains(&h), "handoff {h} of {freed} freed");
                assert!(after + h <= active, "the handoff raised the count: {active} -> {}", after + h);
                assert!(after + h <= max.max(after), "over the cap {max}: {}", after + h);
                if after >= max {
                    assert_eq!(h, 0, "cap {max} lowered below {after} running: nothing handed on");
                }
                let c = counting(max, active, freed);
                assert_eq!(c, (max - after).max(0), "room under the counting lock");
            }
        }
    }
    // The conformance case complete_and_claim_lowered_cap_hands_nothing_on, step by step: cap 3
    // held by 3, lowered to 1, three completions of one job each: 0, 0, then 1.
    let mut active = 3;
    let mut claimed = Vec::new();
    for _ in 0..3 {
        let got = handoff(1, active, 1).min(1);
        claimed.push(got);
        active = active - 1 + got;
    }
    assert_eq!((claimed, active), (vec![0, 0, 1], 1));
}

/// A model of `sys.sp_sequence_get_range` for a sequence `START WITH 1 INCREMENT BY 1`: each
/// call returns the current value and moves the sequence past `range_size` values, whether
/// or not the caller's transaction later commits.
struct Sequence {
    next: i64,
    increment: i64,
}

impl Sequence {
    fn get_range(&mut self, range_size: i64) -> i64 {
        let first = self.next;
        self.next += range_size * self.increment;
        first
    }
}

/// Item 5: the lease range arithmetic, pinned to the statement's own expressions, for batches
/// of 1, 2 and the maximum: the range is `@Limit` values from `@RangeFirst`, the k-th row in
/// claim order (`ROW_NUMBER`, 1-based) gets `first + k - 1`, so n rows get n distinct leases
/// inside the range; the next range starts after it; a range drawn by a claim that rolled back
/// is a gap, never handed out again.
#[test]
fn the_lease_range_gives_row_k_first_plus_k_minus_1_for_batches_of_1_2_and_the_maximum() {
    let st = Statements::new("chokaq").unwrap();
    for sql in [&st.claim, &st.complete_and_claim] {
        assert!(sql.contains(
            "EXEC sys.sp_sequence_get_range @sequence_name = N'[chokaq].[LeaseSeq]', @range_size = @Limit, \
             @range_first_value = @RangeFirst OUTPUT;"
        ));
        assert!(sql.contains("DECLARE @RangeFirst SQL_VARIANT;\nDECLARE @FirstLease BIGINT;"));
        assert!(sql.contains("SET @FirstLease = CAST(@RangeFirst AS BIGINT);"));
        assert!(sql.contains("h.[Lease] = @FirstLease + p.[Rn] - 1,"));
        assert!(sql.contains(
            "SELECT TOP (@Limit)\n        u.[Id],\n        ROW_NUMBER() OVER (ORDER BY u.[Priority] DESC, u.[DueAtUtc] ASC, \
             u.[Id] ASC) AS [Rn]"
        ));
        // The range is drawn before the transaction: a rollback cannot give its values back.
        assert!(at(sql, "sp_sequence_get_range") < at(sql, "BEGIN TRANSACTION;"));
    }
    // The sequence the arithmetic assumes.
    assert!(st
        .migrate_objects
        .contains("CREATE SEQUENCE [chokaq].[LeaseSeq] AS BIGINT START WITH 1 INCREMENT BY 1 CACHE 100;"));
    let max = i64::from(chokaq_core::MAX_CLAIM_LIMIT);
    assert!(i32::try_from(max).is_ok(), "@Limit is an INT");
    let mut seq = Sequence { next: 1, increment: 1 };
    let mut handed = std::collections::BTreeSet::new();
    for (limit, rows) in [(1, 1), (2, 2), (2, 1), (max, max), (max, 7), (1, 0)] {
        let first = seq.get_range(limit);
        let leases: Vec<i64> = (1..=rows).map(|rn| first + rn - 1).collect();
        assert_eq!(
            leases.first().copied(),
            (rows > 0).then_some(first),
            "limit {limit}: the first row gets the first value"
        );
        assert_eq!(leases.len() as i64, rows, "limit {limit}: one lease per row");
        assert!(leases.iter().all(|l| (first..first + limit).contains(l)), "limit {limit}: inside the range");
        for l in &leases {
            assert!(handed.insert(*l), "lease {l} handed out twice");
        }
        assert_eq!(seq.next, first + limit, "limit {limit}: the next range starts after this one");
    }
    // A claim that draws a range and then rolls back: its values are skipped, never reused.
    let drawn = seq.get_range(2);
    let after = seq.get_range(1);
    assert_eq!(after, drawn + 2, "the rolled-back range [{drawn}, {}] is a gap", drawn + 1);
    assert!(!handed.contains(&drawn) && !handed.contains(&(drawn + 1)));
    // Batches 1, 2 and the maximum from the first value: exact figures.
    let mut seq = Sequence { next: 1, increment: 1 };
    assert_eq!(seq.get_range(1), 1);
    assert_eq!(seq.get_range(2), 2);
    assert_eq!(seq.get_range(max), 4);
    assert_eq!(seq.next, 4 + max, "the maximum batch took values 4 to {}", 3 + max);
}

/// Item 2: the lock rows exist before the transaction (inserted when missing, looked for first
/// without a lock), the table is created by the migration (schema version 8) and dropped with
/// the schema.
#[test]
fn the_queue_lock_rows_are_made_before_the_transaction_and_migrated() {
    let st = Statements::new("chokaq").unwrap();
    for (name, sql) in [("claim", &st.claim), ("complete_and_claim", &st.complete_and_claim)] {
        let probe = at(
            sql,
            "WHERE (SELECT COUNT_BIG(*) FROM [chokaq].[QueueLocks] AS l WITH (NOLOCK) WHERE l.[Queue] = t.[Name]) < 2",
        );
        let insert = at(sql, "    INSERT INTO [chokaq].[QueueLocks] ([Queue], [Kind])\n    SELECT t.[Name], k.[Kind]");
        assert!(sql.contains("    CROSS JOIN (VALUES (0), (1)) AS k ([Kind])\n"), "{name}");
        assert!(sql.contains("FROM [chokaq].[QueueLocks] AS l WITH (UPDLOCK, HOLDLOCK)"), "{name}");
        assert!(probe < insert && insert < at(sql, "BEGIN TRANSACTION;"), "{name}: rows made before the transaction");
        assert!(
            !sql[at(sql, "BEGIN TRANSACTION;")..].contains("HOLDLOCK"),
            "{name}: no key-range lock in the transaction"
        );
    }
    let c = &st.control_queue;
    assert!(at(c, "INSERT INTO [chokaq].[QueueLocks] ([Queue], [Kind])") < at(c, "BEGIN TRANSACTION;"));
    let o = &st.migrate_objects;
    let table = at(
        o,
        "IF OBJECT_ID(N'[chokaq].[QueueLocks]', N'U') IS NULL\n    CREATE TABLE [chokaq].[QueueLocks] (\n        [Queue] \
         VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,\n        [Kind] SMALLINT NOT NULL,\n        [LastTakenAtUtc] \
         DATETIME2(7) NULL,\n        CONSTRAINT [PK_QueueLocks] PRIMARY KEY CLUSTERED ([Queue], [Kind])\n    );",
    );
    let v8 = at(
        o,
        "IF NOT EXISTS (SELECT 1 FROM [chokaq].[SchemaVersions] WHERE [Version] = 8)\n    INSERT INTO \
         [chokaq].[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (8, SYSUTCDATETIME());",
    );
    assert!(at(o, "BEGIN TRANSACTION;") < table && table < v8 && v8 < at(o, "COMMIT TRANSACTION;"));
    assert!(st.drop_schema.contains("DROP TABLE IF EXISTS [chokaq].[QueueLocks];"));
}

/// Issue 25: a keyed or rate-limited ("guarded") queue's claim waits for its cap row
/// (exclusive, no `READPAST`), in the cap loop's name order, and never takes the handoff: its
/// counts always run under the lock. The key step runs after every lock is held (and, in
/// `complete_and_claim`, after the archive), with the claim's time read again there.
#[test]
fn guarded_queues_wait_for_their_cap_row_and_never_hand_off() {
    let st = Statements::new("chokaq").unwrap();
    for (name, sql) in [("claim", &st.claim), ("complete_and_claim", &st.complete_and_claim)] {
        let settings = at(
            sql,
            "    t.[Guarded] = CASE WHEN q.[KeyMaxWorkers] IS NOT NULL OR q.[RateJobs] IS NOT NULL THEN 1 ELSE 0 END\n",
        );
        let loop_start =
            at(sql, "SET @Name = (SELECT MIN([Name]) FROM @Q WHERE [MaxWorkers] IS NOT NULL OR [Guarded] = 1);");
        let wait = at(
            sql,
            "    IF (SELECT t.[Guarded] FROM @Q AS t WHERE t.[Name] = @Name) = 1\n    BEGIN\n        SELECT @Got = \
             COUNT_BIG(*)\n        FROM [chokaq].[QueueLocks] AS l WITH (XLOCK, ROWLOCK)\n        WHERE l.[Queue] = @Name \
             AND l.[Kind] = 1;\n        IF @Got = 0\n            THROW 51002,",
        );
        let handoff_or_skip =
            at(sql, "    END\n    ELSE IF (SELECT t.[Freed] FROM @Q AS t WHERE t.[Name] = @Name) < @Limit");
        assert!(settings < loop_start && loop_start < wait && wait < handoff_or_skip, "{name}");
        // A guarded queue leaves the branch with @Got = 1: the counting allowance (only where a
        // queue cap is set), never the handoff's.
        assert!(sql.contains("        WHERE t.[Name] = @Name AND t.[MaxWorkers] IS NOT NULL;\n    ELSE IF"), "{name}");
        let keys = at(sql, "IF EXISTS (SELECT 1 FROM @Q WHERE [Guarded] = 1)\n    SET @Now = SYSUTCDATETIME();");
        let take = at(sql, "UPDATE h\nSET\n    h.[Status] = CASE WHEN @Mode = 2");
        assert!(at(sql, "WHILE @Name IS NOT NULL") < keys && keys < take, "{name}");
        if name == "complete_and_claim" {
            assert!(at(sql, "INTO [chokaq].[JobsArchive] (") < keys, "the key counts see the archive");
        }
        // Every count of the key step is a locking read of committed rows, under the lock: the
        // running keys' (a seek), and the windows' (issue 40, L7: two one-row seeks of an
        // index of the starts log per count: queue-wide, per running key, per key met).
        let k = &sql[keys..take];
        assert_eq!(k.matches("WITH (READCOMMITTEDLOCK, FORCESEEK)").count(), 1, "{name}");
        assert_eq!(k.matches("WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_QueueN]))").count(), 2, "{name}");
        assert_eq!(k.matches("WITH (READCOMMITTEDLOCK, INDEX ([IX_StartsLog_KeyN]))").count(), 4, "{name}");
        assert_eq!(k.matches("SELECT TOP (1) s.[N] FROM").count(), 6, "{name}: one row each");
        assert!(!k.contains("COUNT_BIG(*)\n        FROM [chokaq].[StartsLog]"), "{name}: no window counted row by row");
        assert!(!k.contains("READPAST, FORCESEEK)\n        WHERE @KeyMax"), "{name}: counts never skip rows");
    }
}

/// Issue 25, the key step's text: the key room, the default room, the queue room (cap slots
/// and a queue-wide rate window), the rounds that skip full keys, the per-key ranking that
/// drops rows past a key's room, and the bound of 10 rounds.
#[test]
fn the_key_step_skips_full_keys_and_ranks_per_key() {
    let st = Statements::new("chokaq").unwrap();
    let c = &st.claim;
    assert!(c.contains(
        "    SELECT h.[ConcurrencyKey], @KeyMax - COUNT_BIG(*)\n    FROM [chokaq].[JobsHot] AS h WITH (READCOMMITTEDLOCK, \
         FORCESEEK)\n    WHERE @KeyMax IS NOT NULL AND h.[Queue] = @Name AND h.[Status] IN (1, 2) AND h.[ConcurrencyKey] IS \
         NOT NULL\n"
    ));
    // Issue 40, L7: a per-key window is the key's last ordinal less its first in the window,
    // plus one; counted for the running keys up front, then for the keys of the next due rows
    // before each round; a key not counted yet takes nothing in a round.
    assert!(c.contains("               WHERE s.[Queue] = @Name AND s.[CKey] = k.[CKey] AND s.[Stamp] > @Since\n"));
    assert!(c.contains("               WHERE s.[Queue] = @Name AND s.[CKey] = d.[CKey] AND s.[Stamp] > @Since\n"));
    assert!(c.contains("               ORDER BY s.[Stamp] ASC, s.[N] ASC) + 1, 0) AS [Started]) AS w;"));
    assert!(c.contains("                    SELECT TOP (@Need + 16) j.[ConcurrencyKey]\n"));
    assert!(c.contains(
        "                        AND NOT EXISTS (SELECT 1 FROM @K AS k WHERE k.[CKey] = j.[ConcurrencyKey])\n"
    ));
    assert!(c.contains("CASE WHEN @RateByKey = 1 AND @RateJobs IS NOT NULL THEN 0 ELSE @KeyDefault END"));
    assert!(c.contains(
        "        WHEN @RateByKey = 1 AND @RateJobs IS NOT NULL AND (@KeyMax IS NULL OR @RateJobs < @KeyMax) THEN \
         @RateJobs\n        ELSE @KeyMax\n"
    ));
    assert!(c.contains("    IF @RateJobs IS NOT NULL AND @RateByKey = 0\n"));
    assert!(c.contains(
        "               WHERE s.[Queue] = @Name AND s.[Stamp] > @Since ORDER BY s.[Stamp] ASC, s.[N] ASC) + 1, 0)"
    ));
    assert!(c.contains(
        "    SET @Since = DATEADD(MILLISECOND, -(@RatePerMs % 1000), DATEADD(SECOND, -(@RatePerMs / 1000), @Now));"
    ));
    let scan = at(
        c,
        "        FROM [chokaq].[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)\n        WHERE j.[Queue] = \
         @Name AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now\n",
    );
    assert!(c[scan..].contains(
        "                OR ISNULL(\n                    (SELECT k.[Room] FROM @K AS k WHERE k.[CKey] = j.[ConcurrencyKey]),\n\
         \u{20}                   CASE WHEN @RateByKey = 1 AND @RateJobs IS NOT NULL THEN 0 ELSE @KeyDefault END\n\
         \u{20}               ) > (SELECT COUNT_BIG(*) FROM @C AS c WHERE c.[Queue] = @Name AND c.[CKey] = j.[ConcurrencyKey])\n"
    ));
    let drop =
        at(c, "ROW_NUMBER() OVER (PARTITION BY r.[CKey] ORDER BY r.[Priority] DESC, r.[DueAtUtc] ASC, r.[Id] ASC)");
    assert!(scan < drop);
    assert!(c.contains(
        "        WHERE @KeyDefault IS NOT NULL\n            AND n.[Rn] > ISNULL(k.[Room], CASE WHEN @RateByKey = 1 AND \
         @RateJobs IS NOT NULL THEN 0 ELSE @KeyDefault END);\n"
    ));
    assert!(c.contains("    WHILE @Need > 0 AND @Round < 10\n"));
    assert!(c.contains("        IF @@ROWCOUNT = 0 AND @Got < @Need AND @Counted = 0\n            BREAK;\n"));
    // The claim takes the plain queues by their seeks and the guarded ones from @C only.
    assert!(c.contains(
        "        WHERE t.[Guarded] = 0\n        UNION ALL\n        SELECT g.[Id], g.[Priority], g.[DueAtUtc]\n"
    ));
}

/// Issue 25, the rate limit's starts log: every claimed row of a rate-limited queue gets one
/// entry (queue, key, `@Now`) in the claim's transaction, after the claim and before the
/// commit; `@Now` is also Start mode's `StartedAtUtc`, and it is read after the locks.
#[test]
fn a_rate_limited_claim_logs_each_start_with_the_claims_stamp() {
    let st = Statements::new("chokaq").unwrap();
    for sql in [&st.claim, &st.complete_and_claim] {
        let log = at(sql, "INSERT INTO [chokaq].[StartsLog] ([Queue], [CKey], [Stamp], [N])\nSELECT h.[Queue], h.[ConcurrencyKey], @Now,\n");
        assert!(sql[log..].contains(
            "FROM @C AS g\nINNER JOIN @Q AS t ON t.[Name] = g.[Queue]\nINNER JOIN [chokaq].[JobsHot] AS h WITH (FORCESEEK) ON \
             h.[Id] = g.[Id]\n"
        ));
        assert!(sql[log..].contains(
            "WHERE t.[RateJobs] IS NOT NULL AND h.[WorkerId] = @WorkerId AND h.[Lease] >= @FirstLease \
             AND h.[Lease] < @FirstLease + @Limit;\nCOMMIT TRANSACTION;"
        ));
        // Issue 40, L7: each start numbered after its bucket's last ordinal (the queue's, or
        // its key's; key-less ones under a limit per key 0).
        assert!(sql[log..].contains("        WHEN t.[RateByKey] = 1 AND h.[ConcurrencyKey] IS NULL THEN 0\n"));
        assert!(sql[log..]
            .contains("    WHERE t.[RateByKey] = 1 AND s.[Queue] = h.[Queue] AND s.[CKey] = h.[ConcurrencyKey]\n"));
        assert!(sql[log..].contains("    WHERE t.[RateByKey] = 0 AND s.[Queue] = h.[Queue]\n"));
        assert!(at(sql, "WHERE h.[Status] = 0;\n") < log);
        assert!(sql.contains("    h.[StartedAtUtc] = CASE WHEN @Mode = 2 THEN @Now ELSE h.[StartedAtUtc] END,\n"));
        assert_eq!(sql.matches("SET @Now = SYSUTCDATETIME();").count(), 1, "one re-read, after the locks");
        assert!(
            at(sql, "SET @Now = SYSUTCDATETIME();")
                > at(sql, "FROM [chokaq].[QueueLocks] AS l WITH (XLOCK, ROWLOCK)\n")
        );
    }
}

/// A model of the key step (the rounds as the statement runs them) against the reference
/// greedy walk (the memory backend's claim): on random small backlogs of a few keys, with key
/// rooms from running jobs and rate windows, a default room and a queue room, the rounds take
/// exactly the rows the greedy walk takes, in claim order: no key at its room holds back
/// another, and no key goes past its room.
#[test]
fn the_rounds_take_what_the_greedy_walk_takes() {
    use std::collections::HashMap;
    type Row = (u32, Option<u8>);
    fn room_of(k: u8, rooms: &HashMap<u8, i64>, default: Option<i64>) -> Option<i64> {
        rooms.get(&k).copied().or(default)
    }
    fn greedy(rows: &[Row], rooms: &HashMap<u8, i64>, default: Option<i64>, queue_room: i64) -> Vec<u32> {
        let mut taken: Vec<u32> = Vec::new();
        let mut per: HashMap<u8, i64> = HashMap::new();
        for (id, key) in rows {
            if taken.len() as i64 >= queue_room {
                break;
            }
            if let Some(k) = key {
                if let Some(room) = room_of(*k, rooms, default) {
                    if *per.get(k).unwrap_or(&0) >= room {
                        continue;
                    }
                }
                *per.entry(*k).or_default() += 1;
            }
            taken.push(*id);
        }
        taken
    }
    // The statement: rounds of TOP (@Need) over rows not in @C whose key has room counting
    // @C, then the per-key ranking drops rows past a key's room.
    fn rounds(rows: &[Row], rooms: &HashMap<u8, i64>, default: Option<i64>, queue_room: i64) -> (Vec<u32>, u32) {
        let mut c: Vec<Row> = Vec::new();
        let mut need = queue_room.max(0);
        let mut round = 0;
        while need > 0 && round < 10 {
            round += 1;
            let before = c.clone();
            let count = |k: u8| before.iter().filter(|(_, x)| *x == Some(k)).count() as i64;
            let picked: Vec<Row> = rows
                .iter()
                .filter(|(id, key)| {
                    !before.iter().any(|(x, _)| x == id)
                        && match key {
                            None => true,
                            Some(k) => default.is_none() || room_of(*k, rooms, default).unwrap() > count(*k),
                        }
                })
                .take(need as usize)
                .copied()
                .collect();
            let got = picked.len() as i64;
            c.extend(picked);
            if got == 0 {
                break;
            }
            c.sort_by_key(|(id, _)| *id);
            let mut rank: HashMap<u8, i64> = HashMap::new();
            let len = c.len();
            c.retain(|(_, key)| match key {
                Some(k) if default.is_some() => {
                    let r = rank.entry(*k).or_default();
                    *r += 1;
                    *r <= room_of(*k, rooms, default).unwrap()
                }
                _ => true,
            });
            let dropped = len - c.len();
            if dropped == 0 && got < need {
                break;
            }
            need = queue_room - c.len() as i64;
        }
        (c.into_iter().map(|(id, _)| id).collect(), round)
    }
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _ in 0..5_000 {
        let keys = 1 + next(4) as u8;
        // Claim order is id order here (priority and due time folded into the id).
        let rows: Vec<Row> = (0..next(30) as u32)
            .map(|id| (id, if next(4) == 0 { None } else { Some(next(u64::from(keys)) as u8) }))
            .collect();
        let default = if next(5) == 0 { None } else { Some(next(4) as i64) };
        let mut rooms = HashMap::new();
        if let Some(d) = default {
            for k in 0..keys {
                if next(2) == 0 {
                    // Running jobs or logged starts: a room below the default, maybe negative (a
                    // lowered cap).
                    rooms.insert(k, d - next(4) as i64);
                }
            }
        }
        let queue_room = next(12) as i64;
        let expect = greedy(&rows, &rooms, default, queue_room);
        let (got, used) = rounds(&rows, &rooms, default, queue_room);
        assert_eq!(got, expect, "rows {rows:?} rooms {rooms:?} default {default:?} queue room {queue_room}");
        assert!(used <= u32::from(keys) + 2, "{used} rounds for {keys} keys");
    }
}
