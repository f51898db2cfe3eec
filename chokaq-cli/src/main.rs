//! `chokaq`: the command line of chokaq. Migrates a schema and inspects and operates its
//! queues, jobs, dead letters and worker processes on PostgreSQL, SQLite, SQL Server and MariaDB /
//! MySQL, through
//! `chokaq::connect` and the `Backend` trait only. See `docs/operations.md` for the reference.
//!
//! Output is a table on a terminal and JSON with `--json`; the exit code says what happened
//! ([`Exit`]). No output ever contains the database URL or its password.

mod commands;
mod dead;
mod flows;
mod inspect;
mod jobs;
mod output;
mod parse;
mod queues;
mod views;
mod web_flags;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use chokaq::{Error, ErrorKind};

/// The exit codes, for scripts to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done.
    Ok = 0,
    /// Any other error.
    Other = 1,
    /// A usage or configuration error: unknown flag, bad value, bad or missing URL, an unknown
    /// URL parameter, a TLS setting or certificate the connection refused, a database or role
    /// the server does not have, a refused login, a missing privilege, a SQLite file or
    /// directory that does not exist, a `--listen` port in use (clap uses 2 too). Trying again
    /// cannot fix it.
    Usage = 2,
    /// The job, dead letter or queue named does not exist (or is no longer where the command
    /// expects it: a dead letter another process already requeued).
    NotFound = 3,
    /// A conflict: e.g. a live job already holds the idempotency key of the dead letter to
    /// requeue.
    Conflict = 4,
    /// The database cannot be reached (or a transient failure persisted): try again.
    Unavailable = 5,
    /// The schema has not been created or is older than this build: run `chokaq migrate`.
    NotMigrated = 6,
}

impl Exit {
    /// The exit code for an error kind.
    pub fn for_kind(kind: ErrorKind) -> Exit {
        match kind {
            ErrorKind::InvalidInput => Exit::Usage,
            ErrorKind::NotFound => Exit::NotFound,
            ErrorKind::Conflict => Exit::Conflict,
            ErrorKind::Unavailable | ErrorKind::Transient => Exit::Unavailable,
            ErrorKind::NotMigrated => Exit::NotMigrated,
            _ => Exit::Other,
        }
    }
}

/// An error of a command: what to print, and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Failure { exit, message: message.into(), hint: None }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let exit = Exit::for_kind(e.kind());
        let hint = match e.kind() {
            ErrorKind::NotMigrated => Some(format!("the database said: {}", e.message())),
            ErrorKind::Unavailable => {
                Some("check that the database is running and that --url / DATABASE_URL points at it".to_string())
            }
            ErrorKind::Transient => Some("a transient failure: try again".to_string()),
            ErrorKind::InvalidInput => config_hint(e.message()).map(str::to_string),
            _ => None,
        };
        // chokaq's errors never quote the URL or its password.
        let message = match e.kind() {
            ErrorKind::NotMigrated => {
                "schema not migrated: run `chokaq migrate` (with the same --url and --schema)".into()
            }
            // The kind of `Other` reads "error": the line starts with "error: " already.
            ErrorKind::Other => match e.operation() {
                Some(op) => format!("{op}: {}", e.message()),
                None => e.message().to_string(),
            },
            // Without the operation (a Rust method name such as `control_queue`): the command
            // line names what ran.
            _ => format!("{}: {}", e.kind(), e.message()),
        };
        Failure { exit, message, hint }
    }
}

/// What to look at for a configuration error of the backends: the messages of
/// `chokaq_postgres::tls` / `chokaq_mysql::tls` and of the privilege errors (error.rs of each)
/// say which kind they are. `None` for any other.
fn config_hint(message: &str) -> Option<&'static str> {
    if message.contains("TLS to the database failed") {
        Some(
            "a TLS setting: check sslmode / sslrootcert (PostgreSQL) or ssl-mode / ssl-ca (MariaDB) in --url / \
             DATABASE_URL, and that the host name is one the server's certificate holds (docs/security.md)",
        )
    } else if message.contains("URL parameter")
        || message.contains("in the URL: expected")
        || message.contains("of the URL cannot be read")
    {
        Some("a parameter of --url / DATABASE_URL (after the ?): fix its name or value (docs/security.md)")
    } else if message.contains("lacks a privilege") {
        Some(
            "a missing grant: see the privileges the backend needs (docs/security.md, Privileges), or use another role",
        )
    } else {
        None
    }
}

