//! `chokaq::apptest` on PostgreSQL: each case on a fresh schema `chokaq_t_<hex>`, dropped
//! afterwards (the cases are in `apptest_cases`). The URL comes from
//! `CHOKAQ_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); when the
//! database is unreachable every case is ignored, unless `CHOKAQ_TEST_REQUIRE` names
//! `postgres`: then every case fails.

mod apptest_cases;

use std::sync::Arc;

use apptest_cases::{Signup, Welcome};
use chokaq::apptest::Expect;
use chokaq::postgres::map_sqlx_error;
use chokaq::postgres::{PgBackend, PgConfig};
use chokaq::Backend;
use chokaq::{Client, JobBuilder};
use chokaq_core::testing::TestSupport;
use futures::FutureExt;

fn url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn connect(schema: &str) -> chokaq::Result<PgBackend> {
    PgBackend::connect(PgConfig::new(url()).schema(schema).max_connections(4)).await
}

fn main() -> std::process::ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let reachable = rt.block_on(async { connect("chokaq_probe").await.map(drop) });
    drop(rt);
    let required = std::env::var("CHOKAQ_TEST_REQUIRE").is_ok_and(|v| v.split(',').any(|s| s.trim() == "postgres"));
    let reachable = match reachable {
        Ok(()) => Ok(()),
        // Required: run the cases, which then fail on the connection error.
        Err(_) if required => Ok(()),
        Err(e) => Err(format!("PostgreSQL unreachable ({})", e.kind())),
    };
    apptest_cases::main_with(
        reachable,
        vec![("transaction_form_sees_uncommitted_jobs", |b| in_tx(b).boxed())],
        || async {
            let b = connect(&format!("chokaq_t_{:016x}", rand::random::<u64>())).await?;
            b.migrate().await?;
            Ok(Arc::new(b))
        },
        |b| async move {
            // The schema goes with the case: the cases share the server with other tests.
            if let Err(e) = b.drop_schema().await {
                eprintln!("could not drop schema {}: {e}", b.schema());
            }
        },
    )
}

/// The transaction form: a job enqueued in an open transaction is seen on that transaction's
/// connection, with its options, and not outside it; a rollback leaves nothing.
async fn in_tx(b: Arc<PgBackend>) {
    let client = Client::new((*b).clone());
    let signup = Signup { user: 5, email: "u5@example.com".into() };
    let mut tx = b.pool().begin().await.map_err(map_sqlx_error).unwrap();
    client.enqueue_in_tx(&mut tx, JobBuilder::new(&signup).priority(3).tag("tx")).await.unwrap();
    client.enqueue_many_in_tx(&mut tx, [&signup, &signup]).await.unwrap();
    let five = || Expect::<Signup>::matching(|s| s.user == 5);
    let found = five().priority(3).tag("tx").assert_enqueued_in_tx(&b, &mut tx).await;
    assert_eq!(found.job.email, "u5@example.com");
    assert_eq!(five().assert_enqueued_times_in_tx(&b, &mut tx, 3).await.len(), 3);
    assert_eq!(five().find_in_tx(&b, &mut tx).await.unwrap().len(), 3);
    Expect::<Welcome>::any().refute_enqueued_in_tx(&b, &mut tx).await;
    five().refute_enqueued(&*b).await; // not committed: not visible outside
    tx.commit().await.unwrap();
    five().assert_enqueued_times(&*b, 3).await;

    let mut tx = b.pool().begin().await.map_err(map_sqlx_error).unwrap();
    client.enqueue_in_tx(&mut tx, &Welcome { to: "w@example.com".into() }).await.unwrap();
    Expect::<Welcome>::any().assert_enqueued_in_tx(&b, &mut tx).await;
    let miss = Expect::<Welcome>::any().priority(9);
    let panic = std::panic::AssertUnwindSafe(miss.assert_enqueued_in_tx(&b, &mut tx)).catch_unwind().await.unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("differs: priority is 0, not 9"), "{msg}");
    tx.rollback().await.unwrap();
    Expect::<Welcome>::any().refute_enqueued(&*b).await;
    assert_eq!(b.stats().await.unwrap().total(), 3);
}
