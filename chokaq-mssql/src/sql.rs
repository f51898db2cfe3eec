//! Every T-SQL statement of the SQL Server backend, in one place.
//!
//! Each statement is one batch sent with `sp_executesql` (tiberius binds values as `@P1`,
//! `@P2`, …). Every batch starts by copying its parameters into named, typed variables, so the
//! statement reads on its own. Values are always bound; the only thing spliced into the text
//! is the schema name, after [`chokaq_core::validate::schema_name`] accepted it (so it cannot
//! contain `]` or `'`).
//!
//! Ids are stored as `BINARY(16)` (the UUID v7 bytes), not `UNIQUEIDENTIFIER`: SQL Server
//! sorts `uniqueidentifier` by its last six bytes first, which would break "id order =
//! creation order" for keyset paging and the claim's tie-break. Text keys compared for
//! equality (queue, kind, idempotency key, reason) use the binary collation
//! `Latin1_General_BIN2`, so `Mail` and `mail` are different queues and keys whatever the
//! database's collation.
//!
//! Lists of ids or leases travel as ONE JSON parameter read with `OPENJSON`, so a batch of
//! any size is one round trip and never meets the 2,100-parameter limit.

use chokaq_core::validate;

/// Columns every job table has, in this order.
const COMMON: [&str; 18] = [
    "Id",
    "Queue",
    "Kind",
    "Payload",
    "Tags",
    "IdempotencyKey",
    "Priority",
    "Attempt",
    "MaxAttempts",
    "Lease",
    "WorkerId",
    "HeartbeatUtc",
    "ScheduledAtUtc",
    "CreatedAtUtc",
    "StartedAtUtc",
    "UpdatedAtUtc",
    "LastError",
    "CreatedBy",
];