pub type CliResult<T = ()> = Result<T, Failure>;

/// Operate chokaq queues: migrate the schema, inspect queues, jobs, dead letters and worker
/// processes, pause and resume queues, retry dead letters, purge old rows.
///
/// The database comes from --url or DATABASE_URL: postgres://…, sqlite:… (or a *.db path),
/// mysql://… or mariadb://…, or a SQL Server connection string (server=…;… or mssql://…).
///
/// Exit codes: 0 ok, 1 other error, 2 usage or configuration (bad flag or value, bad or
/// missing URL or URL parameter, TLS, no such database, role or SQLite file or directory, a
/// missing privilege, a port in use), 3 not found, 4 conflict, 5 database unavailable (try
/// again), 6 schema not migrated.
#[derive(Debug, Parser)]
#[command(name = "chokaq", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// The database URL (never printed). Default: $DATABASE_URL.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    url: Option<String>,

    /// The schema holding chokaq's tables (PostgreSQL, SQL Server); on MariaDB / MySQL the
    /// database holding them (created by `migrate`, beside the URL's database); SQLite checks
    /// the name and ignores it.
    #[arg(
        long,
        global = true,
        env = "CHOKAQ_SCHEMA",
        hide_env_values = true,
        default_value = "chokaq",
        value_name = "NAME"
    )]
    schema: String,

    /// Print JSON (one document on stdout; errors as JSON on stderr) instead of tables.
    #[arg(long, global = true)]
    json: bool,

    /// How long to wait for the database before exit code 5.
    #[arg(long, global = true, default_value = "10s", value_parser = parse::duration, value_name = "DURATION")]
    connect_timeout: Duration,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the schema (idempotent; safe while workers run).
    Migrate,
    /// Jobs per queue and state, with each queue's lag (age of its oldest due job).
    Stats,
    /// List queues with their settings, or change one (pause, resume, activate, deactivate,
    /// cap, key-cap, rate-limit, zombie-timeout).
    Queues {
        #[command(subcommand)]
        action: Option<QueueAction>,
    },
    /// List, show and cancel jobs.
    Jobs {
        #[command(subcommand)]
        action: JobAction,
    },
    /// List dead letters and put them back to Pending.
    Dead {
        #[command(subcommand)]
        action: DeadAction,
    },
    /// Delete finished jobs (archive or dead-letter table) older than an age.
    Purge(PurgeArgs),
    /// The live worker processes: host, pid, queues, concurrency, start, last heartbeat.
    Workers,
    /// The periodic schedules (list), or pause / resume one.
    Schedules {
        #[command(subcommand)]
        action: Option<ScheduleAction>,
    },
    /// Show a workflow (its tasks and their states) or cancel every task not yet final.
    Workflows {
        #[command(subcommand)]
        action: WorkflowAction,
    },
    /// Show a batch: its counts and the callbacks enqueued so far.
    Batches {
        #[command(subcommand)]
        action: BatchAction,
    },
    /// Serve the web dashboard (`chokaq-web`) until Ctrl-C or SIGTERM.
    Web(WebArgs),
}

#[derive(Debug, Subcommand)]
pub enum WorkflowAction {
    /// A workflow's name, counts per state and tasks (name, state, job, dependencies).
    Show { id: String },
    /// Cancel every task not yet final (waiting and pending ones dead-lettered, running ones
    /// asked to stop).
    Cancel { id: String },
}

#[derive(Debug, Subcommand)]
pub enum BatchAction {
    /// A batch's counts and the callbacks enqueued so far.
    Show { id: String },
}

