//! Job outputs (`docs/outputs.md`): [`chokaq_core::Backend::record_output`] and `get_output`.

use chokaq_core::{validate, Error, ErrorKind, Fenced, JobId, LeaseRef, Result, WorkerId};

use crate::backend::{commit, MysqlBackend};
use crate::bounded::ReadConn;
use crate::error::{map_err, Path};

/// [`chokaq_core::Backend::record_output`]: checked before any round trip, then in one
/// transaction the held row is locked (`lock_held`, the guard of `heartbeat`: this lease and
/// worker, Fetched or Processing) and written; a lost lease writes nothing.
pub(crate) async fn record_output(
    b: &MysqlBackend,
    worker: WorkerId,
    lease: LeaseRef,
    value: &serde_json::Value,
) -> Result<Fenced> {
    validate::output(value, b.max_output_bytes)?;
    let text = serde_json::to_string(value)?;
    b.retrying(Path::Completion, || async {
        let mut tx = b.begin().await?;
        let held = sqlx::query(&b.sql.lock_held)
            .bind(lease.id.0)
            .bind(lease.lease.0)
            .bind(worker.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        if held.is_none() {
            commit(tx).await?;
            return Ok(Fenced::LeaseLost);
        }
        sqlx::query(&b.sql.record_output).bind(&text).bind(lease.id.0).execute(&mut *tx).await.map_err(map_err)?;
        commit(tx).await?;
        Ok(Fenced::Done(()))
    })
    .await
}

/// [`chokaq_core::Backend::get_output`]: one statement over the three tables.
pub(crate) async fn get_output(b: &MysqlBackend, id: JobId) -> Result<Option<serde_json::Value>> {
    let mut r = ReadConn::open(b).await?;
    // Read as bytes: MariaDB types the union of the LONGTEXT columns as LONGBLOB.
    let out: Result<Option<Option<Vec<u8>>>> = sqlx::query_scalar(&b.sql.get_output)
        .bind(id.0)
        .bind(id.0)
        .bind(id.0)
        .fetch_optional(r.conn())
        .await
        .map_err(map_err);
    let text = r.finish(out).await?.flatten();
    text.map(|t| {
        serde_json::from_slice(&t)
            .map_err(|e| Error::with_source(ErrorKind::Other, format!("job {id}: the stored output is not JSON"), e))
    })
    .transpose()
}
