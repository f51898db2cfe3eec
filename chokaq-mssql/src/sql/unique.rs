//! The statements of unique jobs (issue 42, `docs/unique.md`): schema version 10 (the
//! `Uniques` table), the enqueue of one unique job, `unique_of` and `prune_uniques`.

/// Schema version 10, a batch of its own after `migrate_workers`, under the `migrate` row of
/// `Locks`: one row per unique key (64 hex digits of SHA-256, computed by the client), naming
/// the job holding it, the states that count (a bitmask), the settings (JSON) and the end of
/// the period bucket. The primary key holds one holder per key; `IX_Uniques_JobId` serves
/// `unique_of`. No claim or move statement touches the table.
pub(super) const MIGRATE_UNIQUES: &str = "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
BEGIN TRANSACTION;
UPDATE l
SET l.[LastTakenAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Locks] AS l WITH (ROWLOCK)
WHERE l.[Name] = 'migrate';
IF @@ROWCOUNT = 0
    THROW 51003, N'chokaq: the migration lock row is missing from the Locks table', 1;
IF OBJECT_ID(N'{schema}.[Uniques]', N'U') IS NULL
    CREATE TABLE {schema}.[Uniques] (
        [UniqueKey] VARCHAR(64) COLLATE Latin1_General_BIN2 NOT NULL CONSTRAINT [PK_Uniques] PRIMARY KEY CLUSTERED,
        [JobId] BINARY(16) NOT NULL,
        [States] INT NOT NULL,
        [Settings] NVARCHAR(MAX) NOT NULL,
        [ExpiresAtUtc] DATETIME2(7) NULL,
        [CreatedAtUtc] DATETIME2(7) NOT NULL
    );
IF NOT EXISTS (SELECT 1 FROM sys.indexes \
    WHERE [name] = N'IX_Uniques_JobId' AND [object_id] = OBJECT_ID(N'{schema}.[Uniques]'))
    CREATE NONCLUSTERED INDEX [IX_Uniques_JobId] ON {schema}.[Uniques] ([JobId]);
