//! The grammar check every backend runs over every statement it can send.
//!
//! A backend crate exports `all_statements(schema)` and ships a `tests/grammar.rs` (declared
//! `harness = false`) whose `main` is one call to [`run_main`] (one dialect) or to
//! [`Check::run`] (several dialects, adaptations). For each dialect it writes each statement
//! to a file, runs ONE `sqlfluff parse --dialect <d>` over the directory, and fails on any
//! statement with an unparsable section. A second trial per dialect feeds a deliberately
//! broken statement and proves the check catches it.
//!
//! Two adaptations, off unless a [`Check`] turns them on, for what sqlfluff 4.5.0 cannot take
//! as the backend writes it (MariaDB / MySQL, see docs/mysql.md "Grammar"):
//!
//! - [`Check::question_mark_placeholders`]: `?` placeholders are filled by sqlfluff's
//!   `placeholder` templater (`param_style = question_mark`: each becomes a literal) before
//!   parsing;
//! - [`Check::locking_clauses_apart`]: a trailing locking clause (`FOR UPDATE …`,
//!   `LOCK IN SHARE MODE`) after `ORDER BY` or `LIMIT`, valid on the server but rejected there
//!   by sqlfluff's grammar, is cut off: the statement is parsed without it, and each distinct
//!   clause on its own after a plain `SELECT … WHERE` (so a misspelt clause is still caught).
//!   The broken statement goes through the same adaptation.
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
    /// `mysql` (MySQL 8)
    Mysql,
    /// `mariadb`
    Mariadb,
}

impl Dialect {
    /// sqlfluff's name of the dialect.
    pub fn sqlfluff_name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
            Dialect::Tsql => "tsql",
            Dialect::Mysql => "mysql",
            Dialect::Mariadb => "mariadb",
        }
    }
}

/// A libtest-mimic `main` with two trials: `every_statement_parses_as_<dialect>` over
/// `statements` (name, SQL), and `a_broken_statement_is_caught`, which checks that `broken`
/// (one of the statements, deliberately corrupted) and a garbage line are both reported while
/// a valid statement is not. The same as `Check::new(&[dialect]).run(statements, broken)`.
pub fn run_main<N: Into<String>>(dialect: Dialect, statements: Vec<(N, String)>, broken: String) -> ExitCode {
    Check::new(&[dialect]).run(statements, broken)
}

/// The check of one statement set: under which dialects, with which adaptations (see the
/// module documentation).
#[derive(Debug, Clone)]
pub struct Check {
    dialects: Vec<Dialect>,
    question_marks: bool,
    locking_clauses: Vec<&'static str>,
}

impl Check {
    /// The statements are checked under each of `dialects` (at least one), with no adaptation.
    pub fn new(dialects: &[Dialect]) -> Check {
        Check { dialects: dialects.to_vec(), question_marks: false, locking_clauses: Vec::new() }
    }

    /// `?` placeholders: sqlfluff's `placeholder` templater fills them before parsing.
    pub fn question_mark_placeholders(mut self) -> Check {
        self.question_marks = true;
        self
    }

