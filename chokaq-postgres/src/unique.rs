//! Unique jobs (`docs/unique.md`, migration 17): what enqueue does with a unique job whose key
//! row was taken (the holder's state decides: a duplicate, or a take-over under the row lock),
//! [`chokaq_core::Backend::unique_of`] and [`chokaq_core::Backend::prune_uniques`].

use std::collections::HashMap;

use chokaq_core::{
    prune_limit, DeadReason, Error, ErrorKind, JobId, Result, UniqueHold, UniqueOpts, UniqueState, UniqueStates,
};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::enqueue::{NewRow, Target};
use crate::error::{map_sqlx_error, with_retry};
use crate::PgBackend;

/// What became of a unique job whose key row the enqueue statement found taken.
pub(crate) enum Resolved {
    /// The holder is in one of the job's counted states: its id.
    Duplicate(JobId),
    /// The holder no longer counted; this job took the key over and was inserted (the
    /// transaction id of the insert, for the wake-up after a caller's commit).
    Inserted(i64),
    /// The key row names this very job, which its idempotency key kept out: the idempotency
    /// look-up decides.
    ByIdempotencyKey,
    /// The key row vanished meanwhile (pruned): insert again.
    Again,
}

/// The holder of one key as `UNIQUE_HOLDERS` reads it.
struct Holder {
    job: Uuid,
    state: Option<UniqueState>,
}

fn holder(row: &sqlx::postgres::PgRow) -> Result<(String, Holder)> {
    let d = |e: sqlx::Error| Error::new(ErrorKind::Other, format!("unique holder row: {e}"));
    let key: String = row.try_get(0).map_err(d)?;
    let job: Uuid = row.try_get(1).map_err(d)?;
    let place: Option<String> = row.try_get(2).map_err(d)?;
    let state = match place.as_deref() {
        Some("h") => Some(UniqueState::of_hot(
            row.try_get::<i16, _>(3).map_err(d)?,
            row.try_get::<i32, _>(4).map_err(d)?,
            row.try_get::<bool, _>(5).map_err(d)?,
        )?),
        Some("a") => Some(UniqueState::Succeeded),
        Some(_) => Some(UniqueState::of_dead(DeadReason::parse(&row.try_get::<String, _>(6).map_err(d)?)?)),
        None => None,
    };
    Ok((key, Holder { job, state }))
}

impl PgBackend {
    async fn holders_on(&self, target: &mut Target<'_>, keys: &[&str]) -> Result<HashMap<String, Holder>> {
        let q = || sqlx::query(&self.sql().unique_holders).bind(keys);
        let rows = match target {
            Target::Pool(pool) => with_retry(|| q().fetch_all(*pool)).await?,
            Target::Conn(conn) => q().fetch_all(&mut **conn).await.map_err(map_sqlx_error)?,
        };
        rows.iter().map(holder).collect()
    }

    /// Resolves the unique jobs `taken` (indexes into `rows`) whose key rows were taken. A
    /// holder in a counted state makes a duplicate with no lock (it held the key at that
    /// read); only a holder that no longer counts leads to the take-over under the row lock.
    pub(crate) async fn resolve_uniques(
        &self,
        target: &mut Target<'_>,
        rows: &[NewRow],
        taken: &[usize],
    ) -> Result<Vec<(usize, Resolved)>> {
        let keys: Vec<&str> = taken.iter().filter_map(|&i| rows[i].unique.as_ref().map(|u| u.key.as_str())).collect();
        let holders = self.holders_on(target, &keys).await?;
        let mut out = Vec::with_capacity(taken.len());
        for &i in taken {
            let Some(u) = rows[i].unique.as_ref() else { continue };
            let r = match holders.get(&u.key) {
                None => Resolved::Again,
                Some(h) if h.job == rows[i].id => Resolved::ByIdempotencyKey,
                Some(h) if h.state.is_some_and(|s| u.states.contains(s)) => Resolved::Duplicate(JobId(h.job)),
                Some(_) => match target {
                    Target::Pool(pool) => {
                        let mut tx = pool.begin().await.map_err(map_sqlx_error)?;
                        let r = self.take_over(&mut tx, &rows[i], u.states).await?;
                        tx.commit().await.map_err(map_sqlx_error)?;
                        r
                    }
                    Target::Conn(conn) => self.take_over(conn, &rows[i], u.states).await?,
                },
            };
            out.push((i, r));
        }
        Ok(out)
    }

