//! [`chokaq_core::Backend::list_jobs`]: one page in id order, with a statement of exactly the
//! filters given ([`crate::sql::list_query`]).

use chokaq_core::listing::{self, ListArg};
use chokaq_core::{JobPage, ListJobsParams, Result};

use crate::backend::PgBackend;
use crate::bounded::Session;
use crate::error::with_retry;
use crate::rows::{self};
use crate::sql;

/// One page in id order; `next` is the last id of the page when more rows follow.
pub(crate) async fn list_jobs(b: &PgBackend, filter: &ListJobsParams) -> Result<JobPage> {
    listing::validate_params(filter)?;
    // Only the filters given, built with sea-query (`chokaq_core::listing`).
    let q = sql::list_query(&b.shared.schema, filter)?;
    let build = || {
        let mut query = sqlx::query(&q.sql);
        for arg in &q.args {
            query = match arg {
                ListArg::Text(s) => query.bind(s.as_str()),
                ListArg::SmallInt(n) => query.bind(*n),
                ListArg::BigInt(n) => query.bind(*n),
                ListArg::Bytes(b) => query.bind(b.as_slice()),
                ListArg::Uuid(u) => query.bind(*u),
                ListArg::Time(t) => query.bind(*t),
            };
        }
        query
    };
    let found = match b.read_deadline {
        Some(d) => {
            let mut s = Session::open(b, d).await?;
            let r = build().fetch_all(s.conn()).await;
            s.finish(r).await?
        }
        None => with_retry(|| build().fetch_all(&b.kept)).await?,
    };
    let mut jobs = found.iter().map(rows::record).collect::<Result<Vec<_>>>()?;
    let next = if jobs.len() > filter.limit as usize {
        jobs.truncate(filter.limit as usize);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(JobPage { jobs, next })
}
