//! Tests of `connect`: URL dispatch, redaction, and real connections where a database is
//! reachable.

use chokaq_core::ErrorKind;

use super::*;

const SECRET: &str = "hunter2-s3cret";

#[test]
fn dispatch_by_scheme() {
    use BackendKind::*;
    let cases = [
        ("postgres://u@h:5432/db", Postgres),
        ("postgresql://u:p@h/db", Postgres),
        ("  POSTGRES://h/db  ", Postgres),
        ("sqlite:///tmp/jobs.db", Sqlite),
        ("sqlite://jobs.db?mode=rwc", Sqlite),
        ("sqlite:jobs", Sqlite),
        ("/var/lib/app/jobs.db", Sqlite),
        ("jobs.sqlite3", Sqlite),
        ("./data/Jobs.SQLITE", Sqlite),
        ("server=tcp:h,1433;user=sa;password=x", Mssql),
        ("Data Source=h;User ID=sa", Mssql),
        ("mssql://sa:x@h:1433/db", Mssql),
        ("sqlserver://h", Mssql),
        ("mysql://root@127.0.0.1:3306/test", Mysql),
        ("MariaDB://u:p@h/db", Mysql),
    ];
    for (url, kind) in cases {
        assert_eq!(backend_kind(url).unwrap(), kind, "{url}");
    }
}

#[test]
fn unknown_or_empty_is_invalid_input_without_the_url() {
    for url in ["", "   ", "redis://:hunter2-s3cret@h", "hunter2-s3cret", "/tmp/jobs.txt", "we!rd hunter2-s3cret://x"] {
        let e = backend_kind(url).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}");
        assert!(!e.to_string().contains(SECRET), "{e}");
        let e = ConnectOptions::new(url).check().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{url}");
    }
    let e = backend_kind("redis://:pw@h").unwrap_err();
    assert!(e.to_string().contains("\"redis\""), "{e}");
}

#[test]
fn bad_schema_is_invalid_input() {
    for schema in ["", "1abc", "a-b", "x; DROP TABLE y", &"s".repeat(64)] {
        let e = ConnectOptions::new("postgres://h/db").schema(schema).check().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{schema}");
    }
}

#[test]
fn missing_feature_is_unsupported_naming_it() {
    for (url, kind) in [
        (format!("postgres://u:{SECRET}@h/db"), BackendKind::Postgres),
        (format!("sqlite:///tmp/{SECRET}.db"), BackendKind::Sqlite),
        (format!("server=h;user=sa;password={SECRET}"), BackendKind::Mssql),
        (format!("mssql://sa:{SECRET}@h/db"), BackendKind::Mssql),
        (format!("mysql://root:{SECRET}@h/db"), BackendKind::Mysql),
        (format!("mariadb://root:{SECRET}@h/db"), BackendKind::Mysql),
    ] {
        let r = ConnectOptions::new(url.as_str()).schema("s").check();
        if kind.is_compiled_in() {
            assert_eq!(r.unwrap(), kind);
        } else {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{kind}");
            assert!(e.to_string().contains(&format!("feature \"{}\"", kind.feature())), "{e}");
            assert!(!e.to_string().contains(SECRET), "{e}");
        }
    }
}

