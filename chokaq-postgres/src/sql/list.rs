//! The `list_jobs` statement of the list room: built per call with sea-query.

use chokaq_core::listing::{self, ListQuery, SqlDialect};
use chokaq_core::{JobTable, ListJobsParams, Result};

/// The columns of a `list_jobs` page of each table, with payloads or without (every payload
/// then reads as JSON `null`, and none leaves the server), as `rows::record` decodes them. The
/// statement around them is built per call with sea-query (`chokaq_core::listing`): only the
/// filters given, keyset `id > after`, `ORDER BY id`, `LIMIT`; [`all_statements`] lists a
/// representative set of its shapes for the grammar check.
pub(crate) fn list_columns(table: JobTable, without_payloads: bool) -> &'static str {
    match (table, without_payloads) {
        (JobTable::Hot, false) => hot_record!("payload"),
        (JobTable::Hot, true) => hot_record!("'null'::jsonb"),
        (JobTable::Archive, false) => archive_record!("payload"),
        (JobTable::Archive, true) => archive_record!("'null'::jsonb"),
        (JobTable::DeadLetter, false) => dlq_record!("payload"),
        (JobTable::DeadLetter, true) => dlq_record!("'null'::jsonb"),
    }
}

/// The listing of `p` in `schema` (validated), rendered for PostgreSQL.
pub(crate) fn list_query(schema: &str, p: &ListJobsParams) -> Result<ListQuery> {
    let mut q = listing::list_query(SqlDialect::Postgres, schema, list_columns(p.table, p.without_payloads), p)?;
    if p.table == JobTable::Hot && p.status == Some(chokaq_core::JobStatus::Pending) {
        q.sql = with_blocked(&q.sql)?;
    }
    Ok(q)
}

/// The Pending filter of a hot listing (`"status" IN ($a, $b)`: Pending and Scheduled, as
/// `chokaq_core::listing` renders it) with Blocked (4, migration 13) and Waiting (5, migration
/// 19) added: they read as Pending.
fn with_blocked(sql: &str) -> Result<String> {
    const AT: &str = "\"status\" IN (";
    let start = sql
        .find(AT)
        .ok_or_else(|| chokaq_core::Error::new(chokaq_core::ErrorKind::Other, "listing: no status filter"))?;
    let close = sql[start..]
        .find(')')
        .ok_or_else(|| chokaq_core::Error::new(chokaq_core::ErrorKind::Other, "listing: status filter not closed"))?
        + start;
    Ok(format!("{}, 4, 5{}", &sql[..close], &sql[close..]))
}
