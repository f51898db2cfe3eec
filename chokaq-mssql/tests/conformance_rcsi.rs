//! The shared conformance suite against SQL Server with READ_COMMITTED_SNAPSHOT ON (row
//! versioning for read committed) and ALLOW_SNAPSHOT_ISOLATION ON: the cap must stay strict
//! here too. See `tests/common/mod.rs` for configuration.

mod common;

fn main() -> std::process::ExitCode {
    common::main_for(common::RCSI_ON)
}
