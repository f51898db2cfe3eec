//! Handlers by kind, type-erased.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chokaq_core::RetryPolicy;
use futures::future::BoxFuture;
use futures::FutureExt;

use crate::job::{Job, JobContext, JobResult};

/// What running a handler produced, before panics and timeouts are looked at.
#[derive(Debug)]
pub(crate) enum HandlerOutcome {
    /// The handler returned.
    Returned(JobResult),
    /// The payload does not deserialize into the job's type; the handler never ran.
    Undecodable(String),
}

type ErasedFn = dyn Fn(serde_json::Value, JobContext) -> BoxFuture<'static, HandlerOutcome> + Send + Sync;

/// One registered handler and its per-type settings.
pub(crate) struct Handler {
    pub(crate) call: Box<ErasedFn>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry_policy: Option<RetryPolicy>,
    /// The job type's default queue (`Job::queue`); None for a raw handler.
    pub(crate) queue: Option<&'static str>,
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handler")
            .field("timeout", &self.timeout)
            .field("retry_policy", &self.retry_policy)
            .field("queue", &self.queue)
            .finish()
    }
}

/// Handlers by job kind.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    handlers: HashMap<String, Arc<Handler>>,
}

impl Registry {
    pub(crate) fn get(&self, kind: &str) -> Option<&Arc<Handler>> {
        self.handlers.get(kind)
    }

    pub(crate) fn kinds(&self) -> impl Iterator<Item = &str> {
        self.handlers.keys().map(String::as_str)
    }

    pub(crate) fn handlers(&self) -> impl Iterator<Item = (&str, &Handler)> {
        self.handlers.iter().map(|(k, h)| (k.as_str(), &**h))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    pub(crate) fn insert_typed<J, F, Fut>(&mut self, f: F)
    where
        J: Job,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        let f = Arc::new(f);
        let call = move |payload: serde_json::Value, ctx: JobContext| -> BoxFuture<'static, HandlerOutcome> {
            match serde_json::from_value::<J>(payload) {
                Ok(job) => f(job, ctx).map(HandlerOutcome::Returned).boxed(),
                Err(e) => {
                    let msg =
                        format!("payload does not deserialize into {} ({}): {e}", std::any::type_name::<J>(), J::KIND);
                    futures::future::ready(HandlerOutcome::Undecodable(msg)).boxed()
                }
            }
        };
        self.handlers.insert(
            J::KIND.to_string(),
            Arc::new(Handler {
                call: Box::new(call),
                timeout: J::timeout(),
                retry_policy: J::retry_policy(),
                queue: Some(J::queue()),
            }),
        );
    }

    pub(crate) fn insert_raw<F, Fut>(&mut self, kind: String, f: F)
    where
        F: Fn(serde_json::Value, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = JobResult> + Send + 'static,
    {
        let call = move |payload: serde_json::Value, ctx: JobContext| -> BoxFuture<'static, HandlerOutcome> {
            f(payload, ctx).map(HandlerOutcome::Returned).boxed()
        };
        self.handlers
            .insert(kind, Arc::new(Handler { call: Box::new(call), timeout: None, retry_policy: None, queue: None }));
    }
}
