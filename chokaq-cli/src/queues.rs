//! `queues`: list, pause, resume, caps, rate limits, zombie timeouts.

use chokaq::core::{JobTable, ListJobsParams, QueueControl, QueueSettings, RateLimit};
use chokaq::{Backend, QueueName};

use crate::commands::{queue_name, Cx};
use crate::output::{self, age, opt_time, outln, Table};
use crate::views::*;
use crate::{CliResult, Exit, Failure, QueueAction};

impl Cx {
    pub(crate) async fn queues(&self, action: QueueAction) -> CliResult<Exit> {
        let (queue, control, done, create) = match action {
            QueueAction::List => return self.list_queues().await,
            QueueAction::Pause { queue, create } => (queue, QueueControl::Pause, "paused", create),
            QueueAction::Resume { queue, create } => (queue, QueueControl::Resume, "resumed", create),
            QueueAction::Activate { queue, create } => (queue, QueueControl::Activate, "activated", create),
            QueueAction::Deactivate { queue, create } => (queue, QueueControl::Deactivate, "deactivated", create),
            QueueAction::Cap { queue, max, create } => (queue, QueueControl::SetMaxWorkers(max.0), "cap set", create),
            QueueAction::KeyCap { queue, max, create } => {
                (queue, QueueControl::SetKeyMaxWorkers(max.0), "key cap set", create)
            }
            QueueAction::RateLimit { queue, limit, by_key, create } => {
                let limit = match (limit.0, by_key) {
                    (None, true) => {
                        return Err(Failure::new(Exit::Usage, "--by-key needs a limit, not `none`").hint(
                            "`chokaq queues rate-limit Q none` removes the limit, whether it was per key or not",
                        ))
                    }
                    (limit, by_key) => limit.map(|l| RateLimit { by_key, ..l }),
                };
                (queue, QueueControl::SetRateLimit(limit), "rate limit set", create)
            }
            QueueAction::ZombieTimeout { queue, timeout, create } => {
                (queue, QueueControl::SetZombieTimeout(timeout.0), "zombie timeout set", create)
            }
        };
        let q = queue_name(&queue)?;
        if !create.create && !self.queue_exists(&q).await? {
            let again = with_create(std::env::args().collect())
                .unwrap_or_else(|| format!("chokaq queues {} {q} --create", action_word(done)));
            return Err(Failure::new(Exit::NotFound, format!("no queue {q}: it has no job and no settings"))
                .hint(format!("check the name (chokaq queues list), or pass --create to set it anyway: {again}")));
        }
        // Accepted, and said what it does (issue 40): a cap of 0 lets nothing through, which
        // is a way to hold work, not a typo to refuse; the dashboard keeps 0 too.
        let note = match control {
            QueueControl::SetKeyMaxWorkers(Some(0)) => Some(format!(
                "note: a key cap of 0 holds every job of {q} that has a concurrency key (jobs without one still run); \
                 `chokaq queues key-cap {q} none` removes it"
            )),
            QueueControl::SetMaxWorkers(Some(0)) => Some(format!(
                "note: a cap of 0 lets no job of {q} start (like pause); `chokaq queues cap {q} none` removes it"
            )),
            _ => None,
        };
        let s = self.backend.control_queue(&q, control).await?;
        if let (Some(note), false) = (note, self.json) {
            eprintln!("{}", output::escape(&note));
        }
        if self.json {
            output::json(&QueueView::of(&s));
        } else {
            outln!("queue {q}: {done}");
            self.print_queues(&[s]);
        }
        Ok(Exit::Ok)
    }

