//! The listing workload (`--workloads list`, issue 28): a page of 50 of `list_jobs` under each
//! single filter, over `--list-archived` archived jobs (default 1,000,000) in 10 queues and
//! 1,000 kinds, one created every 86.4 ms back from now (1,000,000 in the last 24 hours) with a
//! UUID v7 id of its creation time, one tag of 100 each; and over a hot table of `--list-hot` jobs (default 100,000) of which 1 % are
//! Processing. p50 and max per filter over `--list-samples` pages (after 3 untimed ones). The
//! same code for PostgreSQL and MySQL: the archive is filled by one INSERT … SELECT in the
//! server's dialect (the schema name is ours, every value a bound parameter), the hot table by
//! `enqueue_many` and `claim`, and every page goes through the `Backend` trait.

use std::time::Instant;

use chokaq::core::{
    ClaimMode, ClaimParams, JobKind, JobStatus, JobTable, ListJobsParams, NewJob, QueueName, WorkerId, MAX_CLAIM_LIMIT,
};
use chokaq::{Backend, Error, ErrorKind, Result};
use serde_json::{json, Value};

/// Queues and kinds of the archive (as in the measurement).
const QUEUES: i64 = 10;
const KINDS: i64 = 1000;
/// Distinct tags; each archived job has one.
const TAGS: i64 = 100;
/// The page size of every sample.
const PAGE: u32 = 50;

fn other(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg)
}

/// The archive fill for PostgreSQL: `$1` rows; row `g` is created `g` × 86.4 ms ago, its
/// id a UUID v7 of that millisecond (then `g` in the low bits, so ids are unique), queue
/// `list-q<g % 10>`, kind `list.k<g % 1000>`, tag `t<g % 100>`.
pub(crate) fn pg_archive_fill(schema: &str) -> String {
    format!(
        "INSERT INTO \"{schema}\".jobs_archive (id, queue, kind, payload, tags, priority, attempt, max_attempts, \
         created_at, started_at, updated_at, finished_at) \
         SELECT (lpad(to_hex(floor(extract(epoch FROM c) * 1000)::bigint), 12, '0') || '7000' || '8' \
                 || lpad(to_hex(g), 15, '0'))::uuid, \
                'list-q' || (g % {QUEUES}), 'list.k' || (g % {KINDS}), '{{}}'::jsonb, ARRAY['t' || (g % {TAGS})], \
                0, 1, 25, c, c, c, c \
           FROM (SELECT g, now() - g * interval '86400 microseconds' AS c \
                   FROM generate_series(1, $1::bigint) g) s"
    )
}

/// The same for MySQL / MariaDB (times in microseconds, ids `BINARY(16)`, tags JSON text):
/// `?` the row count, from a cross join of six digit tables (at most 1,000,000 rows).
pub(crate) fn mysql_archive_fill(schema: &str) -> String {
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                  UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";
    format!(
        "INSERT INTO `{schema}`.jobs_archive (id, queue, kind, payload, tags, priority, status, attempt, \
         max_attempts, created_at, started_at, updated_at, finished_at) \
         SELECT UNHEX(CONCAT(LPAD(HEX(c DIV 1000), 12, '0'), '7000', '8', LPAD(HEX(g), 15, '0'))), \
                CONCAT('list-q', g % {QUEUES}), CONCAT('list.k', g % {KINDS}), '{{}}', \
                CONCAT('[\"t', g % {TAGS}, '\"]'), 0, 0, 1, 25, c, c, c, c \
           FROM (SELECT g, now_us - g * 86400 AS c \
                   FROM (SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * h.d AS g \
                           FROM {digits} a, {digits} b, {digits} c, {digits} e, {digits} f, {digits} h) n, \
                        (SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us) k \
                  WHERE g <= ?) s"
    )
}

/// Fills the hot table with `n` jobs of queue `list-hot` (kind `list.hot`) and claims 1 % of
/// them with `ClaimMode::Start` (Processing).
pub(crate) async fn fill_hot(b: &dyn Backend, n: u64) -> Result<u64> {
    let q = QueueName::new("list-hot")?;
    let kind = JobKind::new("list.hot")?;
    let mut left = n;
    while left > 0 {
        let k = left.min(5000);
        let jobs = (0..k).map(|i| NewJob::new(q.clone(), kind.clone()).json(json!({ "i": i }))).collect();
        b.enqueue_many(jobs).await?;
        left -= k;
    }
    let want = n / 100;
    let worker = WorkerId::random();
    let mut took = 0u64;
    while took < want {
        let limit = (want - took).min(u64::from(MAX_CLAIM_LIMIT)) as u32;
        let got = b.claim(&ClaimParams::new(worker, vec![q.clone()], limit, ClaimMode::Start)).await?;
        if got.is_empty() {
            return Err(other(format!("list: claimed {took} of {want} hot jobs")));
        }
        took += got.len() as u64;
    }
    Ok(took)
}

