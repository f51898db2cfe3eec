//! `migrate`, `stats`, `schedules` and `workers`.

use chokaq::core::Timestamp;
use chokaq::Backend;

use crate::commands::Cx;
use crate::output::{self, age, clip, outln, since, time, time_in_zone, Table};
use crate::views::*;
use crate::{CliResult, Exit};

impl Cx {
    pub(crate) fn migrated(&self) -> CliResult<Exit> {
        if self.json {
            output::json(&serde_json::json!({
                "migrated": true, "backend": self.backend.name(), "schema": self.schema
            }));
        } else {
            outln!("schema {} is migrated ({})", self.schema, self.backend.name());
        }
        Ok(Exit::Ok)
    }

    pub(crate) async fn stats(&self) -> CliResult<Exit> {
        let s = self.backend.stats().await?;
        let schedules = self.backend.list_schedules().await?;
        let now = s.taken_at.unwrap_or_else(chrono::Utc::now);
        let lag = |t: Option<Timestamp>| t.map(|t| since(now, t));
        let state = queue_state;
        if self.json {
            let queues: Vec<_> = s.queues.iter().map(|q| stats_queue_json(q, lag(q.oldest_due_at))).collect();
            output::json(&serde_json::json!({
                "taken_at": s.taken_at,
                "total": { "pending": s.pending, "fetched": s.fetched, "processing": s.processing,
                           "archived": s.archived, "dead": s.dead, "failed": s.failed(),
                           "cancelled": s.cancelled },
                "queues": queues,
                "schedules": schedules.iter().map(schedule_json).collect::<Vec<_>>(),
            }));
            return Ok(Exit::Ok);
        }
        if s.queues.is_empty() {
            outln!("no queues (a queue is listed once it holds a job or has settings)");
            print_schedules(&schedules);
            return Ok(Exit::Ok);
        }
        let mut t = Table::new(&[
            "QUEUE",
            "STATE",
            ">PENDING",
            ">FETCHED",
            ">PROCESSING",
            ">ARCHIVED",
            ">FAILED",
            ">CANCELLED",
            ">LAG",
        ]);
        for q in &s.queues {
            t.row(vec![
                q.queue.clone(),
                state(q).into(),
                q.pending.to_string(),
                q.fetched.to_string(),
                q.processing.to_string(),
                q.archived.to_string(),
                q.failed().to_string(),
                q.cancelled.to_string(),
                lag(q.oldest_due_at).map_or_else(|| "-".to_string(), age),
            ]);
        }
        // "(all)" can be no queue's name (a queue named TOTAL looked like the total row).
        t.row(vec![
            "(all)".into(),
            String::new(),
            s.pending.to_string(),
            s.fetched.to_string(),
            s.processing.to_string(),
            s.archived.to_string(),
            s.failed().to_string(),
            s.cancelled.to_string(),
            String::new(),
        ]);
        t.print();
        if let Some(keys) = keys_table(&s.queues) {
            outln!();
            keys.print();
        }
        print_schedules(&schedules);
        Ok(Exit::Ok)
    }

    pub(crate) async fn schedules(&self) -> CliResult<Exit> {
        let all = self.backend.list_schedules().await?;
        if self.json {
            output::json(&all.iter().map(schedule_json).collect::<Vec<_>>());
        } else if all.is_empty() {
            outln!("no schedules");
        } else {
            print_schedules(&all);
        }
        Ok(Exit::Ok)
    }

    pub(crate) async fn set_schedule(&self, name: &str, enabled: bool) -> CliResult<Exit> {
        let row = self.backend.set_schedule_enabled(name, enabled).await?;
        if self.json {
            output::json(&schedule_json(&row));
        } else {
            outln!("schedule {}: {}", row.name, if enabled { "resumed" } else { "paused" });
        }
        Ok(Exit::Ok)
    }

    pub(crate) async fn workers(&self) -> CliResult<Exit> {
        let all = self.backend.list_workers().await?;
        let now = chrono::Utc::now();
        if self.json {
            let rows: Vec<_> = all
                .iter()
                .map(|w| {
                    serde_json::json!({
                        "worker": w.worker.to_string(), "host": w.host, "pid": w.pid, "queues": w.queues,
                        "concurrency": w.concurrency, "started_at": w.started_at, "last_seen_at": w.last_seen_at,
                        "last_seen_seconds_ago": since(now, w.last_seen_at).as_secs_f64(),
                    })
                })
                .collect();
            output::json(&rows);
            return Ok(Exit::Ok);
        }
        if all.is_empty() {
            outln!("no live workers");
            return Ok(Exit::Ok);
        }
        let mut t = Table::new(&["WORKER", "HOST", ">PID", "QUEUES", ">CONCURRENCY", "STARTED", ">LAST SEEN"]);
        for w in &all {
            t.row(vec![
                w.worker.to_string(),
                clip(&w.host, 40),
                w.pid.to_string(),
                clip(&w.queues.join(","), 60),
                w.concurrency.to_string(),
                time(w.started_at),
                format!("{} ago", age(since(now, w.last_seen_at))),
            ]);
        }
        t.print();
        Ok(Exit::Ok)
    }
}

fn schedule_json(r: &chokaq::core::ScheduleRow) -> serde_json::Value {
    serde_json::json!({
        "name": r.name, "spec": r.spec, "time_zone": r.time_zone, "group": r.group,
        "next_tick": r.next_tick,
        "next_tick_local": r.next_tick.map(|t| {
            r.time_zone.parse::<chrono_tz::Tz>().map_or_else(|_| t.to_rfc3339(), |tz| t.with_timezone(&tz).to_rfc3339())
        }),
        "last_enqueued_tick": r.last_enqueued_tick,
        "enabled": r.enabled, "stale": r.stale,
    })
}

/// The schedules as a second table (nothing when there are none).
fn print_schedules(all: &[chokaq::core::ScheduleRow]) {
    if all.is_empty() {
        return;
    }
    outln!();
    let mut t = Table::new(&["SCHEDULE", "SPEC", "TZ", "NEXT TICK", "LAST TICK", "STATE"]);
    for r in all {
        let state = if r.stale {
            "stale"
        } else if r.enabled {
            "active"
        } else {
            "paused"
        };
        t.row(vec![
            clip(&r.name, 60),
            clip(&r.spec, 40),
            r.time_zone.clone(),
            r.next_tick.map_or_else(|| "-".to_string(), |t| time_in_zone(t, &r.time_zone)),
            r.last_enqueued_tick.map_or_else(|| "-".to_string(), time),
            state.to_string(),
        ]);
    }
    t.print();
}