/// `[A], [B], …` or `p.[A], p.[B], …`.
fn cols(prefix: &str, names: &[&str]) -> String {
    names
        .iter()
        .map(|c| if prefix.is_empty() { format!("[{c}]") } else { format!("{prefix}.[{c}]") })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `prefix.[col]` for every common column, except those given an expression in `overrides`.
fn common_with(prefix: &str, overrides: &[(&str, &str)]) -> String {
    COMMON
        .iter()
        .map(|c| match overrides.iter().find(|(name, _)| name == c) {
            Some((_, expr)) => (*expr).to_string(),
            None => format!("{prefix}.[{c}]"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The session options every pooled connection gets once, as a plain batch (so they stick):
/// the options filtered indexes need, `XACT_ABORT`, and READ COMMITTED (READPAST needs it;
/// error 650 under SNAPSHOT).
pub const SESSION_SETUP: &str = "SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET QUOTED_IDENTIFIER ON;
SET NUMERIC_ROUNDABORT OFF;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;";

/// The connection health check.
pub const PING: &str = "SELECT 1 AS [Ok];";

/// Every statement of the backend for one (validated) schema.
#[derive(Debug, Clone)]
pub struct Statements {
    pub migrate_schema: String,
    pub migrate_objects: String,
    pub enqueue: String,
    pub claim: String,
    pub start: String,
    pub heartbeat: String,
    pub complete: String,
    pub fail: String,
    pub release: String,
    pub rescue: String,
    pub cancel: String,
    pub control_queue: String,
    pub queue_settings: String,
    pub requeue_dead: String,
    pub purge_archive: String,
    pub purge_dlq: String,
    pub stats: String,
    pub get_job: String,
    pub list_hot: String,
    pub list_archive: String,
    pub list_dlq: String,
    pub db_now: String,
    pub force: String,
    pub presence_many: String,
    pub kill_connections: String,
    pub drop_schema: String,
}

impl Statements {
    /// The statements for `schema`, which the caller has validated.
    pub fn new(schema: &str) -> Self {
        let s = schema;
        Statements {
            migrate_schema: migrate_schema(s),
            migrate_objects: migrate_objects(s),
            enqueue: enqueue(s),
            claim: claim(s),
            start: start(s),
            heartbeat: heartbeat(s),
            complete: complete(s),
            fail: fail(s),
            release: release(s),
            rescue: rescue(s),
            cancel: cancel(s),
            control_queue: control_queue(s),
            queue_settings: queue_settings(s),
            requeue_dead: requeue_dead(s),
            purge_archive: purge(s, "JobsArchive", false),
            purge_dlq: purge(s, "JobsDlq", true),
            stats: stats(s),
            get_job: get_job(s),
            list_hot: list(s, ListTable::Hot),
            list_archive: list(s, ListTable::Archive),
            list_dlq: list(s, ListTable::Dlq),
            db_now: "SELECT SYSUTCDATETIME() AS [Now];".to_string(),
            force: force(s),
            presence_many: presence_many(s),
            kill_connections: KILL_CONNECTIONS.to_string(),
            drop_schema: drop_schema(s),
        }
    }

    /// `(name, sql)` for every statement.
    pub fn all(&self) -> Vec<(&'static str, String)> {
        vec![
            ("session_setup", SESSION_SETUP.to_string()),
            ("ping", PING.to_string()),
            ("migrate_schema", self.migrate_schema.clone()),
            ("migrate_objects", self.migrate_objects.clone()),
            ("enqueue", self.enqueue.clone()),
            ("claim", self.claim.clone()),
            ("start", self.start.clone()),
            ("heartbeat", self.heartbeat.clone()),
            ("complete", self.complete.clone()),
            ("fail", self.fail.clone()),
            ("release", self.release.clone()),
            ("rescue", self.rescue.clone()),
            ("cancel", self.cancel.clone()),
            ("control_queue", self.control_queue.clone()),
            ("queue_settings", self.queue_settings.clone()),
            ("requeue_dead", self.requeue_dead.clone()),
            ("purge_archive", self.purge_archive.clone()),
            ("purge_dlq", self.purge_dlq.clone()),
            ("stats", self.stats.clone()),
            ("get_job", self.get_job.clone()),
            ("list_hot", self.list_hot.clone()),
            ("list_archive", self.list_archive.clone()),
            ("list_dlq", self.list_dlq.clone()),
            ("db_now", self.db_now.clone()),
            ("force", self.force.clone()),
            ("presence_many", self.presence_many.clone()),
            ("kill_connections", self.kill_connections.clone()),
            ("drop_schema", self.drop_schema.clone()),
            ("ensure_test_database", ensure_test_database("chokaq_conformance_rcsi_on")),
        ]
    }
}

/// Every statement for `schema` as `(name, sql)`. Returns an empty list when `schema` is not
/// a valid schema name (nothing unvalidated is ever spliced).
pub fn all_statements(schema: &str) -> Vec<(&'static str, String)> {
    if validate::schema_name(schema).is_err() {
        return Vec::new();
    }
    Statements::new(schema).all()
}

// ---------------------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------------------

/// Creates the schema itself, under the migration app lock. `CREATE SCHEMA` must be alone in
/// its batch, hence `EXEC`.
fn migrate_schema(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
DECLARE @LockResult INT;
BEGIN TRANSACTION;
EXEC @LockResult = sp_getapplock @Resource = N'chokaq:migrate:{s}', @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 30000;
IF @LockResult < 0
    THROW 51000, N'chokaq: could not take the migration lock within 30 s', 1;
IF SCHEMA_ID(N'{s}') IS NULL
    EXEC (N'CREATE SCHEMA [{s}]');
COMMIT TRANSACTION;
SET LOCK_TIMEOUT -1;"
    )
}

/// Creates every table, index and the lease sequence if missing: idempotent, safe from many
/// processes at once (the app lock serialises them; `LOCK_TIMEOUT` bounds the wait).
fn migrate_objects(s: &str) -> String {
    let common_cols = |table: &str| {
        format!(
            "[Id] BINARY(16) NOT NULL,
    [Queue] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL,
    [Kind] NVARCHAR(255) COLLATE Latin1_General_BIN2 NOT NULL,
    [Payload] NVARCHAR(MAX) NOT NULL,
    [Tags] NVARCHAR(MAX) NULL,
    [IdempotencyKey] NVARCHAR(255) COLLATE Latin1_General_BIN2 NULL,
    [Priority] INT NOT NULL,
    [Attempt] INT NOT NULL,
    [MaxAttempts] INT NOT NULL,
    [Lease] BIGINT NULL,
    [WorkerId] UNIQUEIDENTIFIER NULL,
    [HeartbeatUtc] DATETIME2(7) NULL,
    [ScheduledAtUtc] DATETIME2(7) NULL,
    [CreatedAtUtc] DATETIME2(7) NOT NULL,
    [StartedAtUtc] DATETIME2(7) NULL,
    [UpdatedAtUtc] DATETIME2(7) NOT NULL,
    [LastError] NVARCHAR(MAX) NULL,
    [CreatedBy] NVARCHAR(255) NULL,
    CONSTRAINT [PK_{table}] PRIMARY KEY CLUSTERED ([Id])"
        )
    };
    let index = |name: &str, table: &str, body: &str| {
        format!(
            "IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE [name] = N'{name}' AND [object_id] = OBJECT_ID(N'[{s}].[{table}]'))
    CREATE {body};"
        )
    };
    format!(
        "SET XACT_ABORT ON;
SET LOCK_TIMEOUT 30000;
DECLARE @LockResult INT;
BEGIN TRANSACTION;
EXEC @LockResult = sp_getapplock @Resource = N'chokaq:migrate:{s}', @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 30000;
IF @LockResult < 0
    THROW 51000, N'chokaq: could not take the migration lock within 30 s', 1;
IF OBJECT_ID(N'[{s}].[SchemaVersions]', N'U') IS NULL
    CREATE TABLE [{s}].[SchemaVersions] (
        [Version] INT NOT NULL CONSTRAINT [PK_SchemaVersions] PRIMARY KEY CLUSTERED,
        [AppliedAtUtc] DATETIME2(7) NOT NULL
    );
IF OBJECT_ID(N'[{s}].[LeaseSeq]', N'SO') IS NULL
    CREATE SEQUENCE [{s}].[LeaseSeq] AS BIGINT START WITH 1 INCREMENT BY 1 CACHE 100;
IF OBJECT_ID(N'[{s}].[Queues]', N'U') IS NULL
    CREATE TABLE [{s}].[Queues] (
        [Name] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL CONSTRAINT [PK_Queues] PRIMARY KEY CLUSTERED,
        [MaxWorkers] INT NULL,
        [IsPaused] BIT NOT NULL CONSTRAINT [DF_Queues_IsPaused] DEFAULT (0),
        [IsActive] BIT NOT NULL CONSTRAINT [DF_Queues_IsActive] DEFAULT (1),
        [ZombieTimeoutMs] BIGINT NULL,
        [ZombiePolicy] SMALLINT NOT NULL CONSTRAINT [DF_Queues_ZombiePolicy] DEFAULT (0),
        [CreatedAtUtc] DATETIME2(7) NOT NULL,
        [UpdatedAtUtc] DATETIME2(7) NOT NULL
    );
IF OBJECT_ID(N'[{s}].[JobsHot]', N'U') IS NULL
    CREATE TABLE [{s}].[JobsHot] (
    {hot},
    [Status] SMALLINT NOT NULL,
    [DueAtUtc] DATETIME2(7) NOT NULL,
    [CancelRequested] BIT NOT NULL CONSTRAINT [DF_JobsHot_CancelRequested] DEFAULT (0)
    );
IF OBJECT_ID(N'[{s}].[JobsArchive]', N'U') IS NULL
    CREATE TABLE [{s}].[JobsArchive] (
    {archive},
    [FinishedAtUtc] DATETIME2(7) NOT NULL
    );
IF OBJECT_ID(N'[{s}].[JobsDlq]', N'U') IS NULL
    CREATE TABLE [{s}].[JobsDlq] (
    {dlq},
    [FinishedAtUtc] DATETIME2(7) NOT NULL,
    [Reason] VARCHAR(32) COLLATE Latin1_General_BIN2 NOT NULL
    );
{ix_pending}
{ix_fetched}
{ix_processing}
{ix_active}
{ux_key}
{ix_archive}
{ix_dlq}
IF NOT EXISTS (SELECT 1 FROM [{s}].[SchemaVersions] WHERE [Version] = 1)
    INSERT INTO [{s}].[SchemaVersions] ([Version], [AppliedAtUtc]) VALUES (1, SYSUTCDATETIME());
COMMIT TRANSACTION;
SET LOCK_TIMEOUT -1;",
        hot = common_cols("JobsHot"),
        archive = common_cols("JobsArchive"),
        dlq = common_cols("JobsDlq"),
        ix_pending = index(
            "IX_JobsHot_Pending",
            "JobsHot",
            &format!("NONCLUSTERED INDEX [IX_JobsHot_Pending] ON [{s}].[JobsHot] ([Queue], [Priority] DESC, [DueAtUtc], [Id]) WHERE [Status] = 0")
        ),
        ix_fetched = index(
            "IX_JobsHot_Fetched",
            "JobsHot",
            &format!("NONCLUSTERED INDEX [IX_JobsHot_Fetched] ON [{s}].[JobsHot] ([UpdatedAtUtc]) INCLUDE ([Queue]) WHERE [Status] = 1")
        ),
        ix_processing = index(
            "IX_JobsHot_Processing",
            "JobsHot",
            &format!("NONCLUSTERED INDEX [IX_JobsHot_Processing] ON [{s}].[JobsHot] ([HeartbeatUtc]) INCLUDE ([Queue], [Attempt], [MaxAttempts]) WHERE [Status] = 2")
        ),
        ix_active = index(
            "IX_JobsHot_Active",
            "JobsHot",
            &format!("NONCLUSTERED INDEX [IX_JobsHot_Active] ON [{s}].[JobsHot] ([Queue], [Status]) WHERE [Status] IN (1, 2)")
        ),
        ux_key = index(
            "UX_JobsHot_IdempotencyKey",
            "JobsHot",
            &format!("UNIQUE NONCLUSTERED INDEX [UX_JobsHot_IdempotencyKey] ON [{s}].[JobsHot] ([IdempotencyKey]) WHERE [IdempotencyKey] IS NOT NULL")
        ),
        ix_archive = index(
            "IX_JobsArchive_FinishedAtUtc",
            "JobsArchive",
            &format!("NONCLUSTERED INDEX [IX_JobsArchive_FinishedAtUtc] ON [{s}].[JobsArchive] ([FinishedAtUtc])")
        ),
        ix_dlq = index(
            "IX_JobsDlq_FinishedAtUtc",
            "JobsDlq",
            &format!("NONCLUSTERED INDEX [IX_JobsDlq_FinishedAtUtc] ON [{s}].[JobsDlq] ([FinishedAtUtc])")
        ),
    )
}

fn drop_schema(s: &str) -> String {
    format!(
        "DROP TABLE IF EXISTS [{s}].[JobsHot];
DROP TABLE IF EXISTS [{s}].[JobsArchive];
DROP TABLE IF EXISTS [{s}].[JobsDlq];
DROP TABLE IF EXISTS [{s}].[Queues];
DROP TABLE IF EXISTS [{s}].[SchemaVersions];
DROP SEQUENCE IF EXISTS [{s}].[LeaseSeq];
DROP SCHEMA IF EXISTS [{s}];"
    )
}

// ---------------------------------------------------------------------------------------
// Enqueue
// ---------------------------------------------------------------------------------------

/// Enqueue one or many jobs in one round trip.
///
/// `@P1` NVARCHAR(MAX): a JSON array of jobs, one object per job:
/// `{"o": ordinal, "id": "<32 hex>", "q": queue, "k": kind, "p": "<payload JSON text>",
/// "t": "<tags JSON text>"|null, "key": key|null, "pr": priority, "ma": max_attempts,
/// "at": "yyyy-mm-ddThh:mm:ss.fffffff"|null, "ds": delay seconds|null, "dn": delay nanos,
/// "by": created_by|null}`.
///
/// Idempotency: a key already held by a hot job returns that job's id (`Duplicate = 1`).
/// Concurrent enqueuers of one key serialise on the key-range lock that
/// `WITH (UPDLOCK, HOLDLOCK)` takes on the (possibly missing) index entry; the filtered
/// unique index `UX_JobsHot_IdempotencyKey` is the backstop (2601 → Conflict → retried).
/// Two jobs with one key in the same batch: the first is inserted, the rest get its id.
///
/// Returns one row per input job, in input order: `Ord, Id, Duplicate`.
fn enqueue(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
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
INSERT INTO @In ([Ord], [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [MaxAttempts], [ScheduledAtUtc], [CreatedBy], [FirstOfKey])
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
        WHEN j.[DelaySec] IS NOT NULL THEN DATEADD(NANOSECOND, ISNULL(j.[DelayNs], 0), DATEADD(SECOND, j.[DelaySec], @Now))
    END,
    j.[CreatedBy],
    CASE
        WHEN j.[IdempotencyKey] IS NULL THEN 1
        WHEN j.[Ord] = MIN(j.[Ord]) OVER (PARTITION BY j.[IdempotencyKey] COLLATE Latin1_General_BIN2) THEN 1
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
INSERT INTO [{s}].[JobsHot] (
    [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey], [Priority], [Status], [Attempt], [MaxAttempts],
    [ScheduledAtUtc], [DueAtUtc], [CreatedAtUtc], [UpdatedAtUtc], [CancelRequested], [CreatedBy]
)
OUTPUT INSERTED.[Id] INTO @Inserted ([Id])
SELECT
    i.[Id], i.[Queue], i.[Kind], i.[Payload], i.[Tags], i.[IdempotencyKey], i.[Priority], 0, 0, i.[MaxAttempts],
    i.[ScheduledAtUtc], ISNULL(i.[ScheduledAtUtc], @Now), @Now, @Now, 0, i.[CreatedBy]
FROM @In AS i
WHERE i.[FirstOfKey] = 1
    AND (
        i.[IdempotencyKey] IS NULL
        OR NOT EXISTS (
            SELECT 1
            FROM [{s}].[JobsHot] AS h WITH (UPDLOCK, HOLDLOCK)
            WHERE h.[IdempotencyKey] = i.[IdempotencyKey]
        )
    )
ORDER BY i.[Ord];
SELECT
    i.[Ord],
    CASE WHEN n.[Id] IS NOT NULL THEN n.[Id] ELSE h.[Id] END AS [Id],
    CAST(CASE WHEN n.[Id] IS NOT NULL THEN 0 ELSE 1 END AS BIT) AS [Duplicate]
FROM @In AS i
LEFT JOIN @Inserted AS n ON n.[Id] = i.[Id]
LEFT JOIN [{s}].[JobsHot] AS h ON i.[IdempotencyKey] IS NOT NULL AND h.[IdempotencyKey] = i.[IdempotencyKey]
ORDER BY i.[Ord];
COMMIT TRANSACTION;"
    )
}

// ---------------------------------------------------------------------------------------
// Claim
// ---------------------------------------------------------------------------------------

/// The claim: ONE `UPDATE … OUTPUT INSERTED` that takes due Pending jobs, preceded (in the
/// same transaction) by the queue gate.
///
/// Parameters: `@P1` JSON array of queue names, `@P2` worker id, `@P3` limit, `@P4` mode
/// (1 = reserve into Fetched, 2 = start into Processing).
///
/// 1. `@Q` gets the requested queues that are not paused or inactive. The queue rows are
///    read `WITH (HOLDLOCK)`: a shared key(-range) lock held to the end of the claim, which
///    never blocks another claimer (S is compatible with S and U) but makes a concurrent
///    `control_queue` (which needs X) wait, so a cap or a pause cannot appear in the middle
///    of a claim that has already decided the queue is uncapped or running.
/// 2. Capped queues only: their rows are locked `WITH (UPDLOCK, HOLDLOCK, ROWLOCK)`. U is
///    incompatible with U, so claims of ONE capped queue take turns here, from the count to
///    the commit. Uncapped queues never take this lock.
/// 3. For capped queues, the active jobs (Fetched + Processing) are counted
///    `WITH (READCOMMITTEDLOCK)`: a locking read of committed rows even when
///    READ_COMMITTED_SNAPSHOT is ON (a plain read under RCSI would count an old version).
///    Every transition that can raise a queue's active count is a claim, and claims of a
///    capped queue hold its U lock until they commit, so the count cannot go stale before
///    this claim commits: `Slots = MaxWorkers - Active` is exact, and the cap is strict with
///    RCSI ON or OFF.
/// 4. The UPDATE: for each queue, a bounded index seek (`TOP` inside `CROSS APPLY`, on
///    `IX_JobsHot_Pending`: Queue, Priority DESC, DueAtUtc, Id) reads at most
///    `min(limit, Slots)` rows `WITH (UPDLOCK, READPAST, ROWLOCK)`, skipping rows other
///    claimers hold; the outer `TOP (@Limit)` keeps the best across queues. Cost grows with
///    the number of requested queues and the limit, never with the backlog.
///
/// The lease is one `NEXT VALUE FOR` the sequence per claim: every job of this claim gets
/// it, and guarded writes match `(Id, Lease)`, so it fences per job and per claim.
fn claim(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Queues NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Limit INT = @P3;
DECLARE @Mode SMALLINT = @P4;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Lease BIGINT;
DECLARE @Q TABLE (
    [Name] VARCHAR(128) COLLATE Latin1_General_BIN2 NOT NULL PRIMARY KEY,
    [MaxWorkers] INT NULL,
    [Slots] INT NULL
);
BEGIN TRANSACTION;
INSERT INTO @Q ([Name], [MaxWorkers])
SELECT r.[Name], q.[MaxWorkers]
FROM (SELECT DISTINCT CAST(j.[value] AS VARCHAR(128)) COLLATE Latin1_General_BIN2 AS [Name] FROM OPENJSON(@Queues) AS j) AS r
LEFT JOIN [{s}].[Queues] AS q WITH (HOLDLOCK, ROWLOCK) ON q.[Name] = r.[Name]
WHERE q.[Name] IS NULL OR (q.[IsPaused] = 0 AND q.[IsActive] = 1);
IF EXISTS (SELECT 1 FROM @Q WHERE [MaxWorkers] IS NOT NULL)
BEGIN
    UPDATE t
    SET t.[MaxWorkers] = q.[MaxWorkers]
    FROM @Q AS t
    INNER JOIN [{s}].[Queues] AS q WITH (UPDLOCK, HOLDLOCK, ROWLOCK) ON q.[Name] = t.[Name]
    WHERE t.[MaxWorkers] IS NOT NULL;
    UPDATE t
    SET t.[Slots] = CASE WHEN t.[MaxWorkers] > a.[Active] THEN t.[MaxWorkers] - a.[Active] ELSE 0 END
    FROM @Q AS t
    CROSS APPLY (
        SELECT COUNT_BIG(*) AS [Active]
        FROM [{s}].[JobsHot] AS h WITH (READCOMMITTEDLOCK)
        WHERE h.[Queue] = t.[Name] AND h.[Status] IN (1, 2)
    ) AS a
    WHERE t.[MaxWorkers] IS NOT NULL;
END;
SET @Lease = NEXT VALUE FOR [{s}].[LeaseSeq];
UPDATE h
SET
    h.[Status] = @Mode,
    h.[WorkerId] = @WorkerId,
    h.[Lease] = @Lease,
    h.[Attempt] = CASE WHEN @Mode = 2 THEN h.[Attempt] + 1 ELSE h.[Attempt] END,
    h.[StartedAtUtc] = CASE WHEN @Mode = 2 THEN @Now ELSE h.[StartedAtUtc] END,
    h.[HeartbeatUtc] = CASE WHEN @Mode = 2 THEN @Now ELSE h.[HeartbeatUtc] END,
    h.[UpdatedAtUtc] = @Now
OUTPUT {out}, INSERTED.[Status]
FROM [{s}].[JobsHot] AS h
INNER JOIN (
    SELECT TOP (@Limit) c.[Id], c.[Priority], c.[DueAtUtc]
    FROM @Q AS t
    CROSS APPLY (
        SELECT TOP (CASE WHEN t.[Slots] IS NULL OR t.[Slots] > @Limit THEN @Limit ELSE t.[Slots] END)
            j.[Id], j.[Priority], j.[DueAtUtc]
        FROM [{s}].[JobsHot] AS j WITH (UPDLOCK, READPAST, ROWLOCK)
        WHERE j.[Queue] = t.[Name] AND j.[Status] = 0 AND j.[DueAtUtc] <= @Now
        ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC
    ) AS c
    ORDER BY c.[Priority] DESC, c.[DueAtUtc] ASC, c.[Id] ASC
) AS p ON p.[Id] = h.[Id]
WHERE h.[Status] = 0;
COMMIT TRANSACTION;",
        out = cols("INSERTED", &COMMON),
    )
}

// ---------------------------------------------------------------------------------------
// Guarded writes. `@P1` is always a JSON array `[{"id": "<32 hex>", "lease": n}, …]`,
// `@P2` the worker id. The guard is Id + Lease + WorkerId + Status.
// ---------------------------------------------------------------------------------------

const LEASES_JSON: &str = "OPENJSON(@Leases) WITH ([Id] CHAR(32) '$.id', [Lease] BIGINT '$.lease') AS l";

/// Fetched → Processing (`Attempt + 1`). Returns the ids written.
fn start(s: &str) -> String {
    format!(
        "SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE h
SET h.[Status] = 2, h.[Attempt] = h.[Attempt] + 1, h.[StartedAtUtc] = @Now, h.[HeartbeatUtc] = @Now, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id]
FROM [{s}].[JobsHot] AS h
INNER JOIN {LEASES_JSON} ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId;"
    )
}

/// Bumps `HeartbeatUtc` of Processing jobs still held. Returns `Id, CancelRequested`.
fn heartbeat(s: &str) -> String {
    format!(
        "SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE h
SET h.[HeartbeatUtc] = @Now, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id], INSERTED.[CancelRequested]
FROM [{s}].[JobsHot] AS h
INNER JOIN {LEASES_JSON} ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 2 AND h.[WorkerId] = @WorkerId;"
    )
}

/// Processing → archive: `DELETE … OUTPUT DELETED … INTO JobsArchive`, one statement in one
/// `XACT_ABORT` transaction. Then returns the ids now in the archive under these leases and
/// this worker (so a retried call after a lost answer still reports them done).
fn complete(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
BEGIN TRANSACTION;
DELETE h
OUTPUT {out}, @Now INTO [{s}].[JobsArchive] ({into}, [FinishedAtUtc])
FROM [{s}].[JobsHot] AS h
INNER JOIN {LEASES_JSON} ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 2 AND h.[WorkerId] = @WorkerId;
SELECT a.[Id]
FROM [{s}].[JobsArchive] AS a
INNER JOIN {LEASES_JSON} ON a.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND a.[Lease] = l.[Lease]
WHERE a.[WorkerId] = @WorkerId;
COMMIT TRANSACTION;",
        out = common_with("DELETED", &[("UpdatedAtUtc", "@Now")]),
        into = cols("", &COMMON),
    )
}

