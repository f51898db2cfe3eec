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
        .replace(&h[at(h, "DELETE h\nOUTPUT")..at(h, "UPDATE h\nSET\n")], "");
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
        "    IF (SELECT t.[Freed] FROM @Q AS t WHERE t.[Name] = @Name) < @Limit\n    BEGIN\n        SELECT @Got = \
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
            "SELECT TOP (@Limit)\n        c.[Id],\n        ROW_NUMBER() OVER (ORDER BY c.[Priority] DESC, c.[DueAtUtc] ASC, \
             c.[Id] ASC) AS [Rn]"
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
