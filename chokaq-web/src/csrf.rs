//! CSRF tokens: double-submit cookie bound to a per-process secret.
//!
//! A token is `hex(nonce) "." hex(HMAC-SHA256(secret, nonce))`. The dashboard sets it in the
//! `chokaq_csrf` cookie (`HttpOnly; SameSite=Strict`) and puts the same value in every form; a
//! POST must carry it back in the form field `csrf` or the `x-csrf-token` header, equal to the
//! cookie and signed with this process's secret (so a cookie planted by a sibling site does not
//! pass). Compared in constant time.

use axum::http::{header, HeaderMap};
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(crate) const COOKIE: &str = "chokaq_csrf";

pub(crate) struct Csrf {
    secret: [u8; 32],
}

impl Csrf {
    pub fn new() -> Self {
        Csrf { secret: rand::random() }
    }

    fn mac(&self, nonce: &str) -> String {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        m.update(nonce.as_bytes());
        hex::encode(m.finalize().into_bytes())
    }

    /// A fresh token.
    pub fn issue(&self) -> String {
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        let mac = self.mac(&nonce);
        format!("{nonce}.{mac}")
    }

    /// Whether this process signed the token.
    pub fn verify(&self, token: &str) -> bool {
        let Some((nonce, mac)) = token.split_once('.') else { return false };
        nonce.len() == 32 && constant_time_eq(self.mac(nonce).as_bytes(), mac.as_bytes())
    }
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

/// Equal bytes, in time independent of where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_with_their_secret() {
        let (a, b) = (Csrf::new(), Csrf::new());
        let t = a.issue();
        assert!(a.verify(&t));
        assert!(!b.verify(&t));
        assert!(!a.verify("00.11"));
        let mut forged = t.clone();
        forged.replace_range(0..1, if t.starts_with('0') { "1" } else { "0" });
        assert!(!a.verify(&forged));
    }

    #[test]
    fn cookies_are_parsed() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; chokaq_csrf=xyz; b=2".parse().unwrap());
        assert_eq!(cookie_tokens(&h), vec!["xyz".to_string()]);
    }
}