/// Ends a Processing attempt that did not succeed, in one transaction.
///
/// Parameters: `@P1` id (BINARY(16)), `@P2` lease, `@P3` worker, `@P4` action
/// (0 = retry, 1 = snooze, 2 = dead-letter), `@P5`/`@P6` delay seconds / nanoseconds,
/// `@P7` error text (NULL keeps the last one), `@P8` dead-letter reason.
///
/// Retry and snooze put the job back to Pending (`WorkerId` cleared, due after the delay);
/// a retry with no attempts left, and the dead-letter action, move it to `JobsDlq` with
/// `DELETE … OUTPUT DELETED … INTO`. Returns `Result` (0 = lease lost, 1 = retried,
/// 2 = snoozed, 3 = dead-lettered), `DueAtUtc`, `Reason`.
fn fail(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Lease BIGINT = @P2;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P3;
DECLARE @Action SMALLINT = @P4;
DECLARE @DelaySec INT = @P5;
DECLARE @DelayNs INT = @P6;
DECLARE @Error NVARCHAR(MAX) = @P7;
DECLARE @Reason VARCHAR(32) = @P8;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Due DATETIME2(7) = DATEADD(NANOSECOND, @DelayNs, DATEADD(SECOND, @DelaySec, @Now));
DECLARE @Result INT = 0;
BEGIN TRANSACTION;
IF @Action IN (0, 1)
BEGIN
    UPDATE h
    SET
        h.[Status] = 0,
        h.[WorkerId] = NULL,
        h.[HeartbeatUtc] = NULL,
        h.[ScheduledAtUtc] = @Due,
        h.[DueAtUtc] = @Due,
        h.[UpdatedAtUtc] = @Now,
        h.[CancelRequested] = 0,
        h.[LastError] = CASE WHEN @Action = 0 THEN ISNULL(@Error, h.[LastError]) ELSE h.[LastError] END,
        h.[Attempt] = CASE WHEN @Action = 1 AND h.[Attempt] > 0 THEN h.[Attempt] - 1 ELSE h.[Attempt] END
    FROM [{s}].[JobsHot] AS h
    WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2
        AND (@Action = 1 OR h.[Attempt] < h.[MaxAttempts]);
    IF @@ROWCOUNT = 1
        SET @Result = @Action + 1;
END;
IF @Result = 0
BEGIN
    DELETE h
    OUTPUT {out}, @Now, @Reason INTO [{s}].[JobsDlq] ({into}, [FinishedAtUtc], [Reason])
    FROM [{s}].[JobsHot] AS h
    WHERE h.[Id] = @Id AND h.[Lease] = @Lease AND h.[WorkerId] = @WorkerId AND h.[Status] = 2;
    IF @@ROWCOUNT = 1
        SET @Result = 3;
END;
COMMIT TRANSACTION;
SELECT @Result AS [Result], @Due AS [DueAtUtc], @Reason AS [Reason];",
        out = common_with("DELETED", &[("UpdatedAtUtc", "@Now"), ("LastError", "ISNULL(@Error, DELETED.[LastError])")]),
        into = cols("", &COMMON),
    )
}

