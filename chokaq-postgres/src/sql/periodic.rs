//! The statements of the periodic room: the schedules table (`docs/periodic.md`).

/// Columns of a `schedules` row.
macro_rules! schedule_cols {
    () => {
        "name, spec, time_zone, group_name, next_tick, last_enqueued_tick, enabled, stale, created_at, updated_at"
    };
}

/// Upsert by name: `$1` name, `$2` spec, `$3` time zone, `$4` group, `$5` next tick, `$6`
/// replace. An existing row is updated (and returned) only if it holds the same definition,
/// is stale, or `$6`; otherwise nothing is returned (a conflict).
pub(super) const SCHEDULE_REGISTER: &str = concat!(
    "
INSERT INTO {schema}.schedules AS s (name, spec, time_zone, group_name, next_tick)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE
   SET spec = excluded.spec, time_zone = excluded.time_zone, group_name = excluded.group_name,
       next_tick = coalesce(excluded.next_tick, s.next_tick), stale = false, updated_at = now()
 WHERE (s.spec = excluded.spec AND s.time_zone = excluded.time_zone AND s.group_name = excluded.group_name)
    OR s.stale OR $6::bool
RETURNING ",
    schedule_cols!()
);

/// One schedule row: `$1` name.
pub(super) const SCHEDULE_GET: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules WHERE name = $1");

/// Every schedule row.
pub(super) const SCHEDULE_LIST: &str = concat!("SELECT ", schedule_cols!(), " FROM {schema}.schedules ORDER BY name");

/// The tick's compare-and-set: `$1` name, `$2` tick, `$3` next tick, `$4` spec, `$5` time
/// zone. A concurrent winner's update makes this one re-check its WHERE on the new row version
/// (READ COMMITTED) or fail with a serialization error (stricter levels; retried): either way
/// it matches no row. Returns `enabled` when this call won the tick.
pub(super) const SCHEDULE_TICK: &str = "
UPDATE {schema}.schedules
   SET last_enqueued_tick = $2, next_tick = $3, updated_at = now()
 WHERE name = $1 AND NOT stale AND spec = $4 AND time_zone = $5
   AND (last_enqueued_tick IS NULL OR last_enqueued_tick < $2)
RETURNING enabled";

/// Pause or resume: `$1` name, `$2` enabled.
pub(super) const SCHEDULE_SET_ENABLED: &str = concat!(
    "UPDATE {schema}.schedules SET enabled = $2, updated_at = now() WHERE name = $1 RETURNING ",
    schedule_cols!()
);

/// Marks stale the rows of group `$1` not named in `$2`.
pub(super) const SCHEDULE_MARK_STALE: &str = "
UPDATE {schema}.schedules SET stale = true, updated_at = now()
 WHERE group_name = $1 AND NOT stale AND NOT (name = ANY($2::text[]))";