/// `chokaq web`: where to listen and how requests authenticate. One of `--token`,
/// `--basic USER:PASS` or `--no-auth` (loopback only) is required; the secrets may come from
/// the environment (`CHOKAQ_WEB_TOKEN`, `CHOKAQ_WEB_BASIC`) so they stay out of `ps`.
#[derive(Debug, Args)]
pub struct WebArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Require `Authorization: Bearer TOKEN`.
    #[arg(long, env = "CHOKAQ_WEB_TOKEN", hide_env_values = true, conflicts_with_all = ["basic", "no_auth"])]
    pub token: Option<String>,
    /// Require HTTP basic auth with USER:PASS.
    #[arg(long, env = "CHOKAQ_WEB_BASIC", hide_env_values = true, conflicts_with = "no_auth")]
    pub basic: Option<String>,
    /// No authentication: accepted only on a loopback address.
    #[arg(long)]
    pub no_auth: bool,
    /// Hide every action and refuse every POST.
    #[arg(long)]
    pub read_only: bool,
    /// Mark the CSRF cookie `Secure`: the browser reaches the dashboard over HTTPS (a TLS proxy
    /// in front).
    #[arg(long)]
    pub secure_cookie: bool,
    #[command(flatten)]
    pub limits: web_flags::WebFlags,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// Every schedule row: spec, time zone, next and last tick, state (the default).
    List,
    /// Stop enqueueing a schedule's ticks (they pass without a job and are not caught up).
    Pause { name: String },
    /// Enqueue a paused schedule's ticks again, from its next tick.
    Resume { name: String },
}

#[derive(Debug, Subcommand)]
pub enum QueueAction {
    /// Every queue that holds jobs or has settings (paused, capped, ...), with its settings
    /// (the default).
    List,
    /// Stop claims from a queue (running jobs finish). A queue with no job and no settings is
    /// refused (a typo would otherwise create a paused queue) unless `--create` is given.
    Pause {
        queue: String,
        #[command(flatten)]
        create: CreateArg,
    },
    /// Let claims from a paused queue go on.
    Resume {
        queue: String,
        #[command(flatten)]
        create: CreateArg,
    },
    /// Mark a queue active (claims allowed).
    Activate {
        queue: String,
        #[command(flatten)]
        create: CreateArg,
    },
    /// Mark a queue inactive (no claims, as paused; for queues being retired).
    Deactivate {
        queue: String,
        #[command(flatten)]
        create: CreateArg,
    },
    /// Cap how many of the queue's jobs run at once over every worker: a number, or `none`.
    Cap {
        queue: String,
        #[arg(value_parser = parse::cap, value_name = "N|none")]
        max: parse::Cap,
        #[command(flatten)]
        create: CreateArg,
    },
    /// Cap how many jobs of each concurrency key run at once in the queue over every worker: a
    /// number, or `none`. Jobs without a key are not bound by it (the queue's cap still is).
    KeyCap {
        queue: String,
        #[arg(value_parser = parse::cap, value_name = "N|none")]
        max: parse::Cap,
        #[command(flatten)]
        create: CreateArg,
    },
    /// Limit how many of the queue's jobs start per period over every worker: N/PERIOD (e.g.
    /// 500/1s, 10/250ms, 100/1m, 1000/1h; periods of 1ms to 1d), or `none`. With --by-key the
    /// limit holds for each concurrency key apart (jobs without a key are then not limited).
    RateLimit {
        queue: String,
        #[arg(value_parser = parse::rate, value_name = "N/PERIOD|none")]
        limit: parse::Rate,
        /// One limit per concurrency key instead of one for the whole queue.
        #[arg(long)]
        by_key: bool,
        #[command(flatten)]
        create: CreateArg,
    },
    /// How long a running job may go without a heartbeat before it is rescued: a duration
    /// (e.g. 5m), or `none` for the default.
    ZombieTimeout {
        queue: String,
        #[arg(value_parser = parse::optional_duration, value_name = "DURATION|none")]
        timeout: parse::OptionalDuration,
        #[command(flatten)]
        create: CreateArg,
    },
}

