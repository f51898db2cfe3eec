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
                "max_workers must be at most {}, got {n} (None means no cap)",
                validate::MAX_QUEUE_WORKERS
            ))),
            QueueControl::SetZombieTimeout(Some(t)) => {
                validate::duration("zombie_timeout", t, validate::MIN_ZOMBIE_TIMEOUT, validate::MAX_ZOMBIE_TIMEOUT)
            }
            QueueControl::SetFetchedTimeout(Some(t)) => {
                validate::duration("fetched_timeout", t, validate::MIN_ZOMBIE_TIMEOUT, validate::MAX_ZOMBIE_TIMEOUT)
            }
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
        ] {
            let err = bad.validate().unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{bad:?}: {err}");
        }
    }
}