IF NOT EXISTS (SELECT 1 FROM {schema}.[SchemaVersions] WHERE [Version] = 10)
    INSERT INTO {schema}.[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (10, SYSUTCDATETIME());
COMMIT TRANSACTION;";

/// Where the unique block goes: right after the enqueue's `BEGIN TRANSACTION;`.
const AFTER_BEGIN: &str = "BEGIN TRANSACTION;\n";

/// The unique block of [`enqueue_unique`], inside the enqueue's transaction. `@P2` is a JSON
/// object (read with `OPENJSON … WITH`, whose `NVARCHAR(MAX)` column keeps settings longer
/// than the 4,000 characters `JSON_VALUE` returns): `{"key": "<64 hex>", "states": bitmask, "settings": "<JSON text>", "exp":
/// "yyyy-mm-ddThh:mm:ss.fffffff"|null}`.
///
/// The key row is read `WITH (UPDLOCK, HOLDLOCK, ROWLOCK)`: an update lock on the row, or on
/// the key range where it would be, held to the commit, so racing enqueuers of one key queue
/// here (no MERGE: without HOLDLOCK it is racy). The holder's state is then read (the moves
/// between the job tables are atomic, so it is in one table or none) and mapped to its bit:
/// Pending 1, Scheduled 2, Fetched 4, Processing 8, waiting for a retry 16, succeeded 32,
/// cancelled 64, discarded 128 (`chokaq_core::UniqueState`). A holder in one of the job's
/// states makes it a duplicate (`@UDup`); otherwise the row is taken over (or inserted). The
/// primary key is the backstop: a 2627 there is a `Conflict`, retried by the caller.
const UNIQUE_BLOCK: &str = "DECLARE @U NVARCHAR(MAX) = @P2;
DECLARE @UKey VARCHAR(64);
DECLARE @UStates INT;
DECLARE @USettings NVARCHAR(MAX);
DECLARE @UExpires DATETIME2(7);
SELECT @UKey = j.[UKey], @UStates = j.[UStates], @USettings = j.[USettings], @UExpires = j.[UExpires]
FROM OPENJSON(@U) WITH ([UKey] VARCHAR(64) '$.key', [UStates] INT '$.states', [USettings] NVARCHAR(MAX) '$.settings', [UExpires] DATETIME2(7) '$.exp') AS j;
DECLARE @UNew BINARY(16) = (SELECT TOP (1) i.[Id] FROM @In AS i ORDER BY i.[Ord]);
DECLARE @UHolder BINARY(16) = NULL;
DECLARE @UState INT = 0;
DECLARE @UDup BINARY(16) = NULL;
SELECT @UHolder = u.[JobId]
FROM {schema}.[Uniques] AS u WITH (UPDLOCK, HOLDLOCK, ROWLOCK)
WHERE u.[UniqueKey] = @UKey;
IF @UHolder IS NULL
    INSERT INTO {schema}.[Uniques] ([UniqueKey], [JobId], [States], [Settings], [ExpiresAtUtc], [CreatedAtUtc])
    VALUES (@UKey, @UNew, @UStates, @USettings, @UExpires, @Now);
ELSE
BEGIN
    SELECT @UState = CASE
        WHEN h.[Id] IS NOT NULL THEN CASE
            WHEN h.[Status] = 1 THEN 4
            WHEN h.[Status] = 2 THEN 8
            WHEN h.[Attempt] > 0 THEN 16
            WHEN h.[DueAtUtc] > @Now THEN 2
            ELSE 1
        END
        WHEN a.[Id] IS NOT NULL THEN 32
        WHEN d.[Id] IS NOT NULL THEN CASE WHEN d.[Reason] = 'cancelled' THEN 64 ELSE 128 END
        ELSE 0
    END
    FROM (SELECT @UHolder AS [Id]) AS k
    LEFT JOIN {schema}.[JobsHot] AS h ON h.[Id] = k.[Id]
    LEFT JOIN {schema}.[JobsArchive] AS a ON a.[Id] = k.[Id]
    LEFT JOIN {schema}.[JobsDlq] AS d ON d.[Id] = k.[Id];
    IF (@UState & @UStates) <> 0
        SET @UDup = @UHolder;
    ELSE
        UPDATE {schema}.[Uniques]
        SET [JobId] = @UNew, [States] = @UStates, [Settings] = @USettings, [ExpiresAtUtc] = @UExpires,
            [CreatedAtUtc] = @Now
        WHERE [UniqueKey] = @UKey AND [JobId] = @UHolder;
END;
";

/// The enqueue's insert guard, and the same with the duplicate left out.
const INSERT_GUARD: &str = "WHERE i.[FirstOfKey] = 1\n";
const INSERT_GUARD_UNIQUE: &str = "WHERE i.[FirstOfKey] = 1 AND @UDup IS NULL\n";

/// The enqueue's result id, and the same with a unique duplicate's holder.
const RESULT_ID: &str = "CASE WHEN n.[Id] IS NOT NULL THEN n.[Id] ELSE h.[Id] END AS [Id]";
const RESULT_ID_UNIQUE: &str =
    "CASE WHEN n.[Id] IS NOT NULL THEN n.[Id] WHEN @UDup IS NOT NULL THEN @UDup ELSE h.[Id] END AS [Id]";

/// The enqueue of ONE unique job: [`super::enqueue::ENQUEUE`] (`@P1`, a one-job array) with
/// the unique block after its `BEGIN TRANSACTION`, its insert skipped for a duplicate, and the
/// holder's id returned for it (`Duplicate = 1`). The idempotency key keeps its own rules.
pub(super) fn enqueue_unique() -> String {
    let base = super::enqueue::ENQUEUE;
    for anchor in [AFTER_BEGIN, INSERT_GUARD, RESULT_ID] {
        assert_eq!(base.matches(anchor).count(), 1, "the enqueue statement changed: {anchor:?}");
    }
    base.replace(AFTER_BEGIN, &format!("{AFTER_BEGIN}{UNIQUE_BLOCK}"))
        .replace(INSERT_GUARD, INSERT_GUARD_UNIQUE)
        .replace(RESULT_ID, RESULT_ID_UNIQUE)
}

/// `@P1` job id: the key it holds, its settings and the end of its period.
pub(super) const UNIQUE_OF: &str = "SET NOCOUNT ON;
SELECT TOP (1) u.[UniqueKey], u.[Settings], u.[ExpiresAtUtc]
FROM {schema}.[Uniques] AS u
WHERE u.[JobId] = @P1
ORDER BY u.[UniqueKey];";

/// Pruning: `@P1` limit, `@P2` a random key. At most `@P1` key rows from `@P2` on in key order
/// (wrapping around) are locked, skipping rows an enqueue holds (`UPDLOCK, READPAST`); then
/// those that decide nothing any more are deleted: the job is not hot, and the states count no
/// finished state (224), or the period is over, or the job is in no table. Returns `Pruned`.
pub(super) const UNIQUE_PRUNE: &str = "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Limit INT = @P1;
DECLARE @From VARCHAR(64) = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Pruned INT = 0;
DECLARE @Keys TABLE ([UniqueKey] VARCHAR(64) COLLATE Latin1_General_BIN2 NOT NULL PRIMARY KEY);
BEGIN TRANSACTION;
INSERT INTO @Keys ([UniqueKey])
SELECT TOP (@Limit) u.[UniqueKey]
FROM {schema}.[Uniques] AS u WITH (UPDLOCK, READPAST, ROWLOCK)
WHERE u.[UniqueKey] >= @From
ORDER BY u.[UniqueKey];
INSERT INTO @Keys ([UniqueKey])
SELECT TOP (@Limit - (SELECT COUNT(*) FROM @Keys)) u.[UniqueKey]
FROM {schema}.[Uniques] AS u WITH (UPDLOCK, READPAST, ROWLOCK)
WHERE u.[UniqueKey] < @From
ORDER BY u.[UniqueKey];
DELETE u
FROM {schema}.[Uniques] AS u
INNER JOIN @Keys AS k ON k.[UniqueKey] = u.[UniqueKey]
WHERE NOT EXISTS (SELECT 1 FROM {schema}.[JobsHot] AS h WHERE h.[Id] = u.[JobId])
    AND (
        (u.[States] & 224) = 0
        OR u.[ExpiresAtUtc] <= @Now
        OR (
            NOT EXISTS (SELECT 1 FROM {schema}.[JobsArchive] AS a WHERE a.[Id] = u.[JobId])
            AND NOT EXISTS (SELECT 1 FROM {schema}.[JobsDlq] AS d WHERE d.[Id] = u.[JobId])
        )
    );
SET @Pruned = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT CAST(@Pruned AS BIGINT) AS [Pruned];";

#[cfg(test)]
mod tests {
    use super::super::Statements;

    /// The unique enqueue is the plain one plus the key block: the block locks the key row
    /// with UPDLOCK and HOLDLOCK inside the transaction, before the insert, and the insert and
    /// the result know the duplicate.
    #[test]
    fn the_unique_enqueue_locks_the_key_row_before_the_insert() {
        let st = Statements::new("chokaq").unwrap();
        let e = &st.enqueue_unique;
        let at = |what: &str| e.find(what).unwrap_or_else(|| panic!("missing: {what}"));
        assert!(e.contains("FROM [chokaq].[Uniques] AS u WITH (UPDLOCK, HOLDLOCK, ROWLOCK)"));
        assert!(at("BEGIN TRANSACTION;") < at("WITH (UPDLOCK, HOLDLOCK, ROWLOCK)"));
        assert!(at("WITH (UPDLOCK, HOLDLOCK, ROWLOCK)") < at("INSERT INTO [chokaq].[JobsHot]"));
        assert!(e.contains("WHERE i.[FirstOfKey] = 1 AND @UDup IS NULL\n"));
        assert!(e.contains("WHEN @UDup IS NOT NULL THEN @UDup"));
        assert!(!e.contains("MERGE"), "no MERGE: racy without HOLDLOCK");
        assert!(e.contains("WHERE [UniqueKey] = @UKey AND [JobId] = @UHolder;"), "compare-and-set");
        // The plain enqueue is untouched.
        assert!(!st.enqueue.contains("Uniques"));
        assert!(st.prune_uniques.contains("WITH (UPDLOCK, READPAST, ROWLOCK)"));
    }
}
