//! The shared conformance suite against SQL Server with READ_COMMITTED_SNAPSHOT OFF (locking
//! read committed) and ALLOW_SNAPSHOT_ISOLATION ON. See `tests/common/mod.rs` for
//! configuration; `conformance_rcsi` runs the same cases with RCSI ON, `conformance_defaults`
//! with both OFF.

mod common;

fn main() -> std::process::ExitCode {
    common::main_for(common::RCSI_OFF)
}
