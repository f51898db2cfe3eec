//! `list_jobs` as built by `chokaq_core::listing` (issue 28): a creation window lists what was
//! created in it, as id bounds too (the contract's rule for a job whose id clock was off), and
//! a page by kind reads the kind's index and one by creation time a range of the primary key.

mod common;

use chokaq_core::listing::v7_floor;
use chokaq_core::{Backend, BackendExt, JobKind, JobTable, ListJobsParams, NewJob, QueueName};
use sqlx::Row;

fn job(queue: &str) -> NewJob {
    NewJob::new(QueueName::new(queue).unwrap(), JobKind::new("list.test.v1").unwrap()).json(serde_json::json!({}))
}

fn window(from: Option<chrono::DateTime<chrono::Utc>>, to: Option<chrono::DateTime<chrono::Utc>>) -> ListJobsParams {
    let mut p = ListJobsParams::new(JobTable::Hot);
    p.created_from = from;
    p.created_to = to;
    p
}

#[tokio::test]
async fn list_by_creation_window() {
    let f = fixture!();
    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    for _ in 0..3 {
        f.db.enqueue(job("win")).await.unwrap();
    }
    let after = chrono::Utc::now() + chrono::Duration::seconds(5);
    assert_eq!(f.db.list_jobs(&window(Some(before), None)).await.unwrap().jobs.len(), 3);
    assert_eq!(f.db.list_jobs(&window(Some(before), Some(after))).await.unwrap().jobs.len(), 3);
    assert_eq!(f.db.list_jobs(&window(None, Some(before))).await.unwrap().jobs.len(), 0);
    assert_eq!(f.db.list_jobs(&window(Some(after), None)).await.unwrap().jobs.len(), 0);
    let mut p = window(Some(before), Some(after));
    p.limit = 2;
    let first = f.db.list_jobs(&p).await.unwrap();
    assert_eq!(first.jobs.len(), 2);
    p.after = first.next;
    let second = f.db.list_jobs(&p).await.unwrap();
    assert_eq!((second.jobs.len(), second.next), (1, None));
    f.drop().await;
}

/// The rule of docs/contract.md: a job whose id is ten minutes older than its `created_at`
/// (its enqueuing clock ten minutes behind the database's) is listed without a window and
/// left out of a window it was created in; one within the minute of skew is found.
#[tokio::test]
async fn a_window_also_bounds_the_id() {
    let f = fixture!();
    let now = chrono::Utc::now();
    let schema = f.db.schema().to_string();
    let insert = format!(
        "INSERT INTO \"{schema}\".jobs_archive (id, queue, kind, payload, priority, attempt, max_attempts, \
         created_at, updated_at, finished_at) VALUES ($1, 'skew', 'k', '{{}}', 0, 1, 1, $2, $2, $2)"
    );
    let mut far = *v7_floor(now - chrono::Duration::minutes(10)).as_bytes();
    far[15] = 1;
    let mut near = *v7_floor(now - chrono::Duration::seconds(30)).as_bytes();
    near[15] = 2;
    for id in [far, near] {
        sqlx::query(&insert).bind(uuid::Uuid::from_bytes(id)).bind(now).execute(f.db.pool()).await.unwrap();
    }
    let mut p = ListJobsParams::new(JobTable::Archive);
    assert_eq!(f.db.list_jobs(&p).await.unwrap().jobs.len(), 2);
    p.created_from = Some(now - chrono::Duration::seconds(1));
    let got = f.db.list_jobs(&p).await.unwrap().jobs;
    assert_eq!(got.iter().map(|j| j.id.0).collect::<Vec<_>>(), vec![uuid::Uuid::from_bytes(near)]);
    f.drop().await;
}

/// Over 20,000 archived jobs of 1,000 kinds: the plan of a page by kind reads
/// `jobs_archive_kind_idx` (migration 12), and one by creation time reads the primary key in
/// order from the window's id bound.
#[tokio::test]
async fn pages_by_kind_and_window_are_index_ranges() {
    let f = fixture!();
    let schema = f.db.schema().to_string();
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".jobs_archive (id, queue, kind, payload, priority, attempt, max_attempts, \
         created_at, updated_at, finished_at) \
         SELECT (lpad(to_hex(floor(extract(epoch FROM c) * 1000)::bigint), 12, '0') || '7000' || '8' \
                 || lpad(to_hex(g), 15, '0'))::uuid, 'q' || (g % 10), 'k' || (g % 1000), '{{}}', 0, 1, 1, c, c, c \
           FROM (SELECT g, now() - g * interval '1 second' AS c FROM generate_series(1, 20000) g) s"
    ))
    .execute(f.db.pool())
    .await
    .unwrap();
    sqlx::query(&format!("ANALYZE \"{schema}\".jobs_archive")).execute(f.db.pool()).await.unwrap();
    let all = chokaq_postgres::all_statements(&schema).unwrap();
    let stmt = |name: &str| all.iter().find(|(n, _)| *n == name).unwrap().1.clone();
    let plan = |rows: Vec<sqlx::postgres::PgRow>| -> String {
        rows.iter().map(|r| r.get::<String, _>(0)).collect::<Vec<_>>().join("\n")
    };
    let kind = plan(
        sqlx::query(&format!("EXPLAIN {}", stmt("list_archive_kind")))
            .bind("k7")
            .bind(51i64)
            .fetch_all(f.db.pool())
            .await
            .unwrap(),
    );
    // Only the kind's rows are read (20 here: the planner may fetch them by bitmap and sort
    // them; with many it walks the index in id order), never the table.
    assert!(kind.contains("jobs_archive_kind_idx") && !kind.contains("Seq Scan"), "{kind}");
    let from = chrono::Utc::now() - chrono::Duration::minutes(10);
    let window = plan(
        sqlx::query(&format!("EXPLAIN {}", stmt("list_archive_from")))
            .bind(from)
            .bind(v7_floor(from - chrono::Duration::minutes(1)))
            .bind(51i64)
            .fetch_all(f.db.pool())
            .await
            .unwrap(),
    );
    assert!(window.contains("jobs_archive_pkey") && window.contains("Index Cond: (id >="), "{window}");
    assert!(!window.contains("Sort"), "{window}");
    // And the pages themselves: 50 of kind k7 (20 exist), 50 of the last 10 minutes.
    let mut p = ListJobsParams::new(JobTable::Archive);
    p.kind = Some(JobKind::new("k7").unwrap());
    p.limit = 50;
    assert_eq!(f.db.list_jobs(&p).await.unwrap().jobs.len(), 20);
    let mut p = ListJobsParams::new(JobTable::Archive);
    p.created_from = Some(from);
    p.limit = 50;
    let page = f.db.list_jobs(&p).await.unwrap();
    assert_eq!(page.jobs.len(), 50);
    assert!(page.jobs.iter().all(|j| j.created_at >= from));
    f.drop().await;
}
