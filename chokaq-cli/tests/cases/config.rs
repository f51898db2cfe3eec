//! Issue 40, item 2 (L9): what a retry cannot fix is a configuration error, exit 2, with a
//! hint naming the cause, on PostgreSQL and MariaDB alike: a SQLite directory that does not
//! exist, an unknown URL parameter or `sslmode` value, a CA file that cannot be read, a TLS
//! handshake refused, a missing privilege. (Before: exit 5 with "check that the database is
//! running" for the directory, TLS and MariaDB privileges; exit 1 for PostgreSQL privileges; a
//! misspelt parameter was ignored.) A port in use is `operator::web_port_in_use`.

use super::*;

/// `url` with `param` added to its query.
fn with_param(url: &str, param: &str) -> String {
    format!("{url}{}{param}", if url.contains('?') { '&' } else { '?' })
}

fn expect_config_error(out: &Out, url: &str, what: &str, names: &str, hint: &str) -> TestResult {
    out.check_secret(url, &[what])?;
    ensure_eq!(out.code, 2, "{what}: exit code (stderr {})", out.stderr);
    ensure!(out.stderr.contains(names), "{what}: the error names {names:?}: {}", out.stderr);
    ensure!(out.stderr.contains(&format!("hint: {hint}")), "{what}: the hint says {hint:?}: {}", out.stderr);
    ensure!(
        !out.stderr.contains("check that the database is running"),
        "{what}: the database-down hint: {}",
        out.stderr
    );
    Ok(())
}

/// Checked before any connection (the servers named do not exist: port 1).
pub fn url_and_path_errors() -> TestResult {
    let dir = std::env::temp_dir().join(format!("chokaq_cli_nodir_{:016x}", rand::random::<u64>()));
    let url = format!("sqlite:{}", dir.join("jobs.db").display());
    let out = bin(&["--url", &url, "migrate"])?;
    expect_config_error(&out, &url, "SQLite, no directory", "its directory does not exist", "check the path")?;
    ensure!(!dir.exists(), "the directory was created");

    let param_hint = "a parameter of --url";
    for (url, names) in [
        (
            format!("postgres://postgres:{SECRET}@127.0.0.1:1/test?ssl_mode=require"),
            "unknown URL parameter \"ssl_mode\"",
        ),
        (
            format!("postgres://postgres:{SECRET}@127.0.0.1:1/test?sslmode=verify_full"),
            "invalid sslmode \"verify_full\"",
        ),
        (format!("mysql://root:{SECRET}@127.0.0.1:1/test?ssl_mode=REQUIRED"), "unknown URL parameter \"ssl_mode\""),
        (
            format!("mysql://root:{SECRET}@127.0.0.1:1/test?ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/ca.pem"),
            "the ssl-ca file \"/nonexistent/ca.pem\" of the URL cannot be read",
        ),
    ] {
        for cmd in ["stats", "migrate"] {
            let out = bin(&["--url", &url, "--connect-timeout", "2s", cmd])?;
            expect_config_error(&out, &url, cmd, names, param_hint)?;
        }
    }
    Ok(())
}

/// Host-name verification against the test server: its certificate (if it has TLS at all) is
/// not one the system roots trust for `127.0.0.1`; without TLS the server cannot satisfy the
/// mode either. Both are TLS configuration errors.
pub async fn tls_refused(db: Arc<Db>) -> TestResult {
    let param = match db.kind {
        Kind::Postgres => "sslmode=verify-full",
        Kind::Mysql => "ssl-mode=VERIFY_IDENTITY",
        Kind::Sqlite => return Ok(()),
    };
    let url = with_param(&db.url, param);
    let out = Out::of(
        Command::new(env!("CARGO_BIN_EXE_chokaq"))
            .env("DATABASE_URL", &url)
            .args(["--schema", &db.schema, "stats"])
            .output()
            .map_err(err)?,
    );
    expect_config_error(&out, &url, param, "TLS to the database failed", "a TLS setting")
}

/// A role / user without any grant on the schema: `stats` is refused by the server.
pub async fn missing_privilege(db: Arc<Db>) -> TestResult {
    let user = format!("chokaq_noperm_{:08x}", rand::random::<u32>());
    let url = match db.kind {
        Kind::Postgres => {
            use sqlx::{Connection, Executor};
            let mut admin = sqlx::PgConnection::connect(&pg_url()).await.map_err(err)?;
            admin.execute(format!("CREATE ROLE {user} LOGIN").as_str()).await.map_err(err)?;
            let base = pg_url();
            let (_, rest) = base.split_once('@').ok_or("CHOKAQ_TEST_POSTGRES_URL has no user")?;
            format!("postgres://{user}:{SECRET}@{rest}")
        }
        Kind::Mysql => {
            mysql_admin(&[format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{SECRET}'")]).await?;
            let url = mysql_url();
            let (scheme, _, hostport, _, _) = mysql_url_parts(&url).ok_or("CHOKAQ_TEST_MYSQL_URL is no URL")?;
            format!("{scheme}://{user}:{SECRET}@{hostport}")
        }
        Kind::Sqlite => return Ok(()),
    };
    let out = Out::of(
        Command::new(env!("CARGO_BIN_EXE_chokaq"))
            .env("DATABASE_URL", &url)
            .args(["--schema", &db.schema, "stats"])
            .output()
            .map_err(err)?,
    );
    let checked = expect_config_error(&out, &url, "stats without a grant", "lacks a privilege", "a missing grant");
    match db.kind {
        Kind::Postgres => {
            use sqlx::{Connection, Executor};
            let mut admin = sqlx::PgConnection::connect(&pg_url()).await.map_err(err)?;
            admin.execute(format!("DROP ROLE IF EXISTS {user}").as_str()).await.map_err(err)?;
        }
        _ => mysql_admin(&[format!("DROP USER IF EXISTS '{user}'@'%'")]).await?,
    }
    checked
}

/// MariaDB's `--connect-timeout` is the flag's, not capped at 10 s, and the message says it
/// (before: `min(flag, 10 s)`, and always "no answer within 10 s"). The server here accepts
/// the TCP connection (the kernel's backlog) and never sends its greeting.
pub fn mysql_connect_timeout_is_the_flags() -> TestResult {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    let url = format!("mysql://root:{SECRET}@{}/test", silent.local_addr().map_err(err)?);
    let t0 = std::time::Instant::now();
    let out = bin(&["--url", &url, "--connect-timeout", "11s", "stats"])?;
    let took = t0.elapsed();
    out.check_secret(&url, &["stats"])?;
    ensure_eq!(out.code, 5, "exit code of a server that never answers (stderr {})", out.stderr);
    ensure!(out.stderr.contains("no answer within 11 s"), "the message names the flag's timeout: {}", out.stderr);
    ensure!(took >= Duration::from_secs(11) && took < Duration::from_secs(20), "waited {took:?} for an 11 s timeout");
    drop(silent);
    Ok(())
}
