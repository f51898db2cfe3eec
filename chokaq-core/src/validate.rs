//! Validation of names, text, payloads, durations and list lengths, shared by every backend
//! so they all reject the same input with the same
//! [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) error.
//!
//! Every limit is a constant here; `docs/contract.md` ("Input limits") lists them all. The
//! rule throughout: accept only what every backend can store **and read back**.

use std::fmt;
use std::time::Duration;

use chrono::Datelike;

use crate::{Error, LeaseRef, NewJob, Result, Timestamp};

/// Longest queue name, in bytes.
pub const MAX_QUEUE_LEN: usize = 128;
/// Longest job kind, in bytes.
pub const MAX_KIND_LEN: usize = 255;
/// Longest idempotency key, in bytes.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
/// Longest single tag, in bytes.
pub const MAX_TAG_LEN: usize = 100;
/// Longest concurrency key, in bytes (issue 25: keyed caps and rate limits).
pub const MAX_CONCURRENCY_KEY_LEN: usize = 255;
/// Most tags on one job.
pub const MAX_TAGS: usize = 32;
/// Default payload limit (bytes of serialized JSON); backends make it configurable.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Default limit of one job output (bytes of serialized JSON, `docs/outputs.md`); backends
/// make it configurable (`max_output_bytes`).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Deepest nesting of arrays and objects in a payload: `1` and `"x"` are depth 0, `[1]` and
/// `{"a": 1}` depth 1. serde_json's reader, which every backend's read path uses, stops at
/// 128 levels, and a backend may read the payload inside a row or a claim result that adds
/// levels of its own; 64 leaves room for that.
pub const MAX_PAYLOAD_DEPTH: usize = 64;
/// Most bytes in one `enqueue_many` call: the serialized payloads plus the text fields
/// (queue, kind, key, tags, `created_by`) of all its jobs. A backend whose payload limit is
/// larger uses that limit instead, so one job at the limit always fits.
pub const MAX_ENQUEUE_BATCH_BYTES: usize = 32 * 1024 * 1024;
/// Most leases in one `start`, `heartbeat`, `complete` or `release` call (and in the
/// completing half of `complete_and_claim`). A worker holds at most `concurrency + prefetch
/// + lookahead` (each at most [`MAX_CLAIM_LIMIT`](crate::MAX_CLAIM_LIMIT)) jobs, well below it.
pub const MAX_LEASES_PER_CALL: usize = 10_000;
/// Longest error text stored with a job; longer text is truncated on a char boundary.
pub const MAX_ERROR_LEN: usize = 8000;
/// Longest `created_by`, in bytes.
pub const MAX_CREATED_BY_LEN: usize = 255;

/// Longest identifier of the databases chokaq supports: PostgreSQL's (`NAMEDATALEN` - 1).
pub const MAX_IDENTIFIER_LEN: usize = 63;
/// Longest schema name, in bytes. Shorter than [`MAX_IDENTIFIER_LEN`] so that every
/// identifier a backend derives from it (PostgreSQL: the `NOTIFY` channel `<schema>_jobs`, the
/// `application_name` `chokaq:<schema>`) stays within it.
pub const MAX_SCHEMA_NAME_LEN: usize = 48;
/// The room a backend has for a prefix plus a suffix around the schema name in a derived
/// identifier: [`MAX_IDENTIFIER_LEN`] - [`MAX_SCHEMA_NAME_LEN`] = 15 bytes. Today's longest
/// affix is `chokaq:` (7 bytes).
pub const MAX_SCHEMA_AFFIX_LEN: usize = MAX_IDENTIFIER_LEN - MAX_SCHEMA_NAME_LEN;
/// Schema names that belong to the database itself, compared without regard to case:
/// PostgreSQL's `public`, `pg_catalog` and `information_schema`, SQL Server's `dbo`, `sys`,
/// `guest`, `INFORMATION_SCHEMA` and its fixed database-role schemas. Names starting with
/// [`RESERVED_SCHEMA_PREFIX`] are reserved too.
pub const RESERVED_SCHEMA_NAMES: &[&str] = &[
    "public",
    "pg_catalog",
    "information_schema",
    "dbo",
    "sys",
    "guest",
    "db_owner",
    "db_accessadmin",
    "db_securityadmin",
    "db_ddladmin",
    "db_backupoperator",
    "db_datareader",
    "db_datawriter",
    "db_denydatareader",
    "db_denydatawriter",
];
/// PostgreSQL reserves every schema name starting with `pg_` (compared without regard to case).
pub const RESERVED_SCHEMA_PREFIX: &str = "pg_";

