//! [`chokaq_core::Backend::list_jobs`]: one page in id order, of one table.

use chokaq_core::{validate, Error, JobPage, JobStatus, JobTable, ListJobsParams, Result};

use crate::rows::{check_ts, decode_record, id_bytes, last_set};

use crate::backend::MssqlBackend;

/// [`chokaq_core::Backend::list_jobs`].
pub(crate) async fn list_jobs(b: &MssqlBackend, f: &ListJobsParams) -> Result<JobPage> {
    let op = "list_jobs";
    if f.limit == 0 || f.limit > 1000 {
        return Err(Error::invalid(format!("list limit must be 1 to 1000, got {}", f.limit)));
    }
    if f.status.is_some() && f.table != JobTable::Hot {
        return Err(Error::invalid("list_jobs: a status filter applies to the hot table only"));
    }
    if let Some(tag) = &f.tag {
        validate::text_field("tag", tag, validate::MAX_TAG_LEN)?;
    }
    let sql = match f.table {
        JobTable::Hot => &b.sql().list_hot,
        JobTable::Archive => &b.sql().list_archive,
        JobTable::DeadLetter => &b.sql().list_dlq,
    };
    check_ts("created_from", f.created_from)?;
    check_ts("created_to", f.created_to)?;
    let limit = i32::try_from(f.limit + 1).unwrap_or(1001);
    let after = f.after.map(id_bytes);
    let queue = f.queue.as_ref().map(|q| q.as_str().to_string());
    let status = f.status.map(JobStatus::code);
    let kind = f.kind.as_ref().map(|k| k.as_str().to_string());
    let tag = f.tag.clone();
    let rows = last_set(
        b.read(op, sql, &[&limit, &after, &queue, &status, &kind, &tag, &f.created_from, &f.created_to]).await?,
    );
    let mut jobs = rows.iter().map(|r| decode_record(op, r)).collect::<Result<Vec<_>>>()?;
    if f.without_payloads {
        // The statement still reads the payloads; the answer leaves them out as the
        // contract says (a narrower statement is future work).
        for j in &mut jobs {
            j.payload = serde_json::Value::Null;
        }
    }
    let next = if jobs.len() > f.limit as usize {
        jobs.truncate(f.limit as usize);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(JobPage { jobs, next })
}