/// Fetched → Pending for leases still held; the attempt is unchanged. Returns the ids.
fn release(s: &str) -> String {
    format!(
        "SET NOCOUNT ON;
DECLARE @Leases NVARCHAR(MAX) = @P1;
DECLARE @WorkerId UNIQUEIDENTIFIER = @P2;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
UPDATE h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[UpdatedAtUtc] = @Now
OUTPUT INSERTED.[Id]
FROM [{s}].[JobsHot] AS h
INNER JOIN {LEASES_JSON} ON h.[Id] = CONVERT(BINARY(16), l.[Id], 2) AND h.[Lease] = l.[Lease]
WHERE h.[Status] = 1 AND h.[WorkerId] = @WorkerId;"
    )
}

/// Maintenance, one instance at a time: `sp_getapplock` with `@LockTimeout = 0` (a second
/// instance returns `Ran = 0` at once instead of waiting).
///
/// Parameters: `@P1` fetched timeout (ms), `@P2` default zombie timeout (ms), `@P3` limit.
/// Expired Fetched jobs go back to Pending; zombies (Processing, heartbeat older than their
/// queue's `ZombieTimeoutMs` or the default) go back to Pending when attempts remain and the
/// queue's policy is Retry (0), else to `JobsDlq` (reason `zombie`). Rows locked by others
/// are skipped (READPAST). Returns `Ran, FetchedReleased, ZombiesRetried, ZombiesDead`.
fn rescue(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @FetchedTimeoutMs BIGINT = @P1;
DECLARE @DefaultZombieMs BIGINT = @P2;
DECLARE @Limit INT = @P3;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @LockResult INT;
DECLARE @FetchedReleased INT = 0;
DECLARE @ZombiesRetried INT = 0;
DECLARE @ZombiesDead INT = 0;
DECLARE @Z TABLE ([Id] BINARY(16) NOT NULL PRIMARY KEY, [Retry] BIT NOT NULL);
BEGIN TRANSACTION;
EXEC @LockResult = sp_getapplock @Resource = N'chokaq:rescue:{s}', @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 0;
IF @LockResult < 0
BEGIN
    ROLLBACK TRANSACTION;
    SELECT CAST(0 AS BIT) AS [Ran], 0 AS [FetchedReleased], 0 AS [ZombiesRetried], 0 AS [ZombiesDead];
    RETURN;
END;
UPDATE TOP (@Limit) h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[UpdatedAtUtc] = @Now
FROM [{s}].[JobsHot] AS h WITH (READPAST, ROWLOCK)
WHERE h.[Status] = 1
    AND h.[UpdatedAtUtc] < DATEADD(MILLISECOND, -(@FetchedTimeoutMs % 1000), DATEADD(SECOND, -(@FetchedTimeoutMs / 1000), @Now));
SET @FetchedReleased = @@ROWCOUNT;
INSERT INTO @Z ([Id], [Retry])
SELECT TOP (@Limit)
    h.[Id],
    CASE WHEN h.[Attempt] < h.[MaxAttempts] AND ISNULL(q.[ZombiePolicy], 0) = 0 THEN 1 ELSE 0 END
FROM [{s}].[JobsHot] AS h WITH (UPDLOCK, READPAST, ROWLOCK)
LEFT JOIN [{s}].[Queues] AS q ON q.[Name] = h.[Queue]
WHERE h.[Status] = 2
    AND ISNULL(h.[HeartbeatUtc], h.[UpdatedAtUtc]) < DATEADD(
        MILLISECOND,
        -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) % 1000),
        DATEADD(SECOND, -(ISNULL(q.[ZombieTimeoutMs], @DefaultZombieMs) / 1000), @Now)
    )
