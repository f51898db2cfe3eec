use std::fmt;

/// The portable kind of an [`Error`]. Backends map their driver's errors to these kinds in
/// exactly one function, by SQLSTATE or error number, never by message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller passed something invalid: a bad queue or schema name, a payload over the
    /// limit, malformed JSON, an unknown job kind. Retrying the same call cannot succeed.
    InvalidInput,
    /// The named thing (a job, a queue) does not exist.
    NotFound,
    /// A uniqueness or state conflict that the caller should resolve (not a lost lease: that
    /// is an ordinary [`crate::Fenced::LeaseLost`] outcome).
    Conflict,
    /// A failure that a retry is expected to fix: deadlock, serialization failure, lock
    /// timeout.
    Transient,
    /// The database cannot be reached or went away (connection refused, terminated, pool
    /// timed out, server shutting down).
    Unavailable,
    /// The backend does not support this operation.
    Unsupported,
    /// The schema has not been created or is older than this build needs: a table or schema
    /// the statement reads does not exist. Run the migrations (`Backend::migrate`, or
    /// `chokaq migrate`).
    NotMigrated,
    /// Anything else: the source is kept for diagnosis.
    Other,
}

impl ErrorKind {
    /// Whether an operation that failed with this kind may be retried as it is.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Transient | ErrorKind::Unavailable)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Transient => "transient",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NotMigrated => "schema not migrated",
            ErrorKind::Other => "error",
        };
        f.write_str(s)
    }
}

/// The one error type of chokaq: a kind, a message, and the source error where there is one.
///
/// Messages never contain connection strings or passwords.
///
/// A backend sets the [`Backend`](crate::Backend) operation an error came from
/// ([`Error::operation`], e.g. `complete`); `Display` then starts with it.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    operation: Option<&'static str>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(op) = self.operation {
            write!(f, "{op}: ")?;
        }
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// `Result` with chokaq's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), operation: None, source: None }
    }

    /// A new error of `kind` with a message and the error that caused it.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error { kind, message: message.into(), operation: None, source: Some(source.into()) }
    }

    /// Shorthand for [`ErrorKind::InvalidInput`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// Shorthand for [`ErrorKind::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// The portable kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the failed operation may be retried as it is.
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// The [`Backend`](crate::Backend) operation the error came from (`claim`, `complete`,
    /// `enqueue_many`, …), where the backend set it.
    pub fn operation(&self) -> Option<&'static str> {
        self.operation
    }

    /// Sets the operation the error came from, unless one is set already (the innermost
    /// operation names it).
    pub fn with_operation(mut self, operation: &'static str) -> Self {
        self.operation.get_or_insert(operation);
        self
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::with_source(ErrorKind::InvalidInput, format!("payload is not valid JSON for this type: {e}"), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        assert!(Error::new(ErrorKind::Transient, "deadlock").is_retryable());
        assert!(Error::new(ErrorKind::Unavailable, "gone").is_retryable());
        assert!(!Error::invalid("bad").is_retryable());
        assert_eq!(Error::invalid("bad queue").to_string(), "invalid input: bad queue");
        let e = Error::new(ErrorKind::Transient, "deadlock").with_operation("complete").with_operation("outer");
        assert_eq!(e.operation(), Some("complete"));
        assert_eq!(e.to_string(), "complete: transient: deadlock");
    }
}
