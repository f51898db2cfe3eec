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
mod tests;
