//! The statements of the periodic room: the schedules table (`docs/periodic.md`).
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// One schedule row, locked: (name).
pub(super) const SCHEDULE_LOCK: &str =
    concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = ? FOR UPDATE");

/// One schedule row: (name).
pub(super) const SCHEDULE_GET: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = ?");

/// Every schedule row.
pub(super) const SCHEDULE_LIST: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules ORDER BY name");

/// (name, spec, time zone, group, next tick, now, now).
pub(super) const SCHEDULE_INSERT: &str =
    "INSERT INTO {schema}.schedules (name, spec, time_zone, group_name, next_tick, enabled, stale, \
     created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, 0, ?, ?)";

/// Takes over an existing row: (spec, time zone, group, next tick, now, name).
pub(super) const SCHEDULE_UPDATE: &str = "UPDATE {schema}.schedules SET spec = ?, time_zone = ?, group_name = ?, \
     next_tick = COALESCE(?, next_tick), stale = 0, updated_at = ? WHERE name = ?";

/// The tick's compare-and-set: (tick, next tick, now, name, spec, time zone, tick). One
/// row changed when this call won the tick.
pub(super) const SCHEDULE_TICK: &str =
    "UPDATE {schema}.schedules SET last_enqueued_tick = ?, next_tick = ?, updated_at = ? \
     WHERE name = ? AND stale = 0 AND spec = ? AND time_zone = ? \
     AND (last_enqueued_tick IS NULL OR last_enqueued_tick < ?)";

/// Pause or resume: (enabled 0/1, now, name).
pub(super) const SCHEDULE_SET_ENABLED: &str =
    "UPDATE {schema}.schedules SET enabled = ?, updated_at = ? WHERE name = ?";

/// Marks stale the rows of a group not named in a JSON array: (now, group, names JSON).
pub(super) const SCHEDULE_MARK_STALE: &str = "UPDATE {schema}.schedules SET stale = 1, updated_at = ? \
     WHERE group_name = ? AND stale = 0 AND NOT JSON_CONTAINS(?, JSON_QUOTE(CONVERT(name USING utf8mb4)))";
