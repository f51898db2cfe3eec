//! Cases that need no database: `--help` and usage errors, and URLs that cannot work (an
//! unknown scheme, an unrecognised one, a server that refuses). `bin` runs the binary with
//! no `DATABASE_URL` or `CHOKAQ_SCHEMA` from the environment.

use super::*;

pub(crate) fn bin(args: &[&str]) -> Result<Out, String> {
    let out = Out::of(
        Command::new(env!("CARGO_BIN_EXE_chokaq"))
            .env_remove("DATABASE_URL")
            .env_remove("CHOKAQ_SCHEMA")
            .args(args)
            .output()
            .map_err(err)?,
    );
    Ok(out)
}

/// `--help` of the binary and of every subcommand exits 0; usage errors exit 2; a missing
/// URL exits 2 and says how to give one; the help never shows DATABASE_URL's value.
pub(crate) fn help_and_usage() -> TestResult {
    let top = bin(&["--help"])?;
    ensure_eq!(top.code, 0, "--help");
    for word in ["migrate", "stats", "queues", "jobs", "dead", "purge", "workers", "Exit codes"] {
        ensure!(top.stdout.contains(word), "--help does not mention {word}: {}", top.stdout);
    }
    for sub in [
        &["migrate"][..],
        &["stats"],
        &["queues"],
        &["queues", "pause"],
        &["queues", "cap"],
        &["queues", "zombie-timeout"],
        &["jobs", "list"],
        &["jobs", "show"],
        &["jobs", "cancel"],
        &["dead", "list"],
        &["dead", "retry"],
        &["purge"],
        &["workers"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let out = bin(&args)?;
        ensure_eq!(out.code, 0, "{args:?}");
        ensure!(out.stdout.contains("Usage: chokaq"), "{args:?}: {}", out.stdout);
    }
    let secret_env = Command::new(env!("CARGO_BIN_EXE_chokaq"))
        .env("DATABASE_URL", format!("postgres://u:{SECRET}@h/db"))
        .arg("--help")
        .output()
        .map_err(err)?;
    ensure!(!String::from_utf8_lossy(&secret_env.stdout).contains(SECRET), "--help shows DATABASE_URL's value");
    for bad in [
        &["frobnicate"][..],
        &["stats", "--nope"],
        &["queues", "cap", "q"],
        &["queues", "cap", "q", "lots"],
        &["purge", "--table", "archive"],
        &["purge", "--table", "hot", "--older-than", "1d"],
        &["purge", "--table", "archive", "--older-than", "7x"],
        &["dead", "retry"],
        &["dead", "retry", "--all"],
        &["jobs", "list", "--limit", "0"],
    ] {
        let out = bin(bad)?;
        ensure_eq!(out.code, 2, "exit code of {bad:?} (stderr {})", out.stderr);
    }
    let no_url = bin(&["stats"])?;
    ensure_eq!(no_url.code, 2, "no URL");
    ensure!(no_url.stderr.contains("DATABASE_URL"), "{}", no_url.stderr);
    let v = bin(&["--version"])?;
    ensure_eq!(v.code, 0, "--version");
    ensure!(v.stdout.starts_with("chokaq "), "{}", v.stdout);
    Ok(())
}

/// A URL of an unknown scheme, an unrecognised one, or a server that refuses: exit 2, 2 and
/// 5, errors that say what is expected, no password anywhere (table and JSON form).
pub(crate) fn bad_url() -> TestResult {
    for url in [format!("redis://root:{SECRET}@h/db"), format!("{SECRET}-not-a-url")] {
        for json in [false, true] {
            let mut args = vec!["--url", url.as_str()];
            if json {
                args.push("--json");
            }
            args.push("stats");
            let out = bin(&args)?;
            out.check_secret(&url, &args)?;
            ensure_eq!(out.code, 2, "exit code with URL {url:?} (stderr {})", out.stderr);
            if json {
                let e = out.json_error()?;
                ensure_eq!(e["error"]["exit_code"].as_u64(), Some(2), "JSON exit code");
                ensure!(e["error"]["message"].as_str().unwrap_or("").contains("expected postgres://"), "{e}");
            } else {
                ensure!(out.stderr.starts_with("error: "), "{}", out.stderr);
                ensure!(out.stderr.contains("expected postgres://"), "{}", out.stderr);
            }
        }
    }
    let refused = format!("postgres://postgres:{SECRET}@127.0.0.1:1/test");
    let out = bin(&["--url", &refused, "--connect-timeout", "2s", "stats"])?;
    out.check_secret(&refused, &["stats"])?;
    ensure_eq!(out.code, 5, "exit code of a refused connection (stderr {})", out.stderr);
    ensure!(out.stderr.contains("hint: check that the database is running"), "{}", out.stderr);
    // Reported at once, not after the connect timeout (the pool tries a refused connection
    // again until then).
    let t0 = std::time::Instant::now();
    let out = bin(&["--url", &refused, "--connect-timeout", "30s", "workers"])?;
    ensure_eq!(out.code, 5, "exit code of a refused connection, 30 s timeout (stderr {})", out.stderr);
    ensure!(t0.elapsed() < Duration::from_secs(5), "refused connection reported after {:?}", t0.elapsed());
    ensure!(out.stderr.to_lowercase().contains("refused"), "the refusal is named: {}", out.stderr);
    let out = bin(&["--url", &refused, "--connect-timeout", "2s", "--json", "workers"])?;
    out.check_secret(&refused, &["workers"])?;
    ensure_eq!(out.json_error()?["error"]["exit_code"].as_u64(), Some(5), "JSON exit code of a refused connection");
    Ok(())
}
