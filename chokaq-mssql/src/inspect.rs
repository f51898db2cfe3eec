//! Reads: [`chokaq_core::Backend::queue_settings`], `stats` and `get_job` (`list_jobs` is in
//! [`crate::list`]).

use chokaq_core::{Error, ErrorKind, JobId, JobRecord, QueueName, QueueSettings, Result, StatsSnapshot};

use crate::rows::{decode_queue, decode_record, decode_stats, id_bytes, last_set};

use crate::backend::MssqlBackend;

/// [`chokaq_core::Backend::queue_settings`].
pub(crate) async fn queue_settings(b: &MssqlBackend, queue: &QueueName) -> Result<QueueSettings> {
    let op = "queue_settings";
    let name = queue.as_str().to_string();
    let rows = last_set(b.read(op, &b.sql().queue_settings, &[&name]).await?);
    match rows.first() {
        Some(r) => decode_queue(op, r),
        None => Ok(QueueSettings::default_for(queue.clone())),
    }
}

/// [`chokaq_core::Backend::stats`].
pub(crate) async fn stats(b: &MssqlBackend) -> Result<StatsSnapshot> {
    let op = "stats";
    let sets = b.read(op, &b.sql().stats, &[]).await?;
    decode_stats(op, sets)
}

/// [`chokaq_core::Backend::get_job`].
pub(crate) async fn get_job(b: &MssqlBackend, id: JobId) -> Result<Option<JobRecord>> {
    let op = "get_job";
    let bytes = id_bytes(id);
    let rows = last_set(b.read(op, &b.sql().get_job, &[&bytes]).await?);
    match rows.len() {
        0 => Ok(None),
        1 => decode_record(op, &rows[0]).map(Some),
        n => Err(Error::new(ErrorKind::Other, format!("get_job: job {id} is in {n} tables at once"))),
    }
}
