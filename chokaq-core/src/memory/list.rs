//! [`crate::Backend::list_jobs`]: one page of one table, in id order.

use crate::{Error, JobLocation, JobPage, JobRecord, JobTable, ListJobsParams, Result};

use super::MemoryBackend;

/// [`crate::Backend::list_jobs`].
pub(crate) async fn list_jobs(b: &MemoryBackend, filter: &ListJobsParams) -> Result<JobPage> {
    if filter.limit == 0 || filter.limit > 1000 {
        return Err(Error::invalid(format!("list limit must be 1 to 1000, got {}", filter.limit)));
    }
    if let Some(tag) = &filter.tag {
        crate::validate::text_field("tag", tag, crate::validate::MAX_TAG_LEN)?;
    }
    let s = b.lock();
    let table = match filter.table {
        JobTable::Hot => &s.hot,
        JobTable::Archive => &s.archive,
        JobTable::DeadLetter => &s.dead,
    };
    let mut jobs: Vec<JobRecord> = table
        .values()
        .filter(|r| filter.after.is_none_or(|a| r.id > a))
        .filter(|r| filter.queue.as_ref().is_none_or(|q| &r.queue == q))
        .filter(|r| filter.status.is_none_or(|st| r.location == JobLocation::Hot(st)))
        .filter(|r| filter.kind.as_ref().is_none_or(|k| &r.kind == k))
        .filter(|r| filter.tag.as_ref().is_none_or(|t| r.tags.contains(t)))
        .filter(|r| filter.created_from.is_none_or(|f| r.created_at >= f))
        .filter(|r| filter.created_to.is_none_or(|t| r.created_at < t))
        .take(filter.limit as usize + 1)
        .map(|r| {
            let mut r = r.clone();
            if filter.without_payloads {
                r.payload = serde_json::Value::Null;
            }
            r
        })
        .collect();
    let next = if jobs.len() > filter.limit as usize {
        jobs.truncate(filter.limit as usize);
        jobs.last().map(|r| r.id)
    } else {
        None
    };
    Ok(JobPage { jobs, next })
}
