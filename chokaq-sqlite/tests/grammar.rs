//! Every statement of the SQLite backend (migrations and test support included) parses as
//! SQLite in sqlfluff, and a deliberately broken claim is caught.
//!
//! `cargo test -p chokaq-sqlite --test grammar` with `sqlfluff` (>= 4.5.0) on the `PATH`;
//! without it both trials are ignored (`CHOKAQ_TEST_REQUIRE=sqlfluff` makes that a failure).

use std::process::ExitCode;

use chokaq_conformance::grammar::{run_main, Dialect};

fn main() -> ExitCode {
    let statements = match chokaq_sqlite::all_statements("chokaq_grammar") {
        Ok(s) => s,
        Err(e) => {
            eprintln!("all_statements: {e}");
            return ExitCode::FAILURE;
        }
    };
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
