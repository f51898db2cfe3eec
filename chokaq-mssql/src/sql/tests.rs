//! Unit tests of the statements as a whole (`sql.rs`): the schema they name, the bound
//! values, the migration's versions, and what each statement returns.

use chokaq_core::ErrorKind;

use super::*;

#[test]
fn every_statement_names_only_the_schema_it_was_given() {
    let all = all_statements("jobs_x").unwrap();
    assert_eq!(all.len(), 58);
    let mut names: Vec<_> = all.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all.len(), "statement names are unique");
    for (name, sql) in &all {
        assert!(!sql.contains("[chokaq]"), "{name}");
        assert!(!sql.contains("{s}") && !sql.contains("{out}"), "{name}: unexpanded placeholder");
        assert!(!sql.contains('{') && !sql.contains('}'), "{name}: unexpanded placeholder");
        assert!(!sql.to_ascii_uppercase().contains("MERGE "), "{name}: no MERGE anywhere");
    }
    for bad in ["bad]name", "x'; DROP TABLE y; --", "", "1a"] {
        assert_eq!(all_statements(bad).unwrap_err().kind(), ErrorKind::InvalidInput, "{bad}");
    }
    assert_eq!(ensure_test_database("db]x").unwrap_err().kind(), ErrorKind::InvalidInput);
    // A database name is not held to the schema rule (reserved names, 48 bytes).
    let long = "d".repeat(crate::config::MAX_DATABASE_NAME_LEN);
    assert!(ensure_test_database(&long).unwrap().contains(&format!("CREATE DATABASE [{long}];")));
    assert!(ensure_test_database(&format!("{long}x")).is_err());
    assert!(ensure_test_database("dbo").is_ok());
    for reserved in ["dbo", "sys", "guest"] {
        assert_eq!(all_statements(reserved).unwrap_err().kind(), ErrorKind::InvalidInput, "{reserved}");
    }
}

fn at(sql: &str, what: &str) -> usize {
    sql.find(what).unwrap_or_else(|| panic!("missing: {what}"))
}

/// Item 15: a `SET` inside a batch sent with `sp_executesql` ends with the batch, so a
/// trailing one does nothing. Only the session setup (a plain batch) may end with one.
#[test]
fn no_batch_ends_with_a_set_that_does_nothing() {
    for (name, sql) in all_statements("chokaq").unwrap() {
        let last = sql.trim_end().rsplit(';').nth(1).unwrap_or_default().trim();
        if name != "session_setup" {
            assert!(!last.starts_with("SET "), "{name} ends with {last:?}");
        }
    }
}

/// Item 11: a blocked statement fails after 5 s with 1222 (retried) instead of waiting for
/// the 60 s client timeout with its own locks held.
#[test]
fn sessions_wait_at_most_five_seconds_for_a_lock() {
    assert!(SESSION_SETUP.ends_with("SET LOCK_TIMEOUT 5000;"));
    assert!(SESSION_SETUP.contains("SET XACT_ABORT ON;"), "a lock timeout then rolls the whole batch back");
}

/// Item 4: lock escalation is disabled on the three job tables, only where it is not yet.
#[test]
fn migration_disables_lock_escalation_on_the_job_tables() {
    let st = Statements::new("chokaq").unwrap();
    let m = &st.migrate_lock_escalation;
    for table in ["JobsHot", "JobsArchive", "JobsDlq"] {
        assert!(m.contains(&format!("ALTER TABLE [chokaq].[{table}] SET (LOCK_ESCALATION = DISABLE);")), "{table}");
        assert!(m.contains(&format!("OBJECT_ID(N'[chokaq].[{table}]') AND [lock_escalation] <> 1)")), "{table}");
    }
    assert!(!st.migrate_objects.contains("LOCK_ESCALATION"), "kept out of the grammar-checked batches");
    // Purge deletes in statements of at most 4,000 rows.
    for sql in [&st.purge_archive, &st.purge_dlq] {
        assert!(sql
            .contains("SET @Chunk = CASE WHEN @BatchSize - @Deleted > 4000 THEN 4000 ELSE @BatchSize - @Deleted END;"));
        assert!(sql.contains("DELETE TOP (@Chunk)"));
        // Each DELETE is its own transaction, except for maintenance (`@Locked`), whose
        // batch holds the `rescue` row of `Locks` (issue 11 item 10).
        assert_eq!(sql.matches("BEGIN TRANSACTION").count(), 1);
        assert!(sql.contains("IF @Locked = 1\nBEGIN\n    BEGIN TRANSACTION;"), "{sql}");
        assert!(sql.contains("FROM [chokaq].[Locks] AS l WITH (ROWLOCK, READPAST)"));
    }
}