ORDER BY h.[Id];
UPDATE h
SET h.[Status] = 0, h.[WorkerId] = NULL, h.[HeartbeatUtc] = NULL, h.[UpdatedAtUtc] = @Now, h.[CancelRequested] = 0
FROM [{s}].[JobsHot] AS h
INNER JOIN @Z AS z ON z.[Id] = h.[Id]
WHERE z.[Retry] = 1 AND h.[Status] = 2;
SET @ZombiesRetried = @@ROWCOUNT;
DELETE h
OUTPUT {out}, @Now, 'zombie' INTO [{s}].[JobsDlq] ({into}, [FinishedAtUtc], [Reason])
FROM [{s}].[JobsHot] AS h
INNER JOIN @Z AS z ON z.[Id] = h.[Id]
WHERE z.[Retry] = 0 AND h.[Status] = 2;
SET @ZombiesDead = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT CAST(1 AS BIT) AS [Ran], @FetchedReleased AS [FetchedReleased], @ZombiesRetried AS [ZombiesRetried], @ZombiesDead AS [ZombiesDead];",
        out = common_with("DELETED", &[("UpdatedAtUtc", "@Now")]),
        into = cols("", &COMMON),
    )
}

/// Cancels a live job. `@P1` id. Pending/Fetched: moved to `JobsDlq` (reason `cancelled`) by
/// `DELETE … OUTPUT DELETED … INTO`; Processing: `CancelRequested = 1`. Returns `Result`
/// (0 = not live, 1 = cancelled, 2 = requested).
fn cancel(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Result INT = 0;
BEGIN TRANSACTION;
DELETE h
OUTPUT {out}, @Now, 'cancelled' INTO [{s}].[JobsDlq] ({into}, [FinishedAtUtc], [Reason])
FROM [{s}].[JobsHot] AS h
WHERE h.[Id] = @Id AND h.[Status] IN (0, 1);
IF @@ROWCOUNT = 1
    SET @Result = 1;
IF @Result = 0
BEGIN
    UPDATE [{s}].[JobsHot]
    SET [CancelRequested] = 1, [UpdatedAtUtc] = @Now
    WHERE [Id] = @Id AND [Status] = 2;
    IF @@ROWCOUNT = 1
        SET @Result = 2;
END;
COMMIT TRANSACTION;
SELECT @Result AS [Result];",
        out = common_with("DELETED", &[("UpdatedAtUtc", "@Now")]),
        into = cols("", &COMMON),
    )
}

const QUEUE_COLUMNS: &str =
    "[Name], [MaxWorkers], [IsPaused], [IsActive], [ZombieTimeoutMs], [ZombiePolicy], [UpdatedAtUtc]";

/// Queue control as an upsert: update under `UPDLOCK, HOLDLOCK` (which also locks the key
/// range when the row is missing), insert if nothing was updated. No MERGE.
///
/// Parameters: `@P1` queue, `@P2` op (1 pause, 2 resume, 3 activate, 4 deactivate,
/// 5 set max workers, 6 set zombie timeout, 7 set zombie policy), `@P3` max workers,
/// `@P4` zombie timeout ms, `@P5` zombie policy. Returns the row.
fn control_queue(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Name VARCHAR(128) = @P1;
DECLARE @Op SMALLINT = @P2;
DECLARE @MaxWorkers INT = @P3;
DECLARE @ZombieTimeoutMs BIGINT = @P4;
DECLARE @ZombiePolicy SMALLINT = @P5;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
BEGIN TRANSACTION;
UPDATE q
SET
    q.[IsPaused] = CASE @Op WHEN 1 THEN 1 WHEN 2 THEN 0 ELSE q.[IsPaused] END,
    q.[IsActive] = CASE @Op WHEN 3 THEN 1 WHEN 4 THEN 0 ELSE q.[IsActive] END,
    q.[MaxWorkers] = CASE WHEN @Op = 5 THEN @MaxWorkers ELSE q.[MaxWorkers] END,
    q.[ZombieTimeoutMs] = CASE WHEN @Op = 6 THEN @ZombieTimeoutMs ELSE q.[ZombieTimeoutMs] END,
    q.[ZombiePolicy] = CASE WHEN @Op = 7 THEN @ZombiePolicy ELSE q.[ZombiePolicy] END,
    q.[UpdatedAtUtc] = @Now
FROM [{s}].[Queues] AS q WITH (UPDLOCK, HOLDLOCK)
WHERE q.[Name] = @Name;
IF @@ROWCOUNT = 0
    INSERT INTO [{s}].[Queues] ([Name], [MaxWorkers], [IsPaused], [IsActive], [ZombieTimeoutMs], [ZombiePolicy], [CreatedAtUtc], [UpdatedAtUtc])
    VALUES (
        @Name,
        CASE WHEN @Op = 5 THEN @MaxWorkers END,
        CASE WHEN @Op = 1 THEN 1 ELSE 0 END,
        CASE WHEN @Op = 4 THEN 0 ELSE 1 END,
        CASE WHEN @Op = 6 THEN @ZombieTimeoutMs END,
        CASE WHEN @Op = 7 THEN @ZombiePolicy ELSE 0 END,
        @Now,
        @Now
    );
COMMIT TRANSACTION;
SELECT {QUEUE_COLUMNS} FROM [{s}].[Queues] WHERE [Name] = @Name;"
    )
}

