//! Unit tests of the statements (`sql.rs`).

use super::*;

/// The moves copy the hot row column for column, in `cols!()` order.
#[test]
fn moves_copy_every_column_in_order() {
    let st = Statements::new("chokaq").unwrap();
    let now = now_us!();
    let archived = cols!()
        .replace("updated_at", now)
        .replace("status, attempt,", "2, attempt + (status = 1),")
        .replace("started_at", &format!("CASE WHEN status = 1 THEN {now} ELSE started_at END"));
    assert!(
        st.archive_many.contains(&format!("SELECT {archived}, {now}, output FROM `chokaq`.jobs_hot")),
        "{}",
        st.archive_many
    );
    let dead = cols!().replace("updated_at", "?").replace("last_error", "COALESCE(?, last_error)");
    assert!(
        st.dead_letter.contains(&format!("SELECT {dead}, ?, ?, output FROM `chokaq`.jobs_hot")),
        "{}",
        st.dead_letter
    );
}

/// The set-based shapes: powers of two up to CHUNK, each list expanded `n` times.
#[test]
fn set_based_statements_expand_to_their_shape() {
    assert_eq!([shape(0), shape(1), shape(3), shape(8), shape(9), shape(700)], [1, 1, 4, 8, 16, CHUNK]);
    let sql = expand("a IN ({ids}) AND (a, b) IN ({pairs}) AND CASE a {cases} END", 3);
    assert_eq!(
        sql,
        "a IN (?, ?, ?) AND (a, b) IN ((?, ?), (?, ?), (?, ?)) AND CASE a WHEN ? THEN ? WHEN ? THEN ? \
         WHEN ? THEN ? END"
    );
    assert_eq!(probe("SELECT ?", 2), "SELECT ? UNION ALL SELECT ?");
}

#[test]
fn every_table_is_qualified_and_the_schema_is_validated() {
    let all = all_statements("chokaq_grammar").unwrap();
    let unqualified = [
        "session_isolation",
        "db_now",
        "connection_id",
        "read_snapshot",
        "bounded_setup",
        "bounded_limit_mariadb",
        "bounded_limit_mysql",
        "bounded_reset_mariadb",
        "bounded_reset_mysql",
        "bounded_kill",
        "isolation_level",
        "isolation_level_old",
        "kill_connection",
        "handler_reads",
    ];
    for (name, sql) in &all {
        assert!(!sql.contains("{schema}"), "{name}: {sql}");
        if !unqualified.contains(&name.as_str()) {
            assert!(sql.contains("`chokaq_grammar`"), "{name}: {sql}");
        }
    }
    let mut names: Vec<_> = all.iter().map(|(n, _)| n.clone()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all.len(), "names are unique");
    for bad in ["", "a;b", "x`y", "1a"] {
        assert!(all_statements(bad).is_err(), "{bad}");
    }
}

/// Issue 40, L8: the server's own databases are refused, in any case, with a typed
/// InvalidInput error naming the reason (`migrate` would otherwise write into them).
#[test]
fn the_servers_system_databases_are_refused() {
    for name in ["mysql", "MySQL", "performance_schema", "PERFORMANCE_SCHEMA", "sys", "Sys", "information_schema"] {
        let e = all_statements(name).expect_err(name);
        assert_eq!(e.kind(), chokaq_core::ErrorKind::InvalidInput, "{name}: {e}");
        assert!(e.to_string().contains("reserved"), "{name}: {e}");
    }
    assert!(all_statements("mysql_jobs").is_ok(), "a name merely starting with mysql is fine");
}
