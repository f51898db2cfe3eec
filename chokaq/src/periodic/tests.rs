//! Unit tests of `periodic.rs`.

use std::collections::BTreeSet;

use chokaq_core::memory::MemoryBackend;
use chokaq_core::{tick_key, ErrorKind, JobTable, ListJobsParams};

use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn ticks(src: &dyn TickSource, from: &str, until: &str) -> Vec<Timestamp> {
    chokaq_core::ticks_between(src, at(from), at(until), 100)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Ping;

impl Job for Ping {
    const KIND: &'static str = "test.ping.v1";
    fn queue() -> &'static str {
        "periodic-test"
    }
}

/// Daylight saving in Berlin, 2026: 29 March 02:00 CET becomes 03:00 CEST (a gap), 25
/// October 03:00 CEST becomes 02:00 CET (02:00-03:00 repeats).
#[test]
fn dst_gaps_and_repeats_follow_the_documented_rule() {
    let daily = Cron::parse("30 2 * * *").unwrap().in_tz(chrono_tz::Europe::Berlin);
    assert_eq!(daily.spec(), "cron:30 2 * * *");
    assert_eq!(daily.time_zone(), "Europe/Berlin");
    // 02:30 does not exist on 29 March: the tick is the first instant after the gap,
    // 03:00 CEST (01:00 UTC); the days around it are at 02:30 local.
    assert_eq!(
        ticks(&daily, "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z"),
        vec![at("2026-03-28T01:30:00Z"), at("2026-03-29T01:00:00Z"), at("2026-03-30T00:30:00Z")]
    );
    // 02:30 happens twice on 25 October: one tick, at the first (02:30 CEST, 00:30 UTC).
    assert_eq!(
        ticks(&daily, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"),
        vec![at("2026-10-25T00:30:00Z"), at("2026-10-26T01:30:00Z")]
    );
    // A wildcard schedule fires on real instants only: every half hour of UTC through
    // the repeated hour (both passes), none invented in the gap.
    let half_hourly = Cron::parse("*/30 * * * *").unwrap().in_tz(chrono_tz::Europe::Berlin);
    assert_eq!(
        ticks(&half_hourly, "2026-10-24T23:45:00Z", "2026-10-25T02:15:00Z"),
        vec![
            at("2026-10-25T00:00:00Z"),
            at("2026-10-25T00:30:00Z"),
            at("2026-10-25T01:00:00Z"),
            at("2026-10-25T01:30:00Z"),
            at("2026-10-25T02:00:00Z"),
        ]
    );
    assert_eq!(
        ticks(&half_hourly, "2026-03-29T00:15:00Z", "2026-03-29T01:45:00Z"),
        vec![at("2026-03-29T00:30:00Z"), at("2026-03-29T01:00:00Z"), at("2026-03-29T01:30:00Z")]
    );
}

#[test]
fn bad_schedules_are_invalid_input() {
    assert_eq!(Cron::parse("61 * * * *").unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(Cron::parse("").unwrap_err().kind(), ErrorKind::InvalidInput);
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let e = Scheduler::builder(b.clone()).every("x", Duration::from_millis(1500), || Ping).build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let twice = Scheduler::builder(b.clone())
        .every("x", Duration::from_secs(1), || Ping)
        .every("x", Duration::from_secs(2), || Ping)
        .build()
        .unwrap_err();
    assert!(twice.message().contains("declared twice"), "{twice}");
    let bad_name = Scheduler::builder(b).every("a\nb", Duration::from_secs(1), || Ping).build().unwrap_err();
    assert_eq!(bad_name.kind(), ErrorKind::InvalidInput);
}

async fn keys(b: &dyn Backend) -> Vec<String> {
    let mut p = ListJobsParams::new(JobTable::Hot);
    p.limit = 1000;
    b.list_jobs(&p).await.unwrap().jobs.into_iter().filter_map(|j| j.idempotency_key).collect()
}

/// Two schedulers on one store for the same 1-second schedule: every tick once, none
/// missed between the first and the last.
#[tokio::test]
async fn two_schedulers_enqueue_each_tick_once() {
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let stop = CancellationToken::new();
    let mut running = Vec::new();
    for _ in 0..2 {
        let s = Scheduler::builder(b.clone()).every("t.sec", Duration::from_secs(1), || Ping).build().unwrap();
        running.push(s.start(stop.clone()).await.unwrap());
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while keys(&*b).await.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "3 ticks did not come within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    for r in running {
        r.wait().await;
    }
    let got = keys(&*b).await;
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "a tick enqueued twice: {got:?}");
    let row = &b.list_schedules().await.unwrap()[0];
    let last = row.last_enqueued_tick.unwrap();
    let first = last - chrono::Duration::seconds(got.len() as i64 - 1);
    let want: BTreeSet<String> =
        (0..got.len() as i64).map(|i| tick_key("t.sec", first + chrono::Duration::seconds(i))).collect();
    assert_eq!(unique.into_iter().cloned().collect::<BTreeSet<_>>(), want, "ticks are contiguous");
}

#[tokio::test]
async fn a_second_spec_under_one_name_fails_the_start() {
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let stop = CancellationToken::new();
    let one = Scheduler::builder(b.clone()).every("t.c", Duration::from_secs(60), || Ping).build().unwrap();
    let _running = one.start(stop.clone()).await.unwrap();
    let two = Scheduler::builder(b.clone()).every("t.c", Duration::from_secs(120), || Ping).build().unwrap();
    let err = two.start(stop.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(err.message().contains("every:60s") && err.message().contains("every:120s"), "{err}");
    // A deliberate change.
    let three =
        Scheduler::builder(b.clone()).every("t.c", Duration::from_secs(120), || Ping).replace().build().unwrap();
    let r = three.start(stop.clone()).await.unwrap();
    assert_eq!(r.schedules[0].spec, "every:120s");
    stop.cancel();
}

/// A restart after five hours of an hourly schedule: RunOnce enqueues the latest missed
/// tick at start; a schedule the code no longer declares is marked stale.
#[tokio::test]
async fn restart_applies_the_missed_tick_policy_and_marks_stale() {
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let hourly = Interval::new(Duration::from_secs(3600)).unwrap();
    let now = Utc::now();
    let latest = chrono::DateTime::from_timestamp(now.timestamp().div_euclid(3600) * 3600, 0).unwrap();
    let before = latest - chrono::Duration::hours(5);
    let def = ScheduleDef::new("t.hourly", hourly.spec(), hourly.time_zone());
    b.register_schedule(&def).await.unwrap();
    b.register_schedule(&ScheduleDef::new("t.old", "every:60s", "UTC")).await.unwrap();
    let job = (&Ping).into_new_job().unwrap();
    b.enqueue_tick(&TickRequest::new(&def, before, None, job)).await.unwrap();
    let stop = CancellationToken::new();
    let s = Scheduler::builder(b.clone())
        .every("t.hourly", Duration::from_secs(3600), || Ping)
        .missed(MissedTickPolicy::RunOnce)
        .build()
        .unwrap();
    let _r = s.start(stop.clone()).await.unwrap();
    let mut got = keys(&*b).await;
    got.sort();
    assert_eq!(got, vec![tick_key("t.hourly", before), tick_key("t.hourly", latest)]);
    let client = crate::Client::new(b.clone());
    let rows = client.schedules().await.unwrap();
    let old = rows.iter().find(|r| r.name == "t.old").unwrap();
    assert!(old.stale, "an undeclared schedule of the group is marked stale");
    assert!(!client.pause_schedule("t.hourly").await.unwrap().enabled);
    assert!(client.resume_schedule("t.hourly").await.unwrap().enabled);
    let missing = client.pause_schedule("t.none").await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    stop.cancel();
}

/// A worker with the scheduler inside it runs the periodic job.
#[tokio::test]
async fn a_worker_runs_its_scheduler() {
    let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let s = Scheduler::builder(b.clone()).every("t.w", Duration::from_secs(1), || Ping).build().unwrap();
    let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let r = runs.clone();
    let worker = crate::Worker::builder(b.clone())
        .queues(["periodic-test"])
        .poll_interval(Duration::from_millis(20))
        .register(move |_: Ping, _| {
            let r = r.clone();
            async move {
                r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
        })
        .scheduler(s)
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(worker.run(stop.clone()));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while runs.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(std::time::Instant::now() < deadline, "the periodic job did not run twice within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    task.await.unwrap().unwrap();
    let s = b.stats().await.unwrap();
    assert_eq!(s.archived, u64::from(runs.load(std::sync::atomic::Ordering::SeqCst)), "every run archived");
}
