//! No statement of chokaq's pool is JIT-compiled (issue 38 item 1): the pool's sessions run
//! with `jit = off`, whatever the server, the database or the role sets. At a large backlog the
//! claim's generic plan passes `jit_above_cost`, and compiling it cost every claim ~25 ms.
//!
//! The test forces JIT in a session of the pool the way a server tuned for analytics would
//! (every JIT cost threshold 0) and EXPLAINs the claim, heartbeat and complete statements: no
//! plan may carry a `JIT` section. Without LLVM (`pg_jit_available()` false) it says so and
//! still checks the pool's setting.

mod common;

use chokaq_core::{BackendExt, ClaimMode, WorkerId};
use sqlx::Connection;

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of the statement `$sql` with the binds `$bind`, as text.
macro_rules! explain {
    ($conn:expr, $sql:expr, $($bind:expr),*) => {{
        let text = format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", $sql);
        let plan: serde_json::Value =
            sqlx::query_scalar(&text)$(.bind($bind))*.fetch_one(&mut *$conn).await.unwrap();
        plan.to_string()
    }};
}

#[tokio::test]
async fn pool_sessions_never_jit_compile() {
    let f = fixture!();
    let db = &f.db;
    for _ in 0..3 {
        db.enqueue(common::job("jit")).await.unwrap();
    }
    let worker = WorkerId::random();
    let held = common::claim(db, worker, "jit", 2, ClaimMode::Start).await;
    assert_eq!(held.len(), 2);

    let mut conn = db.pool().acquire().await.unwrap().detach();
    let jit: String = sqlx::query_scalar("SHOW jit").fetch_one(&mut conn).await.unwrap();
    assert_eq!(jit, "off", "a session of chokaq's pool runs with jit = {jit}");

    let available: bool = sqlx::query_scalar("SELECT pg_jit_available()").fetch_one(&mut conn).await.unwrap();
    if !available {
        eprintln!(
            "NOTE: this server has no JIT (pg_jit_available() is false): only the pool's `jit` setting was checked"
        );
    } else {
        // What a server tuned for analytics (or a large backlog's estimate) does: every plan
        // passes the thresholds.
        for s in ["SET jit_above_cost = 0", "SET jit_inline_above_cost = 0", "SET jit_optimize_above_cost = 0"] {
            sqlx::query(s).execute(&mut conn).await.unwrap();
        }
        let statements: std::collections::HashMap<_, _> =
            chokaq_postgres::all_statements(db.schema()).unwrap().into_iter().collect();
        let queues = vec!["jit".to_owned()];
        let (a, b) = (&held[0], &held[1]);
        let plans = [
            ("heartbeat", explain!(&mut conn, statements["heartbeat"], worker.0, vec![a.id.0], vec![a.lease.0])),
            ("complete", explain!(&mut conn, statements["complete"], worker.0, vec![b.id.0], vec![b.lease.0])),
            // $4 = 2: start mode (`mode_code`).
            ("claim", explain!(&mut conn, statements["claim"], worker.0, queues.clone(), 1i32, 2i16)),
        ];
        for (name, plan) in plans {
            assert!(!plan.contains("\"JIT\""), "{name} was JIT-compiled in a session of chokaq's pool: {plan}");
        }
    }
    conn.close().await.unwrap();
    f.drop().await;
}
