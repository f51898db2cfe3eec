//! Periodic jobs: the `Schedules` table (`docs/periodic.md`, schema version 4, created by
//! [`super::migrate::MIGRATE_OBJECTS`]). Names, specs, time zones and groups compare with the
//! binary collation.

/// The columns of a `Schedules` row.
macro_rules! schedule_cols {
    ($a:literal) => {
        concat!(
            $a,
            ".[Name], ",
            $a,
            ".[Spec], ",
            $a,
            ".[TimeZone], ",
            $a,
            ".[GroupName], ",
            $a,
            ".[NextTickUtc], ",
            $a,
            ".[LastEnqueuedTickUtc], ",
            $a,
            ".[Enabled], ",
            $a,
            ".[Stale], ",
            $a,
            ".[CreatedAtUtc], ",
            $a,
            ".[UpdatedAtUtc]"
        )
    };
}

/// Upsert by name: `@P1` name, `@P2` spec, `@P3` time zone, `@P4` group, `@P5` next tick
/// (NULL keeps it), `@P6` replace. An existing row is updated only if it holds the same
/// definition, is stale, or `@P6` is 1; a missing one is inserted. `UPDLOCK, HOLDLOCK` takes
/// the key-range lock of a missing name, so two registrations of one new name serialise.
/// Returns the row as it is now: the caller compares it with its definition (a different one
/// is a conflict).
pub(super) const SCHEDULE_REGISTER: &str = concat!(
    "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Name NVARCHAR(200) = @P1;
DECLARE @Spec NVARCHAR(200) = @P2;
DECLARE @TimeZone NVARCHAR(64) = @P3;
DECLARE @GroupName NVARCHAR(100) = @P4;
DECLARE @NextTick DATETIME2(7) = @P5;
DECLARE @Replace BIT = @P6;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
BEGIN TRANSACTION;
UPDATE s
SET s.[Spec] = @Spec, s.[TimeZone] = @TimeZone, s.[GroupName] = @GroupName,
    s.[NextTickUtc] = ISNULL(@NextTick, s.[NextTickUtc]), s.[Stale] = 0, s.[UpdatedAtUtc] = @Now
FROM {schema}.[Schedules] AS s WITH (UPDLOCK, HOLDLOCK)
WHERE s.[Name] = @Name
    AND (
        (s.[Spec] = @Spec AND s.[TimeZone] = @TimeZone AND s.[GroupName] = @GroupName)
        OR s.[Stale] = 1
        OR @Replace = 1
    );
IF @@ROWCOUNT = 0
    INSERT INTO {schema}.[Schedules] (
        [Name], [Spec], [TimeZone], [GroupName], [NextTickUtc], [Enabled], [Stale], [CreatedAtUtc], [UpdatedAtUtc]
    )
    SELECT @Name, @Spec, @TimeZone, @GroupName, @NextTick, 1, 0, @Now, @Now
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.[Schedules] AS s WITH (UPDLOCK, HOLDLOCK) WHERE s.[Name] = @Name);
COMMIT TRANSACTION;
SELECT ",
    schedule_cols!("s"),
    "
FROM {schema}.[Schedules] AS s
WHERE s.[Name] = @Name;"
);

/// One row: `@P1` name.
pub(super) const SCHEDULE_GET: &str =
    concat!("SELECT ", schedule_cols!("s"), " FROM {schema}.[Schedules] AS s WHERE s.[Name] = @P1;");

/// Every row, by name.
pub(super) const SCHEDULE_LIST: &str =
    concat!("SELECT ", schedule_cols!("s"), " FROM {schema}.[Schedules] AS s ORDER BY s.[Name];");

/// Pause or resume: `@P1` name, `@P2` enabled. Returns the row (none if there is none).
pub(super) const SCHEDULE_SET_ENABLED: &str = concat!(
    "SET NOCOUNT ON;
UPDATE s
SET s.[Enabled] = @P2, s.[UpdatedAtUtc] = SYSUTCDATETIME()
OUTPUT ",
    schedule_cols!("INSERTED"),
    "
FROM {schema}.[Schedules] AS s
WHERE s.[Name] = @P1;"
);

/// Marks stale the rows of group `@P1` not named in the JSON array `@P2`. Returns `Marked`.
pub(super) const SCHEDULE_MARK_STALE: &str = "SET NOCOUNT ON;
UPDATE s
SET s.[Stale] = 1, s.[UpdatedAtUtc] = SYSUTCDATETIME()
FROM {schema}.[Schedules] AS s
WHERE s.[GroupName] = @P1 AND s.[Stale] = 0
    AND s.[Name] NOT IN (SELECT l.[Name] FROM OPENJSON(@P2) WITH ([Name] NVARCHAR(200) '$') AS l);
SELECT CAST(@@ROWCOUNT AS BIGINT) AS [Marked];";

