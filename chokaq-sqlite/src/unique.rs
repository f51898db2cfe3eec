//! Unique jobs (`docs/unique.md`, schema version 10): the holder of a key and the take-over,
//! inside the enqueue's `BEGIN IMMEDIATE` transaction (the single writer orders racing
//! enqueuers; the primary key holds one holder per key), [`chokaq_core::Backend::unique_of`]
//! and [`chokaq_core::Backend::prune_uniques`].

use chokaq_core::{prune_limit, DeadReason, JobId, Result, UniqueHold, UniqueKey, UniqueOpts, UniqueState};
use sqlx::sqlite::SqliteConnection;
use sqlx::Row;

use crate::backend::{commit, SqliteBackend};
use crate::error::{corrupt, map_err};
use crate::rows::{now_us, opt_ts, ts_us};

/// The job holding `key` when it is in one of `key.states` (the new job is then a duplicate).
pub(crate) async fn counted_holder(
    b: &SqliteBackend,
    conn: &mut SqliteConnection,
    key: &UniqueKey,
    now: i64,
) -> Result<Option<JobId>> {
    let row =
        sqlx::query(&b.sql.unique_holder).bind(&key.key).bind(now).fetch_optional(&mut *conn).await.map_err(map_err)?;
    let Some(row) = row else { return Ok(None) };
    let get = |i: usize| row.try_get_raw(i).map(|v| sqlx::ValueRef::is_null(&v)).map_err(map_err);
    let job: uuid::Uuid = row.try_get(0).map_err(map_err)?;
    let place: Option<String> = row.try_get(1).map_err(map_err)?;
    let state = match place.as_deref() {
        Some("h") if !get(2)? => Some(UniqueState::of_hot(
            i16::try_from(row.try_get::<i64, _>(2).map_err(map_err)?).map_err(|_| corrupt("job status"))?,
            i32::try_from(row.try_get::<i64, _>(3).map_err(map_err)?).map_err(|_| corrupt("attempt"))?,
            row.try_get::<i64, _>(4).map_err(map_err)? != 0,
        )?),
        Some("a") => Some(UniqueState::Succeeded),
        Some("d") => Some(UniqueState::of_dead(DeadReason::parse(&row.try_get::<String, _>(5).map_err(map_err)?)?)),
        _ => None,
    };
    Ok(state.filter(|s| key.states.contains(*s)).map(|_| JobId(job)))
}

/// Job `id` takes `key` (a new row, or the row of a holder that no longer counts).
pub(crate) async fn take(
    b: &SqliteBackend,
    conn: &mut SqliteConnection,
    key: &UniqueKey,
    id: JobId,
    now: i64,
) -> Result<()> {
    let expires = key.expires_at.map(|t| ts_us("unique period end", t)).transpose()?;
    sqlx::query(&b.sql.unique_take)
        .bind(&key.key)
        .bind(id.0)
        .bind(key.states.bits())
        .bind(&key.settings)
        .bind(expires)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(())
}

/// [`chokaq_core::Backend::unique_of`].
pub(crate) async fn unique_of(b: &SqliteBackend, id: JobId) -> Result<Option<UniqueHold>> {
    let mut conn = b.reader.acquire().await.map_err(map_err)?;
    let row: Option<(String, String, Option<i64>)> =
        sqlx::query_as(&b.sql.unique_of).bind(id.0).fetch_optional(&mut *conn).await.map_err(map_err)?;
    row.map(|(key, settings, expires)| {
        Ok(UniqueHold { key, job_id: id, opts: UniqueOpts::from_json(&settings)?, expires_at: opt_ts(expires)? })
    })
    .transpose()
}

/// [`chokaq_core::Backend::prune_uniques`]: at most `limit` key rows looked at, from a random
/// point of the key space.
pub(crate) async fn prune_uniques(b: &SqliteBackend, limit: u32) -> Result<u64> {
    prune_limit(limit)?;
    let from = chokaq_core::prune_from();
    let mut tx = b.begin_write().await?;
    let n = sqlx::query(&b.sql.unique_prune)
        .bind(i64::from(limit))
        .bind(&from)
        .bind(now_us())
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected();
    commit(tx).await?;
    Ok(n)
}
