//! Validation of names and identifiers, shared by every backend so they all reject the same
//! input with the same [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) error.

use crate::{Error, Result};

/// Longest queue name, in bytes.
pub const MAX_QUEUE_LEN: usize = 128;
/// Longest job kind, in bytes.
pub const MAX_KIND_LEN: usize = 255;
/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// Longest single tag, in bytes.
pub const MAX_TAG_LEN: usize = 100;
/// Most tags on one job.
pub const MAX_TAGS: usize = 32;
/// Default payload limit (bytes of serialized JSON); backends make it configurable.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Longest error text stored with a job; longer text is truncated on a char boundary.
pub const MAX_ERROR_LEN: usize = 8000;
/// Longest `created_by`, in bytes.
pub const MAX_CREATED_BY_LEN: usize = 255;

/// Validates a database schema name: `^[A-Za-z_][A-Za-z0-9_]{0,62}$`.
///
/// Schema names are identifiers and so cannot be bound parameters; this check is what makes
/// splicing them into DDL and DML safe.
pub fn schema_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {
            name.len() <= 63 && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!("invalid schema name {name:?}: expected ^[A-Za-z_][A-Za-z0-9_]{{0,62}}$")))
    }
}

/// Validates a queue name: 1 to 128 bytes of `A-Z a-z 0-9 _ - . :`.
pub fn queue_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_QUEUE_LEN {
        return Err(Error::invalid(format!("invalid queue name {name:?}: length must be 1 to {MAX_QUEUE_LEN} bytes")));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')) {
        return Err(Error::invalid(format!(
            "invalid queue name {name:?}: only ASCII letters, digits, '_', '-', '.' and ':' are allowed"
        )));
    }
    Ok(())
}

/// Validates a job kind: 1 to 255 bytes, printable, no whitespace at either end.
pub fn job_kind(kind: &str) -> Result<()> {
    if kind.is_empty() || kind.len() > MAX_KIND_LEN {
        return Err(Error::invalid(format!("invalid job kind {kind:?}: length must be 1 to {MAX_KIND_LEN} bytes")));
    }
    if kind.chars().any(char::is_control) || kind.trim() != kind {
        return Err(Error::invalid(format!(
            "invalid job kind {kind:?}: no control characters or surrounding whitespace"
        )));
    }
    Ok(())
}

/// Validates free text fields (idempotency key, tag, created_by): bounded length, no NUL.
pub fn text_field(what: &str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() || value.len() > max {
        return Err(Error::invalid(format!("invalid {what}: length must be 1 to {max} bytes")));
    }
    if value.contains('\0') {
        return Err(Error::invalid(format!("invalid {what}: NUL characters are not allowed")));
    }
    Ok(())
}

/// Truncates `s` to at most `max` bytes on a char boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names() {
        for ok in ["chokaq", "_x", "A1_b", &"a".repeat(63)] {
            assert!(schema_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1abc", "a-b", "a;drop", "a b", "\"x\"", &"a".repeat(64), "é"] {
            assert!(schema_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn queue_names() {
        assert!(queue_name("default").is_ok());
        assert!(queue_name("mail.high:eu-1").is_ok());
        assert!(queue_name("").is_err());
        assert!(queue_name("a'b").is_err());
        assert!(queue_name(&"q".repeat(129)).is_err());
    }

    #[test]
    fn kinds() {
        assert!(job_kind("email.send.v1").is_ok());
        assert!(job_kind("письмо.v1").is_ok());
        assert!(job_kind(" x").is_err());
        assert!(job_kind("a\nb").is_err());
    }

    #[test]
    fn truncation_respects_chars() {
        assert_eq!(truncate("ééé", 3), "é");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