/// The tick's compare-and-set, spliced into a copy of [`super::enqueue::ENQUEUE`] in place of
/// its `BEGIN TRANSACTION;` (see [`enqueue_tick`]): the enqueue's `@P1` is the one job, then
/// `@P2` name, `@P3` tick, `@P4` next tick, `@P5` spec, `@P6` time zone. The `UPDATE` is a
/// locking read (`READCOMMITTEDLOCK`, also under READ_COMMITTED_SNAPSHOT): a concurrent
/// scheduler's update of the row makes this one wait and re-check its `WHERE` on the committed
/// row, which then no longer matches. Unless it won an enabled row, the batch commits (a paused
/// row still records the tick), returns one row `TickWon` (1: won, paused) and ends; else the
/// enqueue goes on in the same transaction and returns its usual `Ord, Id, Duplicate` row.
pub(super) const TICK_CAS: &str = "DECLARE @TickName NVARCHAR(200) = @P2;
DECLARE @Tick DATETIME2(7) = @P3;
DECLARE @TickNext DATETIME2(7) = @P4;
DECLARE @TickSpec NVARCHAR(200) = @P5;
DECLARE @TickZone NVARCHAR(64) = @P6;
DECLARE @Won TABLE ([Enabled] BIT NOT NULL);
BEGIN TRANSACTION;
UPDATE s
SET s.[LastEnqueuedTickUtc] = @Tick, s.[NextTickUtc] = @TickNext, s.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Enabled] INTO @Won ([Enabled])
FROM {schema}.[Schedules] AS s WITH (ROWLOCK, READCOMMITTEDLOCK)
WHERE s.[Name] = @TickName AND s.[Stale] = 0 AND s.[Spec] = @TickSpec AND s.[TimeZone] = @TickZone
    AND (s.[LastEnqueuedTickUtc] IS NULL OR s.[LastEnqueuedTickUtc] < @Tick);
IF NOT EXISTS (SELECT 1 FROM @Won AS w WHERE w.[Enabled] = 1)
BEGIN
    COMMIT TRANSACTION;
    SELECT CAST(CASE WHEN EXISTS (SELECT 1 FROM @Won) THEN 1 ELSE 0 END AS BIT) AS [TickWon];
    RETURN;
END;
";

/// The enqueue of one tick: [`super::enqueue::ENQUEUE`] with [`TICK_CAS`] in place of its
/// `BEGIN TRANSACTION;` (the tick's compare-and-set and the insert are one transaction).
pub(super) fn enqueue_tick() -> String {
    super::enqueue::ENQUEUE.replacen("BEGIN TRANSACTION;\n", TICK_CAS, 1)
}

#[cfg(test)]
mod tests {
    use super::super::Statements;

    fn at(s: &str, needle: &str) -> usize {
        s.find(needle).unwrap_or_else(|| panic!("{needle:?} not found"))
    }

    /// The tick's compare-and-set and the job's insert are one transaction: the CAS replaces
    /// the enqueue's only `BEGIN TRANSACTION`, before the key locks and the insert; a call that
    /// did not win an enabled row commits and returns before inserting.
    #[test]
    fn enqueue_tick_is_the_cas_then_the_enqueue_in_one_transaction() {
        let st = Statements::new("chokaq").unwrap();
        let t = &st.enqueue_tick;
        assert_eq!(t.matches("BEGIN TRANSACTION;").count(), 1);
        assert_eq!(st.enqueue.matches("BEGIN TRANSACTION;").count(), 1);
        let cas = at(t, "UPDATE s\nSET s.[LastEnqueuedTickUtc] = @Tick");
        assert!(at(t, "BEGIN TRANSACTION;") < cas);
        assert!(cas < at(t, "INNER LOOP JOIN") && cas < at(t, "INSERT INTO [chokaq].[JobsHot]"));
        assert!(t.contains("WITH (ROWLOCK, READCOMMITTEDLOCK)"), "a locking read, also under RCSI");
        assert!(t.contains("(s.[LastEnqueuedTickUtc] IS NULL OR s.[LastEnqueuedTickUtc] < @Tick)"));
        assert!(at(t, "RETURN;") < at(t, "INSERT INTO [chokaq].[JobsHot]"));
        // Everything else of the enqueue is unchanged.
        assert_eq!(t.replace(&super::TICK_CAS.replace("{schema}", "[chokaq]"), "BEGIN TRANSACTION;\n"), st.enqueue);
        // Registration: the key-range lock of a missing name, then the row as it is.
        let r = &st.schedule_register;
        assert_eq!(r.matches("WITH (UPDLOCK, HOLDLOCK)").count(), 2);
        assert!(at(r, "COMMIT TRANSACTION;") < at(r, "SELECT s.[Name]"));
    }
}
