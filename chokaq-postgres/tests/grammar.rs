//! Every statement the backend can send (`chokaq_postgres::all_statements`, the migration
//! scripts included) must parse as PostgreSQL with sqlfluff, and a deliberately broken one
//! must not. `cargo test -p chokaq-postgres --test grammar`; sqlfluff must be on the `PATH`
//! (the trials are ignored without it, or fail when `CHOKAQ_TEST_REQUIRE` contains `sqlfluff`).

use std::process::ExitCode;

use chokaq_conformance::grammar::{run_main, Dialect};

fn main() -> ExitCode {
    let statements = chokaq_postgres::all_statements("chokaq_grammar").expect("a valid schema name");
    let complete = &statements.iter().find(|(name, _)| *name == "complete").expect("the complete statement").1;
    // The move's DELETE with a misspelled keyword.
    let broken = complete.replacen("DELETE FROM", "DELET FROM", 1);
    assert_ne!(&broken, complete, "the complete statement has no DELETE FROM to break");
    run_main(Dialect::Postgres, statements, broken)
}
