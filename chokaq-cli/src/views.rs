//! How jobs, queues and stats are shown: the JSON views and the tables shared by commands.

use chokaq::core::{
    JobLocation, JobStatus, KeyCount, QueueSettings, QueueStats, RateLimit, Timestamp, UniqueArgs, UniqueHold,
};
use chokaq::JobRecord;
use serde::Serialize;

use crate::output::{clip, Table};
use crate::parse::rate_text;

pub(crate) fn status_name(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Pending => "pending",
        JobStatus::Fetched => "fetched",
        JobStatus::Processing => "processing",
    }
}

/// (table, state, dead-letter reason) of a job.
pub(crate) fn place(l: JobLocation) -> (&'static str, &'static str, Option<&'static str>) {
    match l {
        JobLocation::Hot(s) => ("hot", status_name(s), None),
        JobLocation::Archived => ("archive", "done", None),
        JobLocation::Dead(r) => ("dead", "dead", Some(r.as_str())),
    }
}

/// A job as the CLI prints it in JSON.
#[derive(Debug, Serialize)]
pub(crate) struct JobView<'a> {
    pub(crate) id: String,
    pub(crate) table: &'static str,
    pub(crate) state: &'static str,
    pub(crate) reason: Option<&'static str>,
    pub(crate) queue: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) priority: i32,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) tags: &'a [String],
    pub(crate) concurrency_key: Option<&'a str>,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) worker_id: Option<String>,
    pub(crate) created_at: Timestamp,
    pub(crate) scheduled_at: Option<Timestamp>,
    pub(crate) started_at: Option<Timestamp>,
    pub(crate) heartbeat_at: Option<Timestamp>,
    pub(crate) updated_at: Timestamp,
    pub(crate) finished_at: Option<Timestamp>,
    pub(crate) last_error: Option<&'a str>,
    pub(crate) cancel_requested: bool,
    pub(crate) created_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<&'a serde_json::Value>,
    /// `jobs show` of a job holding a unique key (`docs/unique.md`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) unique: Option<UniqueView>,
    /// `jobs show` of a job that recorded an output (`docs/outputs.md`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<serde_json::Value>,
}

/// The unique key a job holds and the settings it was enqueued with.
#[derive(Debug, Serialize)]
pub(crate) struct UniqueView {
    pub(crate) key: String,
    /// `none` (the kind alone), `all` (the whole payload) or `fields` ([`Self::fields`]).
    pub(crate) args: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) fields: Vec<String>,
    pub(crate) period_seconds: Option<u64>,
    pub(crate) period_ends_at: Option<Timestamp>,
    pub(crate) by_queue: bool,
    pub(crate) states: Vec<&'static str>,
    /// The settings in one line, as the table shows them.
    pub(crate) settings: String,
}

impl UniqueView {
    pub(crate) fn of(h: &UniqueHold) -> Self {
        let (args, fields) = match &h.opts.args {
            UniqueArgs::Ignored => ("none", Vec::new()),
            UniqueArgs::All => ("all", Vec::new()),
            UniqueArgs::Fields(f) => ("fields", f.clone()),
        };
        UniqueView {
            key: h.key.clone(),
            args,
            fields,
            period_seconds: h.opts.period_secs,
            period_ends_at: h.expires_at,
            by_queue: h.opts.by_queue,
            states: h.opts.states.states().into_iter().map(|s| s.as_str()).collect(),
            settings: h.opts.to_string(),
        }
    }
}

