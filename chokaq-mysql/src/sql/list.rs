//! The `list_jobs` statement: built per call with sea-query (`chokaq_core::listing`), naming
//! only the predicates of the filters given (no catch-all `? IS NULL OR ...`), so the server
//! plans each shape on its own index: `queue` and `kind` on `(queue, id)` / `(kind, id)`, a
//! creation window on the primary key (ids are UUID v7: the window's id bounds), with the
//! exact `created_at` predicates kept. A representative set of the shapes is grammar-checked
//! like every other statement ([`crate::all_statements`]).

use chokaq_core::listing::{self, ListQuery, SqlDialect};
use chokaq_core::{JobTable, ListJobsParams, Result};

/// The listing of one schema.
pub(crate) struct Lists {
    /// The schema (database) name, validated by `Statements::new`.
    schema: String,
}

/// The selected columns of `table`, as `rows::record` decodes them: the payload, or JSON
/// `null` in its place (`ListJobsParams::without_payloads`: none leaves the server).
fn columns(table: JobTable, without_payloads: bool) -> String {
    let cols = if without_payloads { cols!().replace("payload,", "'null' AS payload,") } else { cols!().to_string() };
    let extra = match table {
        JobTable::Hot => "NULL AS finished_at, NULL AS reason",
        JobTable::Archive => "finished_at, NULL AS reason",
        JobTable::DeadLetter => "finished_at, reason",
    };
    format!("{cols}, {extra}")
}

impl Lists {
    pub(crate) fn new(schema: &str) -> Self {
        Lists { schema: schema.to_string() }
    }

    /// The statement and values of one page (the caller has checked `p` with
    /// `listing::validate_params`).
    pub(crate) fn query(&self, p: &ListJobsParams) -> Result<ListQuery> {
        listing::list_query(SqlDialect::Mysql, &self.schema, &columns(p.table, p.without_payloads), p)
    }

    /// The shapes of `listing::grammar_shapes` for the three tables, named
    /// `list_<table>_<shape>`.
    pub(crate) fn into_named(self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for table in [JobTable::Hot, JobTable::Archive, JobTable::DeadLetter] {
            for (name, p) in listing::grammar_shapes(table) {
                // The schema was validated by `Statements::new`: a listing of it always builds.
                let q = self.query(&p).expect("a validated schema name");
                out.push((name.to_string(), q.sql));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_name_only_their_filters() {
        let l = Lists::new("s");
        let mut p = ListJobsParams::new(JobTable::Hot);
        let q = l.query(&p).unwrap();
        assert!(q.sql.starts_with("SELECT id, queue, kind, payload, tags,"), "{}", q.sql);
        assert!(q.sql.ends_with("NULL AS finished_at, NULL AS reason FROM `s`.`jobs_hot` ORDER BY `id` ASC LIMIT ?"));
        p.queue = Some(chokaq_core::QueueName::new("q").unwrap());
        p.without_payloads = true;
        let q = l.query(&p).unwrap();
        assert!(q.sql.contains("'null' AS payload,") && q.sql.contains("WHERE `queue` = ? ORDER BY"), "{}", q.sql);
        assert!(!q.sql.contains("`kind` ="), "{}", q.sql);
        let dead = l.query(&ListJobsParams::new(JobTable::DeadLetter)).unwrap();
        assert!(dead.sql.contains("finished_at, reason FROM `s`.`jobs_dlq`"), "{}", dead.sql);
        assert_eq!(l.into_named().len(), 11 + 9 + 9);
    }
}
