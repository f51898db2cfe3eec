//! Periodic jobs: the `schedules` table (`docs/periodic.md`). `enqueue_tick` is one
//! transaction: the compare-and-set on the schedule row, then the job's insert.

use chokaq_core::{Error, ErrorKind, Result, ScheduleDef, ScheduleRow, TickOutcome, TickRequest};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::enqueue::Target;
use crate::error::{map_sqlx_error, with_retry};
use crate::PgBackend;

fn schedule(row: &PgRow) -> Result<ScheduleRow> {
    let decode = |e: sqlx::Error| Error::with_source(ErrorKind::Other, "decoding a schedules row", e);
    Ok(ScheduleRow {
        name: row.try_get("name").map_err(decode)?,
        spec: row.try_get("spec").map_err(decode)?,
        time_zone: row.try_get("time_zone").map_err(decode)?,
        group: row.try_get("group_name").map_err(decode)?,
        next_tick: row.try_get("next_tick").map_err(decode)?,
        last_enqueued_tick: row.try_get("last_enqueued_tick").map_err(decode)?,
        enabled: row.try_get("enabled").map_err(decode)?,
        stale: row.try_get("stale").map_err(decode)?,
        created_at: row.try_get("created_at").map_err(decode)?,
        updated_at: row.try_get("updated_at").map_err(decode)?,
    })
}

/// How many times `enqueue_tick` runs its transaction again after a transient error
/// (deadlock, serialization failure): safe, the compare-and-set decides again.
const TICK_TRIES: u32 = 5;

impl PgBackend {
    async fn schedule_on(&self, conn: &mut PgConnection, name: &str) -> Result<Option<ScheduleRow>> {
        let row =
            sqlx::query(&self.sql().schedule_get).bind(name).fetch_optional(conn).await.map_err(map_sqlx_error)?;
        row.as_ref().map(schedule).transpose()
    }

    pub(crate) async fn register_schedule_impl(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        def.validate()?;
        let row = with_retry(|| {
            sqlx::query(&self.sql().schedule_register)
                .bind(&def.name)
                .bind(&def.spec)
                .bind(&def.time_zone)
                .bind(&def.group)
                .bind(def.next_tick)
                .bind(def.replace)
                .fetch_optional(&self.kept)
        })
        .await?;
        match row {
            Some(row) => schedule(&row),
            None => {
                let existing =
                    with_retry(|| sqlx::query(&self.sql().schedule_get).bind(&def.name).fetch_optional(&self.kept))
                        .await?;
                Err(match existing.as_ref().map(schedule).transpose()? {
                    Some(r) => def.conflict(&r),
                    None => Error::new(ErrorKind::Transient, "schedule row vanished during registration; try again"),
                })
            }
        }
    }

    async fn tick_once(&self, req: &TickRequest) -> Result<TickOutcome> {
        let mut tx = self.kept.begin().await.map_err(map_sqlx_error)?;
        let won: Option<bool> = sqlx::query_scalar(&self.sql().schedule_tick)
            .bind(&req.name)
            .bind(req.tick)
            .bind(req.next_tick)
            .bind(&req.spec)
            .bind(&req.time_zone)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_sqlx_error)?;
        let out = match won {
            None => {
                let row = self.schedule_on(&mut tx, &req.name).await?;
                return Ok(TickOutcome::refused(req, row.as_ref()));
            }
            Some(false) => TickOutcome::Paused,
            Some(true) => {
                let (rows, slots) = self.prepare(vec![req.job.clone()])?;
                let mut out = self.enqueue_on(Target::Conn(&mut tx), &rows, &slots).await?;
                TickOutcome::Enqueued(out.pop().ok_or_else(|| Error::new(ErrorKind::Other, "enqueue lost the job"))?)
            }
        };
        tx.commit().await.map_err(map_sqlx_error)?;
        Ok(out)
    }

    pub(crate) async fn enqueue_tick_impl(&self, req: &TickRequest) -> Result<TickOutcome> {
        req.validate(self.shared.max_payload_bytes)?;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.tick_once(req).await {
                Err(e) if e.kind() == ErrorKind::Transient && tries < TICK_TRIES => {
                    tokio::time::sleep(std::time::Duration::from_millis(5 * u64::from(tries))).await;
                }
                other => return other,
            }
        }
    }

    pub(crate) async fn list_schedules_impl(&self) -> Result<Vec<ScheduleRow>> {
        let q = || sqlx::query(&self.sql().schedule_list);
        let rows = match self.read_deadline {
            Some(d) => {
                let mut s = crate::bounded::Session::open(self, d).await?;
                let r = q().fetch_all(s.conn()).await;
                s.finish(r).await?
            }
            None => with_retry(|| q().fetch_all(&self.kept)).await?,
        };
        rows.iter().map(schedule).collect()
    }

    pub(crate) async fn set_schedule_enabled_impl(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        chokaq_core::validate_schedule_name(name)?;
        let row = with_retry(|| {
            sqlx::query(&self.sql().schedule_set_enabled).bind(name).bind(enabled).fetch_optional(&self.kept)
        })
        .await?;
        let row = row.ok_or_else(|| Error::not_found(format!("no schedule named {name:?}")))?;
        schedule(&row)
    }

    pub(crate) async fn mark_stale_schedules_impl(&self, group: &str, live: &[String]) -> Result<u64> {
        chokaq_core::validate_live_schedules(group, live)?;
        let done =
            with_retry(|| sqlx::query(&self.sql().schedule_mark_stale).bind(group).bind(live).execute(&self.kept))
                .await?;
        Ok(done.rows_affected())
    }
}