    /// Under the key row's lock, looks at the holder again (a new statement: a snapshot taken
    /// after the lock was granted, so a racing taker's commit is seen), and takes the key over
    /// only if the holder still counts for none of `states`.
    async fn take_over(&self, conn: &mut PgConnection, row: &NewRow, states: UniqueStates) -> Result<Resolved> {
        let Some(u) = row.unique.as_ref() else { return Ok(Resolved::Again) };
        let locked: Option<Uuid> = sqlx::query_scalar(&self.sql().unique_lock)
            .bind(&u.key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_sqlx_error)?;
        let Some(locked) = locked else { return Ok(Resolved::Again) };
        let mut target = Target::Conn(conn);
        let holders = self.holders_on(&mut target, &[u.key.as_str()]).await?;
        let Target::Conn(conn) = target else { unreachable!("a connection stays a connection") };
        let h = holders.get(&u.key).ok_or_else(|| Error::new(ErrorKind::Other, "a locked key row vanished"))?;
        if h.state.is_some_and(|s| states.contains(s)) {
            return Ok(Resolved::Duplicate(JobId(h.job)));
        }
        let taken = sqlx::query(&self.sql().unique_take)
            .bind(&u.key)
            .bind(row.id)
            .bind(u.states.bits())
            .bind(&u.settings)
            .bind(u.expires_at)
            .bind(locked)
            .execute(&mut *conn)
            .await
            .map_err(map_sqlx_error)?;
        if taken.rows_affected() != 1 {
            return Err(Error::new(ErrorKind::Other, "unique key row changed under its lock"));
        }
        let inserted: Vec<(Uuid, i64)> =
            self.insert_query(&[row], false).fetch_all(&mut *conn).await.map_err(map_sqlx_error)?;
        Ok(match inserted.first() {
            Some((_, xid)) => Resolved::Inserted(*xid),
            None => Resolved::ByIdempotencyKey,
        })
    }
}

/// [`chokaq_core::Backend::unique_of`]: the key on the job's hot row (the default state set;
/// the end of its period from the job's due time), else its row of the uniques table.
pub(crate) async fn unique_of(b: &PgBackend, id: JobId) -> Result<Option<UniqueHold>> {
    let hot: Option<(String, String, chokaq_core::Timestamp)> =
        with_retry(|| sqlx::query_as(&b.sql().unique_of_hot).bind(id.0).fetch_optional(&b.kept)).await?;
    if let Some((key, settings, due)) = hot {
        let opts = UniqueOpts::from_json(&settings)?;
        let expires_at = opts.period_secs.and_then(|p| {
            let p = i64::try_from(p).ok()?;
            chokaq_core::Timestamp::from_timestamp((due.timestamp().div_euclid(p) + 1) * p, 0)
        });
        return Ok(Some(UniqueHold { key, job_id: id, opts, expires_at }));
    }
    let row: Option<(String, String, Option<chokaq_core::Timestamp>)> =
        with_retry(|| sqlx::query_as(&b.sql().unique_of).bind(id.0).fetch_optional(&b.kept)).await?;
    row.map(|(key, settings, expires_at)| {
        Ok(UniqueHold { key, job_id: id, opts: UniqueOpts::from_json(&settings)?, expires_at })
    })
    .transpose()
}

/// [`chokaq_core::Backend::prune_uniques`]: at most `limit` key rows looked at, from a random
/// point of the key space; those locked by an enqueue are skipped.
pub(crate) async fn prune_uniques(b: &PgBackend, limit: u32) -> Result<u64> {
    prune_limit(limit)?;
    let from = chokaq_core::prune_from();
    with_retry(|| async {
        let mut tx = b.kept.begin().await?;
        let keys: Vec<String> = sqlx::query_scalar(&b.sql().unique_prune_lock)
            .bind(i64::from(limit))
            .bind(&from)
            .fetch_all(&mut *tx)
            .await?;
        let n = if keys.is_empty() {
            0
        } else {
            sqlx::query(&b.sql().unique_prune).bind(&keys).execute(&mut *tx).await?.rows_affected()
        };
        tx.commit().await?;
        Ok(n)
    })
    .await
}
