//! Every statement of the MySQL backend (migrations, listings and test support included)
//! parses in sqlfluff as `mysql` and as `mariadb`, and a deliberately broken claim is caught
//! in both dialects.
//!
//! `cargo test -p chokaq-mysql --test grammar` with `sqlfluff` (>= 4.5.0) on the `PATH`;
//! without it the trials are ignored (`CHOKAQ_TEST_REQUIRE=sqlfluff` makes that a failure).
//! The shared runner (`chokaq_conformance::grammar`) checks one dialect per binary; this one
//! runs the same check for two, so it calls sqlfluff itself, the same way.
//!
//! What sqlfluff is given, exactly:
//!
//! - `?` placeholders are filled by sqlfluff's `placeholder` templater (`question_mark`
//!   style: each becomes a numeric literal) before parsing;
//! - sqlfluff 4.5.0's `mysql`/`mariadb` grammar accepts a locking clause (`FOR UPDATE`,
//!   `SKIP LOCKED`, `LOCK IN SHARE MODE`) only where no `ORDER BY` or `LIMIT` precedes it,
//!   although both servers take it after them (MySQL 8.0 manual, 15.2.13 SELECT Statement;
//!   MariaDB, SELECT). Such a statement is parsed without its trailing clause, and each clause
//!   on its own after a plain `SELECT ... WHERE` (so a misspelt clause is still caught: the
//!   broken-statement trial misspells `SKIP LOCKED` in the claim);
//! - of the listing statement (built per call with sea-query, `src/list.rs`), the shapes of
//!   `chokaq_core::listing::grammar_shapes`: no filter (with and without payloads), each
//!   filter alone, the cursor alone, and every filter at once with both id bounds; every other
//!   shape is a conjunction of the same predicates.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use chokaq_conformance::grammar::MIN_SQLFLUFF;
use chokaq_conformance::libtest_mimic::{self, Arguments, Completion, Failed, Trial};

const DIALECTS: [&str; 2] = ["mysql", "mariadb"];