/// One queue's row (none when it has no control row). `@P1` queue.
fn queue_settings(s: &str) -> String {
    format!(
        "DECLARE @Name VARCHAR(128) = @P1;
SELECT {QUEUE_COLUMNS} FROM [{s}].[Queues] WHERE [Name] = @Name;"
    )
}

/// Dead letter → Pending, same id, priority and key, attempt 0: `DELETE … OUTPUT DELETED …
/// INTO JobsHot` in one transaction. A live job holding the key makes the insert fail with
/// 2601 (→ Conflict) and the whole move rolls back. `@P1` id. Returns `Moved` (0 or 1).
fn requeue_dead(s: &str) -> String {
    format!(
        "SET XACT_ABORT ON;
SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Moved INT;
BEGIN TRANSACTION;
DELETE d
OUTPUT
    DELETED.[Id], DELETED.[Queue], DELETED.[Kind], DELETED.[Payload], DELETED.[Tags], DELETED.[IdempotencyKey],
    DELETED.[Priority], 0, DELETED.[MaxAttempts], DELETED.[Lease], DELETED.[CreatedAtUtc], @Now, DELETED.[LastError],
    DELETED.[CreatedBy], 0, DELETED.[CreatedAtUtc], 0
INTO [{s}].[JobsHot] (
    [Id], [Queue], [Kind], [Payload], [Tags], [IdempotencyKey],
    [Priority], [Attempt], [MaxAttempts], [Lease], [CreatedAtUtc], [UpdatedAtUtc], [LastError],
    [CreatedBy], [Status], [DueAtUtc], [CancelRequested]
)
FROM [{s}].[JobsDlq] AS d
WHERE d.[Id] = @Id;
SET @Moved = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @Moved AS [Moved];"
    )
}

/// One bounded purge batch: `DELETE TOP (@n)`. `@P1` batch size, `@P2` older than (ms),
/// `@P3` queue or NULL, `@P4` kind or NULL, `@P5` reason or NULL (dead letters only).
/// Returns `Deleted`.
fn purge(s: &str, table: &str, with_reason: bool) -> String {
    let reason = if with_reason { "\n    AND (@Reason IS NULL OR [Reason] = @Reason)" } else { "" };
    let reason_decl = if with_reason { "\nDECLARE @Reason VARCHAR(32) = @P5;" } else { "" };
    format!(
        "SET NOCOUNT ON;
DECLARE @BatchSize INT = @P1;
DECLARE @OlderThanMs BIGINT = @P2;
DECLARE @Queue VARCHAR(128) = @P3;
DECLARE @Kind NVARCHAR(255) = @P4;{reason_decl}
DECLARE @Cutoff DATETIME2(7) = DATEADD(MILLISECOND, -(@OlderThanMs % 1000), DATEADD(SECOND, -(@OlderThanMs / 1000), SYSUTCDATETIME()));
DELETE TOP (@BatchSize)
FROM [{s}].[{table}]
WHERE [FinishedAtUtc] < @Cutoff
    AND (@Queue IS NULL OR [Queue] = @Queue)
    AND (@Kind IS NULL OR [Kind] = @Kind){reason};
SELECT @@ROWCOUNT AS [Deleted];"
    )
}

/// Counts per queue and state, in ONE statement. The batch switches to SNAPSHOT isolation
/// when the database has `ALLOW_SNAPSHOT_ISOLATION ON` (a transaction-consistent view);
/// otherwise the single statement runs under READ COMMITTED, which is statement-consistent
/// when READ_COMMITTED_SNAPSHOT is ON, and a locking read (that can see a job mid-move)
/// when both are off (documented in docs/sqlserver.md). Returns the `IsSnapshot` flag and
/// the clock, then one row per queue.
fn stats(s: &str) -> String {
    format!(
        "SET NOCOUNT ON;
DECLARE @Now DATETIME2(7) = SYSUTCDATETIME();
DECLARE @Snapshot BIT = 0;
IF EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [snapshot_isolation_state] = 1)
BEGIN
    SET TRANSACTION ISOLATION LEVEL SNAPSHOT;
    SET @Snapshot = 1;
END;
BEGIN TRANSACTION;
SELECT @Snapshot AS [IsSnapshot], @Now AS [Now];
SELECT
    x.[Queue],
    SUM(x.[Pending]) AS [Pending],
    SUM(x.[Fetched]) AS [Fetched],
    SUM(x.[Processing]) AS [Processing],
    SUM(x.[Archived]) AS [Archived],
    SUM(x.[Dead]) AS [Dead],
    MIN(x.[OldestDue]) AS [OldestDue]
FROM (
    SELECT
        h.[Queue],
        SUM(CASE WHEN h.[Status] = 0 THEN 1 ELSE 0 END) AS [Pending],
        SUM(CASE WHEN h.[Status] = 1 THEN 1 ELSE 0 END) AS [Fetched],
        SUM(CASE WHEN h.[Status] = 2 THEN 1 ELSE 0 END) AS [Processing],
        0 AS [Archived],
        0 AS [Dead],
        MIN(CASE WHEN h.[Status] = 0 AND h.[DueAtUtc] <= @Now THEN h.[DueAtUtc] END) AS [OldestDue]
    FROM [{s}].[JobsHot] AS h
    GROUP BY h.[Queue]
    UNION ALL
    SELECT a.[Queue], 0, 0, 0, COUNT(*), 0, NULL
    FROM [{s}].[JobsArchive] AS a
    GROUP BY a.[Queue]
    UNION ALL
    SELECT d.[Queue], 0, 0, 0, 0, COUNT(*), NULL
    FROM [{s}].[JobsDlq] AS d
    GROUP BY d.[Queue]
) AS x
GROUP BY x.[Queue]
ORDER BY x.[Queue];
COMMIT TRANSACTION;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;"
    )
}

