//! Periodic jobs: cron or interval schedules that fire exactly once per tick across the
//! whole cluster, with no leader (`docs/periodic.md`).
//!
//! ```no_run
//! # use std::{sync::Arc, time::Duration};
//! # use chokaq::periodic::{Cron, Scheduler, tz::Europe};
//! # #[derive(serde::Serialize, serde::Deserialize)] struct NightlyReport;
//! # impl chokaq::Job for NightlyReport { const KIND: &'static str = "reports.nightly.v1"; }
//! # async fn demo(backend: Arc<dyn chokaq::Backend>) -> chokaq::Result<()> {
//! let scheduler = Scheduler::builder(backend)
//!     .every("reports.nightly", Cron::parse("0 3 * * *")?.in_tz(Europe::Berlin), || NightlyReport)
//!     .every("cache.warm", Duration::from_secs(300), || NightlyReport)
//!     .build()?;
//! scheduler.run(chokaq::shutdown_token()).await?;
//! # Ok(()) }
//! ```
//!
//! Every process that runs a [`Scheduler`] computes the same tick instants from the spec and
//! calls [`Backend::enqueue_tick`] for each; the database lets exactly one call per tick
//! insert the job (key `periodic:<name>:<tick>`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::{
    missed_ticks, Backend, Error, NewJob, Result, ScheduleDef, TickRequest, Timestamp, DEFAULT_SCHEDULE_GROUP,
};
use chrono::{SubsecRound, Utc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::IntoNewJob;
use crate::{Job, JobBuilder};

pub use chokaq_core::{Interval, MissedTickPolicy, ScheduleRow, TickOutcome, TickSource};
/// The IANA time zones (`tz::Europe::Berlin`), for [`Cron::in_tz`].
pub use chrono_tz as tz;

/// A cron schedule (parsed by the `croner` crate) read in a time zone (UTC unless
/// [`Cron::in_tz`]).
///
/// Five fields (`min hour day month weekday`) or six with seconds first. Daylight-saving
/// rule (croner's): a fixed-time schedule whose local time falls into a spring-forward gap
/// fires at the first instant after the gap; one whose local time repeats in a fall-back hour
/// fires once, at the earlier instant. Wildcard/interval fields fire on real instants only:
/// none in the gap, both passes of a repeated hour.
#[derive(Clone)]
pub struct Cron {
    text: String,
    cron: croner::Cron,
    tz: chrono_tz::Tz,
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cron").field("spec", &self.text).field("tz", &self.tz.name()).finish()
    }
}

impl Cron {
    /// Parses a cron expression; a bad one is
    /// [`ErrorKind::InvalidInput`](chokaq_core::ErrorKind::InvalidInput).
    pub fn parse(expr: &str) -> Result<Cron> {
        let text = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        let cron = croner::parser::CronParser::new()
            .parse(&text)
            .map_err(|e| Error::invalid(format!("invalid cron expression {text:?}: {e}")))?;
        Ok(Cron { text, cron, tz: chrono_tz::UTC })
    }

    /// Reads the expression in time zone `tz`.
    pub fn in_tz(mut self, tz: chrono_tz::Tz) -> Cron {
        self.tz = tz;
        self
    }
}

impl TickSource for Cron {
    fn spec(&self) -> String {
        format!("cron:{}", self.text)
    }
    fn time_zone(&self) -> String {
        self.tz.name().to_owned()
    }
    fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let local = t.trunc_subsecs(0).with_timezone(&self.tz);
        self.cron.find_next_occurrence(&local, false).ok().map(|n| n.with_timezone(&Utc).trunc_subsecs(0))
    }
}

/// What [`SchedulerBuilder::every`] takes as a schedule: a [`Cron`], a [`Duration`] (an
/// epoch-aligned interval of whole seconds) or an [`Interval`].
pub trait IntoSchedule {
    /// The tick source.
    fn into_schedule(self) -> Result<Arc<dyn TickSource>>;
}

impl IntoSchedule for Cron {
    fn into_schedule(self) -> Result<Arc<dyn TickSource>> {
        Ok(Arc::new(self))
    }
}

impl IntoSchedule for Duration {
    fn into_schedule(self) -> Result<Arc<dyn TickSource>> {
        Ok(Arc::new(Interval::new(self)?))
    }
}

impl IntoSchedule for Interval {
    fn into_schedule(self) -> Result<Arc<dyn TickSource>> {
        Ok(Arc::new(self))
    }
}