/// `--create` of the queue controls.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct CreateArg {
    /// Set it even if the queue has no job and no settings yet (creates its settings, e.g. to
    /// pause a queue before its first job). Without it such a queue is refused (exit 3).
    #[arg(long)]
    pub create: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TableArg {
    /// Live jobs (pending, fetched, processing).
    Hot,
    /// Succeeded jobs.
    Archive,
    /// Dead letters.
    Dead,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    Pending,
    Fetched,
    Processing,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only this job kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only jobs with this tag.
    #[arg(long)]
    pub tag: Option<String>,
    /// Created at or after: an RFC 3339 time (2026-01-31T12:00:00Z) or an age (2h = two hours ago).
    #[arg(long, value_parser = parse::time, value_name = "TIME|AGE")]
    pub since: Option<chokaq::core::Timestamp>,
    /// Created before: an RFC 3339 time or an age.
    #[arg(long, value_parser = parse::time, value_name = "TIME|AGE")]
    pub until: Option<chokaq::core::Timestamp>,
    /// Page size (1 to 1000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Start after this job id (the `next` cursor of the previous page).
    #[arg(long, value_name = "ID")]
    pub after: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum JobAction {
    /// One page of jobs of a table, oldest first, filtered; prints the cursor of the next page.
    List {
        /// Which table.
        #[arg(long, value_enum, default_value = "hot")]
        table: TableArg,
        /// Only live jobs in this state (hot table).
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        #[command(flatten)]
        filter: ListArgs,
    },
    /// Everything about one job, wherever it is (payload included).
    Show { id: String },
    /// Cancel a live job: at once if it waits, at its next heartbeat if it runs.
    Cancel { id: String },
    /// Enqueue one job (a replay, a one-off run): its queue, its kind as the handler registers
    /// it (e.g. email.send.v1) and a JSON payload. Prints its id; with an idempotency key a live
    /// job already holds, that job's id and "duplicate".
    Enqueue(EnqueueArgs),
}

/// `chokaq jobs enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The queue.
    pub queue: String,
    /// The job kind.
    pub kind: String,
    /// The payload: a JSON document; `-` reads it from stdin.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub payload: String,
    /// Higher runs first (default 0).
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// Run no earlier than this from now (e.g. 30s, 5m, 2h).
    #[arg(long, value_parser = parse::duration, value_name = "DURATION")]
    pub delay: Option<Duration>,
    /// While a live job of the queue holds this key, no second one is enqueued.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// A tag (repeatable).
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// The unit of the queue's per-key cap and rate limit.
    #[arg(long, value_name = "KEY")]
    pub concurrency_key: Option<String>,
    /// Attempts before the job goes to the dead letters (default: the backend's).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<i32>,
}

#[derive(Debug, Subcommand)]
pub enum DeadAction {
    /// One page of dead letters, with their reason and last error.
    List {
        #[command(flatten)]
        filter: ListArgs,
    },
    /// Put a dead letter back to Pending (attempt 0), or every dead letter of a queue.
    Retry {
        /// The dead letter to retry.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// The queue whose dead letters to retry (with --all).
        #[arg(long, requires = "all")]
        queue: Option<String>,
        /// Retry every dead letter of --queue, in pages of 500 (asks first: --yes).
        #[arg(long, requires = "queue")]
        all: bool,
        /// With --all: go ahead without asking (needed when stdin is not a terminal).
        #[arg(long, short = 'y', requires = "all")]
        yes: bool,
        /// Say what would be requeued, requeue nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PurgeTable {
    /// Succeeded jobs.
    Archive,
    /// Dead letters.
    Dead,
}

#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Which table.
    #[arg(long, value_enum)]
    pub table: PurgeTable,
    /// Delete rows finished longer ago than this (e.g. 7d, 12h, 30m).
    #[arg(long, value_parser = parse::duration, value_name = "DURATION")]
    pub older_than: Duration,
    /// Only this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Count what would be deleted, delete nothing (reads the table page by page).
    #[arg(long)]
    pub dry_run: bool,
    /// Delete without asking (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version exit 0; usage errors 2. clap never echoes an env value.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { Exit::Usage as u8 } else { Exit::Ok as u8 });
        }
    };
    let json = cli.json;
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            output::failure(json, &Failure::new(Exit::Other, format!("cannot start the async runtime: {e}")));
            return ExitCode::from(Exit::Other as u8);
        }
    };
    match rt.block_on(commands::run(cli)) {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(f) => {
            output::failure(json, &f);
            ExitCode::from(f.exit as u8)
        }
    }
}

impl Cli {
    pub fn json(&self) -> bool {
        self.json
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn error_kinds_map_to_documented_exit_codes() {
        assert_eq!(Exit::for_kind(ErrorKind::InvalidInput) as u8, 2);
        assert_eq!(Exit::for_kind(ErrorKind::NotFound) as u8, 3);
        assert_eq!(Exit::for_kind(ErrorKind::Conflict) as u8, 4);
        assert_eq!(Exit::for_kind(ErrorKind::Unavailable) as u8, 5);
        assert_eq!(Exit::for_kind(ErrorKind::NotMigrated) as u8, 6);
        assert_eq!(Exit::for_kind(ErrorKind::Other) as u8, 1);
    }
}
