//! Teeth: proof that the conformance suite catches a broken MySQL backend. For each
//! deliberately broken statement (`chokaq_mysql::Faults`), a fresh schema with that fault
//! switched on runs the cases meant to catch it, and at least one of them must FAIL (the trial
//! prints which); the same cases must pass on a fresh schema with no fault.
//!
//! `cargo test -p chokaq-mysql --test teeth` (URL from `CHOKAQ_TEST_MYSQL_URL`;
//! `CHOKAQ_TEST_REQUIRE=mysql` makes an unreachable server a failure).

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chokaq_conformance::libtest_mimic::{Arguments, Completion, Failed, Trial};
use chokaq_conformance::{fresh_schema_name, is_required, run_cases, TestBackend};
use chokaq_core::testing::TestSupport;
use chokaq_core::{Backend, BackendExt, ClaimMode, ClaimParams, JobKind, NewJob, QueueControl, QueueName, WorkerId};
use chokaq_mysql::{Faults, MysqlBackend, MysqlConfig};
use sqlx::Connection;

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// A targeted check run after the cases: `Err` is a catch (with the fault) or a failure
/// (without it). Given the backend and the server's URL.
type Check = fn(Arc<MysqlBackend>, String) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

struct Tooth {
    fault: &'static str,
    faults: Faults,
    cases: &'static [&'static str],
    checks: &'static [(&'static str, Check)],
}

fn teeth() -> Vec<Tooth> {
    let f = Faults::default();
    vec![
        Tooth {
            fault: "claim_read_then_update",
            faults: Faults { claim_read_then_update: true, ..f },
            cases: &["claim_race_tasks_no_duplicates", "stats_readers_see_consistent_sums"],
            checks: &[],
        },
        Tooth {
            fault: "move_two_transactions",
            faults: Faults { move_two_transactions: true, ..f },
            cases: &["stats_readers_see_consistent_sums", "stress_kill_connections_nothing_lost"],
            checks: &[],
        },
        // Issue 25 (a): the per-key running counts read before the control row's lock.
        Tooth {
            fault: "key_check_before_lock",
            faults: Faults { key_check_before_lock: true, ..f },
            cases: &["keyed_race_tasks"],
            checks: &[("key_counts_after_the_lock", key_counts_after_the_lock)],
        },
        // Issue 25 (d): the rate window off by one (`started <= jobs` lets one start too many).
        Tooth {
            fault: "rate_window_off_by_one",
            faults: Faults { rate_window_off_by_one: true, ..f },
            cases: &["rate_limits_starts_in_window", "rate_race_tasks"],
            checks: &[],
        },
        // Issue 40, L7: a change of a limit's kind keeps the starts log's numbers.
        Tooth {
            fault: "rate_kind_change_keeps_numbers",
            faults: Faults { rate_kind_change_keeps_numbers: true, ..f },
            cases: &["rate_kind_change_keeps_the_window"],
            checks: &[],
        },
    ]
}

async fn open(url: &str, faults: Faults) -> chokaq_core::Result<Arc<MysqlBackend>> {
    let cfg = MysqlConfig::new(url).schema(fresh_schema_name()).max_connections(16);
    let b = MysqlBackend::connect(cfg).await?.with_faults(faults);
    b.migrate().await?;
    Ok(Arc::new(b))
}