/// Longest delay anywhere: `RunAt::After`, retry and snooze delays, `RetryPolicy` `base` and
/// `max`. 36,500 days (about 100 years).
pub const MAX_DELAY: Duration = Duration::from_secs(36_500 * 86_400);
/// Earliest year of a timestamp a job may carry (`RunAt::At`): SQL Server's `datetime2`
/// range, the narrowest of the backends.
pub const MIN_YEAR: i32 = 1;
/// Latest year of a timestamp a job may carry (`RunAt::At`).
pub const MAX_YEAR: i32 = 9999;
/// Shortest queue `zombie_timeout`: PostgreSQL and SQL Server store it in whole
/// milliseconds, and zero would make every running job a zombie at once.
pub const MIN_ZOMBIE_TIMEOUT: Duration = Duration::from_millis(1);
/// Longest queue `zombie_timeout`: 30 days.
pub const MAX_ZOMBIE_TIMEOUT: Duration = Duration::from_secs(30 * 86_400);
/// Largest queue cap (`max_workers`); `0` lets nothing through, `None` means no cap.
pub const MAX_QUEUE_WORKERS: u32 = 1_000_000;
/// Largest `jobs` of a [`RateLimit`](crate::RateLimit).
pub const MAX_RATE_JOBS: u32 = 1_000_000;
/// Shortest `per` of a [`RateLimit`](crate::RateLimit): one millisecond (periods are stored in
/// whole milliseconds).
pub const MIN_RATE_PERIOD: Duration = Duration::from_millis(1);
/// Longest `per` of a [`RateLimit`](crate::RateLimit): one day.
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(86_400);

/// Validates an identifier: `^[A-Za-z_][A-Za-z0-9_]*$`, 1 to `max_len` bytes. No reserved
/// names: that is [`schema_name`]'s rule; this is for other identifiers (a database name).
pub fn identifier(what: &str, name: &str, max_len: usize) -> Result<()> {
    let mut chars = name.chars();
    let ok = match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {
            name.len() <= max_len && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        let rest = max_len.saturating_sub(1);
        Err(Error::invalid(format!("invalid {what} {name:?}: expected ^[A-Za-z_][A-Za-z0-9_]{{0,{rest}}}$")))
    }
}

/// Validates a database schema name: `^[A-Za-z_][A-Za-z0-9_]{0,47}$` (at most
/// [`MAX_SCHEMA_NAME_LEN`] bytes), not one of [`RESERVED_SCHEMA_NAMES`] and not starting with
/// [`RESERVED_SCHEMA_PREFIX`], both compared without regard to case.
///
/// Schema names are identifiers and so cannot be bound parameters; this check is what makes
/// splicing them into DDL and DML safe, and what keeps `drop_schema` away from the
/// database's own schemas.
pub fn schema_name(name: &str) -> Result<()> {
    identifier("schema name", name, MAX_SCHEMA_NAME_LEN)?;
    let lower = name.to_ascii_lowercase();
    if RESERVED_SCHEMA_NAMES.contains(&lower.as_str()) || lower.starts_with(RESERVED_SCHEMA_PREFIX) {
        return Err(Error::invalid(format!(
            "invalid schema name {name:?}: reserved for the database's own use (reserved: {}, and any name \
             starting with {RESERVED_SCHEMA_PREFIX:?})",
            RESERVED_SCHEMA_NAMES.join(", ")
        )));
    }
    Ok(())
}

