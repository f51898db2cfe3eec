//! Which backend a URL names: one feature-gated arm per backend in [`harness_for`], and one
//! function per backend that builds its harness (the in-tree wiring; docs/conformance.md,
//! "Wiring a backend into this repository's runner").

use chokaq_conformance::{Target, UrlHarness};

/// The names `--inject-fault` takes: the switches of `chokaq_postgres::Faults`.
#[cfg(feature = "fault-injection")]
pub const FAULT_NAMES: [&str; 5] = [
    "claim_two_statements",
    "cap_plain_count",
    "complete_without_lease_guard",
    "move_two_autocommits",
    "heartbeat_ignores_lease",
];

/// The `Faults` with the one switch `name` on.
#[cfg(feature = "fault-injection")]
fn fault_named(name: &str) -> Result<chokaq_postgres::Faults, String> {
    let mut f = chokaq_postgres::Faults::default();
    match name {
        "claim_two_statements" => f.claim_two_statements = true,
        "cap_plain_count" => f.cap_plain_count = true,
        "complete_without_lease_guard" => f.complete_without_lease_guard = true,
        "move_two_autocommits" => f.move_two_autocommits = true,
        "heartbeat_ignores_lease" => f.heartbeat_ignores_lease = true,
        other => return Err(format!("unknown fault {other:?}; expected one of {}", FAULT_NAMES.join(", "))),
    }
    Ok(f)
}

/// An ADO.NET connection string, as SQL Server takes it (`server=tcp:host,1433;user=...`):
/// no `://`, and a `key=value` pair. (With the `mssql` feature, chokaq-mssql decides.)
#[cfg(not(feature = "mssql"))]
fn looks_like_connection_string(url: &str) -> bool {
    !url.contains("://") && url.contains('=')
}

/// The URL's scheme, when it has a well-formed one (never a piece of a connection string,
/// which could hold a password).
fn scheme_of(url: &str) -> Option<&str> {
    let scheme = url.split_once(':')?.0;
    let mut chars = scheme.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    well_formed.then_some(scheme)
}

/// The harness for the target's URL, chosen by its scheme (SQL Server: `mssql://`,
/// `sqlserver://` or an ADO connection string, the forms `MssqlConfig::from_url` takes); its `--schema` applies, and its fault (a [`FAULT_NAMES`] entry, only
/// with the `fault-injection` feature and only for PostgreSQL) switches one broken statement
/// on. Errors never quote the URL.
pub fn harness_for(target: &Target) -> Result<UrlHarness, String> {
    let url = target.url.as_str();
    if let Some(name) = &target.fault {
        if !cfg!(feature = "fault-injection") {
            return Err(format!("fault {name:?} asked for, but this build lacks the fault-injection feature"));
        }
        let lower = url.to_ascii_lowercase();
        if !(lower.starts_with("postgres://") || lower.starts_with("postgresql://")) {
            return Err("--inject-fault applies to a postgres:// URL only".into());
        }
    }
    #[cfg(feature = "mssql")]
    if chokaq_mssql::is_connection_string(url) {
        return Ok(mssql(target));
    }
    #[cfg(not(feature = "mssql"))]
    if looks_like_connection_string(url) {
        return Err(format!(
            "this looks like a SQL Server connection string, but this build has no SQL Server backend (built \
             with: {}); rebuild with --features mssql",
            built_with()
        ));
    }
    let Some(scheme) = scheme_of(url) else {
        return Err("no URL scheme: expected e.g. postgres://user@host:5432/db".into());
    };
    match scheme.to_ascii_lowercase().as_str() {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => postgres(target),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(sqlite(target)),
        // MssqlConfig::from_url takes mssql:// and sqlserver:// URLs as well as ADO strings.
        #[cfg(feature = "mssql")]
        "mssql" | "sqlserver" => Ok(mssql(target)),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Ok(mysql(target)),
        other => Err(format!(
            "no backend for URL scheme {other:?} in this build (built with: {}); rebuild with --features {}",
            built_with(),
            match other {
                "postgres" | "postgresql" => "postgres",
                "mssql" | "sqlserver" => "mssql",
                "sqlite" => "sqlite",
                "mysql" | "mariadb" => "mysql",
                _ => "<backend>",
            }
        )),
    }
}

fn built_with() -> String {
    let mut v: Vec<&str> = Vec::new();
    if cfg!(feature = "postgres") {
        v.push("postgres");
    }
    if cfg!(feature = "mssql") {
        v.push("mssql");
    }
    if cfg!(feature = "sqlite") {
        v.push("sqlite");
    }
    if cfg!(feature = "mysql") {
        v.push("mysql");
    }
    if v.is_empty() {
        "no backend features".into()
    } else {
        v.join(", ")
    }
}

