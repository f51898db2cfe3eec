//! LISTEN/NOTIFY wake-ups.

use std::time::Duration;

use chokaq_core::Wake;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::broadcast;

/// Feeds `tx` from a listener on `channel` until every receiver is gone or the backend's `pool`
/// is closed. The listener runs on its own connection, from `own` (a pool of one outside the
/// backend's pool, so a pool too small for it and the claims cannot exist). On a lost connection
/// it sends [`Wake::Any`] (notifications may have been missed) and reconnects.
pub(crate) async fn run(
    pool: PgPool,
    own: PgPool,
    channel: String,
    tx: broadcast::Sender<Wake>,
    mut listener: PgListener,
) {
    let mut backoff = Duration::from_millis(50);
    let closed = pool.close_event();
    tokio::pin!(closed);
    loop {
        let next = tokio::select! {
            _ = tx.closed() => return,
            _ = &mut closed => return,
            n = listener.try_recv() => n,
        };
        match next {
            Ok(Some(n)) => {
                backoff = Duration::from_millis(50);
                if tx.send(Wake::Queue(n.payload().to_owned())).is_err() {
                    return;
                }
            }
            // The connection was lost and re-established: notifications may have been missed.
            Ok(None) => {
                if tx.send(Wake::Any).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %crate::map_sqlx_error(e), "LISTEN connection failed; reconnecting");
                if tx.send(Wake::Any).is_err() {
                    return;
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                if pool.is_closed() {
                    return;
                }
                // A fresh listener when the old one gave up.
                if let Ok(mut l) = PgListener::connect_with(&own).await {
                    if l.listen(&channel).await.is_ok() {
                        listener = l;
                    }
                }
            }
        }
    }
}
