//! Unit tests of the guarded writes (`lease.rs`, and `rescue`, `cancel` and `requeue_dead` of `admin.rs`): the text of each statement, its guards
//! and the order of its steps.

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
    assert!(
        f.ends_with("SELECT @Result AS [Result], @Due AS [DueAtUtc], @Reason AS [Reason], @Repeated AS [Repeated];")
    );
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
    let guard = "WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2\n        \
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
    assert!(f.contains("WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2;\n"));
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
    assert!(
        d.contains("WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] IN (1, 2);")
    );
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
        c.contains("WHERE h.[Id] = @Id AND (h.[Status] IN (0, 3) OR (h.[Status] = 1 AND h.[HeartbeatUtc] IS NULL));"),
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
    let select = at(s, "SELECT h.[Id]\nFROM [chokaq].[JobsHot] AS h WITH (FORCESEEK)\nINNER JOIN OPENJSON(@Leases)");
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
    assert!(c.contains(
        "DELETED.[CreatedAtUtc], CASE WHEN DELETED.[Status] = 1 THEN @Now ELSE DELETED.[StartedAtUtc] END, @Now, DELETED.[LastError],"
    ));
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
    assert!(
        r.contains("INNER JOIN @Cancelled AS c ON c.[Id] = h.[Id]\nWHERE h.[Status] = 1 AND h.[CancelRequested] = 1;")
    );
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

/// Issue 24, and issue 36: the rescue of held jobs. Reserved Fetched jobs only expire by the
/// fetched timeout; held ones by the zombie timeout from their heartbeat, sought on
/// `IX_JobsHot_Held`'s range, and then go back to Pending with `ExpiredHolds + 1`, however
/// often they expired (an expiry never dead-letters: no `@P4`, no `MAX_EXPIRED_HOLDS`); only
/// one whose cancel was accepted goes to `JobsDlq`, `cancelled`, its last error kept.
#[test]
fn rescue_expires_held_jobs_by_the_zombie_timeout() {
    let st = Statements::new("chokaq").unwrap();
    let r = &st.rescue;
    assert!(!r.contains("@P4") && !r.contains("MaxExpiredHolds"), "no expiry limit");
    assert!(!r.contains("N'held "), "no zombie for its expiries");
    assert!(r.contains(
        "DATEADD(SECOND, -(ISNULL(q.[FetchedTimeoutMs], @FetchedTimeoutMs) / 1000), @Now)\n    )\n    AND \
         h.[HeartbeatUtc] IS NULL;\nSET @FetchedReleased = @@ROWCOUNT;"
    ));
    let pick = at(
        r,
        "INSERT INTO @H ([Id], [Dead])\nSELECT TOP (@Limit)\n    h.[Id],\n    h.[CancelRequested]\nFROM \
         [chokaq].[JobsHot] AS h WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)\nLEFT JOIN [chokaq].[Queues] AS q ON \
         q.[Name] = h.[Queue]\nWHERE h.[Status] = 1\n    AND h.[HeartbeatUtc] IS NOT NULL\n    AND h.[HeartbeatUtc] \
         < @ZombieCutoff\n",
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
        "INNER JOIN @H AS x ON x.[Id] = h.[Id]\nWHERE x.[Dead] = 1 AND h.[Status] = 1 AND h.[CancelRequested] = 1;\n\
         SET @ZombiesDead = @@ROWCOUNT;",
    );
    let cancelled = at(
        r,
        "DELETED.[HeartbeatUtc], DELETED.[ScheduledAtUtc], DELETED.[CreatedAtUtc], DELETED.[StartedAtUtc], @Now, \
         DELETED.[LastError], DELETED.[CreatedBy], @Now, 'cancelled', DELETED.[ConcurrencyKey]",
    );
    assert!(back < cancelled && cancelled < dead);
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
    assert!(zombies < first && first < gate && gate < delete && delete < next && next < at(r, "COMMIT TRANSACTION;"));
}