/// Items 3 and 12 in the migration: version 2 (Scheduled state, `Outcome`, per-queue
/// history indexes) upgrades version 1 in place; a compatibility level under 130 is a
/// clear error before anything is created.
#[test]
fn migration_checks_the_compatibility_level_and_upgrades_version_1() {
    let st = Statements::new("chokaq").unwrap();
    let m = &st.migrate_schema;
    assert!(m.contains(
        "DECLARE @Level INT = (SELECT [compatibility_level] FROM sys.databases WHERE [database_id] = DB_ID());"
    ));
    assert!(m.contains("IF @Level < 130"));
    assert!(m.contains("THROW 51001, @Message, 1;"));
    assert!(at(m, "THROW 51001") < at(m, "CREATE SCHEMA"));
    let o = &st.migrate_objects;
    assert!(o.contains("IF COL_LENGTH(N'[chokaq].[JobsHot]', N'Outcome') IS NULL"));
    assert!(o.contains("IF COL_LENGTH(N'[chokaq].[JobsDlq]', N'Outcome') IS NULL"));
    assert!(
        o.contains("UPDATE [chokaq].[JobsHot] SET [Status] = 3 WHERE [Status] = 0 AND [DueAtUtc] > SYSUTCDATETIME();")
    );
    assert!(o.contains("VALUES (2, SYSUTCDATETIME());"));
    assert!(o.contains("CREATE NONCLUSTERED INDEX [IX_JobsArchive_Queue] ON [chokaq].[JobsArchive] ([Queue]) INCLUDE ([FinishedAtUtc]);"));
    assert!(o.contains(
        "CREATE NONCLUSTERED INDEX [IX_JobsDlq_Queue] ON [chokaq].[JobsDlq] ([Queue]) INCLUDE ([FinishedAtUtc]);"
    ));
}

/// Issue 16 finding 3: schema version 3 makes idempotency keys unique per queue. The new
/// filtered index on (Queue, IdempotencyKey) is created before the global one is dropped,
/// in the migration's one transaction, and version 3 is recorded.
#[test]
fn migration_version_3_scopes_idempotency_keys_per_queue() {
    let st = Statements::new("chokaq").unwrap();
    let o = &st.migrate_objects;
    let create = at(
        o,
        "CREATE UNIQUE NONCLUSTERED INDEX [UX_JobsHot_QueueIdempotencyKey] ON [chokaq].[JobsHot] ([Queue], \
         [IdempotencyKey]) WHERE [IdempotencyKey] IS NOT NULL;",
    );
    let drop = at(
        o,
        "IF EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'UX_JobsHot_IdempotencyKey' AND [object_id] = \
         OBJECT_ID(N'[chokaq].[JobsHot]'))\n    DROP INDEX [UX_JobsHot_IdempotencyKey] ON [chokaq].[JobsHot];",
    );
    assert!(create < drop, "uniqueness never lapses");
    assert!(!o.contains("ON [chokaq].[JobsHot] ([IdempotencyKey])"), "no global key index is created any more");
    let v3 = at(
        o,
        "IF NOT EXISTS (SELECT 1 FROM [chokaq].[SchemaVersions] WHERE [Version] = 3)\n    \
         INSERT INTO [chokaq].[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (3, SYSUTCDATETIME());",
    );
    assert!(drop < v3 && v3 < at(o, "COMMIT TRANSACTION;"));
    assert!(at(o, "BEGIN TRANSACTION;") < create);
    // requeue_dead's conflict check is the same index: per queue.
    assert!(st.requeue_dead.contains("INTO [chokaq].[JobsHot] ("));
}

