//! Issue 26: what a new operator ran into. Hostile text in table cells; `purge` and
//! `dead retry --all` that ask first, and their dry runs; configuration errors (no such
//! database, role or SQLite file) that say so with exit code 2; the SQLite file created
//! owner-only; `chokaq web` saying that it stopped.

use super::*;

/// Bidi, zero-width and control characters are escaped in every table cell (the worker's
/// host, tags, idempotency key, `created_by`), and the columns stay aligned.
pub async fn hostile_text(db: Arc<Db>) -> TestResult {
    let host = "h\u{202e}x";
    let reg = chokaq::core::WorkerRegistration {
        worker: WorkerId::random(),
        host: host.into(),
        pid: 4242,
        queues: vec![QueueName::new("emails").unwrap()],
        concurrency: 16,
    };
    db.backend.register_worker(&reg).await.map_err(err)?;
    let t = db.ok_table(&["workers"])?;
    ensure!(!t.contains('\u{202e}'), "the workers table prints U+202E raw: {t:?}");
    ensure!(t.contains("h\\u{202e}x"), "the workers table shows the host escaped: {t}");
    let lines: Vec<&str> = t.lines().collect();
    let end = lines[0].find("PID").ok_or("no PID column")? + "PID".len();
    let row = lines.iter().find(|l| l.contains("h\\u")).ok_or("no row with the host")?;
    ensure!(row.get(..end).is_some_and(|s| s.ends_with("4242")), "PID column misaligned:\n{t}");
    ensure_eq!(db.ok_json(&["workers"])?[0]["host"].as_str(), Some(host), "JSON keeps the host as stored");

    let q = db.q("hostile");
    let job = NewJob::build(q.as_str(), "k")
        .unwrap()
        .tag("t\u{200b}g")
        .idempotency_key("k\u{2066}y")
        .created_by("c\u{202e}b\u{feff}");
    let id = db.enqueue(job).await?;
    let t = db.ok_table(&["jobs", "show", &id.to_string()])?;
    for bad in ['\u{200b}', '\u{2066}', '\u{202e}', '\u{feff}'] {
        ensure!(!t.contains(bad), "jobs show prints U+{:04X} raw: {t:?}", u32::from(bad));
    }
    for shown in ["t\\u{200b}g", "k\\u{2066}y", "c\\u{202e}b\\u{feff}"] {
        ensure!(t.contains(shown), "jobs show does not show {shown}: {t}");
    }
    Ok(())
}

/// `purge` and `dead retry --all` refuse to act without `--yes` when stdin is not a terminal
/// (exit 2, nothing changed); `dead retry --dry-run` (one id and `--all`) changes nothing;
/// an empty `dead list` says "no dead letters".
pub async fn confirmations(db: Arc<Db>) -> TestResult {
    let q = db.q("confirm");
    ensure_eq!(db.ok_table(&["dead", "list", "--queue", q.as_str()])?.trim(), "no dead letters", "empty dead list");
    let ids = db.dead(&q, 3).await?;
    let dead_count = || async {
        let s = db.backend.stats().await.map_err(err)?;
        Ok::<_, String>(s.queue(q.as_str()).map_or(0, |s| s.dead))
    };
    for args in [
        &["dead", "retry", "--queue", q.as_str(), "--all"][..],
        &["purge", "--table", "dead", "--older-than", "0s"],
        &["purge", "--table", "dead", "--older-than", "0s", "--queue", q.as_str()],
    ] {
        let out = db.run(args)?;
        ensure_eq!(out.code, 2, "{args:?} without --yes (stdout {}, stderr {})", out.stdout, out.stderr);
        ensure!(out.stderr.contains("--yes"), "{args:?}: {}", out.stderr);
        ensure_eq!(dead_count().await?, 3, "dead letters after {args:?} without --yes");
    }
    let v = db.ok_json(&["dead", "retry", "--queue", q.as_str(), "--all", "--dry-run"])?;
    ensure_eq!((v["would_requeue"].as_u64(), v["dry_run"].as_bool()), (Some(3), Some(true)), "--all --dry-run");
    let t = db.ok_table(&["dead", "retry", &ids[0].to_string(), "--dry-run"])?;
    ensure!(t.starts_with(&format!("would requeue job {}", ids[0])), "{t}");
    ensure_eq!(dead_count().await?, 3, "dead letters after the dry runs");
    let out = db.run(&["dead", "retry", &JobId::new().to_string(), "--dry-run"])?;
    ensure_eq!(out.code, 3, "dry run of an unknown dead letter (stderr {})", out.stderr);
    ensure_eq!(
        db.ok_json(&["dead", "retry", "--queue", q.as_str(), "--all", "--yes"])?["requeued"].as_u64(),
        Some(3),
        "--yes"
    );
    ensure_eq!(dead_count().await?, 0, "dead letters after --yes");
    Ok(())
}

