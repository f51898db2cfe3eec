//! A queue's control row: pause, activate, cap, zombie settings.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{validate, Error, QueueName, Result, Timestamp};

/// What to do with a queue's zombies (Processing jobs whose heartbeat expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ZombiePolicy {
    /// Back to Pending while attempts remain, else dead-letter. The default.
    #[default]
    Retry,
    /// Always dead-letter (reason `zombie`).
    DeadLetter,
}

/// A rate limit: at most `jobs` starts (claims) in any window of length `per`, for the whole
/// queue or, with `by_key`, for each concurrency key apart.
///
/// The window slides over the database's claim timestamps: a claim stamped `t` may take a job
/// only while fewer than `jobs` starts of the same bucket are stamped after `t - per` (later
/// stamps count too), so no half-open interval `[s, s + per)` ever holds more than `jobs`
/// stamps. A start is a claim in any mode; a job released or rescued back to Pending keeps its
/// start in the window. See `docs/contract.md`, "Keys and rate limits".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RateLimit {
    /// Starts allowed per window: 1 to [`validate::MAX_RATE_JOBS`].
    pub jobs: u32,
    /// The window: whole milliseconds, [`validate::MIN_RATE_PERIOD`] to
    /// [`validate::MAX_RATE_PERIOD`].
    #[serde(with = "millis")]
    pub per: Duration,
    /// One window per concurrency key (jobs without a key are not limited by it) instead of
    /// one for the queue.
    #[serde(default)]
    pub by_key: bool,
}

impl RateLimit {
    /// A queue-wide limit.
    pub const fn new(jobs: u32, per: Duration) -> Self {
        RateLimit { jobs, per, by_key: false }
    }

    /// The same limit for each concurrency key apart.
    pub const fn by_key(mut self) -> Self {
        self.by_key = true;
        self
    }

    /// `per` in whole milliseconds (what backends store).
    pub fn per_millis(&self) -> i64 {
        i64::try_from(self.per.as_millis()).unwrap_or(i64::MAX)
    }

    /// Rejects 0 jobs, more than [`validate::MAX_RATE_JOBS`], and a period outside
    /// [`validate::MIN_RATE_PERIOD`]..=[`validate::MAX_RATE_PERIOD`] or not a whole number of
    /// milliseconds.
    pub fn validate(&self) -> Result<()> {
        if self.jobs == 0 || self.jobs > validate::MAX_RATE_JOBS {
            return Err(Error::invalid(format!(
                "rate limit jobs must be 1 to {}, got {} (no limit: leave it unset; `none` on the command line)",
                validate::MAX_RATE_JOBS,
                self.jobs
            )));
        }
        validate::duration("rate limit period", self.per, validate::MIN_RATE_PERIOD, validate::MAX_RATE_PERIOD)?;
        if self.per.subsec_nanos() % 1_000_000 != 0 {
            return Err(Error::invalid(format!(
                "rate limit period must be a whole number of milliseconds, got {:?}",
                self.per
            )));
        }
        Ok(())
    }

    /// Parses `N/PERIOD` as the CLI takes it: `500/1s`, `10/250ms`, `100/1m`, `1000/1h`,
    /// `5/1d`; the unit is one of `ms`, `s`, `m`, `h`, `d` and the number before it is whole.
    pub fn parse(text: &str, by_key: bool) -> Result<Self> {
        let bad =
            || Error::invalid(format!("invalid rate limit {text:?}: expected N/PERIOD such as 500/1s or 10/250ms"));
        let (jobs, period) = text.trim().split_once('/').ok_or_else(bad)?;
        let jobs: u32 = jobs.trim().parse().map_err(|_| bad())?;
        let period = period.trim();
        let split = period.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (n, unit) = period.split_at(split);
        let n: u64 = if n.is_empty() { 1 } else { n.parse().map_err(|_| bad())? };
        let ms = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        let per = Duration::from_millis(n.checked_mul(ms).ok_or_else(bad)?);
        let limit = RateLimit { jobs, per, by_key };
        limit.validate()?;
        Ok(limit)
    }
}

