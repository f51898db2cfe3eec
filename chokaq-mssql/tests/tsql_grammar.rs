//! Parses every T-SQL statement of the backend with sqlfluff's `tsql` dialect (one process
//! over all files) and fails on any unparsable section; also proves the check catches a
//! deliberately broken statement.
//!
//! sqlfluff is installed by the CI script (`pip install sqlfluff`). When it is missing the
//! tests FAIL if `CHOKAQ_TEST_REQUIRE` contains `sqlfluff`, and are otherwise reported as
//! *ignored* with the reason (a libtest-mimic harness), never counted as passes.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use libtest_mimic::{Arguments, Completion, Failed, Trial};

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let tests: [(&'static str, fn()); 2] = [
        ("every_statement_parses_as_tsql", every_statement_parses_as_tsql),
        ("a_broken_statement_is_caught", a_broken_statement_is_caught),
    ];
    let trials = tests
        .into_iter()
        .map(|(name, f)| {
            Trial::ignorable_test(name, move || {
                if !sqlfluff_available() {
                    if required() {
                        return Err(Failed::from(
                            "sqlfluff is not installed but CHOKAQ_TEST_REQUIRE contains `sqlfluff` (pip install sqlfluff)",
                        ));
                    }
                    return Ok(Completion::ignored_with(
                        "sqlfluff is not installed (pip install sqlfluff); CHOKAQ_TEST_REQUIRE=sqlfluff makes this a failure",
                    ));
                }
                std::panic::catch_unwind(f).map(|()| Completion::Completed).map_err(|e| {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panicked".to_string());
                    Failed::from(msg)
                })
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

fn sqlfluff_available() -> bool {
    Command::new("sqlfluff").arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

fn required() -> bool {
    std::env::var("CHOKAQ_TEST_REQUIRE").map(|v| v.split(',').any(|p| p.trim() == "sqlfluff")).unwrap_or(false)
}

/// Runs `sqlfluff parse --dialect tsql --format json DIR` once and returns the files that
/// contain an unparsable section.
fn unparsable_files(dir: &Path) -> Vec<String> {
    let out = Command::new("sqlfluff")
        .args(["parse", "--dialect", "tsql", "--format", "json", "--nofail"])
        .arg(dir)
        .output()
        .expect("run sqlfluff");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let files: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("sqlfluff output is not JSON ({e}); stderr: {}", String::from_utf8_lossy(&out.stderr))
    });
    let mut bad = Vec::new();
    for f in files.as_array().expect("a JSON array of files") {
        let path = f["filepath"].as_str().unwrap_or("?").to_string();
        let segments = f.get("segments").map(|s| s.to_string()).unwrap_or_default();
        if segments.is_empty() || segments == "null" || segments.contains("\"unparsable\"") {
            bad.push(path);
        }
    }
    bad.sort();
    bad
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("chokaq_tsql_{tag}_{}", uuid_like()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn uuid_like() -> String {
    format!("{}_{}", std::process::id(), Instant::now().elapsed().as_nanos() ^ rand_seed())
}

fn rand_seed() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

fn every_statement_parses_as_tsql() {
    let dir = temp_dir("all");
    let statements = chokaq_mssql::all_statements("chokaq");
    assert!(statements.len() >= 25);
    for (name, sql) in &statements {
        std::fs::write(dir.join(format!("{name}.sql")), sql).unwrap();
    }
    let t = Instant::now();
    let bad = unparsable_files(&dir);
    let took = t.elapsed();
    println!("sqlfluff parsed {} statements in {:.1?}", statements.len(), took);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "unparsable T-SQL in: {bad:?}");
    assert!(took.as_secs() < 120, "sqlfluff took {took:?}");
}

fn a_broken_statement_is_caught() {
    let dir = temp_dir("broken");
    let claim = chokaq_mssql::all_statements("chokaq").into_iter().find(|(n, _)| *n == "claim").unwrap().1;
    std::fs::write(dir.join("claim_ok.sql"), &claim).unwrap();
    // A typo a human could make: a dropped closing parenthesis in the hint list.
    let broken = claim.replacen("WITH (UPDLOCK, READPAST, ROWLOCK)", "WITH (UPDLOCK, READPAST, ROWLOCK", 1);
    assert_ne!(broken, claim);
    std::fs::write(dir.join("claim_broken.sql"), &broken).unwrap();
    std::fs::write(dir.join("garbage.sql"), "SELEC 1 FROMM x WHERE;").unwrap();
    let bad = unparsable_files(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let names: Vec<_> = bad.iter().map(|p| Path::new(p).file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["claim_broken.sql".to_string(), "garbage.sql".to_string()], "{bad:?}");
}
