//! Every T-SQL statement of the backend (`chokaq_mssql::all_statements`: the migration, every
//! operation, the test support, the session setup) parses with sqlfluff's `tsql` dialect, in
//! one sqlfluff run; and a claim with a dropped parenthesis is caught. See
//! `chokaq_conformance::grammar` for how sqlfluff is found and when the trials are ignored.
//!
//! The migration batches of every earlier schema version (`tests/upgrade/`, the steps the
//! upgrade test runs) are checked too, as `v<N>_<batch>`.
//!
//! One statement is left out, by name and only that one: `migrate_lock_escalation`, three
//! `ALTER TABLE … SET (LOCK_ESCALATION = DISABLE)` behind existence checks. That is valid
//! T-SQL (SQL Server 2008 and later) which sqlfluff 4.5.0's tsql dialect does not know (it
//! parses `SET (SYSTEM_VERSIONING = …)` but not `LOCK_ESCALATION`); the migration keeps it
//! in a batch of its own so that nothing else goes unchecked, and a unit test in
//! `src/sql/migrate.rs` checks its shape.

use std::process::ExitCode;

use chokaq_conformance::grammar::{run_main, Dialect};

#[path = "upgrade/steps.rs"]
mod steps;

/// Statements sqlfluff 4.5.0 cannot parse although they are valid T-SQL (see above).
const NOT_PARSED_BY_SQLFLUFF: &[&str] = &["migrate_lock_escalation"];

fn main() -> ExitCode {
    let all = chokaq_mssql::all_statements("chokaq_grammar").expect("a valid schema name");
    let before = all.len();
    let statements: Vec<_> = all.into_iter().filter(|(name, _)| !NOT_PARSED_BY_SQLFLUFF.contains(name)).collect();
    assert_eq!(statements.len() + NOT_PARSED_BY_SQLFLUFF.len(), before, "every left-out statement exists");
    assert!(statements.len() >= 25, "{} statements", statements.len());
    // Every step of every earlier schema version (the upgrade test runs them), by name
    // `v<N>_<batch>`; the lock-escalation batches are left out as today's is.
    let mut statements = statements;
    for (version, file) in steps::VERSIONS {
        for (name, sql) in steps::batches(file, "chokaq_grammar") {
            if !NOT_PARSED_BY_SQLFLUFF.contains(&name.as_str()) {
                statements.push((Box::leak(format!("v{version}_{name}").into_boxed_str()), sql));
            }
        }
    }
    let claim = statements.iter().find(|(name, _)| *name == "claim").map(|(_, sql)| sql.clone()).expect("claim");
    // A typo a human could make: a dropped closing parenthesis in the hint list.
    let broken = claim.replacen(
        "WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)",
        "WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK",
        1,
    );
    assert_ne!(broken, claim, "the claim has the hint list to break");
    run_main(Dialect::Tsql, statements, broken)
}
