//! [`TestSupport`] for the conformance suite and tests (feature `testing`): forcing a job's
//! state past every guard, raw presence counts, killing this backend's sessions, dropping the
//! schema.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::{Error, JobId, QueueName, Result, Timestamp, WorkerId};
use sqlx::{Connection, Row};

use crate::backend::MysqlBackend;
use crate::error::{map_err, mysql_code};
use crate::rows::{opt_text, ts};

/// ER_NO_SUCH_THREAD: the session to kill is gone already.
const NO_SUCH_THREAD: u16 = 1094;

#[async_trait]
impl TestSupport for MysqlBackend {
    async fn db_now(&self) -> Result<Timestamp> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        ts(self.now(&mut conn).await?)
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        let micros = |t: Option<Timestamp>| t.map(|t| t.timestamp_micros());
        let n = sqlx::query(&self.sql.force)
            .bind(patch.status.map(|s| i64::from(s.code())))
            .bind(patch.attempt.map(i64::from))
            .bind(i64::from(patch.scheduled_at.is_some()))
            .bind(patch.scheduled_at.and_then(micros))
            .bind(i64::from(patch.heartbeat_at.is_some()))
            .bind(patch.heartbeat_at.and_then(micros))
            .bind(micros(patch.updated_at))
            .bind(micros(patch.created_at))
            .bind(patch.raw_payload.as_deref())
            .bind(id.0)
            .execute(&self.pool)
            .await
            .map_err(map_err)?
            .rows_affected();
        Ok(n == 1)
    }

    async fn force_worker_seen(&self, worker: WorkerId, last_seen_at: Timestamp) -> Result<bool> {
        let n = sqlx::query(&self.sql.force_worker_seen)
            .bind(last_seen_at.timestamp_micros())
            .bind(worker.0)
            .execute(&self.pool)
            .await
            .map_err(map_err)?
            .rows_affected();
        Ok(n == 1)
    }

    async fn force_finished_at(&self, id: JobId, finished_at: Timestamp) -> Result<bool> {
        let n = sqlx::query(&self.sql.force_finished_at)
            .bind(finished_at.timestamp_micros())
            .bind(id.0)
            .execute(&self.pool)
            .await
            .map_err(map_err)?
            .rows_affected();
        Ok(n == 1)
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        Ok(self.presence_many(&[id]).await?.pop().map(|(_, p)| p).unwrap_or_default())
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let mut map: HashMap<JobId, Presence> = ids.iter().map(|id| (*id, Presence::default())).collect();
        // The ids travel as one bound JSON array of hex strings (`JSON_TABLE` in the statement).
        let hex: Vec<String> = ids.iter().map(|id| id.0.simple().to_string()).collect();
        let hex = serde_json::to_string(&hex)?;
        let mut tx = self.pool.begin_with(self.sql.read_snapshot.clone()).await.map_err(crate::error::map_err)?;
        let tables: [(&String, fn(&mut Presence, u32)); 3] = [
            (&self.sql.presence_hot, |p, n| p.hot = n),
            (&self.sql.presence_archive, |p, n| p.archive = n),
            (&self.sql.presence_dead, |p, n| p.dead = n),
        ];
        for (sql, set) in tables {
            let rows = sqlx::query(sql).bind(&hex).fetch_all(&mut *tx).await.map_err(map_err)?;
            for r in rows {
                let id = JobId(r.try_get("id").map_err(map_err)?);
                let n = u32::try_from(r.try_get::<i64, _>("n").map_err(map_err)?).unwrap_or(u32::MAX);
                if let Some(p) = map.get_mut(&id) {
                    set(p, n);
                }
            }
        }
        tx.rollback().await.map_err(map_err)?;
        Ok(ids.iter().map(|id| (*id, map.get(id).copied().unwrap_or_default())).collect())
    }

    /// Kills every session this backend's pools opened (ids recorded at connect), from a
    /// separate connection of its own.
    async fn kill_connections(&self) -> Result<u64> {
        let ids: Vec<u64> = {
            let mut set = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            set.drain().collect()
        };
        let mut admin = sqlx::MySqlConnection::connect_with(&self.options).await.map_err(map_err)?;
        let mut killed = 0;
        for id in ids {
            match sqlx::query(&self.sql.kill_connection).bind(id).execute(&mut admin).await {
                Ok(_) => killed += 1,
                Err(e) if mysql_code(&e) == Some(NO_SUCH_THREAD) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        admin.close().await.map_err(map_err)?;
        Ok(killed)
    }

    /// InnoDB's own default is REPEATABLE READ (MySQL has no per-role default): this handle's
    /// sessions get it from the server unless the backend pins its level, which it does in
    /// every session it opens. The same backend, whose sessions `session_isolation` reads.
    async fn with_repeatable_read_default(&self) -> Result<Option<Arc<dyn TestSupport>>> {
        Ok(Some(Arc::new(self.clone())))
    }

    async fn session_isolation(&self) -> Result<Option<String>> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        let level = match sqlx::query(&self.sql.isolation_level).fetch_one(&mut *conn).await {
            Ok(row) => opt_text(&row, "@@SESSION.transaction_isolation")?,
            Err(_) => {
                let row = sqlx::query(&self.sql.isolation_level_old).fetch_one(&mut *conn).await.map_err(map_err)?;
                opt_text(&row, "@@SESSION.tx_isolation")?
            }
        };
        Ok(level.map(|l| l.replace('-', " ").to_ascii_lowercase()))
    }

    async fn add_starts(&self, queue: &QueueName, key: Option<&str>, count: u64, at: Timestamp) -> Result<()> {
        if count > 1_000_000 {
            return Err(Error::invalid("add_starts: at most 1,000,000 at once"));
        }
        let mut tx = self.begin().await?;
        let row =
            sqlx::query(&self.sql.lock_queue).bind(queue.as_str()).fetch_optional(&mut *tx).await.map_err(map_err)?;
        let limited = match &row {
            Some(r) => r.try_get::<Option<i64>, _>("rate_jobs").map_err(map_err)?.is_some(),
            None => false,
        };
        if !limited {
            return Err(Error::invalid(format!("add_starts: queue {queue} has no rate limit")));
        }
        let by_key = row.map(|r| r.try_get::<i64, _>("rate_by_key")).transpose().map_err(map_err)? == Some(1);
        if by_key && key.is_none() {
            return Err(Error::invalid("add_starts: a key-less start is in no bucket of a by-key limit"));
        }
        let bucket = if by_key { key } else { None };
        let last = sqlx::query(&self.sql.add_starts_last)
            .bind(queue.as_str())
            .bind(bucket)
            .bind(bucket)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        let (stamp, after): (i64, i64) = match last {
            Some(r) => (r.try_get("stamp").map_err(map_err)?, r.try_get("n").map_err(map_err)?),
            None => (i64::MIN, 0),
        };
        if at.timestamp_micros() < stamp {
            return Err(Error::invalid("add_starts: a stamp earlier than the bucket's latest entry"));
        }
        sqlx::query(&self.sql.add_starts)
            .bind(queue.as_str())
            .bind(key)
            .bind(at.timestamp_micros())
            .bind(after)
            .bind(count as i64)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        crate::backend::commit(tx).await
    }

    async fn drop_schema(&self) -> Result<()> {
        sqlx::query(&self.sql.drop_schema).execute(&self.pool).await.map_err(map_err)?;
        Ok(())
    }
}

impl MysqlBackend {
    /// The storage engine's reads of one session of the pool so far (`Handler_read%` of
    /// `SHOW SESSION STATUS`, summed): with a pool of one connection
    /// ([`MysqlConfig::max_connections`](crate::MysqlConfig::max_connections)), every statement
    /// of this backend's operations but the lease reservation runs on that session, so the
    /// difference between two readings is the work of the calls between them (and of one
    /// reading), deterministic, for tests (`tests/rate_window.rs`).
    pub async fn handler_reads(&self) -> Result<u64> {
        let rows = sqlx::query(&self.sql.handler_reads).fetch_all(&self.pool).await.map_err(map_err)?;
        let mut sum = 0u64;
        for r in rows {
            let v: String = r.try_get(1).map_err(map_err)?;
            sum +=
                v.parse::<u64>().map_err(|e| Error::with_source(chokaq_core::ErrorKind::Other, "Handler_read", e))?;
        }
        Ok(sum)
    }
}
