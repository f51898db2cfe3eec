//! Every statement of the MySQL backend (migrations, listings and test support included)
//! parses in sqlfluff as `mysql` and as `mariadb`, and a deliberately broken claim is caught
//! in both dialects.
//!
//! `cargo test -p chokaq-mysql --test grammar` with `sqlfluff` (>= 4.5.0) on the `PATH`;
//! without it the trials are ignored (`CHOKAQ_TEST_REQUIRE=sqlfluff` makes that a failure).
//! The shared runner (`chokaq_conformance::grammar::Check`) runs it, with the two adaptations
//! sqlfluff 4.5.0 needs here (docs/mysql.md, "Grammar"):
//!
//! - `?` placeholders are filled by sqlfluff's `placeholder` templater (`question_mark`
//!   style) before parsing;
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

use std::process::ExitCode;

use chokaq_conformance::grammar::{Check, Dialect};

/// How a locking clause the servers take after `ORDER BY` / `LIMIT` starts.
const LOCKING: [&str; 2] = [" FOR UPDATE", " LOCK IN SHARE MODE"];

fn main() -> ExitCode {
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
    Check::new(&[Dialect::Mysql, Dialect::Mariadb])
        .question_mark_placeholders()
        .locking_clauses_apart(&LOCKING)
        .run(statements, broken)
}
