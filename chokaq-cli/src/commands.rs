//! The subcommands, each through `chokaq::connect` and the `Backend` trait only.

use std::sync::Arc;

use chokaq::core::{
    JobLocation, JobStatus, JobTable, KeyCount, ListJobsParams, QueueControl, QueueSettings, QueueStats, RateLimit,
    Timestamp,
};
use chokaq::{Backend, ConnectOptions, ErrorKind, JobId, JobKind, JobRecord, QueueName};
use serde::Serialize;

use crate::output::{self, age, clip, opt_time, outln, since, time, Table};
use crate::parse::rate_text;
use crate::{
    Cli, CliResult, Command, DeadAction, Exit, Failure, JobAction, ListArgs, QueueAction, StatusArg, TableArg,
};

/// Runs the command; `Ok` carries the exit code of a command that printed its result.
pub async fn run(cli: Cli) -> CliResult<Exit> {
    let Some(url) = cli.url.clone().filter(|u| !u.trim().is_empty()) else {
        return Err(Failure::new(Exit::Usage, "no database URL").hint(
            "pass --url URL or set DATABASE_URL (postgres://…, sqlite:path/to/jobs.db, mysql://… / mariadb://…, or a \
             SQL Server connection string)",
        ));
    };
    let migrate = matches!(cli.command, Command::Migrate);
    // Only `migrate` creates a SQLite file: a command that reads a file that does not exist
    // says so (a mistyped path must not leave an empty database behind). A refused
    // connection is reported at once, not after the pool's connect timeout.
    let opts = ConnectOptions::new(url)
        .schema(&cli.schema)
        .max_connections(4)
        .connect_timeout(cli.connect_timeout)
        .create_if_missing(migrate)
        .fail_fast(true);
    let kind = opts.check().map_err(Failure::from)?;
    let backend = opts.migrate(migrate).connect().await.map_err(|e| connect_failure(kind, e))?;
    let cx = Cx { backend, json: cli.json(), schema: cli.schema.clone() };
    match cli.command {
        Command::Migrate => cx.migrated(),
        Command::Stats => cx.stats().await,
        Command::Queues { action } => cx.queues(action.unwrap_or(crate::QueueAction::List)).await,
        Command::Jobs { action } => match action {
            JobAction::List { table, status, filter } => cx.list(table, status, &filter).await,
            JobAction::Show { id } => cx.show(&id).await,
            JobAction::Cancel { id } => cx.cancel(&id).await,
        },
        Command::Dead { action } => match action {
            DeadAction::List { filter } => cx.list(TableArg::Dead, None, &filter).await,
            DeadAction::Retry { id: Some(id), dry_run, .. } => cx.retry_one(&id, dry_run).await,
            DeadAction::Retry { id: None, queue: Some(queue), all: true, yes, dry_run } => {
                cx.retry_all(&queue, yes, dry_run).await
            }
            DeadAction::Retry { .. } => Err(Failure::new(Exit::Usage, "dead retry needs an ID, or --queue Q --all")),
        },
        Command::Purge(args) => cx.purge(&args).await,
        Command::Workers => cx.workers().await,
        Command::Schedules { action } => match action.unwrap_or(crate::ScheduleAction::List) {
            crate::ScheduleAction::List => cx.schedules().await,
            crate::ScheduleAction::Pause { name } => cx.set_schedule(&name, false).await,
            crate::ScheduleAction::Resume { name } => cx.set_schedule(&name, true).await,
        },
        Command::Web(args) => cx.web(args).await,
    }
}

pub(crate) struct Cx {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) json: bool,
    schema: String,
}

/// A failed connect: configuration errors (no such database, role or SQLite file, a refused
/// login) get a hint about the URL.
fn connect_failure(kind: chokaq::BackendKind, e: chokaq::Error) -> Failure {
    let invalid = e.kind() == ErrorKind::InvalidInput;
    let f = Failure::from(e);
    match (invalid, kind) {
        (true, chokaq::BackendKind::Sqlite) => {
            f.hint("check the path in --url / DATABASE_URL; `chokaq migrate` creates the file and its tables")
        }
        (true, _) => f.hint("check the database name, the role and the password in --url / DATABASE_URL"),
        (false, _) => f,
    }
}