/// The lines of `stderr` that start with "error:", and whether one of them repeats it.
fn one_error_line(stderr: &str) -> TestResult {
    let errors = stderr.lines().filter(|l| l.starts_with("error:")).count();
    ensure_eq!(errors, 1, "error lines in {stderr:?}");
    ensure!(!stderr.contains("error: error"), "a doubled \"error:\": {stderr}");
    Ok(())
}

/// A database or a role the server (PostgreSQL, MariaDB / MySQL) does not have: exit 2, one
/// clean message that names what is wrong, a hint about the URL, no password.
pub fn missing_database_and_role(kind: Kind) -> TestResult {
    let no_such_db = format!("chokaq_no_such_db_{:08x}", rand::random::<u32>());
    let (no_db, no_role) = match kind {
        Kind::Mysql => {
            let url = mysql_url();
            let (scheme, userinfo, hostport, db, query) = mysql_url_parts(&url).ok_or("not a URL")?;
            (
                format!("{scheme}://{userinfo}@{hostport}/{no_such_db}{query}"),
                format!("{scheme}://chokaq_no_such_role:{SECRET}@{hostport}/{db}{query}"),
            )
        }
        _ => {
            let url = pg_url_with_secret();
            let (base, _) = url.rsplit_once('/').ok_or("no database in the URL")?;
            let no_role = url.replacen("postgres://postgres:", "postgres://chokaq_no_such_role:", 1);
            let no_role = if no_role == url { String::new() } else { no_role };
            (format!("{base}/{no_such_db}"), no_role)
        }
    };
    let mut cases = vec![(no_db, "does not exist")];
    if !no_role.is_empty() {
        cases.push((no_role, "refused the login"));
    }
    for (url, expect) in cases {
        for json in [false, true] {
            let mut args = vec!["--url", url.as_str()];
            if json {
                args.push("--json");
            }
            args.push("stats");
            let out = bin(&args)?;
            out.check_secret(&url, &args)?;
            ensure_eq!(out.code, 2, "exit code ({expect}, json {json}; stderr {})", out.stderr);
            if json {
                let e = out.json_error()?;
                ensure!(e["error"]["message"].as_str().unwrap_or("").contains(expect), "{e}");
            } else {
                one_error_line(&out.stderr)?;
                ensure!(out.stderr.contains(expect), "{}", out.stderr);
                ensure!(out.stderr.contains("hint: check the database name"), "{}", out.stderr);
            }
        }
    }
    Ok(())
}

/// A fresh directory for a SQLite file.
fn temp_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("chokaq_cli_file_{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    Ok(dir)
}