/// Issue 24: schema version 7 adds `ExpiredHolds` (NOT NULL, default 0, only where it is
/// missing) and the held jobs' index, and records version 7, in the migration's transaction.
#[test]
fn migration_version_7_adds_expired_holds_and_the_held_index() {
    let st = Statements::new("chokaq").unwrap();
    let o = &st.migrate_objects;
    let add = at(
        o,
        "IF COL_LENGTH(N'[chokaq].[JobsHot]', N'ExpiredHolds') IS NULL\n    ALTER TABLE [chokaq].[JobsHot] ADD \
         [ExpiredHolds] INT NOT NULL CONSTRAINT [DF_JobsHot_ExpiredHolds] DEFAULT (0);",
    );
    let index = at(
        o,
        "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'IX_JobsHot_Held' AND [object_id] = \
         OBJECT_ID(N'[chokaq].[JobsHot]'))\n    CREATE NONCLUSTERED INDEX [IX_JobsHot_Held] ON [chokaq].[JobsHot] \
         ([HeartbeatUtc]) INCLUDE ([Queue]) WHERE [Status] = 1 AND [HeartbeatUtc] IS NOT NULL;",
    );
    let v7 = at(
        o,
        "IF NOT EXISTS (SELECT 1 FROM [chokaq].[SchemaVersions] WHERE [Version] = 7)\n    \
         INSERT INTO [chokaq].[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (7, SYSUTCDATETIME());",
    );
    assert!(at(o, "BEGIN TRANSACTION;") < add && add < v7 && index < v7 && v7 < at(o, "COMMIT TRANSACTION;"));
    assert!(at(o, "CREATE TABLE [chokaq].[JobsHot] (") < add);
    // Nothing else in the batch reads the new column (it compiles against a version-6 table).
    assert_eq!(o.matches("ExpiredHolds").count(), 3);
    // Every statement that reads or writes it comes after the migration: enqueue leaves it
    // to its default; the claim and the handoff only return it (issue 36: in their OUTPUT,
    // once, for `ClaimedJob::expired_holds`).
    assert!(!st.enqueue.contains("ExpiredHolds"));
    for (name, sql) in [("claim", &st.claim), ("complete_and_claim", &st.complete_and_claim)] {
        assert_eq!(sql.matches("ExpiredHolds").count(), 1, "{name}");
        assert!(sql.contains("INSERTED.[Status], INSERTED.[ConcurrencyKey], INSERTED.[ExpiredHolds]\nFROM"), "{name}");
    }
}