/// What a schedule's factory returns: a typed [`Job`], a [`NewJob`] or a [`JobBuilder`].
pub trait TickJob {
    /// The job to enqueue for one tick.
    fn into_tick_job(self) -> Result<NewJob>;
}

impl<J: Job> TickJob for J {
    fn into_tick_job(self) -> Result<NewJob> {
        (&self).into_new_job()
    }
}

impl TickJob for NewJob {
    fn into_tick_job(self) -> Result<NewJob> {
        Ok(self)
    }
}

impl TickJob for JobBuilder {
    fn into_tick_job(self) -> Result<NewJob> {
        self.into_new_job()
    }
}

type Factory = Arc<dyn Fn() -> Result<NewJob> + Send + Sync>;

struct Entry {
    name: String,
    source: std::result::Result<Arc<dyn TickSource>, String>,
    factory: Factory,
    missed: MissedTickPolicy,
    replace: bool,
}

/// Builds a [`Scheduler`]: `Scheduler::builder(backend).every(..).every(..).build()?`.
pub struct SchedulerBuilder {
    backend: Arc<dyn Backend>,
    entries: Vec<Entry>,
    group: String,
    mark_stale: bool,
    catch_up_after: Duration,
}

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("backend", &self.backend.name())
            .field("schedules", &self.entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>())
            .field("group", &self.group)
            .finish()
    }
}

impl SchedulerBuilder {
    /// Adds a schedule: every tick of `schedule`, `factory` builds the job to enqueue.
    /// Per-schedule settings ([`missed`](Self::missed), [`replace`](Self::replace)) apply to
    /// the schedule added last.
    pub fn every<S, F, J>(mut self, name: impl Into<String>, schedule: S, factory: F) -> Self
    where
        S: IntoSchedule,
        F: Fn() -> J + Send + Sync + 'static,
        J: TickJob,
    {
        self.entries.push(Entry {
            name: name.into(),
            source: schedule.into_schedule().map_err(|e| e.message().to_owned()),
            factory: Arc::new(move || factory().into_tick_job()),
            missed: MissedTickPolicy::Skip,
            replace: false,
        });
        self
    }

    /// The missed-tick policy of the schedule added last (default [`MissedTickPolicy::Skip`]).
    pub fn missed(mut self, policy: MissedTickPolicy) -> Self {
        if let Some(e) = self.entries.last_mut() {
            e.missed = policy;
        }
        self
    }

    /// Deploys a changed spec or time zone of the schedule added last: its row is taken over
    /// instead of failing with a conflict. Processes still running the old spec then get
    /// [`TickOutcome::SpecChanged`] and stop that schedule.
    pub fn replace(mut self) -> Self {
        if let Some(e) = self.entries.last_mut() {
            e.replace = true;
        }
        self
    }

    /// The scheduler group (default `default`): at start, rows of this group that this
    /// scheduler does not declare are marked stale. Give each set of schedules that is
    /// deployed on its own its own group.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Whether to mark this group's undeclared rows stale at start (default true).
    pub fn mark_stale(mut self, on: bool) -> Self {
        self.mark_stale = on;
        self
    }

    /// A running scheduler that wakes up more than this late for a tick (the process was
    /// frozen or starved) treats the ticks it slept through as missed, as on a restart
    /// (default 60 s; at least 1 s).
    pub fn catch_up_after(mut self, after: Duration) -> Self {
        self.catch_up_after = after;
        self
    }

    /// Checks every schedule (names, specs, duplicates) and builds the scheduler.
    pub fn build(self) -> Result<Scheduler> {
        let SchedulerBuilder { backend, entries, group, mark_stale, catch_up_after } = self;
        if catch_up_after < Duration::from_secs(1) || catch_up_after > crate::MAX_SETTING_DURATION {
            return Err(Error::invalid(format!("catch_up_after {catch_up_after:?} is out of range")));
        }
        let mut schedules = Vec::with_capacity(entries.len());
        for e in entries {
            let source = e.source.map_err(|m| Error::invalid(format!("schedule {:?}: {m}", e.name)))?;
            let def = ScheduleDef {
                name: e.name,
                spec: source.spec(),
                time_zone: source.time_zone(),
                group: group.clone(),
                next_tick: None,
                replace: e.replace,
            };
            def.validate()?;
            if schedules.iter().any(|s: &Periodic| s.def.name == def.name) {
                return Err(Error::invalid(format!("schedule {:?} is declared twice", def.name)));
            }
            if let MissedTickPolicy::RunAll { window } = e.missed {
                if window.is_zero() || window > chokaq_core::validate::MAX_DELAY {
                    return Err(Error::invalid(format!("schedule {:?}: RunAll window out of range", def.name)));
                }
            }
            schedules.push(Periodic { def, source, factory: e.factory, missed: e.missed });
        }
        Ok(Scheduler { backend, schedules, group, mark_stale, catch_up_after })
    }
}

