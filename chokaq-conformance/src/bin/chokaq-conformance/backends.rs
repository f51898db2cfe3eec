//! Which backend a URL names. Each backend is a feature of this crate; to add one, add a
//! feature-gated arm to [`harness_for`] and a function like [`postgres`] (about 15 lines).

use chokaq_conformance::UrlHarness;

/// Env var carrying `--inject-fault NAME` to the child processes of multi-process cases, so
/// they run the same broken statements as the parent.
#[cfg(feature = "fault-injection")]
pub const ENV_FAULT: &str = "CHOKAQ_CONFORMANCE_FAULT";

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

/// The harness for `url`, chosen by its scheme; `fault` (a [`FAULT_NAMES`] entry, only with
/// the `fault-injection` feature and only for PostgreSQL) switches one broken statement on.
pub fn harness_for(url: &str, fault: Option<&str>) -> Result<UrlHarness, String> {
    if let Some(name) = fault {
        if !cfg!(feature = "fault-injection") {
            return Err(format!("fault {name:?} asked for, but this build lacks the fault-injection feature"));
        }
        let lower = url.to_ascii_lowercase();
        if !(lower.starts_with("postgres://") || lower.starts_with("postgresql://")) {
            return Err("--inject-fault applies to a postgres:// URL only".into());
        }
    }
    // SQL Server takes an ADO connection string (server=tcp:host,1433;user=...), not a URL.
    #[cfg(feature = "mssql")]
    if chokaq_mssql::is_connection_string(url) {
        return Ok(mssql(url));
    }
    let scheme = url.split_once("://").map(|(s, _)| s).or_else(|| url.split_once(':').map(|(s, _)| s)).unwrap_or("");
    match scheme.to_ascii_lowercase().as_str() {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => postgres(url, fault),
        // #[cfg(feature = "mssql")]
        // "mssql" | "sqlserver" => Ok(mssql(url)),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(sqlite(url)),
        "" => Err("no URL scheme: expected e.g. postgres://user@host:5432/db".into()),
        other => Err(format!(
            "no backend for URL scheme {other:?} in this build (built with: {}); rebuild with --features <backend>",
            built_with()
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
    if v.is_empty() {
        "no backend features".into()
    } else {
        v.join(", ")
    }
}

#[cfg(feature = "postgres")]
fn postgres(url: &str, fault: Option<&str>) -> Result<UrlHarness, String> {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_postgres::{PgBackend, PgConfig};

    #[cfg(feature = "fault-injection")]
    let faults = fault.map(fault_named).transpose()?.unwrap_or_default();
    #[cfg(not(feature = "fault-injection"))]
    let _ = fault; // rejected in harness_for

    Ok(UrlHarness::new("postgres", Some(url.to_string()), move |url, schema| {
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

#[cfg(feature = "mssql")]
fn mssql(conn_str: &str) -> UrlHarness {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_mssql::{MssqlBackend, MssqlConfig};

    UrlHarness::new("mssql", Some(conn_str.to_string()), |conn_str, schema| {
        Box::pin(async move {
            let cfg = MssqlConfig::new(&conn_str)?.schema(&schema)?.max_connections(16);
            Ok(Arc::new(MssqlBackend::connect(cfg).await?) as Arc<dyn TestBackend>)
        })
    })
}

/// SQLite has no schemas: the "schema" is a database file. The store is the URL's file with
/// the schema name inserted before its extension (`sqlite:///tmp/conf.db` and schema
/// `chokaq_t_ab12` give `/tmp/conf.chokaq_t_ab12.db`), so the suite never touches the file the
/// URL names; child processes derive the same file from the same URL and schema.
#[cfg(feature = "sqlite")]
fn sqlite(url: &str) -> UrlHarness {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_sqlite::{SqliteBackend, SqliteConfig};

    UrlHarness::new("sqlite", Some(url.to_string()), |url, schema| {
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
