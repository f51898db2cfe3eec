//! Unique jobs (`docs/unique.md`, schema version 3): the key row written or locked inside the
//! enqueue's transaction, the holder's state, the take-over (compare-and-set under the row's
//! exclusive lock), [`chokaq_core::Backend::unique_of`] and
//! [`chokaq_core::Backend::prune_uniques`].

use chokaq_core::{prune_limit, DeadReason, JobId, Result, UniqueHold, UniqueKey, UniqueOpts, UniqueState};
use sqlx::MySqlConnection;

use crate::backend::{commit, MysqlBackend};
use crate::error::{corrupt, map_err, Path};
use crate::rows::{get, opt_ts, ts_us};

/// What the key row said about a unique job about to be inserted.
pub(crate) enum KeyRow {
    /// The job holding the key counts: the new job is its duplicate.
    Duplicate(JobId),
    /// The key is this job's now (a new row, or taken over): insert the job.
    Taken,
}

/// Writes `key`'s row for job `id`, or locks the existing one and decides: a holder in one of
/// `key.states` makes `id` a duplicate; any other holder is replaced (compare-and-set). The
/// row's exclusive lock is held to the commit, so racing enqueuers of one key queue up here.
pub(crate) async fn claim_key(
    b: &MysqlBackend,
    conn: &mut MySqlConnection,
    key: &UniqueKey,
    id: JobId,
    now: i64,
) -> Result<KeyRow> {
    let expires = key.expires_at.map(|t| ts_us("unique period end", t)).transpose()?;
    sqlx::query(&b.sql.unique_claim_key)
        .bind(key.key.as_bytes())
        .bind(id.0)
        .bind(key.states.bits())
        .bind(&key.settings)
        .bind(expires)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    let row = sqlx::query(&b.sql.unique_holder)
        .bind(now)
        .bind(key.key.as_bytes())
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    let holder: uuid::Uuid = get(&row, "job_id")?;
    if holder == id.0 {
        return Ok(KeyRow::Taken);
    }
    let place: Option<String> = get(&row, "place")?;
    let state = match place.as_deref() {
        Some("h") => Some(UniqueState::of_hot(
            i16::try_from(get::<i64>(&row, "status")?).map_err(|_| corrupt("job status"))?,
            i32::try_from(get::<i64>(&row, "attempt")?).map_err(|_| corrupt("attempt"))?,
            get::<i64>(&row, "later")? != 0,
        )?),
        Some("a") => Some(UniqueState::Succeeded),
        Some(_) => {
            let reason: Vec<u8> = get(&row, "reason")?;
            Some(UniqueState::of_dead(DeadReason::parse(&String::from_utf8_lossy(&reason))?))
        }
        None => None,
    };
    if state.is_some_and(|s| key.states.contains(s)) {
        return Ok(KeyRow::Duplicate(JobId(holder)));
    }
    let taken = sqlx::query(&b.sql.unique_take)
        .bind(id.0)
        .bind(key.states.bits())
        .bind(&key.settings)
        .bind(expires)
        .bind(now)
        .bind(key.key.as_bytes())
        .bind(holder)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    if taken.rows_affected() != 1 {
        return Err(corrupt("unique key row changed under its lock"));
    }
    Ok(KeyRow::Taken)
}

/// [`chokaq_core::Backend::unique_of`].
pub(crate) async fn unique_of(b: &MysqlBackend, id: JobId) -> Result<Option<UniqueHold>> {
    let row: Option<(Vec<u8>, Vec<u8>, Option<i64>)> =
        sqlx::query_as(&b.sql.unique_of).bind(id.0).fetch_optional(&b.pool).await.map_err(map_err)?;
    row.map(|(key, settings, expires)| {
        Ok(UniqueHold {
            key: String::from_utf8(key).map_err(|_| corrupt("unique key"))?,
            job_id: id,
            opts: UniqueOpts::from_json(&String::from_utf8_lossy(&settings))?,
            expires_at: opt_ts(expires)?,
        })
    })
    .transpose()
}

/// [`chokaq_core::Backend::prune_uniques`]: at most `limit` key rows locked (skipping those
/// an enqueue holds), from a random point of the key space on, then those that decide nothing
/// any more deleted.
pub(crate) async fn prune_uniques(b: &MysqlBackend, limit: u32) -> Result<u64> {
    prune_limit(limit)?;
    let from = chokaq_core::prune_from();
    b.retrying(Path::Other, || async {
        let mut tx = b.begin().await?;
        let now = b.now(&mut tx).await?;
        let mut keys: Vec<Vec<u8>> = sqlx::query_scalar(&b.sql.unique_prune_from)
            .bind(from.as_bytes())
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        let rest = i64::from(limit) - keys.len() as i64;
        if rest > 0 {
            let more: Vec<Vec<u8>> = sqlx::query_scalar(&b.sql.unique_prune_wrap)
                .bind(from.as_bytes())
                .bind(rest)
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            keys.extend(more);
        }
        let n = if keys.is_empty() {
            0
        } else {
            let list: Vec<String> = keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
            let list = serde_json::to_string(&list)?;
            sqlx::query(&b.sql.unique_prune)
                .bind(list)
                .bind(now)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .rows_affected()
        };
        commit(tx).await?;
        Ok(n)
    })
    .await
}