/// Rows `g` in 1..=n with `g % m == r`.
fn matching(n: u64, m: u64, r: u64) -> u64 {
    if n < r {
        0
    } else {
        (n - r) / m + u64::from(r > 0)
    }
}

/// p50 and max of `samples` timed pages of `p` (after 3 untimed), each exactly `want` jobs.
async fn time_pages(b: &dyn Backend, name: &str, p: &ListJobsParams, want: u64, samples: u32) -> Result<Value> {
    let mut ms = Vec::new();
    for i in 0..samples + 3 {
        let t0 = Instant::now();
        let page = b.list_jobs(p).await?;
        let took = t0.elapsed().as_secs_f64() * 1e3;
        if page.jobs.len() as u64 != want {
            return Err(other(format!("list {name}: a page of {} jobs, want {want}", page.jobs.len())));
        }
        if i >= 3 {
            ms.push(took);
        }
    }
    ms.sort_by(f64::total_cmp);
    let p50 = ms[(ms.len() - 1) / 2];
    let max = ms[ms.len() - 1];
    eprintln!("list {name}: p50 {p50:.2} ms, max {max:.2} ms ({samples} pages of {PAGE})");
    Ok(json!({ "p50": (p50 * 1000.0).round() / 1000.0, "max": (max * 1000.0).round() / 1000.0 }))
}

#[cfg(test)]
#[test]
fn matching_counts_residues() {
    assert_eq!(matching(2000, 1000, 777), 2);
    assert_eq!(matching(776, 1000, 777), 0);
    assert_eq!(matching(777, 1000, 777), 1);
    assert_eq!(matching(1_000_000, 10, 7), 100_000);
    assert_eq!(matching(1_000_000, 10, 0), 100_000);
    assert_eq!(matching(9, 10, 0), 0);
}

/// The pages: the archive by queue, kind, tag and the last 10 minutes, the hot table by status
/// Processing. Returns `list_page_ms` (p50 per filter) and the details.
pub(crate) async fn pages(b: &dyn Backend, archived: u64, hot: u64, samples: u32) -> Result<Value> {
    let archive = ListJobsParams { limit: PAGE, ..ListJobsParams::new(JobTable::Archive) };
    let page = u64::from(PAGE);
    // The last 10 minutes hold the rows up to 6,944 (10 min / 86.4 ms), all of a fill that
    // small, less the minutes since the fill: a full page at any size the bench takes.
    let filters = [
        (
            "queue",
            ListJobsParams { queue: Some(QueueName::new("list-q7")?), ..archive.clone() },
            matching(archived, 10, 7),
        ),
        (
            "kind",
            ListJobsParams { kind: Some(JobKind::new("list.k777")?), ..archive.clone() },
            matching(archived, 1000, 777),
        ),
        ("tag", ListJobsParams { tag: Some("t77".into()), ..archive.clone() }, matching(archived, 100, 77)),
        (
            "last_10_min",
            ListJobsParams {
                created_from: Some(chrono::Utc::now() - chrono::Duration::minutes(10)),
                ..archive.clone()
            },
            archived,
        ),
        (
            "status_processing",
            ListJobsParams { status: Some(JobStatus::Processing), limit: PAGE, ..ListJobsParams::new(JobTable::Hot) },
            hot / 100,
        ),
    ];
    let mut p50 = serde_json::Map::new();
    let mut details = serde_json::Map::new();
    for (name, p, n) in &filters {
        let v = time_pages(b, name, p, (*n).min(page), samples).await?;
        p50.insert((*name).to_string(), v["p50"].clone());
        details.insert((*name).to_string(), v);
    }
    Ok(json!({
        "list_page_ms": p50,
        "list": {
            "archived": archived, "queues": QUEUES, "kinds": KINDS, "tags": TAGS, "created_every_ms": 86.4,
            "hot": hot, "hot_processing": hot / 100, "page": PAGE, "samples": samples, "pages_ms": details,
        },
    }))
}