/// Issue 16 finding 4: the migration and rescue locks are rows of `[schema].[Locks]`,
/// which only roles with privileges on the schema can lock; no app lock named from the
/// schema is left in either.
#[test]
fn migration_and_rescue_lock_rows_of_the_schema_not_app_locks() {
    let st = Statements::new("chokaq").unwrap();
    for (name, sql) in [
        ("migrate_schema", &st.migrate_schema),
        ("migrate_locks", &st.migrate_locks),
        ("migrate_objects", &st.migrate_objects),
        ("rescue", &st.rescue),
    ] {
        assert!(!sql.contains("sp_getapplock"), "{name}");
        assert!(!sql.contains("chokaq:migrate") && !sql.contains("chokaq:rescue"), "{name}");
    }
    let m = &st.migrate_locks;
    assert!(st
        .migrate_schema
        .contains("    BEGIN CATCH\n        IF SCHEMA_ID(N'chokaq') IS NULL\n            THROW;\n    END CATCH;"));
    assert!(!st.migrate_schema.contains("[Locks]"), "the table is created once the schema exists, in its own batch");
    assert!(m.contains(
        "CREATE TABLE [chokaq].[Locks] (\n            [Name] VARCHAR(32) COLLATE Latin1_General_BIN2 NOT NULL \
         CONSTRAINT [PK_Locks] PRIMARY KEY CLUSTERED,\n            [LastTakenAtUtc] DATETIME2(7) NULL\n        );"
    ));
    // Racing creators: the loser's error is swallowed only if the object exists now.
    assert!(m.contains(
        "    BEGIN CATCH\n        IF OBJECT_ID(N'[chokaq].[Locks]', N'U') IS NULL\n            THROW;\n    END CATCH;"
    ));
    assert!(m.contains(
        "FROM (VALUES ('migrate'), ('rescue')) AS v ([Name])\nWHERE NOT EXISTS (SELECT 1 FROM [chokaq].[Locks] AS l \
         WITH (UPDLOCK, HOLDLOCK) WHERE l.[Name] = v.[Name]);"
    ));
    // The migration waits for the row (a concurrent migration holds it to its commit).
    let o = &st.migrate_objects;
    let lock = at(
        o,
        "BEGIN TRANSACTION;\nUPDATE l\nSET l.[LastTakenAtUtc] = SYSUTCDATETIME()\nFROM [chokaq].[Locks] AS l WITH \
         (ROWLOCK)\nWHERE l.[Name] = 'migrate';\nIF @@ROWCOUNT = 0\n    THROW 51003,",
    );
    assert!(lock < at(o, "CREATE TABLE"), "the lock comes before any DDL");
    assert!(!o[..at(o, "CREATE TABLE")].contains("READPAST"), "the migration waits, it does not skip");
    // Rescue skips the row when someone holds it, and then does nothing.
    let r = &st.rescue;
    let take = at(
        r,
        "BEGIN TRANSACTION;\nUPDATE l\nSET l.[LastTakenAtUtc] = @Now\nFROM [chokaq].[Locks] AS l WITH (ROWLOCK, \
         READPAST)\nWHERE l.[Name] = 'rescue';\nIF @@ROWCOUNT = 0\nBEGIN\n    ROLLBACK TRANSACTION;\n    \
         SELECT CAST(0 AS BIT) AS [Ran]",
    );
    assert!(take < at(r, "UPDATE TOP (@Limit) h"), "nothing is moved before the lock is held");
    // The test support drops the table with the schema.
    assert!(st.drop_schema.contains("DROP TABLE IF EXISTS [chokaq].[Locks];"));
}

/// Issue 16 finding 1, test support: `force` can store a payload's raw text as is (NULL
/// keeps it), so a test can make a row that a read cannot decode.
#[test]
fn force_can_store_a_raw_payload() {
    let st = Statements::new("chokaq").unwrap();
    assert!(st.force.contains("DECLARE @RawPayload NVARCHAR(MAX) = @P14;"));
    assert!(st.force.contains("    [Payload] = ISNULL(@RawPayload, [Payload]),\n"));
}

/// Item 8: every count is a `BIGINT`.
#[test]
fn counts_are_bigint() {
    let st = Statements::new("chokaq").unwrap();
    for (name, sql) in [("stats", &st.stats), ("presence_many", &st.presence_many), ("claim", &st.claim)] {
        assert!(!sql.contains("COUNT(*)"), "{name}");
        assert!(!sql.contains("THEN 1 ELSE 0 END)"), "{name}: an INT sum");
    }
    // Four counts, and the busiest keys' count and its ORDER BY (issue 25).
    assert_eq!(st.stats.matches("COUNT_BIG(*)").count(), 6);
    assert!(st.stats.contains("SUM(CASE WHEN h.[Status] = 1 THEN CAST(1 AS BIGINT) ELSE 0 END)"));
}

/// The Scheduled state is Pending to every reader: stats counts it (and its due rows for
/// `oldest_due_at`), the list filter for Pending includes it, the test support keeps it
/// consistent with the due time.
#[test]
fn scheduled_rows_read_as_pending() {
    let st = Statements::new("chokaq").unwrap();
    assert!(st.stats.contains(
        "SELECT s.[Queue], COUNT_BIG(*), 0, 0, 0, 0, 0, MIN(CASE WHEN s.[DueAtUtc] <= @Now THEN s.[DueAtUtc] END)"
    ));
    assert!(st.stats.contains("WHERE s.[Status] = 3"));
    assert!(st.list_hot.contains("(@Status IS NULL OR t.[Status] = @Status OR (@Status = 0 AND t.[Status] = 3))"));
    assert!(st.force.contains(") > @Now THEN 3\n        ELSE 0\n    END,"));
    assert!(st.requeue_dead.contains("DELETED.[CreatedBy], 0, DELETED.[CreatedAtUtc], 0"), "requeued: Pending, due");
}