impl std::fmt::Display for RateLimit {
    /// `500/1000ms`, with ` by key` for a per-key limit.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}ms", self.jobs, self.per.as_millis())?;
        if self.by_key {
            f.write_str(" by key")?;
        }
        Ok(())
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// One change to a queue's control row (an upsert).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueControl {
    Pause,
    Resume,
    Activate,
    Deactivate,
    /// `None` = unlimited.
    SetMaxWorkers(Option<u32>),
    /// `None` = [`DEFAULT_ZOMBIE_TIMEOUT`](crate::DEFAULT_ZOMBIE_TIMEOUT).
    SetZombieTimeout(Option<Duration>),
    SetZombiePolicy(ZombiePolicy),
    /// How long a Fetched (reserved, not started) job may wait before the rescuer puts it back
    /// to Pending. `None` = [`DEFAULT_FETCHED_TIMEOUT`](crate::DEFAULT_FETCHED_TIMEOUT).
    SetFetchedTimeout(Option<Duration>),
    /// At most this many Fetched + Processing jobs per concurrency key in the queue,
    /// cluster-wide (`None` = no per-key cap). Jobs without a key are not bound by it.
    SetKeyMaxWorkers(Option<u32>),
    /// At most `jobs` starts per `per` window, for the queue or per key (`None` = no limit).
    SetRateLimit(Option<RateLimit>),
}

impl QueueControl {
    /// Range-checks the value a control stores; every backend calls it before writing.
    /// `SetMaxWorkers(Some(n))`: `n` at most [`validate::MAX_QUEUE_WORKERS`] (0 is allowed
    /// and lets nothing through). `SetZombieTimeout(Some(t))`: `t` from
    /// [`validate::MIN_ZOMBIE_TIMEOUT`] to [`validate::MAX_ZOMBIE_TIMEOUT`]; a timeout such as
    /// `Duration::MAX` would otherwise be stored and break every later rescue.
    pub fn validate(&self) -> Result<()> {
        match *self {
            QueueControl::SetMaxWorkers(Some(n)) if n > validate::MAX_QUEUE_WORKERS => Err(Error::invalid(format!(
                "max_workers must be at most {}, got {n} (no cap: leave it unset; `none` on the command line)",
                validate::MAX_QUEUE_WORKERS
            ))),
            QueueControl::SetZombieTimeout(Some(t)) => {
                validate::duration("zombie_timeout", t, validate::MIN_ZOMBIE_TIMEOUT, validate::MAX_ZOMBIE_TIMEOUT)
            }
            QueueControl::SetFetchedTimeout(Some(t)) => {
                validate::duration("fetched_timeout", t, validate::MIN_ZOMBIE_TIMEOUT, validate::MAX_ZOMBIE_TIMEOUT)
            }
            QueueControl::SetKeyMaxWorkers(Some(n)) if n > validate::MAX_QUEUE_WORKERS => Err(Error::invalid(format!(
                "key_max_workers must be at most {}, got {n} (no per-key cap: leave it unset; `none` on the command line)",
                validate::MAX_QUEUE_WORKERS
            ))),
            QueueControl::SetRateLimit(Some(limit)) => limit.validate(),
            _ => Ok(()),
        }
    }
}

/// A queue's settings. A queue with no control row is active, unpaused and unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSettings {
    pub name: QueueName,
    pub max_workers: Option<u32>,
    pub is_paused: bool,
    pub is_active: bool,
    /// `None`: [`DEFAULT_ZOMBIE_TIMEOUT`](crate::DEFAULT_ZOMBIE_TIMEOUT).
    pub zombie_timeout: Option<Duration>,
    pub zombie_policy: ZombiePolicy,
    /// `None`: [`DEFAULT_FETCHED_TIMEOUT`](crate::DEFAULT_FETCHED_TIMEOUT).
    #[serde(default)]
    pub fetched_timeout: Option<Duration>,
    /// The per-key cap: at most this many Fetched + Processing jobs per concurrency key.
    #[serde(default)]
    pub key_max_workers: Option<u32>,
    /// The rate limit, if any.
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// None when the queue has no control row.
    pub updated_at: Option<Timestamp>,
}

impl QueueSettings {
    /// The zombie timeout the rescuer applies to this queue.
    pub fn effective_zombie_timeout(&self) -> Duration {
        self.zombie_timeout.unwrap_or(crate::DEFAULT_ZOMBIE_TIMEOUT)
    }

    /// The fetched timeout the rescuer applies to this queue.
    pub fn effective_fetched_timeout(&self) -> Duration {
        self.fetched_timeout.unwrap_or(crate::DEFAULT_FETCHED_TIMEOUT)
    }

