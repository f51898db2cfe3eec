//! The test support (`chokaq_core::testing::TestSupport`): force a job's fields past every
//! guard, see which tables hold a job, kill this backend's sessions, drop the schema. Compiled
//! only with the crate's `testing` feature, for the conformance suite and tests; never for
//! applications. The statements are in `sql::support`.

use async_trait::async_trait;
use chokaq_core::testing::{JobPatch, Presence, TestSupport};
use chokaq_core::{Error, JobId, JobStatus, QueueName, Result, Timestamp, WorkerId};

use crate::backend::MssqlBackend;
use crate::rows::{check_ts, count, first_row, hex_id, id_bytes, job_id, last_set, req, req_ts};

#[async_trait]
impl TestSupport for MssqlBackend {
    async fn db_now(&self) -> Result<Timestamp> {
        let op = "db_now";
        let row = first_row(op, self.run(op, &self.sql().db_now, &[]).await?)?;
        req_ts(op, &row, "Now")
    }

    async fn add_starts(&self, queue: &QueueName, key: Option<&str>, count: u64, at: Timestamp) -> Result<()> {
        let op = "add_starts";
        check_ts("at", Some(at))?;
        if count > 1_000_000 {
            return Err(Error::invalid("add_starts: at most 1,000,000 at once"));
        }
        let (name, count) = (queue.as_str(), count as i64);
        self.run(op, &self.sql().add_starts, &[&name, &key, &count, &at]).await?;
        Ok(())
    }

    async fn force_worker_seen(&self, worker: WorkerId, last_seen_at: Timestamp) -> Result<bool> {
        let op = "force_worker_seen";
        check_ts("last_seen_at", Some(last_seen_at))?;
        let row = first_row(op, self.run(op, &self.sql().force_worker_seen, &[&worker.0, &last_seen_at]).await?)?;
        Ok(req::<i32>(op, &row, "Changed")? > 0)
    }

    async fn force_finished_at(&self, id: JobId, finished_at: Timestamp) -> Result<bool> {
        let op = "force_finished_at";
        check_ts("finished_at", Some(finished_at))?;
        let bytes = id_bytes(id);
        let row = first_row(op, self.run(op, &self.sql().force_finished_at, &[&bytes, &finished_at]).await?)?;
        Ok(req::<i32>(op, &row, "Changed")? > 0)
    }

    async fn force(&self, id: JobId, patch: &JobPatch) -> Result<bool> {
        let op = "force";
        for (what, t) in [
            ("scheduled_at", patch.scheduled_at.flatten()),
            ("heartbeat_at", patch.heartbeat_at.flatten()),
            ("updated_at", patch.updated_at),
            ("created_at", patch.created_at),
        ] {
            check_ts(what, t)?;
        }
        let bytes = id_bytes(id);
        // `@P14`, the payload's raw text (NULL keeps the stored payload).
        let raw_payload: Option<String> = patch.raw_payload.clone();
        let status = patch.status.map(JobStatus::code);
        let sched = patch.scheduled_at.flatten();
        let hb = patch.heartbeat_at.flatten();
        let (s1, s2, s3, s4, s5, s6) = (
            patch.status.is_some(),
            patch.attempt.is_some(),
            patch.scheduled_at.is_some(),
            patch.heartbeat_at.is_some(),
            patch.updated_at.is_some(),
            patch.created_at.is_some(),
        );
        let row = first_row(
            op,
            self.run(
                op,
                &self.sql().force,
                &[
                    &bytes,
                    &s1,
                    &status,
                    &s2,
                    &patch.attempt,
                    &s3,
                    &sched,
                    &s4,
                    &hb,
                    &s5,
                    &patch.updated_at,
                    &s6,
                    &patch.created_at,
                    &raw_payload,
                ],
            )
            .await?,
        )?;
        Ok(req::<i32>(op, &row, "Changed")? > 0)
    }

    async fn presence(&self, id: JobId) -> Result<Presence> {
        Ok(self.presence_many(&[id]).await?.into_iter().next().map(|(_, p)| p).unwrap_or_default())
    }

    async fn presence_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, Presence)>> {
        let op = "presence_many";
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let json = serde_json::to_string(&ids.iter().map(|i| hex_id(*i)).collect::<Vec<_>>())?;
        let rows = last_set(self.run(op, &self.sql().presence_many, &[&json]).await?);
        let mut found = std::collections::HashMap::new();
        for r in &rows {
            let p = Presence {
                hot: count(op, r, "Hot")? as u32,
                archive: count(op, r, "Archive")? as u32,
                dead: count(op, r, "Dead")? as u32,
            };
            found.insert(job_id(op, r, "Id")?, p);
        }
        Ok(ids.iter().map(|i| (*i, found.get(i).copied().unwrap_or_default())).collect())
    }

    async fn kill_connections(&self) -> Result<u64> {
        let op = "kill_connections";
        let name = self.application_name().to_string();
        let row = first_row(op, self.run(op, &self.sql().kill_connections, &[&name]).await?)?;
        count(op, &row, "Killed")
    }

    async fn drop_schema(&self) -> Result<()> {
        self.run("drop_schema", &self.sql().drop_schema, &[]).await?;
        Ok(())
    }
}

/// A raw session of the crate's tests: another login's view, opened exactly as a pooled
/// connection is (chokaq's parse of the connection string, `pool::tiberius_config`, the
/// session options), so that one test connection string serves the backend and these
/// sessions alike, with or without TLS (tiberius' own parser would refuse `Encrypt=disabled`).
pub type RawSession = tiberius::Client<tokio_util::compat::Compat<tokio::net::TcpStream>>;

impl crate::MssqlConfig {
    /// Opens a [`RawSession`] (not pooled, not any backend's) to the configured server and
    /// database, within the connect timeout, under the application name `app_name`.
    pub async fn open_session(&self, app_name: &str) -> Result<RawSession> {
        let manager = crate::pool::Manager::new(self.parts.clone(), app_name.to_string(), self.connect_timeout);
        let conn = bb8::ManageConnection::connect(&manager).await.map_err(crate::error::connect_error)?;
        Ok(conn.client)
    }
}
