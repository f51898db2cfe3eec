//! Core values as bound parameters: ids as `BINARY(16)` bytes (and 32-hex text inside JSON),
//! leases and jobs as ONE JSON document each, delays split for `DATEADD`, instants checked
//! against `DATETIME2`'s range, and the small codes some statements take.

use std::time::Duration;

use chokaq_core::{
    DeadReason, Error, FailAction, JobId, LeaseRef, NewJob, QueueControl, Result, RunAt, Timestamp, ZombiePolicy,
};

pub(crate) fn hex_id(id: JobId) -> String {
    id.0.simple().to_string()
}

pub(crate) fn id_bytes(id: JobId) -> Vec<u8> {
    id.0.as_bytes().to_vec()
}

/// The leases as one JSON document, sorted by id so multi-row writes tend to lock rows in id
/// order (`docs/contract.md`, database rules; a deadlock that still happens is retried).
pub(crate) fn leases_json(leases: &[LeaseRef]) -> String {
    let mut sorted: Vec<&LeaseRef> = leases.iter().collect();
    sorted.sort_by_key(|l| l.id);
    let v: Vec<serde_json::Value> =
        sorted.iter().map(|l| serde_json::json!({"id": hex_id(l.id), "lease": l.lease.0})).collect();
    serde_json::Value::Array(v).to_string()
}

/// Splits a delay into whole seconds and nanoseconds for `DATEADD`.
pub(crate) fn delay_parts(what: &str, d: Duration) -> Result<(i32, i32)> {
    let secs = i32::try_from(d.as_secs())
        .map_err(|_| Error::invalid(format!("{what} is too long: {d:?} (at most about 68 years)")))?;
    Ok((secs, d.subsec_nanos() as i32))
}

/// A duration in milliseconds for `DATEADD` (whose seconds must fit an `INT`).
pub(crate) fn millis(what: &str, d: Duration) -> Result<i64> {
    if d.as_secs() > i32::MAX as u64 {
        return Err(Error::invalid(format!("{what} is too long: {d:?} (at most about 68 years)")));
    }
    i64::try_from(d.as_millis()).map_err(|_| Error::invalid(format!("{what} is too long: {d:?}")))
}

/// Rejects instants outside `DATETIME2`'s years 1 to 9999 before they reach the driver.
pub(crate) fn check_ts(what: &str, ts: Option<Timestamp>) -> Result<()> {
    use chokaq_core::chrono::Datelike;
    match ts {
        Some(t) if !(1..=9999).contains(&t.year()) => {
            Err(Error::invalid(format!("{what} {t} is outside SQL Server's DATETIME2 range")))
        }
        _ => Ok(()),
    }
}

/// `yyyy-mm-ddThh:mm:ss.fffffff` (100 ns ticks, the precision of `DATETIME2(7)`).
fn datetime2_text(ts: Timestamp) -> String {
    use chokaq_core::chrono::Timelike;
    let n = ts.naive_utc();
    format!("{}.{:07}", n.format("%Y-%m-%dT%H:%M:%S"), (n.nanosecond() % 1_000_000_000) / 100)
}

pub(crate) fn job_json(ord: usize, id: JobId, job: &NewJob) -> Result<serde_json::Value> {
    let (at, ds, dn) = match job.run_at {
        RunAt::Now => (None, None, None),
        RunAt::At(ts) => {
            check_ts("run_at", Some(ts))?;
            (Some(datetime2_text(ts)), None, None)
        }
        RunAt::After(d) => {
            let (s, n) = delay_parts("delay", d)?;
            (None, Some(s), Some(n))
        }
    };
    let tags = if job.tags.is_empty() { None } else { Some(serde_json::to_string(&job.tags)?) };
    Ok(serde_json::json!({
        "o": ord,
        "id": hex_id(id),
        "q": job.queue.as_str(),
        "k": job.kind.as_str(),
        "p": serde_json::to_string(&job.payload)?,
        "t": tags,
        "key": job.idempotency_key,
        "pr": job.priority,
        "ma": job.max_attempts,
        "at": at,
        "ds": ds,
        "dn": dn,
        "by": job.created_by,
        "ck": job.concurrency_key,
    }))
}

/// A unique job's key as the `@P2` document of the unique enqueue (`sql/unique.rs`).
pub(crate) fn unique_json(key: &chokaq_core::UniqueKey) -> Result<String> {
    check_ts("unique period end", key.expires_at)?;
    Ok(serde_json::json!({
        "key": key.key,
        "states": key.states.bits(),
        "settings": key.settings,
        "exp": key.expires_at.map(datetime2_text),
    })
    .to_string())
}