/// Item 7: `get_job` reads one consistent view whatever the database allows.
#[test]
fn get_job_reads_one_consistent_view() {
    let st = Statements::new("chokaq").unwrap();
    let g = &st.get_job;
    assert!(g.contains("[snapshot_isolation_state] = 1)\n    SET TRANSACTION ISOLATION LEVEL SNAPSHOT;"));
    assert!(g.contains(
        "ELSE IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND \
         [is_read_committed_snapshot_on] = 1)\n    SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;"
    ));
    assert!(g.contains("SET DEADLOCK_PRIORITY LOW;"));
    assert!(at(g, "BEGIN TRANSACTION;") < at(g, "SELECT 0 AS [Loc]"));
    assert_eq!(g.matches("UNION ALL").count(), 2, "still one statement over the three tables");
}

#[test]
fn render_puts_the_quoted_name_and_its_text_in_their_places() {
    let sql = render("SELECT SCHEMA_ID(N'{schema_text}') FROM {schema}.[T];", Name::Schema("jobs_1")).unwrap();
    assert_eq!(sql, "SELECT SCHEMA_ID(N'jobs_1') FROM [jobs_1].[T];");
    let sql = render("IF DB_ID(N'{database_text}') IS NULL CREATE DATABASE {database};", Name::Database("d")).unwrap();
    assert_eq!(sql, "IF DB_ID(N'd') IS NULL CREATE DATABASE [d];");
    let st = Statements::new("jobs_1").unwrap();
    assert!(st.migrate_schema.contains("IF SCHEMA_ID(N'jobs_1') IS NULL"));
    assert!(st.migrate_schema.contains("EXEC (N'CREATE SCHEMA [jobs_1]');"));
    assert!(st.rescue.contains("FROM [jobs_1].[Locks] AS l WITH (ROWLOCK, READPAST)"));
    let db = ensure_test_database("chokaq_conformance_rcsi_off").unwrap();
    assert!(db.contains("CREATE DATABASE [chokaq_conformance_rcsi_off];"));
    assert!(!db.contains("rcsi_on"));
    assert!(db.contains("ALTER DATABASE [chokaq_conformance_rcsi_off] SET ALLOW_SNAPSHOT_ISOLATION OFF;"));
    assert!(db.contains("ALTER DATABASE [chokaq_conformance_rcsi_off] SET ALLOW_SNAPSHOT_ISOLATION ON;"));
}

/// Every `[Name]` a statement uses is defined somewhere: a table, column or index of the
/// DDL, a column of a table variable or `OPENJSON ... WITH`, an alias (`AS [Name]`), or a
/// catalog column. Catches a misspelt column without a server.
#[test]
fn every_bracketed_name_is_defined() {
    fn bracketed(sql: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = sql;
        while let Some(i) = rest.find('[') {
            let Some(j) = rest[i..].find(']') else { break };
            out.push(rest[i + 1..i + j].to_string());
            rest = &rest[i + j + 1..];
        }
        out
    }
    let all = all_statements("chokaq").unwrap();
    let st = Statements::new("chokaq").unwrap();
    let mut defined: std::collections::BTreeSet<String> = bracketed(&format!(
        "{}{}{}{}{}{}{}",
        st.migrate_locks,
        st.migrate_objects,
        st.migrate_keys,
        st.migrate_workers,
        st.migrate_start_ordinals,
        st.migrate_uniques,
        st.migrate_outputs
    ))
    .into_iter()
    .collect();
    for catalog in [
        "name",
        "object_id",
        "database_id",
        "snapshot_isolation_state",
        "is_read_committed_snapshot_on",
        "compatibility_level",
        "lock_escalation",
        "session_id",
        "program_name",
        "value",
        "chokaq",
        "chokaq_conformance_rcsi_on",
    ] {
        defined.insert(catalog.to_string());
    }
    for (_, sql) in &all {
        // Declarations: "DECLARE @X TABLE (" and "WITH (" column lists, and aliases.
        for line in sql.lines() {
            let t = line.trim_start();
            if t.starts_with('[')
                && (t.contains(" INT")
                    || t.contains("CHAR")
                    || t.contains("BINARY")
                    || t.contains("BIT")
                    || t.contains("DATETIME2")
                    || t.contains("BIGINT"))
            {
                defined.extend(bracketed(t).into_iter().take(1));
            }
            if t.starts_with("DECLARE @") && t.contains(" TABLE (") {
                defined.extend(bracketed(t));
            }
            if t.contains("OPENJSON(") && t.contains(" WITH (") {
                defined.extend(bracketed(t));
            }
        }
        let mut rest = sql.as_str();
        while let Some(i) = rest.find("AS [") {
            let after = &rest[i + 4..];
            if let Some(j) = after.find(']') {
                defined.insert(after[..j].to_string());
            }
            rest = &rest[i + 4..];
        }
    }
    for (name, sql) in &all {
        for ident in bracketed(sql) {
            assert!(defined.contains(&ident), "{name}: [{ident}] is not defined anywhere");
        }
    }
    // And the check has teeth.
    assert!(!defined.contains("HeartBeatUtc"));
}

