//! Periodic jobs (the `schedules` table): what the backends store and decide, and the pure
//! tick arithmetic every scheduler process shares.
//!
//! There is no leader. Every process that runs a scheduler computes the same tick instants
//! from the schedule's spec alone and asks the database to enqueue each one
//! ([`Backend::enqueue_tick`](crate::Backend::enqueue_tick)). The database decides: one
//! transaction advances the schedule row's `last_enqueued_tick` only if the tick is later
//! (compare-and-set) and, only then, inserts the job with the key
//! [`tick_key`]`(name, tick)`. A tick at or before `last_enqueued_tick` is never enqueued
//! again, whether its job is still live, archived, dead-lettered or purged.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{validate, Enqueued, Error, NewJob, Result, Timestamp};

/// The longest schedule name (bytes): the tick key `periodic:<name>:<tick>` stays within
/// [`validate::MAX_IDEMPOTENCY_KEY_LEN`].
pub const MAX_SCHEDULE_NAME_LEN: usize = 200;
/// The longest spec text (bytes).
pub const MAX_SCHEDULE_SPEC_LEN: usize = 200;
/// The longest time-zone name (bytes).
pub const MAX_TIME_ZONE_LEN: usize = 64;
/// The longest scheduler group name (bytes).
pub const MAX_SCHEDULE_GROUP_LEN: usize = 100;
/// The default scheduler group.
pub const DEFAULT_SCHEDULE_GROUP: &str = "default";
/// The most names one [`Backend::mark_stale_schedules`](crate::Backend::mark_stale_schedules) call takes.
pub const MAX_LIVE_SCHEDULES: usize = 10_000;

/// Checks the arguments of [`Backend::mark_stale_schedules`](crate::Backend::mark_stale_schedules).
pub fn validate_live_schedules(group: &str, live: &[String]) -> Result<()> {
    validate::text_field("schedule group", group, MAX_SCHEDULE_GROUP_LEN)?;
    if live.len() > MAX_LIVE_SCHEDULES {
        return Err(Error::invalid(format!("{} live schedule names, more than {MAX_LIVE_SCHEDULES}", live.len())));
    }
    live.iter().try_for_each(|n| validate_schedule_name(n))
}

/// The shortest interval of an [`Interval`] schedule.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The longest interval of an [`Interval`] schedule (one year).
pub const MAX_INTERVAL: Duration = Duration::from_secs(366 * 86_400);

/// The idempotency key of a tick's job: `periodic:<name>:<tick as RFC 3339, UTC, seconds>`.
pub fn tick_key(name: &str, tick: Timestamp) -> String {
    format!("periodic:{name}:{}", tick.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

/// Checks a schedule name: 1 to [`MAX_SCHEDULE_NAME_LEN`] bytes, no control, line-break,
/// bidi or zero-width character.
pub fn validate_schedule_name(name: &str) -> Result<()> {
    validate::text_field("schedule name", name, MAX_SCHEDULE_NAME_LEN)?;
    if name.chars().any(|c| validate::is_bidi_control(c) || validate::is_zero_width(c)) {
        return Err(Error::invalid("invalid schedule name: bidi and zero-width characters are not allowed"));
    }
    Ok(())
}

/// Checks a tick instant: whole seconds, in the storable range.
pub fn validate_tick(tick: Timestamp) -> Result<()> {
    validate::timestamp("tick", tick)?;
    if tick.timestamp_subsec_nanos() != 0 {
        return Err(Error::invalid(format!("tick {tick} is not a whole second")));
    }
    Ok(())
}

/// What a scheduler does on start with the ticks that fell due while no scheduler ran
/// (those after the row's `last_enqueued_tick` and at or before now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum MissedTickPolicy {
    /// None of them: only the next future tick (the default).
    #[default]
    Skip,
    /// One catch-up job now, for the latest missed tick.
    RunOnce,
    /// Every missed tick within `window` before now, oldest first; older ones are dropped.
    RunAll { window: Duration },
}

/// A schedule as the code declares it; [`Backend::register_schedule`](crate::Backend::register_schedule)
/// upserts it by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleDef {
    pub name: String,
    /// The canonical spec text (`cron:0 3 * * *`, `every:300s`): two processes agree on a
    /// schedule when their texts are equal.
    pub spec: String,
    /// IANA time-zone name the spec is read in (`UTC` for intervals).
    pub time_zone: String,
    /// The scheduler group that owns the row: [`Backend::mark_stale_schedules`](crate::Backend::mark_stale_schedules)
    /// only touches rows of its own group.
    pub group: String,
    /// The next tick this process computes (informational, shown by `list_schedules`).
    pub next_tick: Option<Timestamp>,
    /// Take the name over even if the row holds another spec, time zone or group (a
    /// deliberate change); without it such a row is an [`ErrorKind::Conflict`](crate::ErrorKind::Conflict).
    pub replace: bool,
}

