//! Periodic jobs: the `schedules` table (`docs/periodic.md`). The tick's compare-and-set and
//! the job's insert are one transaction; the row's lock orders concurrent schedulers.

use chokaq_core::{Error, ErrorKind, Result, ScheduleDef, ScheduleRow, TickOutcome, TickRequest};
use sqlx::mysql::MySqlRow;
use sqlx::MySqlConnection;
use sqlx::Row;

use crate::backend::{commit, MysqlBackend};
use crate::bounded::ReadConn;
use crate::enqueue::{insert_one, prepare};
use crate::error::{map_err, mysql_code, Path, DUP_ENTRY};
use crate::rows::{opt_ts, text, ts, ts_us};

fn schedule(row: &MySqlRow) -> Result<ScheduleRow> {
    let n = |c: &str| -> Result<Option<i64>> { row.try_get(c).map_err(map_err) };
    let b = |c: &str| -> Result<bool> { row.try_get::<i64, _>(c).map(|v| v != 0).map_err(map_err) };
    Ok(ScheduleRow {
        name: text(row, "name")?,
        spec: text(row, "spec")?,
        time_zone: text(row, "time_zone")?,
        group: text(row, "group_name")?,
        next_tick: opt_ts(n("next_tick")?)?,
        last_enqueued_tick: opt_ts(n("last_enqueued_tick")?)?,
        enabled: b("enabled")?,
        stale: b("stale")?,
        created_at: ts(row.try_get("created_at").map_err(map_err)?)?,
        updated_at: ts(row.try_get("updated_at").map_err(map_err)?)?,
    })
}

async fn get(b: &MysqlBackend, conn: &mut MySqlConnection, name: &str) -> Result<Option<ScheduleRow>> {
    let row = sqlx::query(&b.sql.schedule_get).bind(name).fetch_optional(&mut *conn).await.map_err(map_err)?;
    row.as_ref().map(schedule).transpose()
}

/// [`chokaq_core::Backend::register_schedule`]: the row locked, then inserted, taken over
/// (same definition, stale, or `replace`), or refused as a conflict.
pub(crate) async fn register(b: &MysqlBackend, def: &ScheduleDef) -> Result<ScheduleRow> {
    def.validate()?;
    let next = def.next_tick.map(|t| ts_us("next_tick", t)).transpose()?;
    // Two first registrations of one name at once: the second insert meets the first's row
    // (a duplicate key) and goes round again, to find it locked and take the "exists" path.
    for _ in 0..3 {
        let out = b
            .retrying(Path::Other, || async {
                let mut tx = b.begin().await?;
                let now = b.now(&mut tx).await?;
                let existing = sqlx::query(&b.sql.schedule_lock)
                    .bind(&def.name)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(map_err)?;
                match existing.as_ref().map(schedule).transpose()? {
                    None => {
                        let res = sqlx::query(&b.sql.schedule_insert)
                            .bind(&def.name)
                            .bind(&def.spec)
                            .bind(&def.time_zone)
                            .bind(&def.group)
                            .bind(next)
                            .bind(now)
                            .bind(now)
                            .execute(&mut *tx)
                            .await;
                        match res {
                            Ok(_) => {}
                            Err(e) if mysql_code(&e) == Some(DUP_ENTRY) => return Ok(None),
                            Err(e) => return Err(map_err(e)),
                        }
                    }
                    Some(row) => {
                        let same = row.spec == def.spec && row.time_zone == def.time_zone && row.group == def.group;
                        if !(same || row.stale || def.replace) {
                            return Err(def.conflict(&row));
                        }
                        sqlx::query(&b.sql.schedule_update)
                            .bind(&def.spec)
                            .bind(&def.time_zone)
                            .bind(&def.group)
                            .bind(next)
                            .bind(now)
                            .bind(&def.name)
                            .execute(&mut *tx)
                            .await
                            .map_err(map_err)?;
                    }
                }
                let row = get(b, &mut tx, &def.name).await?;
                commit(tx).await?;
                Ok(row)
            })
            .await?;
        if let Some(row) = out {
            return Ok(row);
        }
    }
    Err(Error::new(ErrorKind::Transient, "schedule registration kept meeting concurrent registrations"))
}

/// [`chokaq_core::Backend::enqueue_tick`]: the compare-and-set on the row, then the insert,
/// in one transaction.
pub(crate) async fn enqueue_tick(b: &MysqlBackend, req: &TickRequest) -> Result<TickOutcome> {
    req.validate(b.max_payload_bytes)?;
    let tick = ts_us("tick", req.tick)?;
    let next = req.next_tick.map(|t| ts_us("next_tick", t)).transpose()?;
    let prepared = prepare(&req.job)?;
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        let won = sqlx::query(&b.sql.schedule_tick)
            .bind(tick)
            .bind(next)
            .bind(now)
            .bind(&req.name)
            .bind(&req.spec)
            .bind(&req.time_zone)
            .bind(tick)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        let row = get(b, &mut tx, &req.name).await?;
        if won == 0 {
            tx.rollback().await.map_err(map_err)?;
            return Ok(TickOutcome::refused(req, row.as_ref()));
        }
        let out = match row {
            Some(r) if !r.enabled => TickOutcome::Paused,
            _ => TickOutcome::Enqueued(insert_one(b, &mut tx, &req.job, &prepared, now).await?),
        };
        commit(tx).await?;
        Ok(out)
    })
    .await
}

/// [`chokaq_core::Backend::list_schedules`].
pub(crate) async fn list(b: &MysqlBackend) -> Result<Vec<ScheduleRow>> {
    let mut r = ReadConn::open(b).await?;
    let out = sqlx::query(&b.sql.schedule_list).fetch_all(r.conn()).await.map_err(map_err);
    r.finish(out).await?.iter().map(schedule).collect()
}

/// [`chokaq_core::Backend::set_schedule_enabled`].
pub(crate) async fn set_enabled(b: &MysqlBackend, name: &str, enabled: bool) -> Result<ScheduleRow> {
    chokaq_core::validate_schedule_name(name)?;
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        sqlx::query(&b.sql.schedule_set_enabled)
            .bind(i64::from(enabled))
            .bind(now)
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let row = get(b, &mut tx, name).await?;
        let row = row.ok_or_else(|| Error::not_found(format!("no schedule named {name:?}")))?;
        commit(tx).await?;
        Ok(row)
    })
    .await
}

/// [`chokaq_core::Backend::mark_stale_schedules`].
pub(crate) async fn mark_stale(b: &MysqlBackend, group: &str, live: &[String]) -> Result<u64> {
    chokaq_core::validate_live_schedules(group, live)?;
    let names = serde_json::to_string(live)?;
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        let n = sqlx::query(&b.sql.schedule_mark_stale)
            .bind(now)
            .bind(group)
            .bind(&names)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        commit(tx).await?;
        Ok(n)
    })
    .await
}