#[test]
fn parameters_are_numbered_densely() {
    // Every @Pn used by a statement is declared once, and n runs 1..=max with no gap, so
    // the Rust side binds exactly that many values.
    for (name, sql) in all_statements("chokaq").unwrap() {
        let mut max = 0;
        let bytes = sql.as_bytes();
        let mut i = 0;
        let mut seen = std::collections::BTreeSet::new();
        while i + 2 < bytes.len() {
            if bytes[i] == b'@' && bytes[i + 1] == b'P' && bytes[i + 2].is_ascii_digit() {
                let mut j = i + 2;
                while j < bytes.len() && bytes[j].is_ascii_digit() {
                    j += 1;
                }
                let n: usize = sql[i + 2..j].parse().unwrap();
                seen.insert(n);
                max = max.max(n);
                i = j;
            } else {
                i += 1;
            }
        }
        assert_eq!(seen.len(), max, "{name}: parameters {seen:?}");
    }
}

/// How many values the Rust side binds for each statement (see backend.rs); must equal
/// the highest `@Pn` the statement uses.
#[test]
fn bound_values_match_parameters() {
    let binds = [
        ("session_setup", 0),
        ("ping", 0),
        ("migrate_schema", 0),
        ("migrate_locks", 0),
        ("migrate_objects", 0),
        ("migrate_keys", 0),
        ("migrate_start_ordinals", 0),
        ("migrate_lock_escalation", 0),
        ("enqueue", 1),
        ("claim", 4),
        ("complete_and_claim", 5),
        ("start", 2),
        ("heartbeat", 2),
        ("complete", 2),
        ("fail", 8),
        ("release", 2),
        ("dead_letter_undecodable", 4),
        ("rescue", 3),
        ("cancel", 1),
        ("control_queue", 9),
        ("queue_settings", 1),
        ("requeue_dead", 1),
        ("purge_archive", 5),
        ("purge_dlq", 6),
        ("stats", 0),
        ("get_job", 1),
        ("list_hot", 8),
        ("list_archive", 8),
        ("list_dlq", 8),
        ("db_now", 0),
        ("add_starts", 4),
        ("force", 14),
        ("presence_many", 1),
        ("kill_connections", 1),
        ("drop_schema", 0),
        ("migrate_workers", 0),
        ("register_worker", 5),
        ("deregister_worker", 1),
        ("list_workers", 0),
        ("prune_workers", 1),
        ("throughput_all", 1),
        ("throughput_queue", 2),
        ("force_worker_seen", 2),
        ("force_finished_at", 2),
        ("schedule_register", 6),
        ("schedule_get", 1),
        ("schedule_list", 0),
        ("schedule_set_enabled", 2),
        ("schedule_mark_stale", 2),
        ("enqueue_tick", 6),
        ("migrate_uniques", 0),
        ("enqueue_unique", 2),
        ("unique_of", 1),
        ("prune_uniques", 2),
        ("migrate_outputs", 0),
        ("record_output", 4),
        ("get_output", 1),
        ("ensure_test_database", 2),
    ];
    let all = all_statements("chokaq").unwrap();
    assert_eq!(all.len(), binds.len());
    for ((name, sql), (bname, n)) in all.iter().zip(binds) {
        assert_eq!(*name, bname);
        let max = (1..=20).filter(|i| sql.contains(&format!("@P{i}"))).max().unwrap_or(0);
        assert_eq!(max, n, "{name}: highest parameter @P{max}, {n} values bound");
    }
}

