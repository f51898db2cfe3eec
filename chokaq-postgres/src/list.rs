//! The filtered listing and the purge: dynamic WHERE clauses built with sea-query, every value
//! bound.

use chokaq_core::{Error, JobPage, JobTable, ListJobsParams, PurgeParams, PurgeTarget, Result};
use sea_query::{Alias, Expr, LockBehavior, LockType, Order, PostgresQueryBuilder, Query, SelectStatement};
use sea_query_binder::SqlxBinder;
use sqlx::PgPool;

use crate::error::with_retry;
use crate::{rows, sql};

/// Largest page of [`list_jobs`].
pub(crate) const MAX_PAGE: u32 = 1000;

fn col(name: &str) -> Expr {
    Expr::col(Alias::new(name))
}

pub(crate) async fn list_jobs(pool: &PgPool, schema: &str, filter: &ListJobsParams) -> Result<JobPage> {
    if filter.limit == 0 || filter.limit > MAX_PAGE {
        return Err(Error::invalid(format!("list limit must be 1 to {MAX_PAGE}, got {}", filter.limit)));
    }
    let (table, projection) = match filter.table {
        JobTable::Hot => ("jobs_hot", sql::HOT_RECORD),
        JobTable::Archive => ("jobs_archive", sql::ARCHIVE_RECORD),
        JobTable::DeadLetter => ("jobs_dlq", sql::DLQ_RECORD),
    };
    let mut q = Query::select();
    q.expr(Expr::cust(projection)).from((Alias::new(schema), Alias::new(table)));
    if let Some(queue) = &filter.queue {
        q.and_where(col("queue").eq(queue.as_str()));
    }
    if let Some(status) = filter.status {
        if filter.table != JobTable::Hot {
            return Err(Error::invalid("a status filter applies to the hot table only"));
        }
        q.and_where(col("status").eq(status.code()));
    }
    if let Some(kind) = &filter.kind {
        q.and_where(col("kind").eq(kind.as_str()));
    }
    if let Some(tag) = &filter.tag {
        q.and_where(Expr::cust_with_values("tags @> array_append('{}'::text[], $1)", [tag.clone()]));
    }
    if let Some(from) = filter.created_from {
        q.and_where(col("created_at").gte(from));
    }
    if let Some(to) = filter.created_to {
        q.and_where(col("created_at").lt(to));
    }
    if let Some(after) = filter.after {
        q.and_where(col("id").gt(after.0));
    }
    q.order_by(Alias::new("id"), Order::Asc).limit(u64::from(filter.limit) + 1);
    let (text, values) = q.build_sqlx(PostgresQueryBuilder);
    let found = with_retry(|| sqlx::query_with(&text, values.clone()).fetch_all(pool)).await?;
    let mut jobs = found.iter().map(rows::record).collect::<Result<Vec<_>>>()?;
    let next = if jobs.len() > filter.limit as usize {
        jobs.truncate(filter.limit as usize);
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(JobPage { jobs, next })
}

/// Deletes in bounded batches (`DELETE … WHERE id IN (SELECT id … LIMIT n FOR UPDATE SKIP
/// LOCKED)`), each its own short transaction, until a batch comes back short or
/// `max_batches` ran. Concurrent purges skip each other's rows instead of waiting.
pub(crate) async fn purge(pool: &PgPool, schema: &str, req: &PurgeParams) -> Result<u64> {
    if req.batch_size == 0 || req.batch_size > 100_000 {
        return Err(Error::invalid(format!("purge batch_size must be 1 to 100000, got {}", req.batch_size)));
    }
    let table = match req.target {
        PurgeTarget::Archive => "jobs_archive",
        PurgeTarget::DeadLetter => "jobs_dlq",
    };
    if req.reason.is_some() && req.target != PurgeTarget::DeadLetter {
        return Err(Error::invalid("a reason filter applies to the dead-letter table only"));
    }
    let mut pick: SelectStatement = Query::select();
    pick.column(Alias::new("id")).from((Alias::new(schema), Alias::new(table))).and_where(Expr::cust_with_values(
        "finished_at < now() - $1 * interval '1 microsecond'",
        [rows::micros(req.older_than)],
    ));
    if let Some(queue) = &req.queue {
        pick.and_where(col("queue").eq(queue.as_str()));
    }
    if let Some(kind) = &req.kind {
        pick.and_where(col("kind").eq(kind.as_str()));
    }
    if let Some(reason) = req.reason {
        pick.and_where(col("reason").eq(reason.as_str()));
    }
    pick.limit(u64::from(req.batch_size)).lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    let (text, values) = Query::delete()
        .from_table((Alias::new(schema), Alias::new(table)))
        .and_where(col("id").in_subquery(pick))
        .build_sqlx(PostgresQueryBuilder);
    let mut total = 0u64;
    for _ in 0..req.max_batches {
        let n = with_retry(|| sqlx::query_with(&text, values.clone()).execute(pool)).await?.rows_affected();
        total += n;
        if n < u64::from(req.batch_size) {
            break;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `$1` in a custom expression is that expression's first value, renumbered in the whole
    /// statement; sea-query's tokenizer takes `[...]` for a quoted identifier, so no `ARRAY[$1]`.
    #[test]
    fn custom_placeholders_are_numbered() {
        let mut q = Query::select();
        q.expr(Expr::cust("x")).from((Alias::new("s"), Alias::new("t")));
        q.and_where(col("queue").eq("a"));
        q.and_where(Expr::cust_with_values("tags @> array_append('{}'::text[], $1)", ["even".to_string()]));
        let (text, _) = q.build_sqlx(PostgresQueryBuilder);
        assert!(text.ends_with(r#"WHERE "queue" = $1 AND (tags @> array_append('{}'::text[], $2))"#), "{text}");
    }
}
