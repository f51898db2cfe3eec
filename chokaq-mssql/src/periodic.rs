//! Periodic jobs on SQL Server: the `Schedules` table (`docs/periodic.md`).

use chokaq_core::{Error, ErrorKind, JobId, Result, ScheduleDef, ScheduleRow, TickOutcome, TickRequest, Timestamp};
use tiberius::Row;

use crate::backend::MssqlBackend;

use crate::rows::{check_ts, decode_enqueued, job_json, last_set, req, req_ts, ts};

fn schedule(op: &str, row: &Row) -> Result<ScheduleRow> {
    let text = |name: &str| -> Result<String> { req::<&str>(op, row, name).map(str::to_owned) };
    Ok(ScheduleRow {
        name: text("Name")?,
        spec: text("Spec")?,
        time_zone: text("TimeZone")?,
        group: text("GroupName")?,
        next_tick: ts(op, row, "NextTickUtc")?,
        last_enqueued_tick: ts(op, row, "LastEnqueuedTickUtc")?,
        enabled: req(op, row, "Enabled")?,
        stale: req(op, row, "Stale")?,
        created_at: req_ts(op, row, "CreatedAtUtc")?,
        updated_at: req_ts(op, row, "UpdatedAtUtc")?,
    })
}

fn check_tick(what: &str, t: Option<Timestamp>) -> Result<()> {
    check_ts(what, t)
}

impl MssqlBackend {
    async fn schedule_by_name(&self, op: &'static str, name: &str) -> Result<Option<ScheduleRow>> {
        let rows = last_set(self.run(op, &self.sql().schedule_get, &[&name]).await?);
        rows.first().map(|r| schedule(op, r)).transpose()
    }

    pub(crate) async fn register_schedule_impl(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        def.validate()?;
        check_tick("next_tick", def.next_tick)?;
        let op = "register_schedule";
        let params: [&dyn tiberius::ToSql; 6] =
            [&def.name, &def.spec, &def.time_zone, &def.group, &def.next_tick, &def.replace];
        let rows = last_set(self.run(op, &self.sql().schedule_register, &params).await?);
        let row = rows.first().ok_or_else(|| Error::new(ErrorKind::Other, "schedule upsert returned no row"))?;
        let row = schedule(op, row)?;
        if def.same_as(&row) {
            Ok(row)
        } else {
            Err(def.conflict(&row))
        }
    }

    pub(crate) async fn enqueue_tick_impl(&self, req_: &TickRequest) -> Result<TickOutcome> {
        req_.validate(self.config().max_payload_bytes)?;
        check_tick("tick", Some(req_.tick))?;
        check_tick("next_tick", req_.next_tick)?;
        let op = "enqueue_tick";
        let job = serde_json::Value::Array(vec![job_json(0, JobId::new(), &req_.job)?]).to_string();
        let params: [&dyn tiberius::ToSql; 6] =
            [&job, &req_.name, &req_.tick, &req_.next_tick, &req_.spec, &req_.time_zone];
        let mut attempt = 0;
        let rows = loop {
            match self.run(op, &self.sql().enqueue_tick, &params).await {
                // A unique-index race on the job's key: the transaction rolled back whole, the
                // compare-and-set with it; running it again decides again.
                Err(e) if e.kind() == ErrorKind::Conflict && attempt < 3 => attempt += 1,
                other => break last_set(other?),
            }
        };
        if let Some(won) = rows.first().and_then(|r| r.try_get::<bool, _>("TickWon").ok().flatten()) {
            if won {
                return Ok(TickOutcome::Paused);
            }
            let row = self.schedule_by_name(op, &req_.name).await?;
            return Ok(TickOutcome::refused(req_, row.as_ref()));
        }
        let mut out = decode_enqueued(op, &rows, 1)?;
        Ok(TickOutcome::Enqueued(out.pop().ok_or_else(|| Error::new(ErrorKind::Other, "enqueue lost the job"))?))
    }

    pub(crate) async fn list_schedules_impl(&self) -> Result<Vec<ScheduleRow>> {
        let op = "list_schedules";
        let rows = last_set(self.read(op, &self.sql().schedule_list, &[]).await?);
        rows.iter().map(|r| schedule(op, r)).collect()
    }

    pub(crate) async fn set_schedule_enabled_impl(&self, name: &str, enabled: bool) -> Result<ScheduleRow> {
        chokaq_core::validate_schedule_name(name)?;
        let op = "set_schedule_enabled";
        let rows = last_set(self.run(op, &self.sql().schedule_set_enabled, &[&name, &enabled]).await?);
        let row = rows.first().ok_or_else(|| Error::not_found(format!("no schedule named {name:?}")))?;
        schedule(op, row)
    }

    pub(crate) async fn mark_stale_schedules_impl(&self, group: &str, live: &[String]) -> Result<u64> {
        chokaq_core::validate_live_schedules(group, live)?;
        let op = "mark_stale_schedules";
        let names = serde_json::to_string(live)?;
        let rows = last_set(self.run(op, &self.sql().schedule_mark_stale, &[&group, &names]).await?);
        let n: i64 = rows.first().map(|r| req(op, r, "Marked")).transpose()?.unwrap_or(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