/// Issue 25: schema version 9. The columns (the concurrency key on the three job tables,
/// the per-key cap and the rate limit on `Queues`) and the `StartsLog` table are added in
/// `migrate_objects`, only where missing, and nothing else there names them (the batch
/// compiles against a version-8 table); their indexes and the version record are the next
/// batch, `migrate_keys`, under the `migrate` row; the log's lock escalation is disabled.
#[test]
fn migration_version_9_adds_keys_caps_rates_and_the_starts_log() {
    let st = Statements::new("chokaq").unwrap();
    let o = &st.migrate_objects;
    for table in ["JobsHot", "JobsArchive", "JobsDlq"] {
        assert!(o.contains(&format!(
            "IF COL_LENGTH(N'[chokaq].[{table}]', N'ConcurrencyKey') IS NULL\n    ALTER TABLE [chokaq].[{table}] ADD \
             [ConcurrencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL;"
        )));
    }
    assert_eq!(o.matches("ConcurrencyKey").count(), 6, "only the three checks and the three ALTERs");
    for (col, ty) in [("KeyMaxWorkers", "INT NULL"), ("RateJobs", "INT NULL"), ("RatePerMs", "BIGINT NULL")] {
        assert!(o.contains(&format!(
            "IF COL_LENGTH(N'[chokaq].[Queues]', N'{col}') IS NULL\n    ALTER TABLE [chokaq].[Queues] ADD [{col}] {ty};"
        )));
    }
    assert!(o.contains("ADD [RateByKey] BIT NOT NULL CONSTRAINT [DF_Queues_RateByKey] DEFAULT (0);"));
    let log = at(o, "IF OBJECT_ID(N'[chokaq].[StartsLog]', N'U') IS NULL\n    CREATE TABLE [chokaq].[StartsLog] (");
    assert!(log < at(o, "COMMIT TRANSACTION;"));
    assert!(!o.contains("IX_JobsHot_ActiveKey") && !o.contains("CX_StartsLog") && !o.contains("VALUES (9,"));
    let k = &st.migrate_keys;
    let lock = at(k, "FROM [chokaq].[Locks] AS l WITH (ROWLOCK)\nWHERE l.[Name] = 'migrate';");
    let active = at(
        k,
        "CREATE NONCLUSTERED INDEX [IX_JobsHot_ActiveKey] ON [chokaq].[JobsHot] ([Queue], [ConcurrencyKey]) WHERE \
         [Status] IN (1, 2) AND [ConcurrencyKey] IS NOT NULL;",
    );
    let clustered = at(k, "CREATE CLUSTERED INDEX [CX_StartsLog] ON [chokaq].[StartsLog] ([Queue], [Stamp]);");
    let v9 = at(
        k,
        "IF NOT EXISTS (SELECT 1 FROM [chokaq].[SchemaVersions] WHERE [Version] = 9)\n    INSERT INTO \
         [chokaq].[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (9, SYSUTCDATETIME());",
    );
    assert!(at(k, "BEGIN TRANSACTION;") < lock && lock < active && active < clustered && clustered < v9);
    assert!(v9 < at(k, "COMMIT TRANSACTION;"));
    assert!(st.migrate_lock_escalation.contains("ALTER TABLE [chokaq].[StartsLog] SET (LOCK_ESCALATION = DISABLE);"));
    assert!(st.drop_schema.contains("DROP TABLE IF EXISTS [chokaq].[StartsLog];"));
    // The migration sends it right after migrate_objects (src/migrate.rs).
    let run = include_str!("../migrate.rs");
    assert!(at(run, "sql().migrate_objects") < at(run, "sql().migrate_keys"));
    assert!(at(run, "sql().migrate_keys") < at(run, "sql().migrate_lock_escalation"));
}