/// A dead-letter reason as stored (`failed`, `cancelled`, …).
pub(crate) fn dead_reason_text(r: DeadReason) -> String {
    r.as_str().to_string()
}

/// `fail`'s action as the statement's parameters: action code (0 retry, 1 snooze,
/// 2 dead-letter), delay, error text, dead-letter reason.
pub(crate) fn fail_action(action: FailAction) -> (i16, Duration, Option<String>, DeadReason) {
    match action {
        FailAction::Retry { delay, error } => (0, delay, Some(error), DeadReason::Failed),
        FailAction::Snooze { delay } => (1, delay, None, DeadReason::Failed),
        FailAction::DeadLetter { reason, error } => (2, Duration::ZERO, Some(error), reason),
        FailAction::Cancelled { error } => (2, Duration::ZERO, error, DeadReason::Cancelled),
    }
}

/// `control_queue`'s parameters, in their order (`@P2` to `@P9`; `@P1` is the queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ControlParams {
    /// The op code.
    pub(crate) code: i16,
    /// `MaxWorkers` (op 5).
    pub(crate) max: Option<i32>,
    /// A timeout in ms: zombie (op 6) or fetched (op 8).
    pub(crate) timeout_ms: Option<i64>,
    /// The zombie policy (op 7).
    pub(crate) policy: Option<i16>,
    /// `KeyMaxWorkers` (op 9).
    pub(crate) key_max: Option<i32>,
    /// `RateJobs`, `RatePerMs`, `RateByKey` (op 10; all `None` clears the limit).
    pub(crate) rate_jobs: Option<i32>,
    pub(crate) rate_per_ms: Option<i64>,
    pub(crate) rate_by_key: Option<bool>,
}

/// A queue control as [`ControlParams`] (op 1 pause, 2 resume, 3 activate, 4 deactivate,
/// 5 set max workers, 6 set zombie timeout, 7 set zombie policy, 8 set fetched timeout,
/// 9 set the per-key cap, 10 set the rate limit). The caller ran `control.validate()`.
pub(crate) fn control_params(control: QueueControl) -> Result<ControlParams> {
    let mut p = ControlParams::default();
    let too_large = |what: &str, n: u32| Error::invalid(format!("{what} {n} is too large"));
    p.code = match control {
        QueueControl::Pause => 1,
        QueueControl::Resume => 2,
        QueueControl::Activate => 3,
        QueueControl::Deactivate => 4,
        QueueControl::SetMaxWorkers(n) => {
            p.max = n.map(|n| i32::try_from(n).map_err(|_| too_large("max_workers", n))).transpose()?;
            5
        }
        QueueControl::SetZombieTimeout(d) => {
            p.timeout_ms = d.map(|d| millis("zombie_timeout", d)).transpose()?;
            6
        }
        QueueControl::SetKeyMaxWorkers(n) => {
            p.key_max = n.map(|n| i32::try_from(n).map_err(|_| too_large("key_max_workers", n))).transpose()?;
            9
        }
        QueueControl::SetRateLimit(limit) => {
            if let Some(l) = limit {
                l.validate()?;
                p.rate_jobs = Some(i32::try_from(l.jobs).map_err(|_| too_large("rate limit jobs", l.jobs))?);
                p.rate_per_ms = Some(l.per_millis());
                p.rate_by_key = Some(l.by_key);
            }
            10
        }
        QueueControl::SetFetchedTimeout(d) => {
            p.timeout_ms = d.map(|d| millis("fetched_timeout", d)).transpose()?;
            8
        }
        QueueControl::SetZombiePolicy(z) => {
            p.policy = Some(match z {
                ZombiePolicy::Retry => 0,
                ZombiePolicy::DeadLetter => 1,
            });
            7
        }
    };
    Ok(p)
}

#[cfg(test)]
mod tests {
    use chokaq_core::chrono::{TimeZone, Utc};
    use chokaq_core::uuid::Uuid;
    use chokaq_core::{ErrorKind, Lease};

    use super::*;

