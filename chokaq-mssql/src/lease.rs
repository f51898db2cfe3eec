//! The guarded writes of a held lease: [`chokaq_core::Backend::start`], `heartbeat`,
//! `complete`, `fail` and `release`. Each names the lease (fencing token) and reports lost
//! leases per id.

use chokaq_core::{
    validate, BatchOutcome, FailAction, FailOutcome, Fenced, HeartbeatReport, LeaseRef, Result, WorkerId,
};

use crate::rows::{
    dead_reason_text, decode_fail, delay_parts, fail_action, first_row, heartbeat_report, id_bytes, ids_of, last_set,
    leases_json, outcome,
};

use crate::backend::MssqlBackend;

/// [`chokaq_core::Backend::start`].
pub(crate) async fn start(b: &MssqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("start", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let json = leases_json(leases);
    let rows = last_set(b.run("start", &b.sql().start, &[&json, &worker.0]).await?);
    Ok(outcome(leases, &ids_of("start", &rows)?))
}

/// [`chokaq_core::Backend::heartbeat`].
pub(crate) async fn heartbeat(b: &MssqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<HeartbeatReport> {
    let op = "heartbeat";
    validate::lease_list(op, leases)?;
    if leases.is_empty() {
        return Ok(HeartbeatReport::default());
    }
    let json = leases_json(leases);
    let rows = last_set(b.run(op, &b.sql().heartbeat, &[&json, &worker.0]).await?);
    heartbeat_report(op, leases, &rows)
}

/// [`chokaq_core::Backend::complete`].
pub(crate) async fn complete(b: &MssqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("complete", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let json = leases_json(leases);
    let rows = last_set(b.run("complete", &b.sql().complete, &[&json, &worker.0]).await?);
    Ok(outcome(leases, &ids_of("complete", &rows)?))
}

/// [`chokaq_core::Backend::fail`].
pub(crate) async fn fail(
    b: &MssqlBackend,
    worker: WorkerId,
    lease: LeaseRef,
    action: FailAction,
) -> Result<Fenced<FailOutcome>> {
    let op = "fail";
    action.validate()?;
    let (code, delay, error, reason) = fail_action(action);
    let (secs, nanos) = delay_parts("retry delay", delay)?;
    let error = error.map(|e| validate::error_text(&e));
    let reason_text = dead_reason_text(reason);
    let id = id_bytes(lease.id);
    let row = first_row(
        op,
        b.run(op, &b.sql().fail, &[&id, &lease.lease.0, &worker.0, &code, &secs, &nanos, &error, &reason_text]).await?,
    )?;
    decode_fail(op, &row)
}

/// [`chokaq_core::Backend::release`].
pub(crate) async fn release(b: &MssqlBackend, worker: WorkerId, leases: &[LeaseRef]) -> Result<BatchOutcome> {
    validate::lease_list("release", leases)?;
    if leases.is_empty() {
        return Ok(BatchOutcome::default());
    }
    let json = leases_json(leases);
    let rows = last_set(b.run("release", &b.sql().release, &[&json, &worker.0]).await?);
    Ok(outcome(leases, &ids_of("release", &rows)?))
}