impl Cx {
    /// `chokaq web`: serves the dashboard until Ctrl-C or SIGTERM.
    async fn web(&self, args: crate::WebArgs) -> CliResult<Exit> {
        let auth = match (args.token, args.basic, args.no_auth) {
            (Some(t), None, false) if !t.is_empty() => chokaq_web::Auth::bearer(t),
            (None, Some(b), false) => match b.split_once(':') {
                Some((user, pass)) if !user.is_empty() && !pass.is_empty() => {
                    chokaq_web::Auth::Basic { user: user.to_string(), pass: pass.to_string() }
                }
                _ => return Err(Failure::new(Exit::Usage, "--basic takes USER:PASS, both non-empty")),
            },
            (None, None, true) => chokaq_web::Auth::None,
            _ => {
                return Err(Failure::new(Exit::Usage, "chokaq web needs one of --token, --basic or --no-auth")
                    .hint("--no-auth is accepted only with a loopback --listen address"))
            }
        };
        let options = chokaq_web::WebOptions::new(auth).read_only(args.read_only).secure_cookie(args.secure_cookie);
        let options = args.limits.apply(options);
        chokaq_web::check_listen(args.listen, &options)?;
        // Bound first, then announced (issue 40): a port in use is an error that says so, and
        // "serving" is never printed for a dashboard that does not listen.
        let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| {
            let what = if e.kind() == std::io::ErrorKind::AddrInUse {
                format!("cannot listen on {}: the port is in use ({e})", args.listen)
            } else {
                format!("cannot listen on {}: {e}", args.listen)
            };
            Failure::new(Exit::Unavailable, what).hint("choose another address with --listen, or stop what holds it")
        })?;
        eprintln!("chokaq web: serving the dashboard on http://{} (Ctrl-C to stop)", args.listen);
        args.limits.init_log();
        chokaq_web::serve_on(self.backend.clone(), listener, options, shutdown_signal()).await?;
        eprintln!("chokaq web: stopped");
        Ok(Exit::Ok)
    }
}

/// Ctrl-C or SIGTERM: what stops `chokaq web`.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// The subcommand that printed `done` ("paused" -> "pause"), for a hint.
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

pub(crate) fn queue_name(s: &str) -> CliResult<QueueName> {
    QueueName::new(s).map_err(Failure::from)
}

pub(crate) fn job_id(s: &str) -> CliResult<JobId> {
    s.trim().parse::<JobId>().map_err(|_| Failure::new(Exit::Usage, format!("{s:?} is not a job id (expected a UUID)")))
}

fn status_name(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Pending => "pending",
        JobStatus::Fetched => "fetched",
        JobStatus::Processing => "processing",
    }
}

/// (table, state, dead-letter reason) of a job.
fn place(l: JobLocation) -> (&'static str, &'static str, Option<&'static str>) {
    match l {
        JobLocation::Hot(s) => ("hot", status_name(s), None),
        JobLocation::Archived => ("archive", "done", None),
        JobLocation::Dead(r) => ("dead", "dead", Some(r.as_str())),
    }
}

/// A job as the CLI prints it in JSON.
#[derive(Debug, Serialize)]
struct JobView<'a> {
    id: String,
    table: &'static str,
    state: &'static str,
    reason: Option<&'static str>,
    queue: &'a str,
    kind: &'a str,
    priority: i32,
    attempt: i32,
    max_attempts: i32,
    tags: &'a [String],
    concurrency_key: Option<&'a str>,
    idempotency_key: Option<&'a str>,
    worker_id: Option<String>,
    created_at: Timestamp,
    scheduled_at: Option<Timestamp>,
    started_at: Option<Timestamp>,
    heartbeat_at: Option<Timestamp>,
    updated_at: Timestamp,
    finished_at: Option<Timestamp>,
    last_error: Option<&'a str>,
    cancel_requested: bool,
    created_by: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a serde_json::Value>,
}

impl<'a> JobView<'a> {
    fn of(r: &'a JobRecord, with_payload: bool) -> Self {
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
        }
    }
}

#[derive(Debug, Serialize)]
struct QueueView {
    queue: String,
    paused: bool,
    active: bool,
    max_workers: Option<u32>,
    /// The per-key cap (`null`: none).
    key_max_workers: Option<u32>,
    /// `{"jobs": N, "per": MILLISECONDS, "by_key": BOOL}` (`null`: none).
    rate_limit: Option<RateLimit>,
    zombie_timeout_seconds: Option<f64>,
    zombie_policy: &'static str,
    updated_at: Option<Timestamp>,
    /// `queues list` only: the keys with the most Fetched + Processing jobs (see
    /// [`QueueStats::busiest_keys`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    busiest_keys: Option<Vec<KeyCount>>,
}