impl ScheduleDef {
    /// A definition in the default group, not replacing.
    pub fn new(name: impl Into<String>, spec: impl Into<String>, time_zone: impl Into<String>) -> Self {
        ScheduleDef {
            name: name.into(),
            spec: spec.into(),
            time_zone: time_zone.into(),
            group: DEFAULT_SCHEDULE_GROUP.to_owned(),
            next_tick: None,
            replace: false,
        }
    }

    /// Checks every field's length and characters, and `next_tick`'s range.
    pub fn validate(&self) -> Result<()> {
        validate_schedule_name(&self.name)?;
        validate::text_field("schedule spec", &self.spec, MAX_SCHEDULE_SPEC_LEN)?;
        validate::text_field("schedule time zone", &self.time_zone, MAX_TIME_ZONE_LEN)?;
        validate::text_field("schedule group", &self.group, MAX_SCHEDULE_GROUP_LEN)?;
        if let Some(t) = self.next_tick {
            validate_tick(t)?;
        }
        Ok(())
    }

    /// Whether a stored row holds this definition (same spec, time zone and group).
    pub fn same_as(&self, row: &ScheduleRow) -> bool {
        self.spec == row.spec && self.time_zone == row.time_zone && self.group == row.group
    }

    /// The [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) for a live row holding another definition.
    pub fn conflict(&self, row: &ScheduleRow) -> Error {
        Error::new(
            crate::ErrorKind::Conflict,
            format!(
                "schedule {:?} is registered as {:?} in time zone {} (group {}), this process declares {:?} in \
                 {} (group {}); rename it, or deploy the change with replace",
                self.name, row.spec, row.time_zone, row.group, self.spec, self.time_zone, self.group
            ),
        )
    }
}

/// One row of the `schedules` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRow {
    pub name: String,
    pub spec: String,
    pub time_zone: String,
    pub group: String,
    /// The next tick, as the last registering or enqueueing process computed it.
    pub next_tick: Option<Timestamp>,
    /// The latest tick whose job was enqueued; no tick at or before it is enqueued again.
    pub last_enqueued_tick: Option<Timestamp>,
    /// False while an operator has paused it: its ticks pass without a job (and are not caught
    /// up later).
    pub enabled: bool,
    /// The code no longer declares it (marked by a scheduler of its group at start); its
    /// ticks are refused until a process registers it again.
    pub stale: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// One tick to enqueue ([`Backend::enqueue_tick`](crate::Backend::enqueue_tick)).
#[derive(Debug, Clone, PartialEq)]
pub struct TickRequest {
    pub name: String,
    /// The spec and time zone the caller computed the tick from: a row holding another one
    /// refuses it ([`TickOutcome::SpecChanged`]).
    pub spec: String,
    pub time_zone: String,
    pub tick: Timestamp,
    /// The tick after this one, stored as the row's `next_tick`.
    pub next_tick: Option<Timestamp>,
    /// The job; its idempotency key is set to [`tick_key`] by [`TickRequest::new`].
    pub job: NewJob,
}

impl TickRequest {
    /// A request for `def`'s `tick`; sets the job's idempotency key.
    pub fn new(def: &ScheduleDef, tick: Timestamp, next_tick: Option<Timestamp>, job: NewJob) -> Self {
        let job = job.idempotency_key(tick_key(&def.name, tick));
        TickRequest {
            name: def.name.clone(),
            spec: def.spec.clone(),
            time_zone: def.time_zone.clone(),
            tick,
            next_tick,
            job,
        }
    }

