//! Periodic jobs: the `schedules` table (`docs/periodic.md`). Every write runs in one
//! `BEGIN IMMEDIATE` transaction, so the tick's compare-and-set and the job's insert are one
//! atomic unit, and SQLite's single writer orders concurrent schedulers.

use chokaq_core::{Enqueued, Error, Result, ScheduleDef, ScheduleRow, TickOutcome, TickRequest};
use sqlx::sqlite::{SqliteConnection, SqliteRow};
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::bounded::ReadConn;
use crate::enqueue::{insert_one, prepare};
use crate::error::map_err;
use crate::rows::{now_us, opt_ts, ts, ts_us};

fn schedule(row: &SqliteRow) -> Result<ScheduleRow> {
    let g = |c: &str| -> Result<String> { row.try_get(c).map_err(map_err) };
    let n = |c: &str| -> Result<Option<i64>> { row.try_get(c).map_err(map_err) };
    let b = |c: &str| -> Result<bool> { row.try_get::<i64, _>(c).map(|v| v != 0).map_err(map_err) };
    Ok(ScheduleRow {
        name: g("name")?,
        spec: g("spec")?,
        time_zone: g("time_zone")?,
        group: g("group_name")?,
        next_tick: opt_ts(n("next_tick")?)?,
        last_enqueued_tick: opt_ts(n("last_enqueued_tick")?)?,
        enabled: b("enabled")?,
        stale: b("stale")?,
        created_at: ts(row.try_get("created_at").map_err(map_err)?)?,
        updated_at: ts(row.try_get("updated_at").map_err(map_err)?)?,
    })
}

async fn get(b: &SqliteBackend, conn: &mut SqliteConnection, name: &str) -> Result<Option<ScheduleRow>> {
    let row = sqlx::query(&b.sql.schedule_get).bind(name).fetch_optional(&mut *conn).await.map_err(map_err)?;
    row.as_ref().map(schedule).transpose()
}

/// [`chokaq_core::Backend::register_schedule`].
pub(crate) async fn register(b: &SqliteBackend, def: &ScheduleDef) -> Result<ScheduleRow> {
    def.validate()?;
    let next = def.next_tick.map(|t| ts_us("next_tick", t)).transpose()?;
    let mut tx = b.begin_write().await?;
    let row = sqlx::query(&b.sql.schedule_register)
        .bind(&def.name)
        .bind(&def.spec)
        .bind(&def.time_zone)
        .bind(&def.group)
        .bind(next)
        .bind(now_us())
        .bind(i64::from(def.replace))
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
    let Some(row) = row else {
        let existing = get(b, &mut tx, &def.name).await?;
        return Err(match existing {
            Some(r) => def.conflict(&r),
            None => Error::new(chokaq_core::ErrorKind::Other, "schedule upsert returned no row"),
        });
    };
    let row = schedule(&row)?;
    commit(tx).await?;
    Ok(row)
}

/// [`chokaq_core::Backend::enqueue_tick`]: the compare-and-set on the row, then the insert,
/// in one write transaction.
pub(crate) async fn enqueue_tick(b: &SqliteBackend, req: &TickRequest) -> Result<TickOutcome> {
    req.validate(b.max_payload_bytes)?;
    let tick = ts_us("tick", req.tick)?;
    let next = req.next_tick.map(|t| ts_us("next_tick", t)).transpose()?;
    let prepared = prepare(&req.job)?;
    let mut tx = b.begin_write().await?;
    let now = now_us();
    let won: Option<i64> = sqlx::query_scalar(&b.sql.schedule_tick)
        .bind(&req.name)
        .bind(tick)
        .bind(next)
        .bind(now)
        .bind(&req.spec)
        .bind(&req.time_zone)
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
    let out = match won {
        None => {
            let row = get(b, &mut tx, &req.name).await?;
            return Ok(TickOutcome::refused(req, row.as_ref()));
        }
        Some(0) => TickOutcome::Paused,
        Some(_) => TickOutcome::Enqueued(insert_one(b, &mut tx, &req.job, &prepared, now).await?),
    };
    commit(tx).await?;
    if matches!(out, TickOutcome::Enqueued(Enqueued { duplicate: false, .. })) {
        b.notify([req.job.queue.as_str().to_string()]);
    }
    Ok(out)
}

/// [`chokaq_core::Backend::list_schedules`].
pub(crate) async fn list(b: &SqliteBackend) -> Result<Vec<ScheduleRow>> {
    let mut r = ReadConn::open(b).await?;
    let out = sqlx::query(&b.sql.schedule_list).fetch_all(r.conn()).await.map_err(map_err);
    r.finish(out).await?.iter().map(schedule).collect()
}

/// [`chokaq_core::Backend::set_schedule_enabled`].
pub(crate) async fn set_enabled(b: &SqliteBackend, name: &str, enabled: bool) -> Result<ScheduleRow> {
    chokaq_core::validate_schedule_name(name)?;
    let mut tx = b.begin_write().await?;
    let row = sqlx::query(&b.sql.schedule_set_enabled)
        .bind(name)
        .bind(i64::from(enabled))
        .bind(now_us())
        .fetch_optional(&mut *tx)
        .await
        .map_err(map_err)?;
    let row = row.ok_or_else(|| Error::not_found(format!("no schedule named {name:?}")))?;
    let row = schedule(&row)?;
    commit(tx).await?;
    Ok(row)
}

/// [`chokaq_core::Backend::mark_stale_schedules`].
pub(crate) async fn mark_stale(b: &SqliteBackend, group: &str, live: &[String]) -> Result<u64> {
    chokaq_core::validate_live_schedules(group, live)?;
    let names = serde_json::to_string(live)?;
    let mut tx = b.begin_write().await?;
    let n = sqlx::query(&b.sql.schedule_mark_stale)
        .bind(group)
        .bind(names)
        .bind(now_us())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
    commit(tx).await?;
    Ok(n)
}