fn main() -> ExitCode {
    let args = Arguments::from_args();
    let statements = match chokaq_mysql::all_statements("chokaq_grammar") {
        Ok(s) => s,
        Err(e) => {
            eprintln!("all_statements: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The claim with a keyword misspelled: the check must report it.
    let claim = statements.iter().find(|(name, _)| name == "claim_pick").map(|(_, sql)| sql.clone());
    let Some(broken) =
        claim.filter(|sql| sql.contains(" SKIP LOCKED")).map(|sql| sql.replace(" SKIP LOCKED", " SKIP LOKCED"))
    else {
        eprintln!("no claim_pick statement with SKIP LOCKED to break");
        return ExitCode::FAILURE;
    };
    let statements = checkable(statements);
    let valid = statements[0].1.clone();
    let mut trials = Vec::new();
    for dialect in DIALECTS {
        let all = statements.clone();
        trials.push(Trial::ignorable_test(format!("every_statement_parses_as_{dialect}"), move || {
            guarded(|| every_statement_parses(dialect, &all))
        }));
        let (valid, broken) = (valid.clone(), broken.clone());
        trials.push(Trial::ignorable_test(format!("a_broken_statement_is_caught_{dialect}"), move || {
            guarded(|| a_broken_statement_is_caught(dialect, &valid, &broken))
        }));
    }
    libtest_mimic::run(&args, trials).exit_code()
}

/// The trailing locking clauses split off (see the module comment), longest first.
const LOCKING: [&str; 3] = [" FOR UPDATE SKIP LOCKED", " FOR UPDATE", " LOCK IN SHARE MODE"];

/// A misspelt locking clause (the broken-statement trial's).
const BROKEN_LOCKING: &str = " FOR UPDATE SKIP LOKCED";

/// Splits a trailing locking clause off a statement with `ORDER BY` or `LIMIT`.
fn split_locking(sql: &str) -> (String, Option<&'static str>) {
    if sql.contains(" ORDER BY ") || sql.contains(" LIMIT ") {
        for clause in LOCKING.into_iter().chain([BROKEN_LOCKING]) {
            if let Some(head) = sql.strip_suffix(clause) {
                return (head.to_string(), Some(clause));
            }
        }
    }
    (sql.to_string(), None)
}

/// The statements as sqlfluff is given them (see the module comment).
fn checkable(all: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut clauses: Vec<&'static str> = Vec::new();
    for (name, sql) in all {
        let (head, clause) = split_locking(&sql);
        if let Some(c) = clause {
            if !clauses.contains(&c) {
                clauses.push(c);
            }
        }
        out.push((name, head));
    }
    for (i, c) in clauses.iter().enumerate() {
        out.push((format!("locking_clause_{i}"), format!("SELECT id FROM `chokaq_grammar`.jobs_hot WHERE id = ?{c}")));
    }
    out
}

fn guarded(check: impl FnOnce() -> Result<(), String>) -> Result<Completion, Failed> {
    if let Err(why) = sqlfluff_usable() {
        if chokaq_conformance::is_required("sqlfluff") {
            return Err(Failed::from(format!("{why}, but CHOKAQ_TEST_REQUIRE contains `sqlfluff`")));
        }
        return Ok(Completion::ignored_with(format!(
            "{why} (scripts/test.sh installs it; CHOKAQ_TEST_REQUIRE=sqlfluff makes this a failure)"
        )));
    }
    check().map(|()| Completion::Completed).map_err(Failed::from)
}

/// Ok when a sqlfluff of at least [`MIN_SQLFLUFF`] is on the PATH; else why not.
fn sqlfluff_usable() -> Result<(), String> {
    let out = Command::new("sqlfluff")
        .arg("--version")
        .output()
        .map_err(|_| format!("sqlfluff is not installed (pip install sqlfluff=={MIN_SQLFLUFF})"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().last().unwrap_or("").to_string();
    let tuple = |v: &str| -> Vec<u64> {
        v.split('.')
            .map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(0))
            .collect()
    };
    if !out.status.success() || tuple(&version) < tuple(MIN_SQLFLUFF) {
        return Err(format!("sqlfluff {version} is older than {MIN_SQLFLUFF}"));
    }
    Ok(())
}

fn every_statement_parses(dialect: &str, statements: &[(String, String)]) -> Result<(), String> {
    let dir = TempDir::new(&format!("all_{dialect}"))?;
    for (i, (name, sql)) in statements.iter().enumerate() {
        dir.write(&format!("{i:03}_{name}.sql"), sql)?;
    }
    let t = Instant::now();
    let bad = unparsable_files(dialect, &dir.0)?;
    println!("sqlfluff parsed {} {dialect} statements in {:.1?}", statements.len(), t.elapsed());
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("unparsable {dialect} statements: {bad:?}"))
    }
}

fn a_broken_statement_is_caught(dialect: &str, valid: &str, broken: &str) -> Result<(), String> {
    let dir = TempDir::new(&format!("broken_{dialect}"))?;
    dir.write("a_valid.sql", valid)?;
    // Checked as every statement is: the clause split off, then on its own.
    let (_, clause) = split_locking(broken);
    let Some(clause) = clause else { return Err("the broken claim has no locking clause".into()) };
    dir.write("b_broken.sql", &format!("SELECT id FROM `chokaq_grammar`.jobs_hot WHERE id = ?{clause}"))?;
    dir.write("c_garbage.sql", "SELEC 1 FROMM x WHERE;")?;
    let bad = unparsable_files(dialect, &dir.0)?;
    let names: Vec<String> =
        bad.iter().filter_map(|p| Path::new(p).file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
    if names == ["b_broken.sql", "c_garbage.sql"] {
        Ok(())
    } else {
        Err(format!("expected exactly b_broken.sql and c_garbage.sql to be unparsable, got {names:?}"))
    }
}

/// Runs `sqlfluff parse --dialect D --format json DIR` once and returns the files with an
/// unparsable section (or no parse tree at all), sorted.
fn unparsable_files(dialect: &str, dir: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("sqlfluff")
        .args(["parse", "--dialect", dialect, "--format", "json", "--nofail", "."])
        // Its `.sqlfluff` (the placeholder templater) is read from the working directory.
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run sqlfluff: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let files: serde_json::Value = serde_json::from_str(&stdout)
        .map_err(|e| format!("sqlfluff output is not JSON ({e}); stderr: {}", String::from_utf8_lossy(&out.stderr)))?;
    let mut bad = Vec::new();
    for f in files.as_array().ok_or("sqlfluff printed no JSON array")? {
        let path = f["filepath"].as_str().unwrap_or("?").to_string();
        let segments = f.get("segments").map(|s| s.to_string()).unwrap_or_default();
        if segments.is_empty() || segments == "null" || segments.contains("\"unparsable\"") {
            bad.push(path);
        }
    }
    bad.sort();
    Ok(bad)
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<TempDir, String> {
        let dir = std::env::temp_dir().join(format!("chokaq_grammar_{tag}_{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let config =
            "[sqlfluff]\ntemplater = placeholder\n\n[sqlfluff:templater:placeholder]\nparam_style = question_mark\n";
        std::fs::write(dir.join(".sqlfluff"), config).map_err(|e| format!("write .sqlfluff: {e}"))?;
        Ok(TempDir(dir))
    }

    fn write(&self, name: &str, sql: &str) -> Result<(), String> {
        std::fs::write(self.0.join(name), sql).map_err(|e| format!("write {name}: {e}"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