/// The uniform record columns of one job table (`Loc` 0 = hot, 1 = archive, 2 = dead).
fn record_select(alias: &str, table: ListTable) -> String {
    let (loc, status, cancel, finished, reason) = match table {
        ListTable::Hot => (
            "0",
            format!("{alias}.[Status]"),
            format!("{alias}.[CancelRequested]"),
            "CAST(NULL AS DATETIME2(7))".to_string(),
            "CAST(NULL AS VARCHAR(32))".to_string(),
        ),
        ListTable::Archive => (
            "1",
            "CAST(NULL AS SMALLINT)".to_string(),
            "CAST(0 AS BIT)".to_string(),
            format!("{alias}.[FinishedAtUtc]"),
            "CAST(NULL AS VARCHAR(32))".to_string(),
        ),
        ListTable::Dlq => (
            "2",
            "CAST(NULL AS SMALLINT)".to_string(),
            "CAST(0 AS BIT)".to_string(),
            format!("{alias}.[FinishedAtUtc]"),
            format!("{alias}.[Reason]"),
        ),
    };
    format!(
        "{loc} AS [Loc], {common}, {status} AS [Status], {cancel} AS [CancelRequested], {finished} AS [FinishedAtUtc], {reason} AS [Reason]",
        common = cols(alias, &COMMON)
    )
}

#[derive(Debug, Clone, Copy)]
enum ListTable {
    Hot,
    Archive,
    Dlq,
}

impl ListTable {
    fn table(self) -> &'static str {
        match self {
            ListTable::Hot => "JobsHot",
            ListTable::Archive => "JobsArchive",
            ListTable::Dlq => "JobsDlq",
        }
    }
}

/// A job wherever it is. `@P1` id. At most one row in the normal case; more rows would mean
/// a broken invariant and are reported.
fn get_job(s: &str) -> String {
    format!(
        "DECLARE @Id BINARY(16) = @P1;
SELECT {hot} FROM [{s}].[JobsHot] AS h WHERE h.[Id] = @Id
UNION ALL
SELECT {archive} FROM [{s}].[JobsArchive] AS a WHERE a.[Id] = @Id
UNION ALL
SELECT {dlq} FROM [{s}].[JobsDlq] AS d WHERE d.[Id] = @Id;",
        hot = record_select("h", ListTable::Hot),
        archive = record_select("a", ListTable::Archive),
        dlq = record_select("d", ListTable::Dlq),
    )
}

/// A filtered page of one table, keyset-paged on the clustered `Id` (UUID v7 bytes, so id
/// order is creation order). `@P1` limit (the caller asks one more to know if a next page
/// exists), `@P2` after id or NULL, `@P3` queue, `@P4` status (hot only), `@P5` kind,
/// `@P6` tag, `@P7` created from, `@P8` created to. `OPTION (RECOMPILE)` so each optional
/// filter gets its own plan.
fn list(s: &str, table: ListTable) -> String {
    let status = match table {
        ListTable::Hot => "\n    AND (@Status IS NULL OR t.[Status] = @Status)",
        _ => "",
    };
    format!(
        "DECLARE @Limit INT = @P1;
DECLARE @After BINARY(16) = @P2;
DECLARE @Queue VARCHAR(128) = @P3;
DECLARE @Status SMALLINT = @P4;
DECLARE @Kind NVARCHAR(255) = @P5;
DECLARE @Tag NVARCHAR(100) = @P6;
DECLARE @CreatedFrom DATETIME2(7) = @P7;
DECLARE @CreatedTo DATETIME2(7) = @P8;
SELECT TOP (@Limit) {select}
FROM [{s}].[{name}] AS t
WHERE (@After IS NULL OR t.[Id] > @After)
    AND (@Queue IS NULL OR t.[Queue] = @Queue){status}
    AND (@Kind IS NULL OR t.[Kind] = @Kind)
    AND (@Tag IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(t.[Tags]) AS g WHERE g.[value] COLLATE Latin1_General_BIN2 = @Tag))
    AND (@CreatedFrom IS NULL OR t.[CreatedAtUtc] >= @CreatedFrom)
    AND (@CreatedTo IS NULL OR t.[CreatedAtUtc] < @CreatedTo)
ORDER BY t.[Id]
OPTION (RECOMPILE);",
        select = record_select("t", table),
        name = table.table(),
    )
}

/// Creates database `db` if missing and sets its row-versioning options, only when they differ
/// (so a second run never kicks other sessions out). Used by the conformance suite to run
/// once with READ_COMMITTED_SNAPSHOT ON and once OFF; `@P1` is 1 for ON. Needs CREATE
/// DATABASE and ALTER on it. `db` is validated like a schema name before it is spliced.
pub fn ensure_test_database(db: &str) -> String {
    format!(
        "DECLARE @Rcsi BIT = @P1;
IF DB_ID(N'{db}') IS NULL
    CREATE DATABASE [{db}];
IF EXISTS (SELECT 1 FROM sys.databases WHERE [name] = N'{db}' AND [snapshot_isolation_state] = 0)
    ALTER DATABASE [{db}] SET ALLOW_SNAPSHOT_ISOLATION ON;
IF @Rcsi = 1 AND EXISTS (SELECT 1 FROM sys.databases WHERE [name] = N'{db}' AND [is_read_committed_snapshot_on] = 0)
    ALTER DATABASE [{db}] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE;
IF @Rcsi = 0 AND EXISTS (SELECT 1 FROM sys.databases WHERE [name] = N'{db}' AND [is_read_committed_snapshot_on] = 1)
    ALTER DATABASE [{db}] SET READ_COMMITTED_SNAPSHOT OFF WITH ROLLBACK IMMEDIATE;
SELECT CAST([is_read_committed_snapshot_on] AS BIT) AS [Rcsi], CAST([snapshot_isolation_state] AS INT) AS [Snapshot]
FROM sys.databases WHERE [name] = N'{db}';"
    )
}

// ---------------------------------------------------------------------------------------
// Test support
// ---------------------------------------------------------------------------------------

/// Forces fields of a hot job, bypassing every guard. `@P1` id, then for each field a
/// "set" flag and a value: `@P2/@P3` status, `@P4/@P5` attempt, `@P6/@P7` scheduled,
/// `@P8/@P9` heartbeat, `@P10/@P11` updated, `@P12/@P13` created. `DueAtUtc` follows.
/// Returns `Changed`.
fn force(s: &str) -> String {
    format!(
        "SET NOCOUNT ON;
DECLARE @Id BINARY(16) = @P1;
DECLARE @SetStatus BIT = @P2;
DECLARE @Status SMALLINT = @P3;
DECLARE @SetAttempt BIT = @P4;
DECLARE @Attempt INT = @P5;
DECLARE @SetScheduled BIT = @P6;
DECLARE @Scheduled DATETIME2(7) = @P7;
DECLARE @SetHeartbeat BIT = @P8;
DECLARE @Heartbeat DATETIME2(7) = @P9;
DECLARE @SetUpdated BIT = @P10;
DECLARE @Updated DATETIME2(7) = @P11;
DECLARE @SetCreated BIT = @P12;
DECLARE @Created DATETIME2(7) = @P13;
UPDATE [{s}].[JobsHot]
SET
    [Status] = CASE WHEN @SetStatus = 1 THEN @Status ELSE [Status] END,
    [Attempt] = CASE WHEN @SetAttempt = 1 THEN @Attempt ELSE [Attempt] END,
    [ScheduledAtUtc] = CASE WHEN @SetScheduled = 1 THEN @Scheduled ELSE [ScheduledAtUtc] END,
    [HeartbeatUtc] = CASE WHEN @SetHeartbeat = 1 THEN @Heartbeat ELSE [HeartbeatUtc] END,
    [UpdatedAtUtc] = CASE WHEN @SetUpdated = 1 THEN @Updated ELSE [UpdatedAtUtc] END,
    [CreatedAtUtc] = CASE WHEN @SetCreated = 1 THEN @Created ELSE [CreatedAtUtc] END,
    [DueAtUtc] = ISNULL(
        CASE WHEN @SetScheduled = 1 THEN @Scheduled ELSE [ScheduledAtUtc] END,
        CASE WHEN @SetCreated = 1 THEN @Created ELSE [CreatedAtUtc] END
    )
WHERE [Id] = @Id;
SELECT @@ROWCOUNT AS [Changed];"
    )
}

