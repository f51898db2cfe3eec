//! Wake-ups pushed by the database on enqueue.

/// A wake-up: work may be available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Jobs were enqueued into this queue.
    Queue(String),
    /// Wake-ups were missed; check every queue.
    Any,
}

/// A stream of wake-ups from the database (PostgreSQL `LISTEN/NOTIFY`).
#[derive(Debug)]
pub struct Wakeups {
    rx: tokio::sync::broadcast::Receiver<Wake>,
}

impl Wakeups {
    /// Wraps a broadcast receiver the backend feeds.
    pub fn new(rx: tokio::sync::broadcast::Receiver<Wake>) -> Self {
        Wakeups { rx }
    }

    /// The next wake-up; `None` once the backend has stopped listening for good.
    pub async fn recv(&mut self) -> Option<Wake> {
        match self.rx.recv().await {
            Ok(w) => Some(w),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Some(Wake::Any),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
        }
    }
}