impl QueueView {
    fn of(s: &QueueSettings) -> Self {
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
fn key_cap_text(s: Option<&QueueSettings>) -> String {
    s.and_then(|s| s.key_max_workers).map_or_else(|| "none".into(), |n| n.to_string())
}

/// A queue's rate limit as a table cell.
fn rate_limit_text(s: Option<&QueueSettings>) -> String {
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
fn queue_state(q: &QueueStats) -> &'static str {
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

impl Cx {
    fn migrated(&self) -> CliResult<Exit> {
        if self.json {
            output::json(&serde_json::json!({
                "migrated": true, "backend": self.backend.name(), "schema": self.schema
            }));
        } else {
            outln!("schema {} is migrated ({})", self.schema, self.backend.name());
        }
        Ok(Exit::Ok)
    }

    async fn stats(&self) -> CliResult<Exit> {
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
        t.row(vec![
            "TOTAL".into(),
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

    async fn schedules(&self) -> CliResult<Exit> {
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

    async fn set_schedule(&self, name: &str, enabled: bool) -> CliResult<Exit> {
        let row = self.backend.set_schedule_enabled(name, enabled).await?;
        if self.json {
            output::json(&schedule_json(&row));
        } else {
            outln!("schedule {}: {}", row.name, if enabled { "resumed" } else { "paused" });
        }
        Ok(Exit::Ok)
    }

    async fn queues(&self, action: QueueAction) -> CliResult<Exit> {
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
            return Err(Failure::new(Exit::NotFound, format!("no queue {q}: it has no job and no settings")).hint(
                format!(
                "check the name (chokaq queues list), or pass --create to set it anyway: chokaq queues {} {q} --create",
                action_word(done)
            ),
            ));
        }
        let s = self.backend.control_queue(&q, control).await?;
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
    async fn queue_exists(&self, q: &QueueName) -> CliResult<bool> {
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

    async fn list_queues(&self) -> CliResult<Exit> {
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

    fn print_queues(&self, all: &[QueueSettings]) {
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

    fn params(&self, table: JobTable, status: Option<StatusArg>, f: &ListArgs) -> CliResult<ListJobsParams> {
        let mut p = ListJobsParams::new(table);
        p.queue = f.queue.as_deref().map(queue_name).transpose()?;
        p.kind = f.kind.as_deref().map(|k| JobKind::new(k).map_err(Failure::from)).transpose()?;
        p.tag = f.tag.clone();
        p.created_from = f.since;
        p.created_to = f.until;
        p.after = f.after.as_deref().map(job_id).transpose()?;
        p.limit = f.limit;
        p.without_payloads = true;
        p.status = status.map(|s| match s {
            StatusArg::Pending => JobStatus::Pending,
            StatusArg::Fetched => JobStatus::Fetched,
            StatusArg::Processing => JobStatus::Processing,
        });
        Ok(p)
    }

    async fn list(&self, table: TableArg, status: Option<StatusArg>, f: &ListArgs) -> CliResult<Exit> {
        let t = match table {
            TableArg::Hot => JobTable::Hot,
            TableArg::Archive => JobTable::Archive,
            TableArg::Dead => JobTable::DeadLetter,
        };
        if status.is_some() && t != JobTable::Hot {
            return Err(Failure::new(Exit::Usage, "--status applies to the hot table only (--table hot)"));
        }
        let page = self.backend.list_jobs(&self.params(t, status, f)?).await?;
        let next = page.next.map(|n| n.to_string());
        if self.json {
            let jobs: Vec<_> = page.jobs.iter().map(|r| JobView::of(r, false)).collect();
            output::json(&serde_json::json!({ "jobs": jobs, "next": next }));
            return Ok(Exit::Ok);
        }
        if page.jobs.is_empty() {
            outln!("{}", if t == JobTable::DeadLetter { "no dead letters" } else { "no jobs" });
            return Ok(Exit::Ok);
        }
        let mut out = match t {
            JobTable::Hot => Table::new(&["ID", "STATE", "QUEUE", "KIND", ">ATTEMPT", ">PRIORITY", "CREATED", "DUE"]),
            JobTable::Archive => Table::new(&["ID", "QUEUE", "KIND", ">ATTEMPT", "CREATED", "FINISHED"]),
            JobTable::DeadLetter => {
                Table::new(&["ID", "QUEUE", "KIND", "REASON", ">ATTEMPT", "FINISHED", "LAST ERROR"])
            }
        };
        for r in &page.jobs {
            let (_, state, reason) = place(r.location);
            let attempt = format!("{}/{}", r.attempt, r.max_attempts);
            out.row(match t {
                JobTable::Hot => vec![
                    r.id.to_string(),
                    state.into(),
                    r.queue.to_string(),
                    r.kind.to_string(),
                    attempt,
                    r.priority.to_string(),
                    time(r.created_at),
                    opt_time(r.scheduled_at),
                ],
                JobTable::Archive => vec![
                    r.id.to_string(),
                    r.queue.to_string(),
                    r.kind.to_string(),
                    attempt,
                    time(r.created_at),
                    opt_time(r.finished_at),
                ],
                JobTable::DeadLetter => vec![
                    r.id.to_string(),
                    r.queue.to_string(),
                    r.kind.to_string(),
                    reason.unwrap_or("-").into(),
                    attempt,
                    opt_time(r.finished_at),
                    clip(r.last_error.as_deref().unwrap_or("-"), 60),
                ],
            });
        }
        out.print();
        if let Some(n) = next {
            outln!("next page: --after {n}");
        }
        Ok(Exit::Ok)
    }

    async fn show(&self, id: &str) -> CliResult<Exit> {
        let id = job_id(id)?;
        let Some(r) = self.backend.get_job(id).await? else {
            return Err(Failure::new(Exit::NotFound, format!("no job {id}")).hint("check the id (`chokaq jobs list`)"));
        };
        let v = JobView::of(&r, true);
        if self.json {
            output::json(&v);
            return Ok(Exit::Ok);
        }
        let mut t = Table::new(&["FIELD", "VALUE"]);
        let mut kv = |k: &'static str, v: String| t.row(vec![k.into(), v]);
        kv("id", v.id.clone());
        kv("table", v.table.into());
        kv("state", v.state.into());
        if let Some(reason) = v.reason {
            kv("reason", reason.into());
        }
        kv("queue", v.queue.into());
        kv("kind", v.kind.into());
        kv("priority", v.priority.to_string());
        kv("attempt", format!("{}/{}", v.attempt, v.max_attempts));
        kv("tags", if v.tags.is_empty() { "-".into() } else { v.tags.join(",") });
        kv("concurrency key", v.concurrency_key.unwrap_or("-").into());
        kv("idempotency key", v.idempotency_key.unwrap_or("-").into());
        kv("worker", v.worker_id.clone().unwrap_or_else(|| "-".into()));
        kv("created", time(v.created_at));
        kv("due", opt_time(v.scheduled_at));
        kv("started", opt_time(v.started_at));
        kv("heartbeat", opt_time(v.heartbeat_at));
        kv("updated", time(v.updated_at));
        kv("finished", opt_time(v.finished_at));
        kv("cancel requested", v.cancel_requested.to_string());
        kv("created by", v.created_by.unwrap_or("-").into());
        kv("last error", clip(v.last_error.unwrap_or("-"), 200));
        kv("payload", clip(&r.payload.to_string(), 200));
        t.print();
        Ok(Exit::Ok)
    }

    async fn cancel(&self, id: &str) -> CliResult<Exit> {
        use chokaq::core::CancelOutcome;
        let id = job_id(id)?;
        let (outcome, text) = match self.backend.cancel(id).await? {
            CancelOutcome::Cancelled => ("cancelled", format!("job {id} cancelled (moved to the dead letters)")),
            CancelOutcome::Requested => (
                "requested",
                format!("job {id} is running: cancel requested, its worker stops it at its next heartbeat"),
            ),
            CancelOutcome::NotLive => {
                return Err(Failure::new(Exit::NotFound, format!("no live job {id} (unknown, finished or dead)")))
            }
        };
        if self.json {
            output::json(&serde_json::json!({ "id": id.to_string(), "outcome": outcome }));
        } else {
            outln!("{text}");
        }
        Ok(Exit::Ok)
    }

    async fn workers(&self) -> CliResult<Exit> {
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
        "next_tick": r.next_tick, "last_enqueued_tick": r.last_enqueued_tick,
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
            r.next_tick.map_or_else(|| "-".to_string(), time),
            r.last_enqueued_tick.map_or_else(|| "-".to_string(), time),
            state.to_string(),
        ]);
    }
    t.print();
}

#[cfg(test)]
mod tests {
    use chokaq::core::memory::MemoryBackend;
    use chokaq::core::{ClaimMode, ClaimParams};
    use chokaq::{BackendExt, NewJob, WorkerId};

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