/// Raw row counts per table for a JSON array of ids (`@P1`, 32-hex strings), in one
/// statement (under SNAPSHOT when the database allows it). Returns `Id, Hot, Archive, Dead`.
fn presence_many(s: &str) -> String {
    format!(
        "SET NOCOUNT ON;
DECLARE @Ids NVARCHAR(MAX) = @P1;
IF EXISTS (SELECT 1 FROM sys.databases WHERE [database_id] = DB_ID() AND [snapshot_isolation_state] = 1)
    SET TRANSACTION ISOLATION LEVEL SNAPSHOT;
BEGIN TRANSACTION;
SELECT
    i.[Id],
    (SELECT COUNT(*) FROM [{s}].[JobsHot] AS h WHERE h.[Id] = i.[Id]) AS [Hot],
    (SELECT COUNT(*) FROM [{s}].[JobsArchive] AS a WHERE a.[Id] = i.[Id]) AS [Archive],
    (SELECT COUNT(*) FROM [{s}].[JobsDlq] AS d WHERE d.[Id] = i.[Id]) AS [Dead]
FROM (SELECT DISTINCT CONVERT(BINARY(16), CAST(j.[value] AS CHAR(32)), 2) AS [Id] FROM OPENJSON(@Ids) AS j) AS i;
COMMIT TRANSACTION;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;"
    )
}

/// Kills the sessions of this backend's pool, found by their program name (`@P1`, unique
/// per backend instance), except the session running this. Needs `VIEW SERVER STATE` and
/// `ALTER ANY CONNECTION`. Returns `Killed`.
const KILL_CONNECTIONS: &str = "SET NOCOUNT ON;
DECLARE @ProgramName NVARCHAR(128) = @P1;
DECLARE @Spid INT;
DECLARE @Killed INT = 0;
DECLARE @Cmd NVARCHAR(64);
DECLARE victims CURSOR LOCAL FAST_FORWARD FOR
    SELECT [session_id] FROM sys.dm_exec_sessions WHERE [program_name] = @ProgramName AND [session_id] <> @@SPID;
OPEN victims;
FETCH NEXT FROM victims INTO @Spid;
WHILE @@FETCH_STATUS = 0
BEGIN
    SET @Cmd = N'KILL ' + CAST(@Spid AS NVARCHAR(12));
    EXEC (@Cmd);
    SET @Killed = @Killed + 1;
    FETCH NEXT FROM victims INTO @Spid;
END;
CLOSE victims;
DEALLOCATE victims;
SELECT @Killed AS [Killed];";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_names_only_the_schema_it_was_given() {
        let all = all_statements("jobs_x");
        assert_eq!(all.len(), 29);
        let mut names: Vec<_> = all.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "statement names are unique");
        for (name, sql) in &all {
            assert!(!sql.contains("[chokaq]"), "{name}");
            assert!(!sql.contains("{s}") && !sql.contains("{out}"), "{name}: unexpanded placeholder");
            assert!(!sql.to_ascii_uppercase().contains("MERGE "), "{name}: no MERGE anywhere");
        }
        assert!(all_statements("bad]name").is_empty());
        assert!(all_statements("x'; DROP TABLE y; --").is_empty());
    }

    #[test]
    fn claim_is_one_update_with_the_right_hints() {
        let st = Statements::new("chokaq");
        let c = &st.claim;
        assert_eq!(c.matches("UPDATE h").count(), 1, "one claim UPDATE");
        assert!(c.contains("OUTPUT INSERTED.[Id]"));
        assert!(c.contains("WITH (UPDLOCK, READPAST, ROWLOCK)"));
        assert!(c.contains("CROSS APPLY"));
        assert!(c.contains("WITH (READCOMMITTEDLOCK)"));
        assert!(c.contains("WITH (UPDLOCK, HOLDLOCK, ROWLOCK)"));
        assert!(c.contains("NEXT VALUE FOR [chokaq].[LeaseSeq]"));
        assert!(c.contains("ORDER BY j.[Priority] DESC, j.[DueAtUtc] ASC, j.[Id] ASC"));
        assert!(!c.contains("ROW_NUMBER"), "no window over every candidate");
    }

    #[test]
    fn moves_are_delete_output_into_under_xact_abort() {
        let st = Statements::new("chokaq");
        for (name, sql, target) in [
            ("complete", &st.complete, "[chokaq].[JobsArchive]"),
            ("fail", &st.fail, "[chokaq].[JobsDlq]"),
            ("cancel", &st.cancel, "[chokaq].[JobsDlq]"),
            ("rescue", &st.rescue, "[chokaq].[JobsDlq]"),
            ("requeue_dead", &st.requeue_dead, "[chokaq].[JobsHot]"),
        ] {
            assert!(sql.starts_with("SET XACT_ABORT ON;"), "{name}");
            assert!(sql.contains("BEGIN TRANSACTION;"), "{name}");
            assert!(sql.contains(&format!("INTO {target}")), "{name}");
            assert!(sql.contains("DELETE "), "{name}");
        }
        assert!(st.rescue.contains("@LockTimeout = 0"));
        assert!(st.migrate_objects.contains("sp_getapplock"));
        assert!(st.migrate_objects.contains("SET LOCK_TIMEOUT 30000"));
        assert!(st.purge_archive.contains("DELETE TOP (@BatchSize)"));
        assert!(st.enqueue.contains("WITH (UPDLOCK, HOLDLOCK)"));
        assert!(st.control_queue.contains("WITH (UPDLOCK, HOLDLOCK)"));
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
        let all = all_statements("chokaq");
        let mut defined: std::collections::BTreeSet<String> =
            bracketed(&Statements::new("chokaq").migrate_objects).into_iter().collect();
        for catalog in [
            "name",
            "object_id",
            "database_id",
            "snapshot_isolation_state",
            "is_read_committed_snapshot_on",
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
        for (name, sql) in all_statements("chokaq") {
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
}
#[cfg(test)]
mod param_counts {
    /// How many values the Rust side binds for each statement (see backend.rs); must equal
    /// the highest `@Pn` the statement uses.
    #[test]
    fn bound_values_match_parameters() {
        let binds = [
            ("session_setup", 0),
            ("ping", 0),
            ("migrate_schema", 0),
            ("migrate_objects", 0),
            ("enqueue", 1),
            ("claim", 4),
            ("start", 2),
            ("heartbeat", 2),
            ("complete", 2),
            ("fail", 8),
            ("release", 2),
            ("rescue", 3),
            ("cancel", 1),
            ("control_queue", 5),
            ("queue_settings", 1),
            ("requeue_dead", 1),
            ("purge_archive", 4),
            ("purge_dlq", 5),
            ("stats", 0),
            ("get_job", 1),
            ("list_hot", 8),
            ("list_archive", 8),
            ("list_dlq", 8),
            ("db_now", 0),
            ("force", 13),
            ("presence_many", 1),
            ("kill_connections", 1),
            ("drop_schema", 0),
            ("ensure_test_database", 1),
        ];
        let all = super::all_statements("chokaq");
        assert_eq!(all.len(), binds.len());
        for ((name, sql), (bname, n)) in all.iter().zip(binds) {
            assert_eq!(*name, bname);
            let max = (1..=20).filter(|i| sql.contains(&format!("@P{i}"))).max().unwrap_or(0);
            assert_eq!(max, n, "{name}: highest parameter @P{max}, {n} values bound");
        }
    }
}