    #[test]
    fn leases_travel_as_one_json_document() {
        let id = JobId(Uuid::parse_str("0190f3a1-2b3c-7d4e-8f00-112233445566").unwrap());
        let json = leases_json(&[LeaseRef { id, lease: Lease(42) }]);
        assert_eq!(json, r#"[{"id":"0190f3a12b3c7d4e8f00112233445566","lease":42}]"#);
        assert_eq!(id_bytes(id).len(), 16);
        assert_eq!(id_bytes(id)[0], 0x01);
    }

    #[test]
    fn job_documents_carry_schedule_and_text_safely() {
        let at =
            Utc.with_ymd_and_hms(2026, 11, 30, 5, 6, 7).unwrap() + chokaq_core::chrono::Duration::nanoseconds(1234500);
        let job = NewJob::build("mail", "email.send.v1")
            .unwrap()
            .json(serde_json::json!({"to": "a'b\"; DROP TABLE x; --", "n": 1}))
            .run_at(at)
            .idempotency_key("k-1")
            .tag("t1");
        let v = job_json(3, JobId::new(), &job).unwrap();
        assert_eq!(v["o"], 3);
        assert_eq!(v["at"], "2026-11-30T05:06:07.0012345");
        assert_eq!(v["ds"], serde_json::Value::Null);
        assert_eq!(v["t"], r#"["t1"]"#);
        let payload: serde_json::Value = serde_json::from_str(v["p"].as_str().unwrap()).unwrap();
        assert_eq!(payload["to"], "a'b\"; DROP TABLE x; --");

        let job = NewJob::build("mail", "k").unwrap().delay(Duration::new(90, 500));
        let v = job_json(0, JobId::new(), &job).unwrap();
        assert_eq!((v["ds"].as_i64(), v["dn"].as_i64()), (Some(90), Some(500)));
        assert_eq!(v["t"], serde_json::Value::Null);
    }

    /// Issue 25: the per-key cap and the rate limit as `control_queue`'s parameters (ops 9
    /// and 10); `SetRateLimit(None)` clears all three rate columns; a limit out of range is
    /// `InvalidInput` here too (the backend also runs `control.validate()` first).
    #[test]
    fn keyed_caps_and_rate_limits_become_control_parameters() {
        use chokaq_core::RateLimit;
        let p = control_params(QueueControl::SetKeyMaxWorkers(Some(0))).unwrap();
        assert_eq!((p.code, p.key_max, p.rate_jobs), (9, Some(0), None));
        let p = control_params(QueueControl::SetKeyMaxWorkers(None)).unwrap();
        assert_eq!((p.code, p.key_max), (9, None));
        let limit = RateLimit::new(500, Duration::from_secs(1)).by_key();
        let p = control_params(QueueControl::SetRateLimit(Some(limit))).unwrap();
        assert_eq!((p.code, p.rate_jobs, p.rate_per_ms, p.rate_by_key), (10, Some(500), Some(1000), Some(true)));
        let p = control_params(QueueControl::SetRateLimit(None)).unwrap();
        assert_eq!((p.code, p.rate_jobs, p.rate_per_ms, p.rate_by_key), (10, None, None, None));
        for bad in [
            RateLimit::new(0, Duration::from_secs(1)),
            RateLimit::new(1, Duration::from_micros(500)),
            RateLimit::new(1, Duration::from_secs(2 * 86_400)),
        ] {
            let e = control_params(QueueControl::SetRateLimit(Some(bad))).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
        }
        // The enqueue document carries the key.
        let job = NewJob::build("q", "k").unwrap().concurrency_key("tenant-42");
        assert_eq!(job_json(0, JobId::new(), &job).unwrap()["ck"], "tenant-42");
        assert_eq!(
            job_json(0, JobId::new(), &NewJob::build("q", "k").unwrap()).unwrap()["ck"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn delays_out_of_range_are_invalid_input() {
        let e = delay_parts("delay", Duration::from_secs(u64::from(u32::MAX))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(delay_parts("delay", Duration::from_millis(1500)).unwrap(), (1, 500_000_000));
        let job = NewJob::build("q", "k").unwrap().delay(Duration::from_secs(u64::MAX / 2));
        assert_eq!(job_json(0, JobId::new(), &job).unwrap_err().kind(), ErrorKind::InvalidInput);
        let far = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        let job = NewJob::build("q", "k").unwrap().run_at(far);
        assert_eq!(job_json(0, JobId::new(), &job).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(millis("t", Duration::from_secs(u64::from(u32::MAX))).unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(millis("t", Duration::from_millis(1500)).unwrap(), 1500);
    }
}
