//! The statement set's shape: what the grammar check (`tests/grammar.rs`) cannot see.

use super::*;
use chokaq_core::ListJobsParams;

/// Every template is rendered: no placeholder is left, the schema is quoted, and the channel
/// is the schema's.
#[test]
fn every_statement_is_rendered() {
    let all = all_statements("Jobs_1").unwrap();
    assert!(all.len() >= 40, "{}", all.len());
    for (name, sql) in &all {
        assert!(!sql.contains("{schema}") && !sql.contains("{channel}") && !sql.contains('%'), "{name}: {sql}");
    }
    let enqueue = &all.iter().find(|(n, _)| *n == "enqueue").unwrap().1;
    assert!(enqueue.contains(r#"INSERT INTO "Jobs_1".jobs_hot"#));
    let requeue = &all.iter().find(|(n, _)| *n == "requeue").unwrap().1;
    assert!(requeue.contains("pg_notify('Jobs_1_jobs'"), "{requeue}");
    assert!(all_statements("bad\"name").is_err());
}

/// The highest `$n` in `sql`.
fn params(sql: &str) -> u32 {
    sql.split('$')
        .skip(1)
        .filter_map(|t| t.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// The optional filters of purge are NULL-able parameters, and each table's statement has
/// exactly the parameters the backend binds to it: `$1`–`$4` (dead letters: `$5` reason).
#[test]
fn purge_takes_null_able_filters() {
    let s = Statements::new("s");
    assert_eq!(params(&s.purge_archive), 4);
    assert_eq!(params(&s.purge_dlq), 5);
    assert!(s.purge_dlq.contains("($5::text IS NULL OR reason = $5::text)"), "{}", s.purge_dlq);
    for purge in [&s.purge_archive, &s.purge_dlq] {
        assert!(purge.contains("LIMIT $4\n       FOR UPDATE SKIP LOCKED"), "{purge}");
    }
}

/// A listing names only the filters given, with one value per placeholder, the payload only
/// when asked for, and the hot table's status as `rows::record` reads it.
#[test]
fn list_pages_name_only_their_filters() {
    let mut p = ListJobsParams::new(JobTable::Hot);
    p.status = Some(chokaq_core::JobStatus::Pending);
    let q = list_query("s", &p).unwrap();
    assert!(
        q.sql.contains(r#"FROM "s"."jobs_hot" WHERE "status" IN ($1, $2, 4, 5) ORDER BY "id" ASC LIMIT $3"#),
        "{}",
        q.sql
    );
    assert_eq!(params(&q.sql) as usize, q.args.len());
    assert!(q.sql.contains("CASE WHEN status IN (3, 4, 5) THEN 0::int2 ELSE status END AS status"), "{}", q.sql);
    assert!(q.sql.contains(" payload AS payload"), "{}", q.sql);
    let mut p = ListJobsParams::new(JobTable::DeadLetter);
    p.without_payloads = true;
    let q = list_query("s", &p).unwrap();
    assert!(q.sql.contains("'null'::jsonb AS payload"), "{}", q.sql);
    assert!(!q.sql.contains(" WHERE "), "{}", q.sql);
    let all = all_statements("s").unwrap();
    let lists: Vec<&str> =
        all.iter().map(|(n, _)| *n).filter(|n| n.starts_with("list_") && *n != "list_workers").collect();
    assert_eq!(lists.len(), 11 + 9 + 9, "{lists:?}");
}

/// Every identifier derived from a schema name stays within PostgreSQL's 63 bytes for the
/// longest name `validate::schema_name` accepts: the NOTIFY channel (a longer one would fail
/// every enqueue), the sessions' `application_name` (cut at 63, so `kill_connections` would
/// match nothing) and the test role.
#[test]
fn derived_identifiers_fit_for_the_longest_schema_name() {
    let longest = "s".repeat(chokaq_core::validate::MAX_SCHEMA_NAME_LEN);
    chokaq_core::validate::schema_name(&longest).unwrap();
    assert!(chokaq_core::validate::schema_name(&format!("{longest}s")).is_err());
    let app = crate::PgConfig::new("postgres://h/db").schema(longest.clone()).application_name();
    for (what, id) in
        [("channel", super::channel(&longest)), ("application_name", app), ("role", super::rr_role(&longest))]
    {
        assert!(id.len() <= chokaq_core::validate::MAX_IDENTIFIER_LEN, "{what} {id} is {} bytes", id.len());
    }
}

/// Issue 12 item 2: the enqueue statement notifies nobody. A transaction that calls
/// `pg_notify` holds a cluster-wide lock from its commit until the commit is flushed, which
/// serialises every enqueuing transaction's commit (the caller's own transaction too, with
/// `enqueue_in_tx`); the wake-up is sent after the commit instead (`notify.rs`).
#[test]
fn enqueue_sends_no_notify_inside_its_transaction() {
    let s = Statements::new("\"chokaq\"");
    assert!(!s.enqueue.contains("pg_notify"), "the enqueue statement notifies: {}", s.enqueue);
    assert!(s.enqueue.contains("txid_current()"), "the caller's transaction id comes back: {}", s.enqueue);
    assert!(s.notify_queues.contains("pg_notify($1, q.queue)"));
    assert!(s.tx_status.contains("txid_status(t.x)"));
}
