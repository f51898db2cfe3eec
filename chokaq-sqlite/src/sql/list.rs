//! The `list_jobs` statement of the list room: built per call with sea-query from only the
//! filters given.

use chokaq_core::listing::{self, ListQuery, SqlDialect};
use chokaq_core::{JobTable, ListJobsParams, Result};

/// The columns of a `list_jobs` page of `table`, as `rows::record` decodes them: the payload,
/// or JSON `null` in its place (`ListJobsParams::without_payloads`: none is read). The
/// statement around them is built per call with sea-query ([`list_query`]).
pub(crate) fn list_columns(table: JobTable, without_payloads: bool) -> String {
    let cols = if without_payloads { cols!().replace("payload,", "'null' AS payload,") } else { cols!().to_string() };
    let extra = match table {
        JobTable::Hot => "NULL AS finished_at, NULL AS reason",
        JobTable::Archive => "finished_at, NULL AS reason",
        JobTable::DeadLetter => "finished_at, reason",
    };
    format!("{cols}, {extra}")
}

/// The listing of `p` in `schema` (validated by the builder), rendered for SQLite: only the
/// predicates of the filters given, keyset `id > after`, a creation window also as id bounds
/// (`chokaq_core::listing`).
pub(crate) fn list_query(schema: &str, p: &ListJobsParams) -> Result<ListQuery> {
    listing::list_query(SqlDialect::Sqlite, schema, &list_columns(p.table, p.without_payloads), p)
}