/// Validates a queue name: 1 to 128 bytes of `A-Z a-z 0-9 _ - . :`. ASCII only, so no
/// control, bidi or zero-width character can get in.
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

/// A bidirectional-text control: U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A zero-width character: U+200B to U+200D (space, non-joiner, joiner) and U+FEFF (byte
/// order mark, zero-width no-break space).
pub fn is_zero_width(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200D}' | '\u{FEFF}')
}

/// Whether `c` would move, hide or break text when printed (a terminal, a page): control
/// characters (Unicode `Cc`), line and paragraph separators, bidi controls and marks,
/// zero-width and other invisible format characters (Unicode `Cf`: soft hyphen, word joiner,
/// invisible operators, interlinear annotation marks, tag characters). The CLI's table cells
/// and error lines and the dashboard's pages show each as its escape.
pub fn is_unsafe_to_print(c: char) -> bool {
    c.is_control()
        || is_bidi_control(c)
        || is_zero_width(c)
        || matches!(
            c,
            '\u{00AD}'
                | '\u{180E}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{2060}'..='\u{2064}'
                | '\u{206A}'..='\u{206F}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// A line break that is not a control character: U+2028 (line separator), U+2029
/// (paragraph separator).
fn is_unicode_line_break(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}')
}

/// Validates a job kind for enqueue: 1 to 255 bytes, no surrounding whitespace, and none of:
/// control characters (Unicode `Cc`), line and paragraph separators, bidi controls
/// ([`is_bidi_control`]), zero-width characters ([`is_zero_width`]). The kind is written
/// into logs and tracing spans as it is, so nothing in it may move or hide text.
pub fn job_kind(kind: &str) -> Result<()> {
    stored_job_kind(kind)?;
    if let Some(c) = kind.chars().find(|&c| is_unicode_line_break(c) || is_bidi_control(c) || is_zero_width(c)) {
        return Err(Error::invalid(format!(
            "invalid job kind {kind:?}: {} (U+{:04X}) is not allowed",
            describe(c),
            u32::from(c)
        )));
    }
    Ok(())
}

/// The rule job kinds were stored under before [`job_kind`] also refused bidi and zero-width
/// characters: 1 to 255 bytes, no control characters, no surrounding whitespace. Reading a
/// stored kind back ([`JobKind::from_stored`](crate::JobKind::from_stored)) checks only this,
/// so rows written by an earlier version stay readable.
pub fn stored_job_kind(kind: &str) -> Result<()> {
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

/// Validates free text fields (idempotency key, tag, `created_by`): 1 to `max` bytes, no
/// control characters (Unicode `Cc`: NUL, `\t`, `\n`, `\r`, ESC, DEL, U+0080 to U+009F) and
/// no line or paragraph separator (U+2028, U+2029), so a value cannot fake a log line or
/// drive a terminal. Other Unicode, right-to-left text included, is accepted.
pub fn text_field(what: &str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() || value.len() > max {
        return Err(Error::invalid(format!("invalid {what}: length must be 1 to {max} bytes")));
    }
    if let Some(c) = value.chars().find(|&c| c.is_control() || is_unicode_line_break(c)) {
        return Err(Error::invalid(format!("invalid {what}: {} (U+{:04X}) is not allowed", describe(c), u32::from(c))));
    }
    Ok(())
}

fn describe(c: char) -> &'static str {
    match c {
        '\0' => "a NUL character",
        c if c.is_control() => "a control character",
        c if is_unicode_line_break(c) => "a line or paragraph separator",
        c if is_bidi_control(c) => "a bidi control character",
        c if is_zero_width(c) => "a zero-width character",
        _ => "this character",
    }
}

/// Checks a JSON payload: at most [`MAX_PAYLOAD_DEPTH`] levels deep, no NUL character in any
/// string or key (databases cannot store it in text), and at most `max_bytes` bytes when
/// serialized. Returns the serialized size.
///
/// The depth walk keeps one iterator per level (so its memory follows the depth, never the
/// size), and the size is counted while serializing into a counter that stops at the limit:
/// no second copy of the payload is built.
pub fn payload(value: &serde_json::Value, max_bytes: usize) -> Result<usize> {
    walk_payload(value)?;
    let mut counter = ByteCounter { bytes: 0, max: max_bytes };
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => Ok(counter.bytes),
        Err(_) if counter.bytes > max_bytes => {
            Err(Error::invalid(format!("payload is more than {max_bytes} bytes of JSON, over the limit")))
        }
        Err(e) => Err(e.into()),
    }
}