/// The race of issue 25 (a), made certain: a test transaction holds the queue's control row
/// while two claims of up to 2 (key cap 2, four jobs of one key) start; once the server shows
/// both waiting for that lock, it commits. The first claim takes 2; the second, counting the
/// key after the lock, takes none. Counted before the lock (the broken variant), both read 0
/// running and take 2 each.
fn key_counts_after_the_lock(
    b: Arc<MysqlBackend>,
    url: String,
) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
    Box::pin(async move {
        let e = |what: &str| {
            let what = what.to_string();
            move |err: chokaq_core::Error| format!("{what}: {err}")
        };
        let q = QueueName::new("teeth_key_lock").map_err(e("queue name"))?;
        let kind = JobKind::new("teeth.key_lock.v1").map_err(e("kind"))?;
        for _ in 0..4 {
            b.enqueue(NewJob::new(q.clone(), kind.clone()).concurrency_key("k")).await.map_err(e("enqueue"))?;
        }
        b.control_queue(&q, QueueControl::SetKeyMaxWorkers(Some(2))).await.map_err(e("key cap"))?;
        let mut conn = sqlx::MySqlConnection::connect(&url).await.map_err(|err| format!("connect: {err}"))?;
        let table = format!("`{}`.queues", b.schema());
        let mut tx = conn.begin().await.map_err(|err| format!("begin: {err}"))?;
        sqlx::query(&format!("SELECT name FROM {table} WHERE name = ? FOR UPDATE"))
            .bind(q.as_str())
            .fetch_one(&mut *tx)
            .await
            .map_err(|err| format!("lock the control row: {err}"))?;
        let claim = |b: Arc<MysqlBackend>, q: QueueName| {
            tokio::spawn(async move {
                b.claim(&ClaimParams::new(WorkerId::random(), vec![q], 2, ClaimMode::Start)).await.map(|j| j.len())
            })
        };
        let (first, second) = (claim(b.clone(), q.clone()), claim(b.clone(), q.clone()));
        // Both claims waiting for the row this transaction holds: executing the lock statement
        // of this schema's `queues` (other tests on the server use schemas of their own).
        let mut watch = sqlx::MySqlConnection::connect(&url).await.map_err(|err| format!("connect: {err}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // (Blocked in the optimizer's "Statistics" stage: a primary-key read, locked before
            // InnoDB lists the statement's transaction as waiting.)
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM information_schema.processlist WHERE id <> CONNECTION_ID() \
                 AND info LIKE concat('%`', ?, '`.queues WHERE name = ? FOR UPDATE%')",
            )
            .bind(b.schema())
            .fetch_one(&mut watch)
            .await
            .map_err(|err| format!("innodb_trx: {err}"))?;
            if waiting >= 2 {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the two claims were not both waiting for the lock within 30 s ({waiting})"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tx.commit().await.map_err(|err| format!("commit: {err}"))?;
        let a = first.await.map_err(|err| format!("claim task: {err}"))?.map_err(e("claim"))?;
        let c = second.await.map_err(|err| format!("claim task: {err}"))?.map_err(e("claim"))?;
        if a + c > 2 {
            return Err(format!("two claims behind the lock took {a} and {c} jobs of key k (cap 2)"));
        }
        if a + c != 2 {
            return Err(format!("two claims behind the lock took {a} and {c} jobs of key k (expected 2 in all)"));
        }
        Ok(())
    })
}

/// Closes `b`'s pool, then drops its schema from a fresh one. A case that stops at a catch
/// drops its claimers mid-transaction: their connections go back to the pool with the
/// rollback only queued, holding their locks (and the metadata lock DROP DATABASE waits for)
/// until the pool closes them.
async fn close_and_drop(url: &str, b: Arc<MysqlBackend>) {
    let schema = b.schema().to_string();
    b.close().await;
    let dropped = async {
        let d = MysqlBackend::connect(MysqlConfig::new(url).schema(schema)).await?;
        let r = d.drop_schema().await;
        d.close().await;
        r
    };
    if let Err(e) = dropped.await {
        eprintln!("teeth: dropping the schema failed: {e}");
    }
}

/// Runs `cases` on a fresh schema with `faults`, then each of `checks` on a fresh schema of
/// its own (a caught case may leave its schema's locks held); returns each one's outcome.
async fn run(
    url: &str,
    faults: Faults,
    cases: &[&str],
    checks: &[(&str, Check)],
) -> Result<Vec<(String, Result<(), String>)>, String> {
    let b = open(url, faults).await.map_err(|e| format!("opening a fresh schema: {e}"))?;
    let mut out = run_cases(b.clone() as Arc<dyn TestBackend>, cases, None).await;
    close_and_drop(url, b).await;
    for (name, check) in checks {
        let b = open(url, faults).await.map_err(|e| format!("opening a fresh schema: {e}"))?;
        out.push((name.to_string(), check(b.clone(), url.to_string()).await));
        close_and_drop(url, b).await;
    }
    Ok(out)
}

fn check(url: &str, tooth: &Tooth, rt: &tokio::runtime::Handle) -> Result<(), Failed> {
    let faulty = rt.block_on(run(url, tooth.faults, tooth.cases, tooth.checks))?;
    let caught: Vec<&(String, Result<(), String>)> =
        faulty.iter().filter(|(_, r)| r.as_ref().is_err_and(|e| !e.starts_with("skipped:"))).collect();
    if caught.is_empty() {
        let checks: Vec<&str> = tooth.checks.iter().map(|(n, _)| *n).collect();
        return Err(
            format!("fault {} was NOT caught: every case passed: {:?} {checks:?}", tooth.fault, tooth.cases).into()
        );
    }
    for (name, r) in &caught {
        let msg = r.as_ref().err().map(|e| e.lines().next().unwrap_or("").to_string()).unwrap_or_default();
        println!("teeth: fault {} caught by {name}: {msg}", tooth.fault);
    }
    let clean = rt.block_on(run(url, Faults::default(), tooth.cases, tooth.checks))?;
    let failed: Vec<_> = clean.iter().filter(|(_, r)| r.is_err()).collect();
    if !failed.is_empty() {
        return Err(format!("the same cases fail with NO fault (so the catch proves nothing): {failed:?}").into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().expect("runtime");
    let url = std::env::var("CHOKAQ_TEST_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let probe = rt.block_on(async {
        let b = MysqlBackend::connect(MysqlConfig::new(url.clone()).schema("chokaq_probe")).await?;
        b.close().await;
        Ok::<(), chokaq_core::Error>(())
    });
    let unavailable = probe.err().map(|e| format!("mysql unreachable: {e}"));
    let required = is_required("mysql");
    let handle = rt.handle().clone();
    let trials = teeth()
        .into_iter()
        .map(|tooth| {
            let (url, handle, unavailable) = (url.clone(), handle.clone(), unavailable.clone());
            Trial::ignorable_test(format!("teeth_{}", tooth.fault), move || match unavailable {
                Some(why) if required => Err(Failed::from(format!("{why} (and CHOKAQ_TEST_REQUIRE requires it)"))),
                Some(why) => Ok(Completion::ignored_with(why)),
                None => check(&url, &tooth, &handle).map(|()| Completion::Completed),
            })
        })
        .collect();
    chokaq_conformance::libtest_mimic::run(&args, trials).exit_code()
}
