//! Which backend a URL names. Each backend is a feature of this crate; to add one, add a
//! feature-gated arm to [`harness_for`] and a function like [`postgres`] (about 15 lines).

use chokaq_conformance::UrlHarness;

/// The harness for `url`, chosen by its scheme.
pub fn harness_for(url: &str) -> Result<UrlHarness, String> {
    // SQL Server takes an ADO connection string (server=tcp:host,1433;user=...), not a URL.
    #[cfg(feature = "mssql")]
    if chokaq_mssql::is_connection_string(url) {
        return Ok(mssql(url));
    }
    let scheme = url.split_once("://").map(|(s, _)| s).or_else(|| url.split_once(':').map(|(s, _)| s)).unwrap_or("");
    match scheme.to_ascii_lowercase().as_str() {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(postgres(url)),
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
fn postgres(url: &str) -> UrlHarness {
    use std::sync::Arc;

    use chokaq_conformance::TestBackend;
    use chokaq_postgres::{PgBackend, PgConfig};

    UrlHarness::new("postgres", Some(url.to_string()), |url, schema| {
        Box::pin(async move {
            let cfg = PgConfig::new(url).schema(schema).max_connections(16);
            Ok(Arc::new(PgBackend::connect(cfg).await?) as Arc<dyn TestBackend>)
        })
    })
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
