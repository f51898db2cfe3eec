//! Every T-SQL statement of the backend (`chokaq_mssql::all_statements`: the migration, every
//! operation, the test support, the session setup) parses with sqlfluff's `tsql` dialect, in
//! one sqlfluff run; and a claim with a dropped parenthesis is caught. See
//! `chokaq_conformance::grammar` for how sqlfluff is found and when the trials are ignored.

use std::process::ExitCode;

use chokaq_conformance::grammar::{run_main, Dialect};

fn main() -> ExitCode {
    let statements = chokaq_mssql::all_statements("chokaq_grammar").expect("a valid schema name");
    assert!(statements.len() >= 25, "{} statements", statements.len());
    let claim = statements.iter().find(|(name, _)| *name == "claim").map(|(_, sql)| sql.clone()).expect("claim");
    // A typo a human could make: a dropped closing parenthesis in the hint list.
    let broken = claim.replacen("WITH (UPDLOCK, READPAST, ROWLOCK)", "WITH (UPDLOCK, READPAST, ROWLOCK", 1);
    assert_ne!(broken, claim, "the claim has the hint list to break");
    run_main(Dialect::Tsql, statements, broken)
}
