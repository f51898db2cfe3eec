//! The subcommands, each through `chokaq::connect` and the `Backend` trait only.

use std::sync::Arc;

use chokaq::{Backend, ConnectOptions, ErrorKind, JobId, QueueName};

use crate::{Cli, CliResult, Command, DeadAction, Exit, Failure, JobAction, TableArg};

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
            JobAction::Enqueue(args) => cx.enqueue(args).await,
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
        Command::Workflows { action } => match action {
            crate::WorkflowAction::Show { id } => cx.workflow_show(&id).await,
            crate::WorkflowAction::Cancel { id } => cx.workflow_cancel(&id).await,
        },
        Command::Batches { action } => match action {
            crate::BatchAction::Show { id } => cx.batch_show(&id).await,
        },
        Command::Web(args) => cx.web(args).await,
    }
}

pub(crate) struct Cx {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) json: bool,
    pub(crate) schema: String,
}

/// A failed connect: configuration errors get a hint naming what to look at (TLS, a URL
/// parameter, a privilege: `crate::config_hint`; else the path of a SQLite file, or the
/// database name, role and password of the URL).
fn connect_failure(kind: chokaq::BackendKind, e: chokaq::Error) -> Failure {
    let invalid = e.kind() == ErrorKind::InvalidInput;
    let f = Failure::from(e);
    if f.hint.is_some() {
        return f;
    }
    match (invalid, kind) {
        (true, chokaq::BackendKind::Sqlite) => f.hint(
            "check the path in --url / DATABASE_URL (its directory must exist); `chokaq migrate` creates the file \
             and its tables",
        ),
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
        let shutdown = shutdown_signal();
        // Bound first, then announced (issue 40): a port in use is an error that says so, and
        // "serving" is never printed for a dashboard that does not listen.
        let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| {
            let what = if e.kind() == std::io::ErrorKind::AddrInUse {
                format!("cannot listen on {}: the port is in use ({e})", args.listen)
            } else {
                format!("cannot listen on {}: {e}", args.listen)
            };
            // A configuration error (exit 2): the same command fails again until --listen changes.
            Failure::new(Exit::Usage, what).hint("choose another address with --listen, or stop what holds it")
        })?;
        eprintln!("chokaq web: serving the dashboard on http://{} (Ctrl-C to stop)", args.listen);
        args.limits.init_log();
        chokaq_web::serve_on(self.backend.clone(), listener, options, shutdown).await?;
        eprintln!("chokaq web: stopped");
        Ok(Exit::Ok)
    }
}

/// Ctrl-C or SIGTERM: what stops `chokaq web`. The handlers are installed when this is called
/// (before the listener is bound), not when the future is first polled: a SIGTERM sent as soon
/// as the port answers found no handler yet and killed the process (CI, two runs at once:
/// `web_says_it_stopped` "exit code after SIGTERM: expected 0, got -1").
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (int, term) = {
        use tokio::signal::unix::{signal, SignalKind};
        (signal(SignalKind::interrupt()).ok(), signal(SignalKind::terminate()).ok())
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! { _ = wait(int) => {}, _ = wait(term) => {} }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

pub(crate) fn queue_name(s: &str) -> CliResult<QueueName> {
    QueueName::new(s).map_err(Failure::from)
}

pub(crate) fn job_id(s: &str) -> CliResult<JobId> {
    s.trim().parse::<JobId>().map_err(|_| Failure::new(Exit::Usage, format!("{s:?} is not a job id (expected a UUID)")))
}
