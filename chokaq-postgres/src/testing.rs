//! `impl TestSupport` (feature `testing`): for the conformance suite and tests, never for
//! applications.

use std::sync::Arc;

use async_trait::async_trait;
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::{Error, JobId, QueueName, Result, Timestamp, WorkerId};
use uuid::Uuid;

use sqlx::postgres::PgPoolOptions;

use crate::error::{map_sqlx_error, with_retry};
use crate::rows::count;
use crate::sql;
use crate::PgBackend;

#[async_trait]
impl TestSupport for PgBackend {
    async fn db_now(&self) -> Result<Timestamp> {
        with_retry(|| sqlx::query_scalar(&self.sql().db_now).fetch_one(&self.kept)).await
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        let n = with_retry(|| {
            sqlx::query(&self.sql().force)
                .bind(id.0)
                .bind(patch.status.map(|s| s.code()))
                .bind(patch.attempt)
                .bind(patch.scheduled_at.is_some())
                .bind(patch.scheduled_at.flatten())
                .bind(patch.heartbeat_at.is_some())
                .bind(patch.heartbeat_at.flatten())
                .bind(patch.updated_at)
                .bind(patch.created_at)
                .bind(patch.raw_payload.as_deref())
                .execute(&self.kept)
        })
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn force_worker_seen(&self, worker: WorkerId, last_seen_at: Timestamp) -> Result<bool> {
        let n = with_retry(|| {
            sqlx::query(&self.sql().force_worker_seen).bind(worker.0).bind(last_seen_at).execute(&self.kept)
        })
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn force_finished_at(&self, id: JobId, finished_at: Timestamp) -> Result<bool> {
        let n =
            with_retry(|| sqlx::query(&self.sql().force_finished_at).bind(id.0).bind(finished_at).execute(&self.kept))
                .await?
                .rows_affected();
        Ok(n > 0)
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        Ok(self.presence_many(&[id]).await?.pop().map(|(_, p)| p).unwrap_or_default())
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let ids: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
        let rows: Vec<(Uuid, i64, i64, i64)> =
            with_retry(|| sqlx::query_as(&self.sql().presence_many).bind(&ids).fetch_all(&self.kept)).await?;
        Ok(rows
            .into_iter()
            .map(|(id, h, a, d)| (JobId(id), Presence { hot: h as u32, archive: a as u32, dead: d as u32 }))
            .collect())
    }

    async fn kill_connections(&self) -> Result<u64> {
        let n: i64 = with_retry(|| {
            sqlx::query_scalar(&self.sql().kill_connections).bind(&self.shared.application_name).fetch_one(&self.kept)
        })
        .await?;
        Ok(count(n))
    }

    async fn with_repeatable_read_default(&self) -> Result<Option<Arc<dyn TestSupport>>> {
        let role = sql::rr_role(&self.shared.schema);
        // The cases of one run share the schema, and so the role, and may ask for it at once.
        // Its creation and grants run under an advisory lock on the role's name (the
        // migration's lock statement, another key): two sessions creating it at once would
        // fail with "role already exists" (or "tuple concurrently updated" on the grants).
        // Whoever comes second finds the role complete, committed by the first.
        let mut tx = self.pool.begin().await.map_err(map_sqlx_error)?;
        sqlx::query(&self.sql().migrate_lock)
            .bind(format!("chokaq:rr_role:{role}"))
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx_error)?;
        match sqlx::Executor::execute(&mut *tx, self.sql().rr_role_create.as_str()).await {
            Ok(_) => tx.commit().await.map_err(map_sqlx_error)?,
            Err(e) => {
                let code = match &e {
                    sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
                    _ => None,
                };
                match code.as_deref() {
                    // Not allowed to create roles here: nothing to test with.
                    Some("42501") => return Ok(None),
                    // duplicate_object: the role exists (the transaction rolls back on drop).
                    Some("42710") => drop(tx),
                    _ => return Err(map_sqlx_error(e)),
                }
            }
        }
        let opts = (*self.pool.connect_options()).clone().username(&role);
        let pool = PgPoolOptions::new()
            .max_connections(self.pool.options().get_max_connections())
            .connect_with(opts)
            .await
            .map_err(map_sqlx_error)?;
        Ok(Some(Arc::new(self.on_pool(pool))))
    }

    async fn session_isolation(&self) -> Result<Option<String>> {
        let level: String =
            with_retry(|| sqlx::query_scalar(&self.sql().session_isolation).fetch_one(&self.kept)).await?;
        Ok(Some(level))
    }

    async fn add_starts(&self, queue: &QueueName, key: Option<&str>, count: u64, at: Timestamp) -> Result<()> {
        let count = i64::try_from(count).map_err(|_| Error::invalid("add_starts: count too large"))?;
        let mut tx = self.kept.begin().await.map_err(map_sqlx_error)?;
        let by_key: Option<bool> = sqlx::query_scalar(&self.sql().add_starts_limit)
            .bind(queue.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_sqlx_error)?;
        let by_key = by_key.ok_or_else(|| Error::invalid(format!("add_starts: queue {queue} has no rate limit")))?;
        if by_key && key.is_none() {
            return Err(Error::invalid("add_starts: a key-less start is in no bucket of a by-key limit"));
        }
        let bucket = if by_key { key } else { None };
        let last: Option<(Timestamp, i64)> = sqlx::query_as(&self.sql().add_starts_last)
            .bind(queue.as_str())
            .bind(bucket)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_sqlx_error)?;
        if last.is_some_and(|(stamp, _)| at < stamp) {
            return Err(Error::invalid("add_starts: a stamp earlier than the bucket's latest entry"));
        }
        let after = last.map_or(0, |(_, n)| n);
        sqlx::query(&self.sql().add_starts)
            .bind(queue.as_str())
            .bind(key)
            .bind(count)
            .bind(at)
            .bind(after)
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx_error)?;
        tx.commit().await.map_err(map_sqlx_error)?;
        Ok(())
    }

    async fn drop_schema(&self) -> Result<()> {
        // Under no statement timeout (a CASCADE over many tables takes its time on a loaded
        // server), in a transaction of its own.
        with_retry(|| async {
            let mut tx = self.pool.begin().await?;
            sqlx::query(&self.sql().no_statement_timeout).execute(&mut *tx).await?;
            sqlx::query(&self.sql().drop_schema).execute(&mut *tx).await?;
            // The role in the same transaction, under no timeout too: on its own, under a
            // session's 1 ms timeout, CI (two runs at once) saw it cancelled (57014).
            sqlx::query(&self.sql().rr_role_drop).execute(&mut *tx).await?;
            tx.commit().await
        })
        .await?;
        Ok(())
    }
}
