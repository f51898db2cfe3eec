//! The shared conformance suite against SQL Server with READ_COMMITTED_SNAPSHOT OFF (locking
//! read committed). See `tests/common/mod.rs` for configuration; `conformance_rcsi` runs the
//! same cases with RCSI ON.

mod common;

fn main() -> std::process::ExitCode {
    common::main_for(false)
}
