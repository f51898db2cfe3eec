//! The `list_jobs` SELECT of the SQL backends, built per call with sea-query and rendered
//! for PostgreSQL, MySQL / MariaDB or SQLite (feature `sql-listing`).
//!
//! [`list_query`] turns a [`ListJobsParams`] into one statement that names only the predicates
//! of the filters given (no `? IS NULL OR …` catch-alls), so the server plans each shape on its
//! own index, and into the values to bind, in placeholder order ([`ListArg`]; the backend binds
//! them with its driver). Every value is a bound parameter; the only text spliced in is the
//! validated schema name (quoted by sea-query), the fixed table names and the backend's own
//! column list.
//!
//! The keyset: `id > after`, `ORDER BY id`, `LIMIT limit + 1` (the extra row says whether a
//! next page exists). A creation window also bounds the id: ids are UUID v7 whose first 48
//! bits are the Unix time in milliseconds of the enqueuing clock, so `created_from` gives the
//! lower bound `id >= v7(created_from - ID_CLOCK_SKEW)` and `created_to` the upper bound
//! `id < v7(created_to + ID_CLOCK_SKEW)` — a range of the primary key — while the exact
//! `created_at` predicates stay. A job whose id clock was more than [`ID_CLOCK_SKEW`] away from
//! its `created_at` may therefore be left out of a time-filtered listing (docs/contract.md,
//! "Listing: filters, order and the creation window").

use chrono::{DateTime, Utc};
use sea_query::{
    Alias, Expr, MysqlQueryBuilder, Order, PostgresQueryBuilder, Query, SelectStatement, SqliteQueryBuilder, Value,
    Values,
};
use uuid::Uuid;

use crate::{validate, Error, JobId, JobStatus, JobTable, ListJobsParams, Result, Timestamp};

/// Largest page of `list_jobs` (`ListJobsParams::limit`).
pub const MAX_LIST_LIMIT: u32 = 1000;

/// How far a job's id clock (the enqueuing process, UUID v7) may be from its `created_at` (the
/// database's clock on PostgreSQL and MySQL) for a time-filtered listing to still find it: the
/// id bounds of a creation window are widened by this much on each side.
pub const ID_CLOCK_SKEW: chrono::Duration = chrono::Duration::minutes(1);

/// The SQL dialect a listing is rendered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlDialect {
    /// `$n` placeholders; ids `uuid`, times `timestamptz`, status `int2`, tags `text[]`.
    Postgres,
    /// MySQL and MariaDB: `?` placeholders; ids `BINARY(16)`, times microseconds
    /// (`BIGINT`), tags a JSON array in text.
    Mysql,
    /// `?` placeholders; ids 16-byte BLOBs, times microseconds, tags a JSON array in text.
    Sqlite,
}

/// One value to bind, in placeholder order.
#[derive(Debug, Clone, PartialEq)]
pub enum ListArg {
    Text(String),
    /// PostgreSQL's `int2` status.
    SmallInt(i16),
    /// Times in microseconds (MySQL, SQLite), status codes (MySQL, SQLite), the row limit.
    BigInt(i64),
    /// An id as its 16 bytes (MySQL, SQLite).
    Bytes(Vec<u8>),
    /// An id as `uuid` (PostgreSQL).
    Uuid(Uuid),
    /// A time as `timestamptz` (PostgreSQL).
    Time(DateTime<Utc>),
}

/// A rendered listing: the statement and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct ListQuery {
    pub sql: String,
    pub args: Vec<ListArg>,
}

/// The table a [`JobTable`] names (the same in every SQL backend).
pub fn table_name(table: JobTable) -> &'static str {
    match table {
        JobTable::Hot => "jobs_hot",
        JobTable::Archive => "jobs_archive",
        JobTable::DeadLetter => "jobs_dlq",
    }
}

/// The checks every backend makes before it builds a listing: the limit (1 to
/// [`MAX_LIST_LIMIT`]), a status filter on the hot table only, a tag as a stored tag.
pub fn validate_params(p: &ListJobsParams) -> Result<()> {
    if p.limit == 0 || p.limit > MAX_LIST_LIMIT {
        return Err(Error::invalid(format!("list limit must be 1 to {MAX_LIST_LIMIT}, got {}", p.limit)));
    }
    if p.status.is_some() && p.table != JobTable::Hot {
        return Err(Error::invalid("a status filter applies to the hot table only"));
    }
    // As stored tags are checked at enqueue: a NUL would otherwise reach the server.
    if let Some(tag) = &p.tag {
        validate::text_field("tag", tag, validate::MAX_TAG_LEN)?;
    }
    Ok(())
}