struct Periodic {
    def: ScheduleDef,
    source: Arc<dyn TickSource>,
    factory: Factory,
    missed: MissedTickPolicy,
}

/// Enqueues the ticks of its schedules; run it beside a [`Worker`](crate::Worker), or inside
/// one ([`WorkerBuilder::scheduler`](crate::WorkerBuilder::scheduler)). Any number of
/// processes may run the same schedules: each tick is enqueued once.
pub struct Scheduler {
    backend: Arc<dyn Backend>,
    schedules: Vec<Periodic>,
    group: String,
    mark_stale: bool,
    catch_up_after: Duration,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("backend", &self.backend.name())
            .field("schedules", &self.schedules.iter().map(|s| (&s.def.name, &s.def.spec)).collect::<Vec<_>>())
            .field("group", &self.group)
            .finish()
    }
}

/// A started scheduler ([`Scheduler::start`]): its loops run until the token is cancelled.
#[derive(Debug)]
pub struct RunningScheduler {
    /// The rows as registered at start (after the missed-tick catch-up).
    pub schedules: Vec<ScheduleRow>,
    tasks: JoinSet<()>,
}

impl RunningScheduler {
    /// Waits until every schedule loop has ended (the token was cancelled, or a schedule
    /// stopped on its own, e.g. on [`TickOutcome::SpecChanged`]).
    pub async fn wait(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

impl Scheduler {
    /// A builder over `backend`.
    pub fn builder(backend: Arc<dyn Backend>) -> SchedulerBuilder {
        SchedulerBuilder {
            backend,
            entries: Vec::new(),
            group: DEFAULT_SCHEDULE_GROUP.to_owned(),
            mark_stale: true,
            catch_up_after: Duration::from_secs(60),
        }
    }

    /// The names of the schedules.
    pub fn names(&self) -> Vec<&str> {
        self.schedules.iter().map(|s| s.def.name.as_str()).collect()
    }

    /// Registers every schedule (a name another process holds with another spec fails here
    /// with [`ErrorKind::Conflict`](chokaq_core::ErrorKind::Conflict), before anything else is
    /// written), marks this group's undeclared rows stale, applies each schedule's missed-tick
    /// policy, then starts one loop per schedule that runs until `shutdown` is cancelled.
    pub async fn start(self, shutdown: CancellationToken) -> Result<RunningScheduler> {
        let Scheduler { backend, schedules, group, mark_stale, catch_up_after } = self;
        let now = Utc::now();
        let mut rows = Vec::with_capacity(schedules.len());
        for s in &schedules {
            let def = ScheduleDef { next_tick: s.source.next_after(now), ..s.def.clone() };
            rows.push(backend.register_schedule(&def).await?);
        }
        if mark_stale {
            let live: Vec<String> = schedules.iter().map(|s| s.def.name.clone()).collect();
            let n = backend.mark_stale_schedules(&group, &live).await?;
            if n > 0 {
                tracing::warn!(group, count = n, "schedules no longer declared by the code marked stale");
            }
        }
        let mut tasks = JoinSet::new();
        let mut out = Vec::with_capacity(rows.len());
        for (s, row) in schedules.into_iter().zip(rows) {
            let s = Arc::new(s);
            let cursor = catch_up(&*backend, &s, row.last_enqueued_tick, now).await?;
            out.push(row);
            tasks.spawn(run_loop(backend.clone(), s, cursor, catch_up_after, shutdown.clone()));
        }
        Ok(RunningScheduler { schedules: out, tasks })
    }

    /// [`Scheduler::start`], then waits until `shutdown` is cancelled and every loop ended.
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        self.start(shutdown).await?.wait().await;
        Ok(())
    }
}

/// Enqueues the missed ticks `policy` keeps; returns the loop's cursor (`now`).
async fn catch_up(backend: &dyn Backend, s: &Periodic, last: Option<Timestamp>, now: Timestamp) -> Result<Timestamp> {
    let ticks = missed_ticks(&*s.source, last, now, s.missed);
    if !ticks.is_empty() {
        tracing::info!(schedule = %s.def.name, count = ticks.len(), policy = ?s.missed, "enqueueing missed ticks");
    }
    for tick in ticks {
        match enqueue(backend, s, tick).await? {
            TickOutcome::SpecChanged { .. } | TickOutcome::Stale | TickOutcome::NotFound => break,
            _ => {}
        }
    }
    Ok(now)
}

async fn enqueue(backend: &dyn Backend, s: &Periodic, tick: Timestamp) -> Result<TickOutcome> {
    let job = (s.factory)()?;
    let req = TickRequest::new(&s.def, tick, s.source.next_after(tick), job);
    let out = backend.enqueue_tick(&req).await?;
    match &out {
        TickOutcome::Enqueued(e) => tracing::debug!(schedule = %s.def.name, %tick, id = %e.id, "tick enqueued"),
        TickOutcome::Taken { .. } => {}
        TickOutcome::Paused => tracing::debug!(schedule = %s.def.name, %tick, "schedule paused; tick passed"),
        TickOutcome::Stale => tracing::warn!(schedule = %s.def.name, "schedule is marked stale; tick refused"),
        TickOutcome::SpecChanged { spec, time_zone } => tracing::error!(
            schedule = %s.def.name, ours = %s.def.spec, theirs = %spec, %time_zone,
            "schedule was replaced with another spec; this process stops it"
        ),
        TickOutcome::NotFound => tracing::warn!(schedule = %s.def.name, "schedule row is gone"),
    }
    Ok(out)
}

/// Sleeps until each tick after `cursor` and enqueues it, until `stop`.
async fn run_loop(
    backend: Arc<dyn Backend>,
    s: Arc<Periodic>,
    mut cursor: Timestamp,
    catch_up_after: Duration,
    stop: CancellationToken,
) {
    let late_limit = chrono::Duration::from_std(catch_up_after).unwrap_or(chrono::Duration::MAX);
    loop {
        let Some(tick) = s.source.next_after(cursor) else {
            tracing::info!(schedule = %s.def.name, "schedule has no more ticks");
            return;
        };
        // Wall-clock sleep: re-check after waking, the clock may have been adjusted.
        loop {
            let wait = (tick - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            if wait.is_zero() {
                break;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        if stop.is_cancelled() {
            return;
        }
        let now = Utc::now();
        if now - tick > late_limit {
            // Frozen or starved: the ticks slept through are missed ticks, as on a restart.
            tracing::warn!(schedule = %s.def.name, %tick, "scheduler woke up late; applying the missed-tick policy");
            // Read the row, not register it: registering would clear a stale mark.
            let last = match backend.list_schedules().await {
                Ok(rows) => rows.into_iter().find(|r| r.name == s.def.name).and_then(|r| r.last_enqueued_tick),
                Err(e) => {
                    tracing::warn!(schedule = %s.def.name, error = %e, "reading the schedule failed; skipping ahead");
                    cursor = now;
                    continue;
                }
            };
            match catch_up(&*backend, &s, last, now).await {
                Ok(c) => cursor = c,
                Err(e) => {
                    tracing::warn!(schedule = %s.def.name, error = %e, "catch-up failed");
                    cursor = now;
                }
            }
            continue;
        }
        // Retry a retryable error until the tick is too old; any process may still win it.
        let mut backoff = Duration::from_millis(50);
        let outcome = loop {
            match enqueue(&*backend, &s, tick).await {
                Ok(o) => break Some(o),
                Err(e) if e.is_retryable() && Utc::now() - tick <= late_limit => {
                    tracing::warn!(schedule = %s.def.name, %tick, error = %e, "enqueueing a tick failed; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::error!(schedule = %s.def.name, %tick, error = %e, "enqueueing a tick failed");
                    break None;
                }
            }
        };
        if matches!(outcome, Some(TickOutcome::SpecChanged { .. })) {
            return;
        }
        if matches!(outcome, Some(TickOutcome::NotFound)) {
            // The row was deleted by hand: register it again for the next ticks.
            if let Err(e) = backend.register_schedule(&s.def).await {
                tracing::error!(schedule = %s.def.name, error = %e, "registering the schedule again failed");
            }
        }
        cursor = tick;
    }
}

#[cfg(test)]
mod tests {
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
}