    /// Checks the name, ticks and job (whose key must be [`tick_key`]).
    pub fn validate(&self, max_payload_bytes: usize) -> Result<()> {
        validate_schedule_name(&self.name)?;
        validate::text_field("schedule spec", &self.spec, MAX_SCHEDULE_SPEC_LEN)?;
        validate::text_field("schedule time zone", &self.time_zone, MAX_TIME_ZONE_LEN)?;
        validate_tick(self.tick)?;
        if let Some(t) = self.next_tick {
            validate_tick(t)?;
        }
        if self.job.idempotency_key.as_deref() != Some(tick_key(&self.name, self.tick).as_str()) {
            return Err(Error::invalid("a tick's job must carry the key periodic:<name>:<tick>"));
        }
        self.job.validate(max_payload_bytes).map(|_| ())
    }
}

/// What [`Backend::enqueue_tick`](crate::Backend::enqueue_tick) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TickOutcome {
    /// This call won the tick: the row now records it, and the job is in (`duplicate` only
    /// if a live job already held the tick's key, e.g. one enqueued by hand).
    Enqueued(Enqueued),
    /// The row already records this tick or a later one: another process won it.
    Taken { last_enqueued_tick: Timestamp },
    /// This call won the tick, but an operator has paused the schedule: the row records the
    /// tick (so it is never caught up later) and no job was inserted.
    Paused,
    /// The row is marked stale.
    Stale,
    /// The row holds another spec or time zone (a replace was deployed).
    SpecChanged { spec: String, time_zone: String },
    /// No row of that name.
    NotFound,
}

impl TickOutcome {
    /// The outcome of a compare-and-set that matched no row, from the row as it is now.
    pub fn refused(req: &TickRequest, row: Option<&ScheduleRow>) -> TickOutcome {
        match row {
            None => TickOutcome::NotFound,
            Some(r) if r.spec != req.spec || r.time_zone != req.time_zone => {
                TickOutcome::SpecChanged { spec: r.spec.clone(), time_zone: r.time_zone.clone() }
            }
            Some(r) if r.stale => TickOutcome::Stale,
            Some(r) => TickOutcome::Taken { last_enqueued_tick: r.last_enqueued_tick.unwrap_or(req.tick) },
        }
    }
}

/// A schedule's tick instants, computed from its spec alone, so that every process agrees.
pub trait TickSource: Send + Sync + fmt::Debug {
    /// The canonical spec text stored in the row.
    fn spec(&self) -> String;
    /// The time zone stored in the row.
    fn time_zone(&self) -> String;
    /// The first tick strictly after `t` (whole seconds), if any.
    fn next_after(&self, t: Timestamp) -> Option<Timestamp>;
}

/// Ticks every `period`, aligned to the Unix epoch: the instants `k × period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    secs: i64,
}

impl Interval {
    /// A whole number of seconds from [`MIN_INTERVAL`] to [`MAX_INTERVAL`].
    pub fn new(period: Duration) -> Result<Self> {
        if period < MIN_INTERVAL || period > MAX_INTERVAL || period.subsec_nanos() != 0 {
            return Err(Error::invalid(format!(
                "interval {period:?} must be whole seconds from {MIN_INTERVAL:?} to {MAX_INTERVAL:?}"
            )));
        }
        Ok(Interval { secs: period.as_secs() as i64 })
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_secs(self.secs as u64)
    }
}

impl TickSource for Interval {
    fn spec(&self) -> String {
        format!("every:{}s", self.secs)
    }
    fn time_zone(&self) -> String {
        "UTC".to_owned()
    }
    fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let s = t.timestamp();
        let next = (s.div_euclid(self.secs) + 1).checked_mul(self.secs)?;
        chrono::DateTime::from_timestamp(next, 0)
    }
}

