//! The query parameters of a database URL (`…?sslmode=verify-full&sslrootcert=/etc/ca.pem`),
//! for the network backends to check before their driver reads them: the driver ignores a
//! parameter it does not know (a misspelt `ssl_mode` silently meant no TLS), and its own error
//! for a bad value may quote the URL. Errors here name the parameter, never the URL, and quote
//! a value only where the caller asks ([`UrlParams::value_error`]).

use crate::{Error, Result};

/// The decoded `key=value` pairs of a URL's query, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UrlParams {
    /// `(key, value)`, percent-decoded; a key without `=` has an empty value.
    pub pairs: Vec<(String, String)>,
}

impl UrlParams {
    /// The query of `url` (after the first `?`, before any `#`), decoded. `backend` names the
    /// backend in errors (`"postgres"`, `"mysql"`).
    pub fn parse(url: &str, backend: &str) -> Result<UrlParams> {
        let Some((_, query)) = url.split_once('?') else {
            return Ok(UrlParams::default());
        };
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        let mut pairs = Vec::new();
        for part in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let key = decode(k).ok_or_else(|| {
                Error::invalid(format!("{backend}: a URL parameter name is not valid percent-encoded UTF-8"))
            })?;
            let value = decode(v).ok_or_else(|| {
                Error::invalid(format!(
                    "{backend}: the URL parameter {} is not valid percent-encoded UTF-8",
                    shown(&key)
                ))
            })?;
            pairs.push((key, value));
        }
        Ok(UrlParams { pairs })
    }

    /// The last value of the first of `keys` present (the drivers read the last one).
    pub fn get(&self, keys: &[&str]) -> Option<&str> {
        self.pairs.iter().rev().find(|(k, _)| keys.contains(&k.as_str())).map(|(_, v)| v.as_str())
    }

    /// Refuses a key not in `known`, naming it and the known ones (never its value: a
    /// misspelt `pasword=` would otherwise be printed).
    pub fn refuse_unknown(&self, backend: &str, known: &[&str]) -> Result<()> {
        if let Some((k, _)) = self.pairs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            return Err(Error::invalid(format!(
                "{backend}: unknown URL parameter {} (known: {})",
                shown(k),
                known.join(", ")
            )));
        }
        Ok(())
    }

    /// An error for a bad `value` of parameter `key`: `expected` says what is accepted. The
    /// value is quoted (escaped, at most 40 characters): only call this for parameters that
    /// hold no secret (modes, not passwords).
    pub fn value_error(backend: &str, key: &str, value: &str, expected: &str) -> Error {
        Error::invalid(format!("{backend}: invalid {key} {} in the URL: expected {expected}", shown(value)))
    }
}

/// A name or value as an error shows it: escaped by `{:?}` (no control or bidi characters
/// reach a terminal raw), cut at 40 characters.
fn shown(s: &str) -> String {
    let cut: String = s.chars().take(40).collect();
    if cut.len() < s.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// Percent-decoding (`+` is a space, as in a form-encoded query); `None` for a malformed
/// escape or bytes that are not UTF-8.
fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_decodes() {
        let p = UrlParams::parse("postgres://u:p@h/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&x", "postgres")
            .unwrap();
        assert_eq!(p.get(&["sslmode", "ssl-mode"]), Some("verify-full"));
        assert_eq!(p.get(&["sslrootcert"]), Some("/tmp/ca.pem"));
        assert_eq!(p.get(&["x"]), Some(""));
        assert_eq!(p.pairs.len(), 3);
        assert!(UrlParams::parse("postgres://h/db", "postgres").unwrap().pairs.is_empty());
        assert!(UrlParams::parse("postgres://h/db?a=%zz", "postgres").is_err());
    }

    #[test]
    fn unknown_keys_are_named_without_their_value() {
        let p = UrlParams::parse("mysql://h/db?ssl_mode=REQUIRED&pasword=hunter2", "mysql").unwrap();
        let e = p.refuse_unknown("mysql", &["ssl-mode", "sslmode"]).unwrap_err();
        assert!(e.message().contains("\"ssl_mode\""), "{e}");
        let e = UrlParams::parse("mysql://h/db?pasword=hunter2", "mysql")
            .unwrap()
            .refuse_unknown("mysql", &["ssl-mode"])
            .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