/// The smallest UUID v7 of the millisecond of `t` (48 bits of Unix milliseconds, version 7,
/// variant bits, the rest zero): every id generated at `t` or later sorts at or after it.
/// Times before 1970 give the nil id; times past the 48-bit range (year 10889) the largest.
pub fn v7_floor(t: Timestamp) -> Uuid {
    if t.timestamp_millis() < 0 {
        return Uuid::nil();
    }
    let ms = t.timestamp_millis().min((1 << 48) - 1) as u64;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = 0x70;
    b[8] = 0x80;
    Uuid::from_bytes(b)
}

/// The lower id bound of the page: the cursor (`id > after`) or a creation window's start
/// (`id >= v7(created_from - skew)`), whichever is higher; `(id, inclusive)`.
fn lower_bound(p: &ListJobsParams) -> Option<(Uuid, bool)> {
    let from = p.created_from.map(|t| (t.checked_sub_signed(ID_CLOCK_SKEW).map_or(Uuid::nil(), v7_floor), true));
    let after = p.after.map(|JobId(id)| (id, false));
    match (after, from) {
        (Some(a), Some(f)) => Some(if f.0 > a.0 { f } else { a }),
        (a, f) => a.or(f),
    }
}

/// Builds the listing of `p` for `dialect` in `schema` (validated here), selecting
/// `columns` (the backend's column list for this table, payload or not, as it decodes it).
/// Call [`validate_params`] first.
pub fn list_query(dialect: SqlDialect, schema: &str, columns: &str, p: &ListJobsParams) -> Result<ListQuery> {
    validate::schema_name(schema)?;
    let mut q = Query::select();
    q.expr(Expr::cust(columns)).from((Alias::new(schema), Alias::new(table_name(p.table))));
    let id = |u: Uuid| match dialect {
        SqlDialect::Postgres => Value::Uuid(Some(Box::new(u))),
        _ => Value::Bytes(Some(Box::new(u.as_bytes().to_vec()))),
    };
    let time = |t: Timestamp| -> Value {
        match dialect {
            SqlDialect::Postgres => Value::ChronoDateTimeUtc(Some(Box::new(t))),
            _ => Value::BigInt(Some(t.timestamp_micros())),
        }
    };
    let status_value = |code: i16| match dialect {
        SqlDialect::Postgres => Value::SmallInt(Some(code)),
        _ => Value::BigInt(Some(i64::from(code))),
    };
    let col = |name: &str| Expr::col(Alias::new(name));
    if let Some(queue) = &p.queue {
        q.and_where(col("queue").eq(queue.as_str()));
    }
    if let Some(status) = p.status {
        // Pending also matches Scheduled (3): Pending whose due time was ahead when written.
        if status == JobStatus::Pending {
            q.and_where(col("status").is_in([status_value(0), status_value(3)]));
        } else {
            q.and_where(col("status").eq(status_value(status.code())));
        }
    }
    if let Some(kind) = &p.kind {
        q.and_where(col("kind").eq(kind.as_str()));
    }
    if let Some(tag) = &p.tag {
        let pred = match dialect {
            // Not `tags @> ARRAY[$1]`: sea-query's tokenizer reads `[…]` as a quoted name
            // and leaves the placeholder in it unnumbered. The same rows either way.
            SqlDialect::Postgres => "CAST($1 AS text) = ANY (tags)",
            SqlDialect::Mysql => "JSON_CONTAINS(tags, JSON_QUOTE(?))",
            SqlDialect::Sqlite => "EXISTS (SELECT 1 FROM json_each(tags) WHERE json_each.value = ?)",
        };
        q.and_where(Expr::cust_with_values(pred, [tag.as_str()]));
    }
    if let Some(from) = p.created_from {
        q.and_where(col("created_at").gte(time(from)));
    }
    if let Some(to) = p.created_to {
        q.and_where(col("created_at").lt(time(to)));
    }
    if let Some((bound, inclusive)) = lower_bound(p) {
        q.and_where(if inclusive { col("id").gte(id(bound)) } else { col("id").gt(id(bound)) });
    }
    if let Some(upper) = p.created_to.and_then(|to| to.checked_add_signed(ID_CLOCK_SKEW)) {
        q.and_where(col("id").lt(id(v7_floor(upper))));
    }
    q.order_by(Alias::new("id"), Order::Asc).limit(u64::from(p.limit) + 1);
    Ok(render(dialect, &q))
}