/// A command that reads a SQLite file that does not exist says so (exit 2) and creates
/// nothing; `migrate` creates it.
pub fn sqlite_missing_file() -> TestResult {
    let dir = temp_dir()?;
    let path = dir.join("typo.db");
    let url = format!("sqlite:{}", path.display());
    let result = (|| {
        for args in [&["stats"][..], &["dead", "list"], &["queues", "pause", "q"], &["web", "--no-auth"]] {
            let mut all = vec!["--url", url.as_str()];
            all.extend_from_slice(args);
            let out = bin(&all)?;
            ensure_eq!(out.code, 2, "{args:?} on a missing file (stderr {})", out.stderr);
            one_error_line(&out.stderr)?;
            ensure!(out.stderr.contains("does not exist"), "{args:?}: {}", out.stderr);
            ensure!(out.stderr.contains("`chokaq migrate` creates"), "{args:?}: {}", out.stderr);
            ensure!(!path.exists(), "{args:?} created the file");
        }
        let out = bin(&["--url", &url, "migrate"])?;
        ensure_eq!(out.code, 0, "migrate (stderr {})", out.stderr);
        ensure!(path.exists(), "migrate did not create the file");
        let out = bin(&["--url", &url, "stats"])?;
        ensure_eq!(out.code, 0, "stats after migrate (stderr {})", out.stderr);
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The mode bits of a file.
#[cfg(unix)]
fn mode(p: &std::path::Path) -> Result<u32, String> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?.permissions().mode() & 0o777)
}

/// Under umask 022, the SQLite file `migrate` creates is 0600, and so are the `-wal` and
/// `-shm` files a running `chokaq web` holds open.
#[cfg(unix)]
pub fn sqlite_file_is_private() -> TestResult {
    let dir = temp_dir()?;
    let path = dir.join("jobs.db");
    let url = format!("sqlite:{}", path.display());
    let port = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?.local_addr().map_err(err)?.port();
    let listen = format!("127.0.0.1:{port}");
    let umask022 = |args: &[&str]| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("umask 022 && exec \"$@\"")
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_chokaq"))
            .args(args)
            .env("DATABASE_URL", &url)
            .env_remove("CHOKAQ_SCHEMA")
            .stdin(Stdio::null());
        c
    };
    let mut child = None;
    let result = (|| {
        let out = Out::of(umask022(&["migrate"]).output().map_err(err)?);
        ensure_eq!(out.code, 0, "migrate (stderr {})", out.stderr);
        ensure_eq!(mode(&path)?, 0o600, "mode of the database file under umask 022");
        let c = child.insert(
            umask022(&["web", "--no-auth", "--listen", &listen])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(err)?,
        );
        // The dashboard's first page reads the file: the -wal and -shm files exist then.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            use std::io::{Read, Write};
            let page = std::net::TcpStream::connect(&listen).and_then(|mut s| {
                write!(s, "GET / HTTP/1.1\r\nHost: {listen}\r\nConnection: close\r\n\r\n")?;
                let mut page = String::new();
                s.read_to_string(&mut page)?;
                Ok(page)
            });
            match page {
                Ok(p) if p.starts_with("HTTP/1.1 200") => break,
                _ if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                other => {
                    let _ = c.kill();
                    return Err(format!("the dashboard never answered 200: {other:?}"));
                }
            }
        }
        for suffix in ["", "-wal", "-shm"] {
            let p = PathBuf::from(format!("{}{suffix}", path.display()));
            ensure_eq!(mode(&p)?, 0o600, "mode of jobs.db{suffix} under umask 022");
        }
        Ok(())
    })();
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `chokaq web` prints a line when it stops on SIGTERM, and exits 0.
#[cfg(unix)]
pub async fn web_says_it_stopped(db: Arc<Db>) -> TestResult {
    let port = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?.local_addr().map_err(err)?.port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = db
        .cmd(&["web", "--no-auth", "--listen", &listen])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(err)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&listen).is_err() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return Err("the dashboard never listened".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let killed = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().map_err(err)?;
    ensure!(killed.success(), "kill -TERM failed");
    let out = Out::of(child.wait_with_output().map_err(err)?);
    out.check_secret(&db.url, &["web"])?;
    ensure_eq!(out.code, 0, "exit code after SIGTERM (stderr {})", out.stderr);
    ensure!(out.stderr.lines().last().is_some_and(|l| l.contains("stopped")), "last line: {}", out.stderr);
    Ok(())
}

/// `chokaq … | head`: a reader that closes the pipe early ends the command quietly, exit 0,
/// in text and in `--json` (it had panicked: "failed printing to stdout: Broken pipe").
pub async fn closed_pipe(db: Arc<Db>) -> TestResult {
    use std::io::Read;
    let q = db.q("pipe");
    let jobs: Vec<NewJob> = (0..1000)
        .map(|i| NewJob::build(q.as_str(), "cli.pipe").unwrap().json(serde_json::json!({ "i": i })).tag("t"))
        .collect();
    db.backend.enqueue_many(jobs).await.map_err(err)?;
    for json in [false, true] {
        let mut args = if json { vec!["--json"] } else { vec![] };
        args.extend_from_slice(&["jobs", "list", "--queue", q.as_str(), "--limit", "1000"]);
        let mut child = db.spawn(&args).map_err(err)?;
        let mut stdout = child.stdout.take().ok_or("no stdout")?;
        let mut first = [0u8; 16];
        stdout.read_exact(&mut first).map_err(err)?;
        drop(stdout);
        let out = child.wait_with_output().map_err(err)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!stderr.contains("panicked"), "json {json}: the command panicked on the closed pipe: {stderr}");
        ensure_eq!(out.status.code(), Some(0), "json {json}: exit status on the closed pipe (stderr: {stderr})");
    }
    Ok(())
}

/// Issue 40: `chokaq web` on a port already in use fails saying so (exit 5, unavailable), and
/// never claims it is serving: "serving …" is printed only once the listener is bound.
pub async fn web_port_in_use(db: Arc<Db>) -> TestResult {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    let listen = taken.local_addr().map_err(err)?.to_string();
    let out = db
        .cmd(&["web", "--listen", &listen])
        .env("CHOKAQ_WEB_TOKEN", "s3cret-token-0123456789")
        .output()
        .map_err(err)?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // Exit 2, a configuration error (issue 40, L9; exit 5 "try again" before).
    ensure_eq!(out.status.code(), Some(2), "web on a taken port (stderr {stderr})");
    ensure!(stderr.contains("hint: choose another address with --listen"), "the hint names --listen: {stderr}");
    ensure!(stderr.contains("in use") && stderr.contains(&listen), "the error names the taken port: {stderr}");
    ensure!(!stderr.contains("serving"), "web printed \"serving\" before binding: {stderr}");
    drop(taken);
    Ok(())
}
