//! The migration batches of every earlier SQL Server schema version (1 to 8), as each version
//! ran them: `vN.sql` holds the batches of the commit that last shipped version N, in their
//! order, each after a `-- batch: <name>` line, with `{schema}` / `{schema_text}` where the
//! schema goes. Used by the upgrade test (`tests/upgrade.rs`: each version, then today's
//! migration, then the suite) and the grammar check (`tests/grammar.rs`: every step parses).

// Each test binary uses part of it.
#![allow(dead_code)]

/// `(version, batches)`, oldest first.
pub const VERSIONS: [(u32, &str); 10] = [
    (1, include_str!("v1.sql")),
    (2, include_str!("v2.sql")),
    (3, include_str!("v3.sql")),
    (4, include_str!("v4.sql")),
    (5, include_str!("v5.sql")),
    (6, include_str!("v6.sql")),
    (7, include_str!("v7.sql")),
    (8, include_str!("v8.sql")),
    (9, include_str!("v9.sql")),
    (10, include_str!("v10.sql")),
];

/// The batches of one version's file, as `(name, sql)`, rendered for `schema` (a name that
/// `chokaq_mssql::all_statements` accepts: validated there, so nothing unvalidated is
/// spliced).
pub fn batches(file: &str, schema: &str) -> Vec<(String, String)> {
    chokaq_mssql::all_statements(schema).expect("a valid schema name");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in file.lines() {
        if let Some(name) = line.strip_prefix("-- batch: ") {
            out.push((name.trim().to_string(), String::new()));
        } else if let Some((_, sql)) = out.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    for (_, sql) in &mut out {
        *sql = sql.trim_end().replace("{schema_text}", schema).replace("{schema}", &format!("[{schema}]"));
    }
    out
}

/// Every version's file has its batches, rendered, in order, and records exactly its own
/// version as the highest (run as a trial of `tests/upgrade.rs`, no server needed).
pub fn check_versions() {
    let mut seen = Vec::new();
    for (version, file) in VERSIONS {
        let b = batches(file, "chokaq");
        let names: Vec<&str> = b.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"migrate_schema"), "v{version}");
        assert!(names.contains(&"migrate_objects"), "v{version}");
        for (name, sql) in &b {
            assert!(!sql.is_empty() && !sql.contains('{') && !sql.contains('}'), "v{version} {name}");
            assert!(sql.contains("[chokaq]") || sql.contains("N'chokaq'"), "v{version} {name}");
        }
        // Any batch may record its version (version 10 records it in migrate_start_ordinals
        // and migrate_uniques).
        let recorded: Vec<u32> = (1..=11)
            .filter(|v| {
                let insert = format!("VALUES ({v}, SYSUTCDATETIME())");
                b.iter().any(|(_, sql)| sql.contains(&insert))
            })
            .collect();
        assert_eq!(recorded.iter().max(), Some(&version), "v{version} records {recorded:?}");
        seen.push(version);
    }
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
}