/// Checks a job output (`Backend::record_output`, `docs/outputs.md`): what a payload must be
/// (depth, no NUL), and at most `max_bytes` bytes of serialized JSON. Too large is
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming both sizes; an output
/// is never truncated. Returns its size in bytes.
pub fn output(value: &serde_json::Value, max_bytes: usize) -> Result<usize> {
    walk_payload(value).map_err(|e| Error::invalid(format!("output: {}", e.message())))?;
    let bytes = serde_json::to_vec(value)?.len();
    if bytes > max_bytes {
        return Err(Error::invalid(format!(
            "output is {bytes} bytes of JSON, more than the limit of {max_bytes} bytes (max_output_bytes)"
        )));
    }
    Ok(bytes)
}

fn walk_payload(value: &serde_json::Value) -> Result<()> {
    use serde_json::Value;
    enum Level<'a> {
        Array(std::slice::Iter<'a, Value>),
        Object(serde_json::map::Iter<'a>),
    }
    let nul = || Error::invalid("payload contains a NUL character (\\u0000), which databases cannot store in text");
    let mut levels: Vec<Level<'_>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(v) = next.take() {
            let level = match v {
                Value::String(s) if s.contains('\0') => return Err(nul()),
                Value::Array(a) => Some(Level::Array(a.iter())),
                Value::Object(o) => Some(Level::Object(o.iter())),
                _ => None,
            };
            if let Some(level) = level {
                if levels.len() == MAX_PAYLOAD_DEPTH {
                    return Err(Error::invalid(format!(
                        "payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep (arrays and objects), over \
                         the limit"
                    )));
                }
                levels.push(level);
            }
        }
        match levels.last_mut() {
            None => return Ok(()),
            Some(Level::Array(it)) => match it.next() {
                Some(v) => next = Some(v),
                None => drop(levels.pop()),
            },
            Some(Level::Object(it)) => match it.next() {
                Some((k, _)) if k.contains('\0') => return Err(nul()),
                Some((_, v)) => next = Some(v),
                None => drop(levels.pop()),
            },
        }
    }
}

