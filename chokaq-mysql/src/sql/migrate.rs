//! The statements of the migrate room: the migrator (the migrations themselves are in `migrate.rs`).
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// The newest applied schema version.
pub(super) const NEWEST_VERSION: &str = "SELECT max(version) FROM {schema}.versions";

/// (version, now).
pub(super) const RECORD_VERSION: &str =
    "INSERT INTO {schema}.versions (version, applied_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE version = version";