#[cfg(feature = "postgres")]
fn postgres(target: &Target) -> Result<UrlHarness, String> {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_postgres::{PgBackend, PgConfig};

    #[cfg(feature = "fault-injection")]
    let faults = target.fault.as_deref().map(fault_named).transpose()?.unwrap_or_default();

    Ok(UrlHarness::for_target("postgres", target, move |url, schema| {
        Box::pin(async move {
            probe_postgres(&url).await?;
            let cfg = PgConfig::new(url).schema(schema).max_connections(16);
            let backend = PgBackend::connect(cfg).await?;
            #[cfg(feature = "fault-injection")]
            let backend = backend.with_faults(faults);
            Ok(Arc::new(backend) as Arc<dyn TestBackend>)
        })
    }))
}

/// One plain connection first, so an unreachable server or a refused login fails at once
/// with the driver's reason (the pool would only report "timed out" after its timeout). The
/// driver's messages name no password; the caller redacts the URL anyway.
#[cfg(feature = "postgres")]
async fn probe_postgres(url: &str) -> chokaq_core::Result<()> {
    use std::str::FromStr;
    use std::time::Duration;

    use chokaq_core::{Error, ErrorKind};
    use sqlx::postgres::{PgConnectOptions, PgConnection};
    use sqlx::Connection;

    // A URL the driver cannot parse: PgBackend::connect reports it as InvalidInput.
    let Ok(opts) = PgConnectOptions::from_str(url) else { return Ok(()) };
    let unavailable = |why: String| Error::new(ErrorKind::Unavailable, format!("cannot connect: {why}"));
    match tokio::time::timeout(Duration::from_secs(10), PgConnection::connect_with(&opts)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(unavailable(e.to_string())),
        Err(_) => Err(unavailable("no answer within 10 s".into())),
    }
}

/// MariaDB / MySQL (`mysql://`, `mariadb://`): the schema is a database of its own, created
/// by the migration and dropped at the end.
#[cfg(feature = "mysql")]
fn mysql(target: &Target) -> UrlHarness {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_mysql::{MysqlBackend, MysqlConfig};

    UrlHarness::for_target("mysql", target, |url, schema| {
        Box::pin(async move {
            let cfg = MysqlConfig::new(url).schema(schema).max_connections(16);
            Ok(Arc::new(MysqlBackend::connect(cfg).await?) as Arc<dyn TestBackend>)
        })
    })
}

#[cfg(feature = "mssql")]
fn mssql(target: &Target) -> UrlHarness {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_mssql::{MssqlBackend, MssqlConfig};

    UrlHarness::for_target("mssql", target, |conn_str, schema| {
        Box::pin(async move {
            let cfg = MssqlConfig::from_url(&conn_str)?.schema(&schema)?.max_connections(16);
            Ok(Arc::new(MssqlBackend::connect(cfg).await?) as Arc<dyn TestBackend>)
        })
    })
}

/// SQLite has no schemas: the "schema" is a database file. The store is the URL's file with
/// the schema name inserted before its extension (`sqlite:///tmp/conf.db` and schema
/// `chokaq_t_ab12` give `/tmp/conf.chokaq_t_ab12.db`), so the suite never touches the file the
/// URL names; child processes derive the same file from the same URL and schema.
#[cfg(feature = "sqlite")]
fn sqlite(target: &Target) -> UrlHarness {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_sqlite::{SqliteBackend, SqliteConfig};

    UrlHarness::for_target("sqlite", target, |url, schema| {
        Box::pin(async move {
            let rest = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
            let (path, params) = rest.split_once('?').map_or((rest, None), |(p, q)| (p, Some(q)));
            let (dir, file) = path.rsplit_once('/').map_or(("", path), |(d, f)| (d, f));
            let (stem, ext) = file.rsplit_once('.').filter(|(s, _)| !s.is_empty()).unwrap_or((file, "db"));
            let file = format!("{stem}.{schema}.{ext}");
            let path = if path.contains('/') { format!("{dir}/{file}") } else { file };
            let store = params.map_or_else(|| format!("sqlite://{path}"), |q| format!("sqlite://{path}?{q}"));
            let cfg = SqliteConfig::new(store);
            Ok(Arc::new(SqliteBackend::connect(cfg).await?) as Arc<dyn TestBackend>)
        })
    })
}
