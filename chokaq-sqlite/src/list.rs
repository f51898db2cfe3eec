//! [`chokaq_core::Backend::list_jobs`]: one page of one table, on a reader connection.

use chokaq_core::listing::{self, ListArg};
use chokaq_core::{JobPage, JobTable, ListJobsParams, Result};

use crate::backend::SqliteBackend;
use crate::bounded::ReadConn;
use crate::error::map_err;
use crate::rows::{self, ts_us, Src};
use crate::sql::{self, MAIN};

/// [`chokaq_core::Backend::list_jobs`]: keyset paging by id, with a statement of exactly the
/// filters asked for ([`crate::sql::list_query`]).
pub(crate) async fn list_jobs(b: &SqliteBackend, filter: &ListJobsParams) -> Result<JobPage> {
    listing::validate_params(filter)?;
    // Times outside years 0..=9999 are refused before they reach the database.
    if let Some(t) = filter.created_from {
        ts_us("created_from", t)?;
    }
    if let Some(t) = filter.created_to {
        ts_us("created_to", t)?;
    }
    let src = match filter.table {
        JobTable::Hot => Src::Hot,
        JobTable::Archive => Src::Archive,
        JobTable::DeadLetter => Src::Dead,
    };
    let lq = sql::list_query(MAIN, filter)?;
    let mut q = sqlx::query(&lq.sql);
    for arg in &lq.args {
        q = match arg {
            ListArg::Text(s) => q.bind(s.as_str()),
            ListArg::SmallInt(n) => q.bind(i64::from(*n)),
            ListArg::BigInt(n) => q.bind(*n),
            ListArg::Bytes(v) => q.bind(v.as_slice()),
            ListArg::Uuid(u) => q.bind(u.as_bytes().as_slice()),
            ListArg::Time(t) => q.bind(t.timestamp_micros()),
        };
    }
    let mut r = ReadConn::open(b).await?;
    let out = q.fetch_all(r.conn()).await.map_err(map_err);
    let rows = r.finish(out).await?;
    let mut jobs = rows.iter().map(|r| rows::record(r, src)).collect::<Result<Vec<_>>>()?;
    let next = if jobs.len() > filter.limit as usize {
        jobs.truncate(filter.limit as usize);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(JobPage { jobs, next })
}
