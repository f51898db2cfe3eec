//! The grammar check every backend runs over every statement it can send.
//!
//! A backend crate exports `all_statements(schema)` and ships a `tests/grammar.rs` (declared
//! `harness = false`) whose `main` is one call to [`run_main`]. It writes each statement to a
//! file, runs ONE `sqlfluff parse --dialect <d>` over the directory, and fails on any
//! statement with an unparsable section. A second trial feeds a deliberately broken statement
//! and proves the check catches it.
//!
//! sqlfluff (PyPI) must be on the `PATH` at version [`MIN_SQLFLUFF`] or newer (older releases
//! cannot parse valid T-SQL such as `UPDATE TOP (@n)`); `scripts/test.sh` installs it. When it
//! is missing or older the trials are *ignored* with the reason, or fail when
//! `CHOKAQ_TEST_REQUIRE` contains `sqlfluff`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// The oldest sqlfluff release the check trusts.
pub const MIN_SQLFLUFF: &str = "4.5.0";

/// The SQL dialects the check knows (sqlfluff's names in parentheses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `postgres`
    Postgres,
    /// `sqlite`
    Sqlite,
    /// `tsql` (SQL Server)
    Tsql,
}

impl Dialect {
    /// sqlfluff's name of the dialect.
    pub fn sqlfluff_name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
            Dialect::Tsql => "tsql",
        }
    }
}

/// A libtest-mimic `main` with two trials: `every_statement_parses_as_<dialect>` over
/// `statements` (name, SQL), and `a_broken_statement_is_caught`, which checks that `broken`
/// (one of the statements, deliberately corrupted) and a garbage line are both reported while
/// a valid statement is not.
pub fn run_main(dialect: Dialect, statements: Vec<(&'static str, String)>, broken: String) -> ExitCode {
    let args = Arguments::from_args();
    let valid = statements.first().map(|(_, sql)| sql.clone()).unwrap_or_default();
    let all = Trial::ignorable_test(format!("every_statement_parses_as_{}", dialect.sqlfluff_name()), move || {
        guarded(|| every_statement_parses(dialect, &statements))
    });
    let caught = Trial::ignorable_test("a_broken_statement_is_caught", move || {
        guarded(|| a_broken_statement_is_caught(dialect, &valid, &broken))
    });
    libtest_mimic::run(&args, vec![all, caught]).exit_code()
}

fn guarded(check: impl FnOnce() -> Result<(), String>) -> Result<Completion, Failed> {
    if let Err(why) = sqlfluff_usable() {
        if crate::is_required("sqlfluff") {
            return Err(Failed::from(format!("{why}, but {} contains `sqlfluff`", crate::ENV_REQUIRE)));
        }
        return Ok(Completion::ignored_with(format!(
            "{why} (scripts/test.sh installs it; {}=sqlfluff makes this a failure)",
            crate::ENV_REQUIRE
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
    if !out.status.success() || version_tuple(&version) < version_tuple(MIN_SQLFLUFF) {
        return Err(format!("sqlfluff {version} is older than {MIN_SQLFLUFF}"));
    }
    Ok(())
}

fn version_tuple(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(0)).collect()
}

fn every_statement_parses(dialect: Dialect, statements: &[(&'static str, String)]) -> Result<(), String> {
    if statements.is_empty() {
        return Err("no statements to check".into());
    }
    let dir = TempDir::new("all")?;
    for (i, (name, sql)) in statements.iter().enumerate() {
        dir.write(&format!("{i:03}_{name}.sql"), sql)?;
    }
    let t = Instant::now();
    let bad = unparsable_files(dialect, &dir.0)?;
    println!("sqlfluff parsed {} {} statements in {:.1?}", statements.len(), dialect.sqlfluff_name(), t.elapsed());
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("unparsable {} statements: {bad:?}", dialect.sqlfluff_name()))
    }
}

fn a_broken_statement_is_caught(dialect: Dialect, valid: &str, broken: &str) -> Result<(), String> {
    if broken == valid || broken.is_empty() {
        return Err("the broken statement must differ from the valid one".into());
    }
    let dir = TempDir::new("broken")?;
    dir.write("a_valid.sql", valid)?;
    dir.write("b_broken.sql", broken)?;
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
fn unparsable_files(dialect: Dialect, dir: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("sqlfluff")
        .args(["parse", "--dialect", dialect.sqlfluff_name(), "--format", "json", "--nofail"])
        .arg(dir)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert!(version_tuple("4.10.0") > version_tuple("4.5.0"));
        assert!(version_tuple("3.5.0") < version_tuple("4.5.0"));
        assert!(version_tuple("4.5.0") >= version_tuple(MIN_SQLFLUFF));
    }
}
