//! Periodic jobs, the schedules table: [`crate::Backend::register_schedule`], `enqueue_tick`,
//! `list_schedules`, `set_schedule_enabled` and `mark_stale_schedules`.

use crate::{Error, Result, ScheduleDef, ScheduleRow, TickOutcome, TickRequest};

use super::MemoryBackend;

/// [`crate::Backend::register_schedule`].
pub(crate) async fn register_schedule(b: &MemoryBackend, def: &ScheduleDef) -> Result<ScheduleRow> {
    def.validate()?;
    let mut s = b.lock();
    let at = b.now();
    let row = match s.schedules.get_mut(&def.name) {
        Some(r) => {
            if !def.same_as(r) && !r.stale && !def.replace {
                return Err(def.conflict(r));
            }
            r.spec.clone_from(&def.spec);
            r.time_zone.clone_from(&def.time_zone);
            r.group.clone_from(&def.group);
            r.next_tick = def.next_tick.or(r.next_tick);
            r.stale = false;
            r.updated_at = at;
            r.clone()
        }
        None => {
            let r = ScheduleRow {
                name: def.name.clone(),
                spec: def.spec.clone(),
                time_zone: def.time_zone.clone(),
                group: def.group.clone(),
                next_tick: def.next_tick,
                last_enqueued_tick: None,
                enabled: true,
                stale: false,
                created_at: at,
                updated_at: at,
            };
            s.schedules.insert(def.name.clone(), r.clone());
            r
        }
    };
    Ok(row)
}

/// [`crate::Backend::enqueue_tick`].
pub(crate) async fn enqueue_tick(b: &MemoryBackend, req: &TickRequest) -> Result<TickOutcome> {
    req.validate(b.max_payload_bytes)?;
    let mut s = b.lock();
    let at = b.now();
    let won = s.schedules.get(&req.name).is_some_and(|r| {
        !r.stale
            && r.spec == req.spec
            && r.time_zone == req.time_zone
            && r.last_enqueued_tick.is_none_or(|last| last < req.tick)
    });
    if !won {
        return Ok(TickOutcome::refused(req, s.schedules.get(&req.name)));
    }
    let mut enabled = false;
    if let Some(r) = s.schedules.get_mut(&req.name) {
        r.last_enqueued_tick = Some(req.tick);
        r.next_tick = req.next_tick;
        r.updated_at = at;
        enabled = r.enabled;
    }
    if !enabled {
        return Ok(TickOutcome::Paused);
    }
    Ok(TickOutcome::Enqueued(MemoryBackend::insert(&mut s, req.job.clone(), at)?))
}

/// [`crate::Backend::list_schedules`].
pub(crate) async fn list_schedules(b: &MemoryBackend) -> Result<Vec<ScheduleRow>> {
    Ok(b.lock().schedules.values().cloned().collect())
}

/// [`crate::Backend::set_schedule_enabled`].
pub(crate) async fn set_schedule_enabled(b: &MemoryBackend, name: &str, enabled: bool) -> Result<ScheduleRow> {
    crate::validate_schedule_name(name)?;
    let mut s = b.lock();
    let r = s.schedules.get_mut(name).ok_or_else(|| Error::not_found(format!("no schedule named {name:?}")))?;
    r.enabled = enabled;
    r.updated_at = b.now();
    Ok(r.clone())
}

/// [`crate::Backend::mark_stale_schedules`].
pub(crate) async fn mark_stale_schedules(b: &MemoryBackend, group: &str, live: &[String]) -> Result<u64> {
    crate::validate_live_schedules(group, live)?;
    let mut s = b.lock();
    let at = b.now();
    let mut n = 0;
    for r in s.schedules.values_mut() {
        if r.group == group && !r.stale && !live.contains(&r.name) {
            r.stale = true;
            r.updated_at = at;
            n += 1;
        }
    }
    Ok(n)
}
