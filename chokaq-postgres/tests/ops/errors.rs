//! How the server's errors reach the caller.

use super::*;

/// A statement stopped by the sessions' `statement_timeout` (`PgConfig::statement_timeout`;
/// SQLSTATE 57014) is `Unavailable`, as a bounded read's deadline and MariaDB's
/// `max_statement_time` are: the database did not answer in the time it was given.
#[tokio::test]
async fn a_statement_stopped_by_the_timeout_is_unavailable() {
    let Some(fx) = common::Fixture::with(|c| c.statement_timeout(Some(Duration::from_millis(50)))).await else {
        return;
    };
    let err = sqlx::query("SELECT pg_sleep(5)")
        .execute(fx.db.pool())
        .await
        .map_err(chokaq_postgres::map_sqlx_error)
        .expect_err("the timeout stops the statement");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("57014"), "{err}");
    fx.drop().await;
}

/// The sessions' `statement_timeout` bounds the application's statements, not the schema's
/// own: `migrate` (a whole migration script in one statement) and the test support's
/// `drop_schema` (a `DROP SCHEMA … CASCADE`) run under no timeout. CI (two runs at once, a
/// loaded server) saw the drop at the end of the 50 ms test above cancelled: "drop schema:
/// … 57014: canceling statement due to statement timeout". A timeout of 1 ms makes it certain.
#[tokio::test]
async fn migrate_and_drop_are_not_bound_by_the_statement_timeout() {
    let Some(fx) = common::Fixture::with(|c| c.statement_timeout(Some(Duration::from_millis(1)))).await else {
        return;
    };
    fx.db.migrate().await.expect("a second migrate (nothing to apply) under a 1 ms timeout");
    fx.drop().await;
}