/// The ticks in `(after, until]`, oldest first, at most `limit` of them (the newest kept).
pub fn ticks_between(src: &dyn TickSource, after: Timestamp, until: Timestamp, limit: usize) -> Vec<Timestamp> {
    let mut out = std::collections::VecDeque::new();
    let mut t = after;
    while let Some(next) = src.next_after(t) {
        if next > until {
            break;
        }
        if out.len() == limit {
            out.pop_front();
        }
        out.push_back(next);
        t = next;
    }
    out.into()
}

/// The most catch-up ticks [`missed_ticks`] returns (the newest ones).
pub const MAX_CATCH_UP_TICKS: usize = 10_000;

/// Which of the ticks missed while no scheduler ran a restarting scheduler enqueues, oldest
/// first: the ticks after `last_enqueued` and at or before `now`, filtered by `policy`. A
/// schedule that never enqueued a tick (`None`) missed nothing.
pub fn missed_ticks(
    src: &dyn TickSource,
    last_enqueued: Option<Timestamp>,
    now: Timestamp,
    policy: MissedTickPolicy,
) -> Vec<Timestamp> {
    let Some(last) = last_enqueued else { return Vec::new() };
    match policy {
        MissedTickPolicy::Skip => Vec::new(),
        MissedTickPolicy::RunOnce => ticks_between(src, last, now, 1),
        MissedTickPolicy::RunAll { window } => {
            let from = chrono::Duration::from_std(window)
                .ok()
                .and_then(|w| now.checked_sub_signed(w))
                .unwrap_or(Timestamp::MIN_UTC)
                .max(last);
            // Strictly inside the window: a tick exactly `window` old is out.
            ticks_between(src, from, now, MAX_CATCH_UP_TICKS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn interval_ticks_are_epoch_aligned() {
        let i = Interval::new(Duration::from_secs(300)).unwrap();
        assert_eq!(i.next_after(at("2026-01-01T00:02:59.5Z")), Some(at("2026-01-01T00:05:00Z")));
        assert_eq!(i.next_after(at("2026-01-01T00:05:00Z")), Some(at("2026-01-01T00:10:00Z")));
        assert_eq!(i.spec(), "every:300s");
        assert!(Interval::new(Duration::from_millis(1500)).is_err());
        assert!(Interval::new(Duration::ZERO).is_err());
    }

    #[test]
    fn tick_keys() {
        assert_eq!(tick_key("a.b", at("2026-01-01T03:00:00Z")), "periodic:a.b:2026-01-01T03:00:00Z");
        let long = "n".repeat(MAX_SCHEDULE_NAME_LEN);
        assert!(tick_key(&long, at("9999-12-31T23:59:59Z")).len() <= validate::MAX_IDEMPOTENCY_KEY_LEN);
        assert!(validate_tick(at("2026-01-01T03:00:00.5Z")).is_err());
        assert!(validate_schedule_name("a\u{200B}b").is_err());
    }

    #[test]
    fn missed_tick_policies() {
        let hourly = Interval::new(Duration::from_secs(3600)).unwrap();
        let last = Some(at("2026-01-01T00:00:00Z"));
        let now = at("2026-01-01T05:30:00Z");
        assert_eq!(missed_ticks(&hourly, last, now, MissedTickPolicy::Skip), Vec::<Timestamp>::new());
        assert_eq!(missed_ticks(&hourly, last, now, MissedTickPolicy::RunOnce), vec![at("2026-01-01T05:00:00Z")]);
        let all = missed_ticks(&hourly, last, now, MissedTickPolicy::RunAll { window: Duration::from_secs(3 * 3600) });
        assert_eq!(all, vec![at("2026-01-01T03:00:00Z"), at("2026-01-01T04:00:00Z"), at("2026-01-01T05:00:00Z")]);
        let wide = MissedTickPolicy::RunAll { window: Duration::from_secs(100 * 3600) };
        assert_eq!(missed_ticks(&hourly, last, now, wide).len(), 5, "never at or before last");
        assert_eq!(
            missed_ticks(&hourly, None, now, MissedTickPolicy::RunOnce),
            Vec::<Timestamp>::new(),
            "a new schedule"
        );
        assert_eq!(
            missed_ticks(&hourly, Some(at("2026-01-01T05:00:00Z")), now, MissedTickPolicy::RunOnce),
            Vec::<Timestamp>::new()
        );
    }
}
