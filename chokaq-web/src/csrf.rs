//! CSRF tokens: double-submit cookie bound to a per-process secret, with an expiry.
//!
//! A token is `hex(nonce) "." issued_at_ms "." hex(HMAC-SHA256(secret, nonce "." issued_at_ms))`.
//! The dashboard sets it in the `chokaq_csrf` cookie (`HttpOnly; SameSite=Strict`, `Secure` on
//! request) and puts the same value in every form; a POST must carry it back in the form field
//! `csrf` or the `x-csrf-token` header, equal to the cookie, signed with this process's secret
//! (so a cookie planted by a sibling site does not pass) and younger than the configured
//! lifetime (12 h by default). Compared in constant time whatever the lengths.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

pub(crate) const COOKIE: &str = "chokaq_csrf";

/// What a token is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    Valid,
    /// Signed here, but older than the lifetime.
    Expired,
    /// Not signed here, or malformed.
    Invalid,
}

pub(crate) struct Csrf {
    secret: [u8; 32],
    max_age_ms: u64,
}

impl Csrf {
    pub fn new(max_age: Duration) -> Self {
        Csrf { secret: rand::random(), max_age_ms: u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX) }
    }

    fn mac(&self, signed: &str) -> String {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        m.update(signed.as_bytes());
        hex::encode(m.finalize().into_bytes())
    }

    /// A fresh token.
    pub fn issue(&self) -> String {
        self.issue_at(now_ms())
    }

    fn issue_at(&self, now_ms: u64) -> String {
        let signed = format!("{}.{now_ms}", hex::encode(rand::random::<[u8; 16]>()));
        let mac = self.mac(&signed);
        format!("{signed}.{mac}")
    }

    /// Whether this process signed the token, and whether it is still young enough.
    pub fn check(&self, token: &str) -> Check {
        self.check_at(token, now_ms())
    }

    fn check_at(&self, token: &str, now_ms: u64) -> Check {
        let Some((signed, mac)) = token.rsplit_once('.') else { return Check::Invalid };
        let Some((nonce, issued)) = signed.split_once('.') else { return Check::Invalid };
        let Ok(issued) = issued.parse::<u64>() else { return Check::Invalid };
        if nonce.len() != 32 || !constant_time_eq(self.mac(signed).as_bytes(), mac.as_bytes()) {
            return Check::Invalid;
        }
        if now_ms.saturating_sub(issued) >= self.max_age_ms {
            Check::Expired
        } else {
            Check::Valid
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

/// Every `chokaq_csrf` value in the request's cookies (one per cookie path that matched).
pub(crate) fn cookie_tokens(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
        .collect()
}

/// Equal bytes, in time independent of where they differ and of whether their lengths do:
/// both are hashed (SHA-256) and the two digests compared without an early return.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (da, db) = (Sha256::digest(a), Sha256::digest(b));
    let diff = da.iter().zip(db.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const H12: u64 = 12 * 3600 * 1000;

    #[test]
    fn tokens_verify_only_with_their_secret() {
        let (a, b) = (Csrf::new(Duration::from_secs(60)), Csrf::new(Duration::from_secs(60)));
        let t = a.issue();
        assert_eq!(a.check(&t), Check::Valid);
        assert_eq!(b.check(&t), Check::Invalid);
        assert_eq!(a.check("00.11"), Check::Invalid);
        assert_eq!(a.check("00.1.11"), Check::Invalid);
        let mut forged = t.clone();
        forged.replace_range(0..1, if t.starts_with('0') { "1" } else { "0" });
        assert_eq!(a.check(&forged), Check::Invalid);
    }

    #[test]
    fn tokens_expire_and_their_time_cannot_be_changed() {
        let c = Csrf::new(Duration::from_millis(H12));
        let t0 = 1_800_000_000_000;
        let t = c.issue_at(t0);
        assert_eq!(c.check_at(&t, t0), Check::Valid);
        assert_eq!(c.check_at(&t, t0 + H12 - 1), Check::Valid);
        assert_eq!(c.check_at(&t, t0 + H12), Check::Expired);
        assert_eq!(c.check_at(&t, t0 + 10 * H12), Check::Expired);
        // A later issue time written into an expired token breaks its signature.
        let (nonce, rest) = t.split_once('.').unwrap();
        let mac = rest.split_once('.').unwrap().1;
        let moved = format!("{nonce}.{}.{mac}", t0 + H12);
        assert_eq!(c.check_at(&moved, t0 + H12 + 5), Check::Invalid);
    }

    #[test]
    fn comparison_handles_every_length() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn cookies_are_parsed() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; chokaq_csrf=xyz; b=2".parse().unwrap());
        assert_eq!(cookie_tokens(&h), vec!["xyz".to_string()]);
    }
}
