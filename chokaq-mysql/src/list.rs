//! The listing statements of `list_jobs`: one per table and combination of filters, each
//! naming only the predicates its filters use (no catch-all `? IS NULL OR ...`), so the
//! server plans each shape on its own index: `queue` and `kind` on `(queue, id)` /
//! `(kind, id)`, the creation window on `(created_at, id)`, none on the primary key. They are
//! built once at connect from the fixed fragments below and grammar-checked like every other
//! statement ([`crate::all_statements`]).
//!
//! Parameters, in order: whether to read payloads (1/0), then one value per filter present in
//! [`FILTERS`] order (the status filter takes two: a Pending filter also matches Scheduled,
//! status 3), then the keyset cursor (the last id of the previous page, or the empty string,
//! which every id is greater than), then the row limit.

use crate::sql::cols;

/// The filters, in bit order of a shape's mask, with their predicate.
pub(crate) const FILTERS: [(&str, &str); 6] = [
    ("queue", "queue = ?"),
    ("status", "status IN (?, ?)"),
    ("kind", "kind = ?"),
    ("tag", "JSON_CONTAINS(tags, JSON_QUOTE(?))"),
    ("from", "created_at >= ?"),
    ("to", "created_at < ?"),
];

/// Bit of the status filter (hot table only).
pub(crate) const STATUS_BIT: usize = 1;

/// The three tables' listing statements, indexed by filter mask.
pub(crate) struct Lists {
    pub(crate) hot: Vec<String>,
    pub(crate) archive: Vec<String>,
    pub(crate) dead: Vec<String>,
}

/// The selected columns, the payload only when the first parameter is 1.
fn select(table: &str, quoted: &str) -> String {
    let cols = cols!().replace("payload,", "CASE WHEN ? = 1 THEN payload ELSE 'null' END AS payload,");
    let extra = match table {
        "jobs_hot" => "NULL AS finished_at, NULL AS reason",
        "jobs_archive" => "finished_at, NULL AS reason",
        _ => "finished_at, reason",
    };
    format!("SELECT {cols}, {extra} FROM {quoted}.{table}")
}

/// One shape: the predicates of `mask`, the cursor and the limit.
fn shape(table: &str, quoted: &str, mask: usize) -> String {
    let mut preds: Vec<&str> =
        FILTERS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, f)| f.1).collect();
    preds.push("id > ?");
    format!("{} WHERE {} ORDER BY id LIMIT ?", select(table, quoted), preds.join(" AND "))
}

impl Lists {
    pub(crate) fn new(quoted: &str) -> Self {
        let all = 1 << FILTERS.len();
        let build =
            |table: &str, status: bool| -> Vec<String> {
                (0..all)
                    .map(|mask| {
                        if !status && mask & (1 << STATUS_BIT) != 0 {
                            String::new()
                        } else {
                            shape(table, quoted, mask)
                        }
                    })
                    .collect()
            };
        Lists { hot: build("jobs_hot", true), archive: build("jobs_archive", false), dead: build("jobs_dlq", false) }
    }

    /// Every shape, named `list_<table>_<filters>`.
    pub(crate) fn into_named(self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (table, stmts) in [("hot", self.hot), ("archive", self.archive), ("dead", self.dead)] {
            for (mask, sql) in stmts.into_iter().enumerate() {
                if sql.is_empty() {
                    continue;
                }
                let names: Vec<&str> =
                    FILTERS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, f)| f.0).collect();
                let suffix = if names.is_empty() { "all".to_string() } else { names.join("_") };
                out.push((format!("list_{table}_{suffix}"), sql));
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
        let l = Lists::new("`s`");
        assert_eq!(l.hot.len(), 64);
        assert!(!l.hot[0].contains("queue = ?") && l.hot[0].contains("id > ?"));
        assert!(l.hot[1].contains("queue = ?") && !l.hot[1].contains("kind = ?"));
        assert!(l.archive[2].is_empty(), "no status filter on the archive");
        assert_eq!(l.into_named().len(), 64 + 32 + 32);
    }
}