    /// A trailing locking clause that starts with one of `starts` (for example `" FOR UPDATE"`,
    /// `" LOCK IN SHARE MODE"`) after an `ORDER BY` or a `LIMIT` is parsed apart: the statement
    /// without it, and the clause (everything from that start to the end of the statement) on
    /// its own after a plain `SELECT … WHERE`.
    pub fn locking_clauses_apart(mut self, starts: &[&'static str]) -> Check {
        self.locking_clauses = starts.to_vec();
        self
    }

    /// A libtest-mimic `main`: per dialect, `every_statement_parses_as_<dialect>` and the
    /// broken-statement trial (`a_broken_statement_is_caught`, with `_<dialect>` appended when
    /// there are several dialects). `broken` is one of the statements, deliberately corrupted.
    pub fn run<N: Into<String>>(self, statements: Vec<(N, String)>, broken: String) -> ExitCode {
        let args = Arguments::from_args();
        let statements: Vec<(String, String)> = statements.into_iter().map(|(n, sql)| (n.into(), sql)).collect();
        let valid = statements.first().map(|(_, sql)| sql.clone()).unwrap_or_default();
        let several = self.dialects.len() > 1;
        let mut trials = Vec::new();
        if self.dialects.is_empty() {
            trials.push(Trial::test("a_dialect_is_named", || Err(Failed::from("Check::new got no dialect"))));
        }
        for &dialect in &self.dialects {
            let name = dialect.sqlfluff_name();
            let (check, all) = (self.clone(), statements.clone());
            trials.push(Trial::ignorable_test(format!("every_statement_parses_as_{name}"), move || {
                guarded(|| check.every_statement_parses(dialect, &all))
            }));
            let (check, valid, broken) = (self.clone(), valid.clone(), broken.clone());
            let trial = if several {
                format!("a_broken_statement_is_caught_{name}")
            } else {
                "a_broken_statement_is_caught".into()
            };
            trials.push(Trial::ignorable_test(trial, move || {
                guarded(|| check.a_broken_statement_is_caught(dialect, &valid, &broken))
            }));
        }
        libtest_mimic::run(&args, trials).exit_code()
    }

    /// Where the trailing locking clause of `sql` starts, if it is to be parsed apart: after the
    /// last `ORDER BY` / `LIMIT`, the first of the configured starts.
    fn locking_split(&self, sql: &str) -> Option<usize> {
        if self.locking_clauses.is_empty() {
            return None;
        }
        let sql = sql.trim_end();
        let after = [" ORDER BY ", " LIMIT "].iter().filter_map(|k| sql.rfind(k)).max()?;
        self.locking_clauses.iter().filter_map(|c| sql[after..].find(c).map(|i| after + i)).min()
    }

    /// The files sqlfluff is given for `statements` (name, SQL): each statement with its
    /// locking clause cut off, then each distinct clause on its own (`<prefix>locking_<i>`).
    fn files(&self, statements: &[(String, String)], prefix: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut clauses: Vec<String> = Vec::new();
        for (name, sql) in statements {
            let sql = sql.trim_end();
            match self.locking_split(sql) {
                Some(at) => {
                    let clause = sql[at..].to_string();
                    if !clauses.contains(&clause) {
                        clauses.push(clause);
                    }
                    out.push((name.clone(), sql[..at].to_string()));
                }
                None => out.push((name.clone(), sql.to_string())),
            }
        }
        for (i, c) in clauses.iter().enumerate() {
            out.push((format!("{prefix}locking_{i}"), format!("SELECT id FROM locking_probe WHERE id = 1{c}")));
        }
        out
    }

    fn every_statement_parses(&self, dialect: Dialect, statements: &[(String, String)]) -> Result<(), String> {
        if statements.is_empty() {
            return Err("no statements to check".into());
        }
        let dir = TempDir::new(&format!("all_{}", dialect.sqlfluff_name()), self.question_marks)?;
        let files = self.files(statements, "");
        for (i, (name, sql)) in files.iter().enumerate() {
            dir.write(&format!("{i:03}_{name}.sql"), sql)?;
        }
        let t = Instant::now();
        let bad = unparsable_files(dialect, &dir.0)?;
        let apart = files.len() - statements.len();
        let note = if apart > 0 { format!(" ({apart} locking clauses parsed apart)") } else { String::new() };
        println!(
            "sqlfluff parsed {} {} statements{note} in {:.1?}",
            statements.len(),
            dialect.sqlfluff_name(),
            t.elapsed()
        );
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("unparsable {} statements: {bad:?}", dialect.sqlfluff_name()))
        }
    }

    /// `a_valid*` (the first statement, adapted) parses; `b_broken*` (the broken statement,
    /// adapted the same way: when its locking clause is parsed apart, the clause is the file
    /// that must fail) and a garbage line do not.
    fn a_broken_statement_is_caught(&self, dialect: Dialect, valid: &str, broken: &str) -> Result<(), String> {
        if broken == valid || broken.is_empty() {
            return Err("the broken statement must differ from the valid one".into());
        }
        let dir = TempDir::new(&format!("broken_{}", dialect.sqlfluff_name()), self.question_marks)?;
        for (name, sql) in self.files(&[("a_valid".into(), valid.into())], "a_valid_") {
            dir.write(&format!("{name}.sql"), &sql)?;
        }
        for (name, sql) in self.files(&[("b_broken".into(), broken.into())], "b_broken_") {
            dir.write(&format!("{name}.sql"), &sql)?;
        }
        dir.write("c_garbage.sql", "SELEC 1 FROMM x WHERE;")?;
        let bad = unparsable_files(dialect, &dir.0)?;
        let names: Vec<String> =
            bad.iter().filter_map(|p| Path::new(p).file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
        let broken_caught = names.iter().any(|n| n.starts_with("b_broken"));
        let only_expected = names.iter().all(|n| n.starts_with("b_broken") || n == "c_garbage.sql");
        if broken_caught && only_expected && names.iter().any(|n| n == "c_garbage.sql") {
            Ok(())
        } else {
            Err(format!(
                "expected the broken statement (b_broken*) and c_garbage.sql to be unparsable, and nothing else; \
                 got {names:?}"
            ))
        }
    }
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

/// Runs `sqlfluff parse --dialect D --format json DIR` once and returns the files with an
/// unparsable section (or no parse tree at all), sorted.
fn unparsable_files(dialect: Dialect, dir: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("sqlfluff")
        .args(["parse", "--dialect", dialect.sqlfluff_name(), "--format", "json", "--nofail", "."])
        // A `.sqlfluff` there (the placeholder templater) is read from the working directory.
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
    /// A fresh directory; with `question_marks`, a `.sqlfluff` in it that fills `?`
    /// placeholders.
    fn new(tag: &str, question_marks: bool) -> Result<TempDir, String> {
        let dir = std::env::temp_dir().join(format!("chokaq_grammar_{tag}_{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let dir = TempDir(dir);
        if question_marks {
            dir.write(
                ".sqlfluff",
                "[sqlfluff]\ntemplater = placeholder\n\n[sqlfluff:templater:placeholder]\nparam_style = question_mark\n",
            )?;
        }
        Ok(dir)
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

    fn st(name: &str, sql: &str) -> (String, String) {
        (name.to_string(), sql.to_string())
    }

    #[test]
    fn locking_clauses_after_order_by_or_limit_are_parsed_apart() {
        let check = Check::new(&[Dialect::Mysql]).locking_clauses_apart(&[" FOR UPDATE", " LOCK IN SHARE MODE"]);
        let files = check.files(
            &[
                st("pick", "SELECT id FROM t WHERE q = ? ORDER BY p DESC, id LIMIT ? FOR UPDATE SKIP LOCKED"),
                st("rescue", "SELECT id FROM t ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"),
                st("share", "SELECT id FROM t WHERE id = ? LIMIT 1 LOCK IN SHARE MODE"),
                // No ORDER BY / LIMIT before it: sqlfluff takes it as it is.
                st("row", "SELECT id FROM t WHERE id = ? FOR UPDATE"),
                // A misspelt clause is cut off whole, so that it is parsed (and fails) alone.
                st("typo", "SELECT id FROM t ORDER BY id LIMIT 1 FOR UPDATE SKIP LOKCED"),
            ],
            "",
        );
        assert_eq!(
            files,
            vec![
                st("pick", "SELECT id FROM t WHERE q = ? ORDER BY p DESC, id LIMIT ?"),
                st("rescue", "SELECT id FROM t ORDER BY id LIMIT ?"),
                st("share", "SELECT id FROM t WHERE id = ? LIMIT 1"),
                st("row", "SELECT id FROM t WHERE id = ? FOR UPDATE"),
                st("typo", "SELECT id FROM t ORDER BY id LIMIT 1"),
                st("locking_0", "SELECT id FROM locking_probe WHERE id = 1 FOR UPDATE SKIP LOCKED"),
                st("locking_1", "SELECT id FROM locking_probe WHERE id = 1 LOCK IN SHARE MODE"),
                st("locking_2", "SELECT id FROM locking_probe WHERE id = 1 FOR UPDATE SKIP LOKCED"),
            ]
        );
        // Without the adaptation nothing is cut.
        let plain = Check::new(&[Dialect::Mysql]);
        let pick = st("pick", "SELECT id FROM t ORDER BY id LIMIT 1 FOR UPDATE");
        assert_eq!(plain.files(std::slice::from_ref(&pick), ""), vec![pick]);
    }
}
