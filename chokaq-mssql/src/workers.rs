//! The workers table (live worker processes) and the finished-jobs throughput:
//! [`chokaq_core::Backend::register_worker`], `deregister_worker`, `list_workers`,
//! `prune_workers` and `throughput`.

use chokaq_core::uuid::Uuid;
use chokaq_core::{
    Error, ErrorKind, Result, ThroughputBucket, ThroughputParams, WorkerId, WorkerProcess, WorkerRegistration,
};

use crate::rows::{count, first_row, last_set, millis, req, req_ts};

use crate::backend::MssqlBackend;

/// [`chokaq_core::Backend::register_worker`].
pub(crate) async fn register_worker(b: &MssqlBackend, reg: &WorkerRegistration) -> Result<()> {
    let op = "register_worker";
    reg.validate()?;
    let queues: Vec<&str> = reg.queues.iter().map(|q| q.as_str()).collect();
    let queues = serde_json::to_string(&queues)?;
    let (host, pid, concurrency) = (reg.host.clone(), i64::from(reg.pid), i64::from(reg.concurrency));
    b.run(op, &b.sql().register_worker, &[&reg.worker.0, &host, &pid, &queues, &concurrency]).await?;
    Ok(())
}

/// [`chokaq_core::Backend::deregister_worker`].
pub(crate) async fn deregister_worker(b: &MssqlBackend, worker: WorkerId) -> Result<bool> {
    let op = "deregister_worker";
    let row = first_row(op, b.run(op, &b.sql().deregister_worker, &[&worker.0]).await?)?;
    Ok(count(op, &row, "Deleted")? > 0)
}

/// [`chokaq_core::Backend::list_workers`].
pub(crate) async fn list_workers(b: &MssqlBackend) -> Result<Vec<WorkerProcess>> {
    let op = "list_workers";
    let rows = last_set(b.read(op, &b.sql().list_workers, &[]).await?);
    let bad = |what: &str| Error::new(ErrorKind::Other, format!("{op}: unexpected stored {what}"));
    rows.iter()
        .map(|r| {
            let queues: &str = req(op, r, "Queues")?;
            Ok(WorkerProcess {
                worker: WorkerId(req::<Uuid>(op, r, "WorkerId")?),
                host: req::<&str>(op, r, "Host")?.to_string(),
                pid: u32::try_from(req::<i64>(op, r, "Pid")?).map_err(|_| bad("pid"))?,
                queues: serde_json::from_str(queues).map_err(|_| bad("queues"))?,
                concurrency: u32::try_from(req::<i64>(op, r, "Concurrency")?).map_err(|_| bad("concurrency"))?,
                started_at: req_ts(op, r, "StartedAtUtc")?,
                last_seen_at: req_ts(op, r, "LastSeenAtUtc")?,
            })
        })
        .collect::<Result<Vec<_>>>()
}

/// [`chokaq_core::Backend::prune_workers`].
pub(crate) async fn prune_workers(b: &MssqlBackend, stale_after: std::time::Duration) -> Result<u64> {
    let op = "prune_workers";
    let ms = millis("stale_after", stale_after)?;
    let row = first_row(op, b.run(op, &b.sql().prune_workers, &[&ms]).await?)?;
    count(op, &row, "Deleted")
}

/// [`chokaq_core::Backend::throughput`].
pub(crate) async fn throughput(b: &MssqlBackend, params: &ThroughputParams) -> Result<Vec<ThroughputBucket>> {
    let op = "throughput";
    params.validate()?;
    let ms = millis("window", params.window)?;
    let sets = match &params.queue {
        None => b.read(op, &b.sql().throughput_all, &[&ms]).await?,
        Some(q) => {
            let name = q.as_str().to_string();
            b.read(op, &b.sql().throughput_queue, &[&ms, &name]).await?
        }
    };
    last_set(sets)
        .iter()
        .map(|r| {
            Ok(ThroughputBucket {
                queue: req::<&str>(op, r, "Queue")?.to_string(),
                minute: req_ts(op, r, "Minute")?,
                finished: count(op, r, "Finished")?,
                failed: count(op, r, "Failed")?,
                retried: count(op, r, "Retried")?,
            })
        })
        .collect::<Result<Vec<_>>>()
}