    /// The settings of a queue with no control row.
    pub fn default_for(name: QueueName) -> Self {
        QueueSettings {
            name,
            max_workers: None,
            is_paused: false,
            is_active: true,
            zombie_timeout: None,
            zombie_policy: ZombiePolicy::Retry,
            fetched_timeout: None,
            key_max_workers: None,
            rate_limit: None,
            updated_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_range_checked() {
        for ok in [
            QueueControl::Pause,
            QueueControl::SetMaxWorkers(None),
            QueueControl::SetMaxWorkers(Some(0)),
            QueueControl::SetMaxWorkers(Some(validate::MAX_QUEUE_WORKERS)),
            QueueControl::SetZombieTimeout(None),
            QueueControl::SetZombieTimeout(Some(validate::MIN_ZOMBIE_TIMEOUT)),
            QueueControl::SetZombieTimeout(Some(validate::MAX_ZOMBIE_TIMEOUT)),
            QueueControl::SetZombiePolicy(ZombiePolicy::DeadLetter),
            QueueControl::SetKeyMaxWorkers(Some(0)),
            QueueControl::SetKeyMaxWorkers(Some(validate::MAX_QUEUE_WORKERS)),
            QueueControl::SetRateLimit(None),
            QueueControl::SetRateLimit(Some(RateLimit::new(1, validate::MIN_RATE_PERIOD))),
            QueueControl::SetRateLimit(Some(
                RateLimit::new(validate::MAX_RATE_JOBS, validate::MAX_RATE_PERIOD).by_key(),
            )),
        ] {
            assert!(ok.validate().is_ok(), "{ok:?}");
        }
        for (bad, needle) in [
            (QueueControl::SetMaxWorkers(Some(validate::MAX_QUEUE_WORKERS + 1)), "max_workers"),
            (QueueControl::SetMaxWorkers(Some(u32::MAX)), "max_workers"),
            (QueueControl::SetZombieTimeout(Some(Duration::ZERO)), "zombie_timeout"),
            (QueueControl::SetZombieTimeout(Some(Duration::from_micros(999))), "zombie_timeout"),
            (QueueControl::SetZombieTimeout(Some(validate::MAX_ZOMBIE_TIMEOUT + Duration::from_secs(1))), "2592000s"),
            (QueueControl::SetZombieTimeout(Some(Duration::MAX)), "zombie_timeout"),
            (QueueControl::SetKeyMaxWorkers(Some(validate::MAX_QUEUE_WORKERS + 1)), "key_max_workers"),
            (QueueControl::SetRateLimit(Some(RateLimit::new(0, Duration::from_secs(1)))), "jobs must be 1"),
            (
                QueueControl::SetRateLimit(Some(RateLimit::new(validate::MAX_RATE_JOBS + 1, Duration::from_secs(1)))),
                "jobs",
            ),
            (QueueControl::SetRateLimit(Some(RateLimit::new(1, Duration::ZERO))), "period"),
            (QueueControl::SetRateLimit(Some(RateLimit::new(1, Duration::from_micros(999)))), "period"),
            (QueueControl::SetRateLimit(Some(RateLimit::new(1, Duration::from_micros(1500)))), "whole number"),
            (QueueControl::SetRateLimit(Some(RateLimit::new(1, Duration::from_secs(86_401)))), "period"),
        ] {
            let err = bad.validate().unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{bad:?}: {err}");
        }
    }
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn rate_limits_parse() {
        assert_eq!(RateLimit::parse("500/1s", false).unwrap(), RateLimit::new(500, Duration::from_secs(1)));
        assert_eq!(
            RateLimit::parse("10/250ms", true).unwrap(),
            RateLimit::new(10, Duration::from_millis(250)).by_key()
        );
        assert_eq!(RateLimit::parse("3/m", false).unwrap().per, Duration::from_secs(60));
        assert_eq!(RateLimit::parse("1/1d", false).unwrap().per, Duration::from_secs(86_400));
        for bad in ["", "5", "0/1s", "5/0s", "5/2d", "x/1s", "5/1w", "-1/1s", "5/1.5s"] {
            let err = RateLimit::parse(bad, false).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{bad}");
        }
        let json = serde_json::to_value(RateLimit::new(5, Duration::from_millis(1500))).unwrap();
        assert_eq!(json, serde_json::json!({"jobs": 5, "per": 1500, "by_key": false}));
    }
}
