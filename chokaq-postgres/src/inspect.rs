//! Reads: [`chokaq_core::Backend::queue_settings`], `stats`, `stats_estimated` and `get_job`
//! (`list_jobs` is in [`crate::list`]). A view with a read deadline runs each in a bounded
//! session ([`crate::bounded`]).

use chokaq_core::{JobId, JobRecord, QueueName, QueueSettings, Result, StatsSnapshot};

use crate::backend::PgBackend;
use crate::bounded::Session;
use crate::error::with_retry;
use crate::rows::{self};

/// [`chokaq_core::Backend::queue_settings`].
pub(crate) async fn queue_settings(b: &PgBackend, queue: &QueueName) -> Result<QueueSettings> {
    let q = || sqlx::query(&b.sql().queue_settings).bind(queue.as_str());
    let row = match b.read_deadline {
        Some(d) => {
            let mut s = Session::open(b, d).await?;
            let r = q().fetch_optional(s.conn()).await;
            s.finish(r).await?
        }
        None => with_retry(|| q().fetch_optional(&b.kept)).await?,
    };
    match row {
        Some(row) => rows::queue_settings(&row),
        None => Ok(QueueSettings::default_for(queue.clone())),
    }
}

/// [`chokaq_core::Backend::stats`].
pub(crate) async fn stats(b: &PgBackend) -> Result<StatsSnapshot> {
    if let Some(d) = b.read_deadline {
        let mut s = Session::open(b, d).await?;
        let r = sqlx::query(&b.sql().stats).fetch_all(s.conn()).await;
        return rows::stats(&s.finish(r).await?);
    }
    let rows = with_retry(|| async {
        let mut tx = b.kept.begin().await?;
        sqlx::query(&b.sql().no_jit).execute(&mut *tx).await?;
        let rows = sqlx::query(&b.sql().stats).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    })
    .await?;
    rows::stats(&rows)
}

/// [`chokaq_core::Backend::stats_estimated`].
pub(crate) async fn stats_estimated(b: &PgBackend) -> Result<StatsSnapshot> {
    if let Some(d) = b.read_deadline {
        let mut s = Session::open(b, d).await?;
        let r = sqlx::query(&b.sql().stats_estimated).bind(b.schema()).fetch_all(s.conn()).await;
        return rows::stats(&s.finish(r).await?);
    }
    let rows = with_retry(|| async {
        let mut tx = b.kept.begin().await?;
        sqlx::query(&b.sql().no_jit).execute(&mut *tx).await?;
        let rows = sqlx::query(&b.sql().stats_estimated).bind(b.schema()).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    })
    .await?;
    rows::stats(&rows)
}

/// [`chokaq_core::Backend::get_job`].
pub(crate) async fn get_job(b: &PgBackend, id: JobId) -> Result<Option<JobRecord>> {
    let q = || sqlx::query(&b.sql().get_job).bind(id.0);
    let row = match b.read_deadline {
        Some(d) => {
            let mut s = Session::open(b, d).await?;
            let r = q().fetch_optional(s.conn()).await;
            s.finish(r).await?
        }
        None => with_retry(|| q().fetch_optional(&b.kept)).await?,
    };
    row.as_ref().map(rows::record).transpose()
}