#[test]
fn debug_redacts_the_url() {
    let o = ConnectOptions::new(format!("postgres://u:{SECRET}@h/db")).schema("s");
    let d = format!("{o:?}");
    assert!(!d.contains(SECRET), "{d}");
    assert!(d.contains("Postgres"), "{d}");
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn test_schema() -> String {
    format!("chokaq_t_{:016x}", rand::random::<u64>())
}

/// A job in, stats out: the backend behind the `Arc<dyn Backend>` really works.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
async fn roundtrip(backend: &Arc<dyn Backend>) {
    use chokaq_core::{JobKind, NewJob, QueueName};
    let before = backend.stats().await.unwrap();
    let job = NewJob::new(QueueName::new("connect_test").unwrap(), JobKind::new("connect.test.v1").unwrap());
    chokaq_core::BackendExt::enqueue(backend, job).await.unwrap();
    let after = backend.stats().await.unwrap();
    let queue_pending = |s: &chokaq_core::StatsSnapshot| s.queue("connect_test").map_or(0, |q| q.pending);
    assert_eq!(after.pending, before.pending + 1);
    assert_eq!(queue_pending(&after), queue_pending(&before) + 1);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_really_connects() {
    let dir = std::env::temp_dir().join(test_schema());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("jobs.db");
    let url = format!("sqlite://{}", path.display());
    // Not migrated yet: the tables do not exist.
    let b = connect(&url, "ignored_by_sqlite").await.unwrap();
    assert_eq!(b.name(), "sqlite");
    assert!(b.stats().await.is_err());
    drop(b);
    for url in [url.clone(), path.display().to_string()] {
        let b = connect_and_migrate(&url, "chokaq").await.unwrap();
        assert_eq!(b.name(), "sqlite");
        roundtrip(&b).await;
    }
    assert!(path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "postgres")]
fn pg_url() -> String {
    std::env::var("CHOKAQ_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_really_connects() {
    use chokaq_core::testing::TestSupport;
    let url = pg_url();
    let schema = test_schema();
    let b = match ConnectOptions::new(&url).schema(&schema).max_connections(2).migrate(true).connect().await {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::Unavailable && !require_postgres() => {
            eprintln!("postgres_really_connects: PostgreSQL unreachable, skipped ({})", e.kind());
            return;
        }
        Err(e) => panic!("connect: {e}"),
    };
    assert_eq!(b.name(), "postgres");
    roundtrip(&b).await;
    drop(b);
    let pg = chokaq_postgres::PgBackend::connect(chokaq_postgres::PgConfig::new(&url).schema(&schema)).await.unwrap();
    pg.drop_schema().await.unwrap();
}

#[cfg(feature = "postgres")]
fn require_postgres() -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").is_ok_and(|v| v.contains("postgres"))
}

/// A refused connection's error does not carry the password.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_error_hides_the_password() {
    let url = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
    let opts = ConnectOptions::new(url).schema("s").connect_timeout(Duration::from_secs(1));
    let e = opts.connect().await.map(|_| ()).unwrap_err();
    assert!(e.kind().is_retryable(), "{e}");
    assert!(!e.to_string().contains(SECRET), "{e}");
    assert!(!format!("{e:?}").contains(SECRET), "{e:?}");
}

/// Issue 26 item 14: with `fail_fast`, a refused connection is `Unavailable` at once, not
/// after the connect timeout; a database or role the server does not have is
/// `InvalidInput`, with or without it, its message naming what is wrong.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_refused_missing_database_and_role() {
    let refused = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
    let t0 = std::time::Instant::now();
    let opts = ConnectOptions::new(&refused).schema("s").connect_timeout(Duration::from_secs(20)).fail_fast(true);
    let e = opts.connect().await.map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "refused after {:?}: {e}", t0.elapsed());
    assert!(!e.to_string().contains(SECRET), "{e}");
    let url = pg_url();
    if chokaq_postgres::PgBackend::connect(chokaq_postgres::PgConfig::new(&url)).await.is_err() {
        assert!(!require_postgres(), "PostgreSQL unreachable");
        return;
    }
    let (base, _) = url.rsplit_once('/').unwrap();
    let no_db = format!("{base}/chokaq_no_such_db_{:08x}", rand::random::<u32>());
    let no_role = url.replacen("postgres://postgres@", "postgres://chokaq_no_such_role@", 1);
    let mut cases = vec![("database", &no_db, "does not exist")];
    if no_role != url {
        cases.push(("role", &no_role, "refused the login"));
    }
    for (what, url, expect) in cases {
        for fail_fast in [false, true] {
            let opts = ConnectOptions::new(url.as_str()).schema("s").fail_fast(fail_fast);
            let e = opts.connect().await.map(|_| ()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "missing {what}, fail_fast {fail_fast}: {e}");
            assert!(e.to_string().contains(expect), "missing {what}: {e}");
        }
    }
}
