//! Every statement of the SQLite backend (migrations and test support included) parses as
//! SQLite in sqlfluff, but `BEGIN IMMEDIATE` (see below), and a deliberately broken claim is
//! caught.
//!
//! `cargo test -p chokaq-sqlite --test grammar` with `sqlfluff` (>= 4.5.0) on the `PATH`;
//! without it both trials are ignored (`CHOKAQ_TEST_REQUIRE=sqlfluff` makes that a failure).

use std::process::ExitCode;

use chokaq_conformance::grammar::{run_main, Dialect};

fn main() -> ExitCode {
    let mut statements = match chokaq_sqlite::all_statements("chokaq_grammar") {
        Ok(s) => s,
        Err(e) => {
            eprintln!("all_statements: {e}");
            return ExitCode::FAILURE;
        }
    };
    // `BEGIN IMMEDIATE` is valid SQLite (`BEGIN [DEFERRED | IMMEDIATE | EXCLUSIVE]
    // [TRANSACTION]`, sqlite.org/lang_transaction.html) and runs before every write of the
    // test suites, but sqlfluff 4.5.0's sqlite dialect knows only `BEGIN [TRANSACTION]`. It is
    // the one statement left out, and only while it is exactly that text.
    let before = statements.len();
    statements.retain(|(name, sql)| !(*name == "begin_immediate" && sql == "BEGIN IMMEDIATE"));
    if statements.len() + 1 != before {
        eprintln!("expected exactly one begin_immediate statement reading `BEGIN IMMEDIATE`");
        return ExitCode::FAILURE;
    }
    // The claim with a keyword misspelled: the check must report it.
    let claim = statements.iter().find(|(name, _)| *name == "claim_one").map(|(_, sql)| sql.clone());
    let Some(broken) =
        claim.filter(|sql| sql.contains(" RETURNING ")).map(|sql| sql.replace(" RETURNING ", " RETURNIGN "))
    else {
        eprintln!("no claim_one statement with RETURNING to break");
        return ExitCode::FAILURE;
    };
    run_main(Dialect::Sqlite, statements, broken)
}