/// Issue 25: `control_queue` sets the per-key cap (op 9) and the rate limit (op 10, all
/// three columns; NULLs clear it), and every reader of a queue's row returns them.
#[test]
fn control_sets_and_readers_return_key_caps_and_rate_limits() {
    let st = Statements::new("chokaq").unwrap();
    let c = &st.control_queue;
    assert!(c.contains("    q.[KeyMaxWorkers] = CASE WHEN @Op = 9 THEN @KeyMaxWorkers ELSE q.[KeyMaxWorkers] END,\n"));
    assert!(c.contains("    q.[RateJobs] = CASE WHEN @Op = 10 THEN @RateJobs ELSE q.[RateJobs] END,\n"));
    assert!(c.contains("    q.[RatePerMs] = CASE WHEN @Op = 10 THEN @RatePerMs ELSE q.[RatePerMs] END,\n"));
    assert!(c.contains("    q.[RateByKey] = CASE WHEN @Op = 10 THEN ISNULL(@RateByKey, 0) ELSE q.[RateByKey] END,\n"));
    assert!(c.contains("        CASE WHEN @Op = 10 THEN ISNULL(@RateByKey, 0) ELSE 0 END,\n"));
    for sql in [c, &st.queue_settings] {
        assert!(
            sql.contains("[FetchedTimeoutMs], [KeyMaxWorkers], [RateJobs], [RatePerMs], [RateByKey], [UpdatedAtUtc]")
        );
    }
    assert!(st.stats.contains("c.[KeyMaxWorkers], c.[RateJobs], c.[RatePerMs], c.[RateByKey], c.[UpdatedAtUtc],"));
}

/// Issue 25: the concurrency key is stored by enqueue, returned by the claim, `get_job`
/// and every list, and copied by every move between tables.
#[test]
fn the_concurrency_key_is_stored_returned_and_copied_by_every_move() {
    let st = Statements::new("chokaq").unwrap();
    assert!(st.enqueue.contains("    [ConcurrencyKey] NVARCHAR(255) '$.ck'\n) AS j;"));
    assert!(st.enqueue.contains("[CancelRequested], [CreatedBy], [ConcurrencyKey]\n)"));
    assert!(st.enqueue.contains("0, i.[CreatedBy], i.[ConcurrencyKey]\nFROM @In AS i"));
    assert!(st.claim.contains("INSERTED.[Status], INSERTED.[ConcurrencyKey], INSERTED.[ExpiredHolds]\nFROM"));
    assert!(st
        .complete_and_claim
        .contains("INSERTED.[Status], INSERTED.[ConcurrencyKey], INSERTED.[ExpiredHolds]\nFROM"));
    for (name, sql) in [("get_job", &st.get_job), ("list_hot", &st.list_hot), ("list_archive", &st.list_archive)] {
        assert!(sql.contains(".[CreatedBy], ") && sql.contains(".[ConcurrencyKey], "), "{name}");
    }
    assert!(st.list_dlq.contains("t.[ConcurrencyKey], "));
    for (name, sql, moves) in [
        ("complete", &st.complete, 1),
        ("complete_and_claim", &st.complete_and_claim, 1),
        ("fail", &st.fail, 1),
        ("release", &st.release, 1),
        ("rescue", &st.rescue, 2),
        ("cancel", &st.cancel, 1),
        ("dead_letter_undecodable", &st.dead_letter_undecodable, 1),
        ("requeue_dead", &st.requeue_dead, 1),
    ] {
        assert_eq!(sql.matches("DELETED.[ConcurrencyKey]").count(), moves, "{name}: copied");
        let into = sql.matches("], [ConcurrencyKey])").count() + sql.matches("], [ConcurrencyKey]\n)").count();
        assert_eq!(into, moves, "{name}: into the target's column");
    }
}
