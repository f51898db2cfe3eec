//! [`TestSupport`] for the conformance suite and tests (feature `testing`): forcing a job's
//! state past every guard, raw presence counts, dropping the tables.

use std::collections::HashMap;

use async_trait::async_trait;
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::{Error, ErrorKind, JobId, QueueName, Result, Timestamp, WorkerId};
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::error::map_err;
use crate::rows::{now_us, ts};

#[async_trait]
impl TestSupport for SqliteBackend {
    async fn db_now(&self) -> Result<Timestamp> {
        ts(now_us())
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        let micros = |t: Option<Timestamp>| t.map(|t| t.timestamp_micros());
        let mut tx = self.begin_write().await?;
        let n = sqlx::query(&self.sql.force)
            .bind(id.0)
            .bind(patch.status.map(|s| i64::from(s.code())))
            .bind(patch.attempt.map(i64::from))
            .bind(patch.scheduled_at.is_some())
            .bind(patch.scheduled_at.and_then(micros))
            .bind(patch.heartbeat_at.is_some())
            .bind(patch.heartbeat_at.and_then(micros))
            .bind(micros(patch.updated_at))
            .bind(micros(patch.created_at))
            .bind(patch.raw_payload.as_deref())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        commit(tx).await?;
        Ok(n == 1)
    }

    async fn force_worker_seen(&self, worker: WorkerId, last_seen_at: Timestamp) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let n = sqlx::query(&self.sql.force_worker_seen)
            .bind(worker.0)
            .bind(last_seen_at.timestamp_micros())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        commit(tx).await?;
        Ok(n == 1)
    }

    async fn force_finished_at(&self, id: JobId, finished_at: Timestamp) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let n = sqlx::query(&self.sql.force_finished_at)
            .bind(id.0)
            .bind(finished_at.timestamp_micros())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        commit(tx).await?;
        Ok(n == 1)
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        Ok(self.presence_many(&[id]).await?.pop().map(|(_, p)| p).unwrap_or_default())
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let mut map: HashMap<JobId, Presence> = ids.iter().map(|id| (*id, Presence::default())).collect();
        // The ids travel as one bound JSON array of hex strings (`unhex` in the statement).
        let hex: Vec<String> = ids.iter().map(|id| id.0.simple().to_string()).collect();
        let hex = serde_json::to_string(&hex)?;
        let mut tx = self.begin_read().await?;
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

    async fn add_starts(&self, queue: &QueueName, key: Option<&str>, count: u64, at: Timestamp) -> Result<()> {
        let count = i64::try_from(count).map_err(|_| Error::invalid("add_starts: count too large"))?;
        let mut tx = self.begin_write().await?;
        let limit = self.read_settings(&mut tx, queue).await?.rate_limit;
        let by_key =
            limit.ok_or_else(|| Error::invalid(format!("add_starts: queue {queue} has no rate limit")))?.by_key;
        if by_key && key.is_none() {
            return Err(Error::invalid("add_starts: a key-less start is in no bucket of a by-key limit"));
        }
        let last = sqlx::query(&self.sql.add_starts_last)
            .bind(queue.as_str())
            .bind(if by_key { key } else { None })
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
            .bind(count)
            .bind(at.timestamp_micros())
            .bind(after)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        commit(tx).await
    }

    /// Drops this backend's tables. SQLite has no schemas, the database file is the schema:
    /// when the file then holds nothing else, the pools are closed and the file (with its
    /// `-wal` and `-shm` companions) is removed, so this backend is unusable afterwards. A
    /// file that holds other tables is kept.
    async fn drop_schema(&self) -> Result<()> {
        // The database file (never printed), from the options the pool opens it with.
        let file = self.writer.connect_options().get_filename().to_path_buf();
        let mut tx = self.begin_write().await?;
        let sql = &self.sql;
        for drop in [
            &sql.drop_jobs_hot,
            &sql.drop_jobs_archive,
            &sql.drop_jobs_dlq,
            &sql.drop_queues,
            &sql.drop_counters,
            &sql.drop_versions,
            &sql.drop_workers,
            &sql.drop_schedules,
            &sql.drop_rate_starts,
            &sql.drop_uniques,
            &sql.drop_fault_key_slots,
        ] {
            sqlx::query(drop).execute(&mut *tx).await.map_err(map_err)?;
        }
        let left: i64 = sqlx::query_scalar(&sql.count_objects).fetch_one(&mut *tx).await.map_err(map_err)?;
        commit(tx).await?;
        if left == 0 {
            self.close().await;
            for suffix in ["", "-wal", "-shm"] {
                let mut p = file.clone().into_os_string();
                p.push(suffix);
                match std::fs::remove_file(&p) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(Error::with_source(
                            ErrorKind::Other,
                            "sqlite: could not remove the dropped database file",
                            e,
                        ))
                    }
                }
            }
        }
        Ok(())
    }
}

impl SqliteBackend {
    /// Counts into `steps` the virtual-machine instructions that this backend's connections run
    /// from now on: a progress handler called at every instruction, on the writer connection and
    /// on `readers` reader connections (the pool's `max_readers`, opened now if need be). A
    /// deterministic measure of a statement's work, for tests (`tests/rate_window.rs`).
    pub async fn count_vm_steps(
        &self,
        steps: std::sync::Arc<std::sync::atomic::AtomicU64>,
        readers: u32,
    ) -> Result<()> {
        let mut conns = vec![self.writer.acquire().await.map_err(map_err)?];
        for _ in 0..readers {
            conns.push(self.reader.acquire().await.map_err(map_err)?);
        }
        for conn in &mut conns {
            let steps = steps.clone();
            conn.lock_handle().await.map_err(map_err)?.set_progress_handler(1, move || {
                steps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                true
            });
        }
        Ok(())
    }
}
