//! A queue's control row: pause, activate, cap, zombie settings.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{QueueName, Timestamp};

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
    /// `None` = use the rescuer's default.
    SetZombieTimeout(Option<Duration>),
    SetZombiePolicy(ZombiePolicy),
}

/// A queue's settings. A queue with no control row is active, unpaused and unlimited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSettings {
    pub name: QueueName,
    pub max_workers: Option<u32>,
    pub is_paused: bool,
    pub is_active: bool,
    pub zombie_timeout: Option<Duration>,
    pub zombie_policy: ZombiePolicy,
    /// None when the queue has no control row.
    pub updated_at: Option<Timestamp>,
}

impl QueueSettings {
    /// The settings of a queue with no control row.
    pub fn default_for(name: QueueName) -> Self {
        QueueSettings {
            name,
            max_workers: None,
            is_paused: false,
            is_active: true,
            zombie_timeout: None,
            zombie_policy: ZombiePolicy::Retry,
            updated_at: None,
        }
    }
}
