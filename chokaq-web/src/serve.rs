//! The standalone server behind [`serve_on`](crate::serve_on): an accept loop over hyper's
//! HTTP/1 server with a timer, so that limits hold before any authentication.
//!
//! - at most `max_connections` connections are served at once: the loop takes a slot before it
//!   accepts, so further clients wait in the kernel's listen backlog (costing the process no
//!   file descriptor) until a connection closes;
//! - at most `max_connections_per_peer` of them come from one peer (one IPv4 address, one IPv6
//!   /64): a connection beyond that is answered 429 at once and closed, so its slot is free
//!   again before any other peer waits for it (issue 40 L4: one client holding 600 idle
//!   sockets made every other request wait 9 s);
//! - hyper's header-read timeout closes a connection that has not sent a whole request head
//!   within `header_read_timeout`: partial headers, nothing at all, or nothing more after a
//!   kept-alive response;
//! - a request not answered within `request_timeout` gets 503 and the connection is closed;
//! - the POST body timeout is the guard's (it reads the body), so it holds under
//!   [`router`](crate::router) too.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::guard::{plain_error, secure};
use crate::WebOptions;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
}

impl From<&WebOptions> for Limits {
    fn from(o: &WebOptions) -> Self {
        Limits {
            header_read_timeout: o.header_read_timeout,
            request_timeout: o.request_timeout,
            max_connections: o.max_connections,
            max_connections_per_peer: o.max_connections_per_peer.min(o.max_connections),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then until every connection is closed.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let peers = Peers::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: say so, give it a moment.
                    tracing::warn!(error = %e, "chokaq dashboard: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(peer_slot) = peers.take(peer, limits.max_connections_per_peer) else {
            // One peer holds its share already: say so without waiting for it (a client that
            // does not read gets nothing), and free the slot at once.
            let _ = stream.try_write(TOO_MANY);
            tracing::debug!(peer = %peer.ip(), "chokaq dashboard: connection refused, too many from this peer");
            drop(stream);
            drop(slot);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let svc = TowerToHyperService::new(app.clone());
        let timeout = limits.request_timeout;
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let call = svc.call(req);
            async move {
                match tokio::time::timeout(timeout, call).await {
                    Ok(resp) => resp,
                    Err(_) => {
                        let mut resp = plain_error(StatusCode::SERVICE_UNAVAILABLE, "the request timed out", false);
                        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                        Ok(secure(resp))
                    }
                }
            }
        });
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _slot = (slot, peer_slot);
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let mut stopping = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "chokaq dashboard: connection ended");
                        }
                        break;
                    }
                    _ = stop.wait_for(|s| *s), if !stopping => {
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it is closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
}

/// The whole answer to a connection beyond its peer's share (written without waiting).
const TOO_MANY: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Length: 39\r\nConnection: close\r\nRetry-After: 1\r\n\r\ntoo many connections from this address\n";

/// Open connections per peer key ([`peer_key`]).
#[derive(Default, Clone)]
struct Peers(Arc<Mutex<HashMap<IpAddr, usize>>>);

impl Peers {
    /// One more connection from `peer`, or None when it holds `max` already.
    fn take(&self, peer: SocketAddr, max: usize) -> Option<PeerSlot> {
        let key = peer_key(peer.ip());
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(key).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot { peers: self.clone(), key })
    }
}

/// A connection's place in its peer's count, given back on drop.
struct PeerSlot {
    peers: Peers,
    key: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self.peers.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// What counts as one peer: an IPv4 address (an IPv4-mapped IPv6 one as IPv4), or an IPv6 /64
/// (one host usually holds a whole /64).
pub(crate) fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_many_is_one_whole_response() {
        let text = std::str::from_utf8(TOO_MANY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let len: usize = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().parse().unwrap();
        assert_eq!(body.len(), len, "{body:?}");
    }

    #[test]
    fn peers_count_per_address_and_per_v6_64() {
        let p = Peers::default();
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let s1 = p.take(a, 2).unwrap();
        let _s2 = p.take(a, 2).unwrap();
        assert!(p.take(a, 2).is_none());
        assert!(p.take("[::ffff:10.0.0.1]:9".parse().unwrap(), 2).is_none(), "mapped IPv4 is the same peer");
        let _b1 = p.take(b, 2).unwrap();
        drop(s1);
        assert!(p.take(a, 2).is_some());
        let _v1 = p.take("[2001:db8:1:2::1]:1".parse().unwrap(), 1).unwrap();
        assert!(p.take("[2001:db8:1:2:ffff::9]:1".parse().unwrap(), 1).is_none(), "same /64");
        assert!(p.take("[2001:db8:1:3::1]:1".parse().unwrap(), 1).is_some());
    }
}