    /// Whether a queue is known: it has a control row, or a job in any table (three one-row
    /// reads, whatever the size of the tables).
    pub(crate) async fn queue_exists(&self, q: &QueueName) -> CliResult<bool> {
        if self.backend.queue_settings(q).await?.updated_at.is_some() {
            return Ok(true);
        }
        for table in [JobTable::Hot, JobTable::DeadLetter, JobTable::Archive] {
            let mut p = ListJobsParams::new(table);
            p.queue = Some(q.clone());
            p.limit = 1;
            p.without_payloads = true;
            if !self.backend.list_jobs(&p).await?.jobs.is_empty() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub(crate) async fn list_queues(&self) -> CliResult<Exit> {
        let stats = self.backend.stats_estimated().await?;
        let mut all = Vec::with_capacity(stats.queues.len());
        for q in &stats.queues {
            all.push(match &q.settings {
                Some(s) => s.clone(),
                None => QueueSettings::default_for(queue_name(&q.queue)?),
            });
        }
        if self.json {
            let views: Vec<_> = all
                .iter()
                .zip(&stats.queues)
                .map(|(s, q)| QueueView { busiest_keys: Some(q.busiest_keys.clone()), ..QueueView::of(s) })
                .collect();
            output::json(&views);
        } else if all.is_empty() {
            outln!("no queues (a queue is listed once it holds a job or has settings)");
        } else {
            self.print_queues(&all);
            if let Some(keys) = busiest_table(&stats.queues) {
                outln!();
                keys.print();
            }
        }
        Ok(Exit::Ok)
    }

    pub(crate) fn print_queues(&self, all: &[QueueSettings]) {
        let mut t =
            Table::new(&["QUEUE", "STATE", ">CAP", ">KEY-CAP", "RATE", ">ZOMBIE-TIMEOUT", "ZOMBIE-POLICY", "UPDATED"]);
        for s in all {
            let v = QueueView::of(s);
            let state = match (s.is_active, s.is_paused) {
                (false, _) => "inactive",
                (true, true) => "paused",
                (true, false) => "running",
            };
            t.row(vec![
                v.queue,
                state.into(),
                s.max_workers.map_or_else(|| "none".into(), |n| n.to_string()),
                key_cap_text(Some(s)),
                rate_limit_text(Some(s)),
                s.zombie_timeout.map_or_else(|| "default".into(), age),
                v.zombie_policy.into(),
                opt_time(s.updated_at),
            ]);
        }
        t.print();
    }
}

/// The subcommand that printed `done` ("paused" -> "pause"), for a hint.
/// The command as it was given from `queues` on (the global flags before it, such as a URL,
/// are left out: they may hold a password), with `--create` added, each argument quoted for a
/// POSIX shell when it needs to be; None when `queues` is not among the arguments.
fn with_create(args: Vec<String>) -> Option<String> {
    let from = args.iter().position(|a| a == "queues")?;
    let quote = |a: &str| {
        if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c)) {
            a.to_string()
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    let mut words: Vec<String> = args[from..].iter().map(|a| quote(a)).collect();
    words.push("--create".into());
    Some(format!("chokaq {}", words.join(" ")))
}

fn action_word(done: &str) -> &'static str {
    match done {
        "paused" => "pause",
        "resumed" => "resume",
        "activated" => "activate",
        "deactivated" => "deactivate",
        "cap set" => "cap",
        "key cap set" => "key-cap",
        "rate limit set" => "rate-limit",
        _ => "zombie-timeout",
    }
}

#[cfg(test)]
mod tests {
    use super::with_create;

    #[test]
    fn the_create_hint_repeats_the_command_with_its_value() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            with_create(args(&["chokaq", "--url", "postgres://u:pw@h/db", "queues", "cap", "q1", "5"])).as_deref(),
            Some("chokaq queues cap q1 5 --create"),
            "the URL before `queues` is left out"
        );
        assert_eq!(
            with_create(args(&["chokaq", "queues", "rate-limit", "q 2", "10/1s", "--by-key"])).as_deref(),
            Some("chokaq queues rate-limit 'q 2' 10/1s --by-key --create")
        );
        assert_eq!(
            with_create(args(&["chokaq", "queues", "cap", "it's", "1"])).as_deref(),
            Some("chokaq queues cap 'it'\\''s' 1 --create")
        );
        assert_eq!(with_create(args(&["chokaq", "stats"])), None);
    }
}