impl<'a> JobView<'a> {
    pub(crate) fn of(r: &'a JobRecord, with_payload: bool) -> Self {
        let (table, state, reason) = place(r.location);
        JobView {
            id: r.id.to_string(),
            table,
            state,
            reason,
            queue: r.queue.as_str(),
            kind: r.kind.as_str(),
            priority: r.priority,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            tags: &r.tags,
            concurrency_key: r.concurrency_key.as_deref(),
            idempotency_key: r.idempotency_key.as_deref(),
            worker_id: r.worker_id.map(|w| w.to_string()),
            created_at: r.created_at,
            scheduled_at: r.scheduled_at,
            started_at: r.started_at,
            heartbeat_at: r.heartbeat_at,
            updated_at: r.updated_at,
            finished_at: r.finished_at,
            last_error: r.last_error.as_deref(),
            cancel_requested: r.cancel_requested,
            created_by: r.created_by.as_deref(),
            payload: with_payload.then_some(&r.payload),
            unique: None,
            output: None,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct QueueView {
    pub(crate) queue: String,
    pub(crate) paused: bool,
    pub(crate) active: bool,
    pub(crate) max_workers: Option<u32>,
    /// The per-key cap (`null`: none).
    pub(crate) key_max_workers: Option<u32>,
    /// `{"jobs": N, "per": MILLISECONDS, "by_key": BOOL}` (`null`: none).
    pub(crate) rate_limit: Option<RateLimit>,
    pub(crate) zombie_timeout_seconds: Option<f64>,
    pub(crate) zombie_policy: &'static str,
    pub(crate) updated_at: Option<Timestamp>,
    /// `queues list` only: the keys with the most Fetched + Processing jobs (see
    /// [`QueueStats::busiest_keys`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) busiest_keys: Option<Vec<KeyCount>>,
}

impl QueueView {
    pub(crate) fn of(s: &QueueSettings) -> Self {
        QueueView {
            queue: s.name.to_string(),
            paused: s.is_paused,
            active: s.is_active,
            max_workers: s.max_workers,
            key_max_workers: s.key_max_workers,
            rate_limit: s.rate_limit,
            zombie_timeout_seconds: s.zombie_timeout.map(|d| d.as_secs_f64()),
            zombie_policy: match s.zombie_policy {
                chokaq::core::ZombiePolicy::Retry => "retry",
                chokaq::core::ZombiePolicy::DeadLetter => "dead_letter",
            },
            updated_at: s.updated_at,
            busiest_keys: None,
        }
    }
}

/// A queue's per-key cap as a table cell.
pub(crate) fn key_cap_text(s: Option<&QueueSettings>) -> String {
    s.and_then(|s| s.key_max_workers).map_or_else(|| "none".into(), |n| n.to_string())
}

/// A queue's rate limit as a table cell.
pub(crate) fn rate_limit_text(s: Option<&QueueSettings>) -> String {
    s.and_then(|s| s.rate_limit).map_or_else(|| "none".into(), |r| rate_text(&r))
}

/// The keyed limits of `stats`: one row per busiest key of each queue (its running count),
/// with the queue's per-key cap and rate limit; a queue with a cap or a limit but no running
/// keyed job gets one row with `-` for the key. `None` when no queue has any of it.
pub(crate) fn keys_table(queues: &[QueueStats]) -> Option<Table> {
    let mut t = Table::new(&["QUEUE", ">KEY-CAP", "RATE", "KEY", ">RUNNING"]);
    let mut any = false;
    for q in queues {
        let s = q.settings.as_ref();
        let limited = s.is_some_and(|s| s.key_max_workers.is_some() || s.rate_limit.is_some());
        if !limited && q.busiest_keys.is_empty() {
            continue;
        }
        any = true;
        let (cap, rate) = (key_cap_text(s), rate_limit_text(s));
        if q.busiest_keys.is_empty() {
            t.row(vec![q.queue.clone(), cap.clone(), rate.clone(), "-".into(), "-".into()]);
        }
        for k in &q.busiest_keys {
            t.row(vec![q.queue.clone(), cap.clone(), rate.clone(), clip(&k.key, 60), k.running.to_string()]);
        }
    }
    any.then_some(t)
}

/// The busiest keys of `queues list`: one row per key. `None` when no queue has a running
/// keyed job.
pub(crate) fn busiest_table(queues: &[QueueStats]) -> Option<Table> {
    let mut t = Table::new(&["QUEUE", "BUSIEST KEY", ">RUNNING"]);
    let mut any = false;
    for q in queues {
        for k in &q.busiest_keys {
            any = true;
            t.row(vec![q.queue.clone(), clip(&k.key, 60), k.running.to_string()]);
        }
    }
    any.then_some(t)
}

/// A queue's state in `stats`.
pub(crate) fn queue_state(q: &QueueStats) -> &'static str {
    match (q.is_active(), q.is_paused()) {
        (false, _) => "inactive",
        (true, true) => "paused",
        (true, false) => "running",
    }
}

/// One queue of `stats --json`.
pub(crate) fn stats_queue_json(q: &QueueStats, lag: Option<std::time::Duration>) -> serde_json::Value {
    let s = q.settings.as_ref();
    serde_json::json!({
        "queue": q.queue, "state": queue_state(q), "paused": q.is_paused(), "active": q.is_active(),
        "max_workers": s.and_then(|s| s.max_workers),
        "key_max_workers": s.and_then(|s| s.key_max_workers),
        "rate_limit": s.and_then(|s| s.rate_limit),
        "pending": q.pending, "fetched": q.fetched,
        "processing": q.processing, "archived": q.archived, "dead": q.dead,
        "failed": q.failed(), "cancelled": q.cancelled,
        "oldest_due_at": q.oldest_due_at,
        "lag_seconds": lag.map(|d| d.as_secs_f64()),
        "busiest_keys": q.busiest_keys,
    })
}

#[cfg(test)]
mod tests {
    use chokaq::core::memory::MemoryBackend;
    use chokaq::core::{ClaimMode, ClaimParams, QueueControl};
    use chokaq::{Backend, BackendExt, NewJob, QueueName, WorkerId};

    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    fn rows(t: &Table) -> Vec<Vec<String>> {
        t.render().lines().map(|l| l.split_whitespace().map(String::from).collect()).collect()
    }

    /// Issue 25 on the memory backend (the reference): `stats` shows each queue's key cap,
    /// rate limit and busiest keys with exact running counts (the cap holds: 2 of 3 for key
    /// a), hostile keys escaped; `--json` carries the same; `queues list` has the columns.
    #[test]
    fn keyed_limits_in_stats_and_queue_lists() {
        block_on(async {
            let b = MemoryBackend::new();
            let (k, r, plain) =
                (QueueName::new("keyed").unwrap(), QueueName::new("rated").unwrap(), QueueName::new("plain").unwrap());
            for key in ["a", "a", "a", "b", "c\u{202e}x"] {
                b.enqueue(NewJob::build(k.as_str(), "t").unwrap().concurrency_key(key)).await.unwrap();
            }
            b.enqueue(NewJob::build(k.as_str(), "t").unwrap()).await.unwrap();
            b.enqueue(NewJob::build(plain.as_str(), "t").unwrap()).await.unwrap();
            b.control_queue(&k, QueueControl::SetKeyMaxWorkers(Some(2))).await.unwrap();
            let limit = RateLimit::parse("500/1s", true).unwrap();
            b.control_queue(&r, QueueControl::SetRateLimit(Some(limit))).await.unwrap();
            let got =
                b.claim(&ClaimParams::new(WorkerId::random(), vec![k.clone()], 10, ClaimMode::Start)).await.unwrap();
            assert_eq!(got.len(), 5, "2 of key a, b, the hostile key and the key-less job");

            let s = b.stats().await.unwrap();
            let t = keys_table(&s.queues).expect("a keys table");
            let out = t.render();
            assert!(!out.contains('\u{202e}'), "{out:?}");
            assert_eq!(
                rows(&t),
                vec![
                    vec!["QUEUE", "KEY-CAP", "RATE", "KEY", "RUNNING"],
                    vec!["keyed", "2", "none", "a", "2"],
                    vec!["keyed", "2", "none", "b", "1"],
                    vec!["keyed", "2", "none", "c\\u{202e}x", "1"],
                    vec!["rated", "none", "500/1s", "per", "key", "-", "-"],
                ],
                "{out}"
            );
            let q = s.queue("keyed").unwrap();
            let v = stats_queue_json(q, None);
            assert_eq!(v["key_max_workers"], serde_json::json!(2));
            assert_eq!(v["rate_limit"], serde_json::Value::Null);
            assert_eq!(
                v["busiest_keys"],
                serde_json::json!([
                    {"key": "a", "running": 2}, {"key": "b", "running": 1}, {"key": "c\u{202e}x", "running": 1}
                ])
            );
            let v = stats_queue_json(s.queue("rated").unwrap(), None);
            assert_eq!(v["rate_limit"], serde_json::json!({"jobs": 500, "per": 1000, "by_key": true}));
            assert_eq!(v["busiest_keys"], serde_json::json!([]));
            assert_eq!(v["key_max_workers"], serde_json::Value::Null);

            let busiest = busiest_table(&s.queues).expect("busiest keys");
            assert_eq!(
                rows(&busiest),
                vec![
                    vec!["QUEUE", "BUSIEST", "KEY", "RUNNING"],
                    vec!["keyed", "a", "2"],
                    vec!["keyed", "b", "1"],
                    vec!["keyed", "c\\u{202e}x", "1"],
                ]
            );
            let view = serde_json::to_value(QueueView::of(&b.queue_settings(&r).await.unwrap())).unwrap();
            assert_eq!(view["rate_limit"], serde_json::json!({"jobs": 500, "per": 1000, "by_key": true}));
            assert!(view.get("busiest_keys").is_none(), "{view}");
            assert_eq!(rate_limit_text(Some(&b.queue_settings(&r).await.unwrap())), "500/1s per key");
            assert_eq!(rate_limit_text(None), "none");

            // No keyed queue, no table.
            let other = MemoryBackend::new();
            other.enqueue(NewJob::build(plain.as_str(), "t").unwrap()).await.unwrap();
            other.control_queue(&plain, QueueControl::SetMaxWorkers(Some(1))).await.unwrap();
            let s = other.stats().await.unwrap();
            assert!(keys_table(&s.queues).is_none());
            assert!(busiest_table(&s.queues).is_none());
        });
    }
}
