//! The shared conformance suite against SQL Server's own default configuration, the one most
//! on-premises databases run: READ_COMMITTED_SNAPSHOT OFF and ALLOW_SNAPSHOT_ISOLATION OFF.
//! Every plain read is a locking read here, so this is where `stats` and `get_job` must stay
//! consistent without any row versioning. See `tests/common/mod.rs` for configuration.

mod common;

fn main() -> std::process::ExitCode {
    common::main_for(common::DEFAULTS)
}
