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
