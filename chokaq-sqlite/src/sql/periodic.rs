//! The statements of the periodic room: the schedules table (`docs/periodic.md`).
//! Templates with `{schema}`, rendered once by [`super::Statements::new`].

/// Upsert by name: `?1` name, `?2` spec, `?3` time zone, `?4` group, `?5` next tick, `?6`
/// now, `?7` 1 to replace. An existing row is updated (and returned) only if it holds the
/// same definition, is stale, or `?7` is 1; otherwise nothing is returned (a conflict).
pub(super) const SCHEDULE_REGISTER: &str = concat!(
    "INSERT INTO {schema}.schedules (name, spec, time_zone, group_name, next_tick, enabled, stale, \
     created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, 1, 0, ?6, ?6) \
     ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, time_zone = excluded.time_zone, \
     group_name = excluded.group_name, next_tick = coalesce(excluded.next_tick, next_tick), stale = 0, \
     updated_at = excluded.updated_at \
     WHERE (spec = excluded.spec AND time_zone = excluded.time_zone AND group_name = excluded.group_name) \
     OR stale = 1 OR ?7 = 1 RETURNING ",
    schedule_cols!()
);

/// One schedule row: `?1` name.
pub(super) const SCHEDULE_GET: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = ?1");

/// Every schedule row.
pub(super) const SCHEDULE_LIST: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules ORDER BY name");

/// The tick's compare-and-set: `?1` name, `?2` tick, `?3` next tick, `?4` now, `?5` spec,
/// `?6` time zone. Returns `enabled` when this call won the tick.
pub(super) const SCHEDULE_TICK: &str =
    "UPDATE {schema}.schedules SET last_enqueued_tick = ?2, next_tick = ?3, updated_at = ?4 \
     WHERE name = ?1 AND stale = 0 AND spec = ?5 AND time_zone = ?6 \
     AND (last_enqueued_tick IS NULL OR last_enqueued_tick < ?2) RETURNING enabled";

/// Pause or resume: `?1` name, `?2` enabled (0/1), `?3` now.
pub(super) const SCHEDULE_SET_ENABLED: &str =
    concat!("UPDATE {schema}.schedules SET enabled = ?2, updated_at = ?3 WHERE name = ?1 RETURNING ", schedule_cols!());

/// Marks stale the rows of group `?1` not named in the JSON array `?2`: `?3` now.
pub(super) const SCHEDULE_MARK_STALE: &str = "UPDATE {schema}.schedules SET stale = 1, updated_at = ?3 \
     WHERE group_name = ?1 AND stale = 0 AND name NOT IN (SELECT value FROM json_each(?2))";

/// Opens every write transaction: takes the write lock before the first read.
pub(super) const BEGIN_IMMEDIATE: &str = "BEGIN IMMEDIATE";