/// Counts bytes written and fails once they pass `max`, so serializing a payload far over
/// the limit stops early.
struct ByteCounter {
    bytes: usize,
    max: usize,
}

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes = self.bytes.saturating_add(buf.len());
        if self.bytes > self.max {
            return Err(std::io::Error::other("over the payload limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Checks one `enqueue_many` batch before anything is written: at most
/// [`MAX_ENQUEUE_BATCH`](crate::MAX_ENQUEUE_BATCH) jobs, each passing
/// [`NewJob::validate`] with `max_payload_bytes`, and at most [`MAX_ENQUEUE_BATCH_BYTES`]
/// (or `max_payload_bytes`, when larger) bytes in all: payloads plus text fields. Returns the
/// batch's byte count.
pub fn enqueue_batch(jobs: &[NewJob], max_payload_bytes: usize) -> Result<usize> {
    if jobs.len() > crate::MAX_ENQUEUE_BATCH {
        return Err(Error::invalid(format!(
            "enqueue_many takes at most {} jobs, got {}",
            crate::MAX_ENQUEUE_BATCH,
            jobs.len()
        )));
    }
    let cap = MAX_ENQUEUE_BATCH_BYTES.max(max_payload_bytes);
    let mut total: usize = 0;
    for job in jobs {
        let text = job.queue.as_str().len()
            + job.kind.as_str().len()
            + job.idempotency_key.as_ref().map_or(0, String::len)
            + job.tags.iter().map(String::len).sum::<usize>()
            + job.created_by.as_ref().map_or(0, String::len);
        total = total.saturating_add(job.validate(max_payload_bytes)?).saturating_add(text);
        if total > cap {
            return Err(Error::invalid(format!(
                "enqueue_many batch is more than {cap} bytes (payloads and text fields), over the limit; split it"
            )));
        }
    }
    Ok(total)
}

/// Checks the length of a lease list for `op` (`start`, `heartbeat`, `complete`, `release`):
/// at most [`MAX_LEASES_PER_CALL`]. Call it before anything is written.
pub fn lease_list(op: &str, leases: &[LeaseRef]) -> Result<()> {
    if leases.len() > MAX_LEASES_PER_CALL {
        return Err(Error::invalid(format!(
            "{op} takes at most {MAX_LEASES_PER_CALL} leases per call, got {}; split the list",
            leases.len()
        )));
    }
    Ok(())
}

/// Checks that `value` lies in `min..=max`; the error names `name` and both limits.
pub fn duration(name: &str, value: Duration, min: Duration, max: Duration) -> Result<()> {
    if value < min || value > max {
        return Err(Error::invalid(format!("{name} must be between {min:?} and {max:?}, got {value:?}")));
    }
    Ok(())
}

/// Checks a delay (`RunAt::After`, a retry or snooze delay): at most [`MAX_DELAY`].
pub fn delay(name: &str, value: Duration) -> Result<()> {
    duration(name, value, Duration::ZERO, MAX_DELAY)
}

/// Checks that a timestamp a job carries lies in the years [`MIN_YEAR`] to [`MAX_YEAR`].
pub fn timestamp(name: &str, value: Timestamp) -> Result<()> {
    if !(MIN_YEAR..=MAX_YEAR).contains(&value.year()) {
        return Err(Error::invalid(format!(
            "{name} must lie in the years {MIN_YEAR} to {MAX_YEAR}, got {}",
            value.to_rfc3339()
        )));
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

/// An error text as stored: at most [`MAX_ERROR_LEN`] bytes, cut on a char boundary, with
/// NUL replaced by U+FFFD (PostgreSQL cannot store NUL in text). Error texts are never
/// rejected. Only the kept part of `s` is copied.
pub fn error_text(s: &str) -> String {
    let mut out = BoundedText::new(MAX_ERROR_LEN);
    let _ = fmt::Write::write_str(&mut out, s);
    out.text
}

/// [`error_text`] of anything that displays, formatted into a buffer that stops at
/// [`MAX_ERROR_LEN`] bytes: a huge error message is never formatted whole.
pub fn error_text_of<E: fmt::Display + ?Sized>(error: &E) -> String {
    let mut out = BoundedText::new(MAX_ERROR_LEN);
    let _ = fmt::write(&mut out, format_args!("{error}"));
    out.text
}

/// A `fmt::Write` that keeps at most `max` bytes and then refuses more.
struct BoundedText {
    text: String,
    max: usize,
}

impl BoundedText {
    fn new(max: usize) -> Self {
        BoundedText { text: String::new(), max }
    }
}

impl fmt::Write for BoundedText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.max - self.text.len();
        if s.len() <= room && !s.contains('\0') {
            self.text.push_str(s);
            return Ok(());
        }
        let mut room = room;
        for c in s.chars() {
            let c = if c == '\0' { '\u{FFFD}' } else { c };
            if c.len_utf8() > room {
                return Err(fmt::Error);
            }
            room -= c.len_utf8();
            self.text.push(c);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