fn render(dialect: SqlDialect, q: &SelectStatement) -> ListQuery {
    let (sql, values) = match dialect {
        SqlDialect::Postgres => q.build(PostgresQueryBuilder),
        SqlDialect::Mysql => q.build(MysqlQueryBuilder),
        SqlDialect::Sqlite => q.build(SqliteQueryBuilder),
    };
    ListQuery { sql, args: args(values) }
}

/// sea-query's values as [`ListArg`]s (only the kinds [`list_query`] creates).
fn args(values: Values) -> Vec<ListArg> {
    values
        .into_iter()
        .map(|v| match v {
            Value::String(Some(s)) => ListArg::Text(*s),
            Value::SmallInt(Some(n)) => ListArg::SmallInt(n),
            Value::BigInt(Some(n)) => ListArg::BigInt(n),
            // The limit: at most MAX_LIST_LIMIT + 1.
            Value::BigUnsigned(Some(n)) => ListArg::BigInt(i64::try_from(n).unwrap_or(i64::MAX)),
            Value::Unsigned(Some(n)) => ListArg::BigInt(i64::from(n)),
            Value::Bytes(Some(b)) => ListArg::Bytes(*b),
            Value::Uuid(Some(u)) => ListArg::Uuid(*u),
            Value::ChronoDateTimeUtc(Some(t)) => ListArg::Time(*t),
            other => unreachable!("list_query creates no {other:?}"),
        })
        .collect()
}

/// The statement names of [`grammar_shapes`]: `list_<table>_<shape>`.
macro_rules! shape_names {
    ($table:literal) => {
        [
            concat!("list_", $table, "_all"),
            concat!("list_", $table, "_all_without_payloads"),
            concat!("list_", $table, "_queue"),
            concat!("list_", $table, "_kind"),
            concat!("list_", $table, "_tag"),
            concat!("list_", $table, "_from"),
            concat!("list_", $table, "_to"),
            concat!("list_", $table, "_after"),
            concat!("list_", $table, "_every_filter"),
            concat!("list_", $table, "_status_pending"),
            concat!("list_", $table, "_status_processing"),
        ]
    };
}

/// The listings the backends' grammar checks parse for `table`, named `list_<table>_<shape>`
/// (`hot`, `archive`, `dead`): no filter (with and without payloads), each filter alone (the
/// status filter on the hot table only, Pending being `IN (0, 3)`), the cursor alone, and every
/// filter at once with the cursor (both id bounds).
pub fn grammar_shapes(table: JobTable) -> Vec<(&'static str, ListJobsParams)> {
    use crate::{JobKind, QueueName};
    let names = match table {
        JobTable::Hot => shape_names!("hot"),
        JobTable::Archive => shape_names!("archive"),
        JobTable::DeadLetter => shape_names!("dead"),
    };
    let t0: Timestamp = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    let base = ListJobsParams::new(table);
    let queue = QueueName::new("q").ok();
    let kind = JobKind::new("k").ok();
    let after = Some(JobId(v7_floor(t0)));
    let hot = table == JobTable::Hot;
    let every = ListJobsParams {
        queue: queue.clone(),
        status: hot.then_some(JobStatus::Pending),
        kind: kind.clone(),
        tag: Some("t".into()),
        created_from: Some(t0),
        created_to: Some(t0 + chrono::Duration::hours(1)),
        after,
        ..base.clone()
    };
    let mut shapes = vec![
        base.clone(),
        ListJobsParams { without_payloads: true, ..base.clone() },
        ListJobsParams { queue, ..base.clone() },
        ListJobsParams { kind, ..base.clone() },
        ListJobsParams { tag: Some("t".into()), ..base.clone() },
        ListJobsParams { created_from: Some(t0), ..base.clone() },
        ListJobsParams { created_to: Some(t0), ..base.clone() },
        ListJobsParams { after, ..base.clone() },
        every,
    ];
    if hot {
        shapes.push(ListJobsParams { status: Some(JobStatus::Pending), ..base.clone() });
        shapes.push(ListJobsParams { status: Some(JobStatus::Processing), ..base });
    }
    names.into_iter().zip(shapes).collect()
}

#[cfg(test)]
mod tests;
