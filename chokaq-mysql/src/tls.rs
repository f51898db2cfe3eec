//! TLS to MariaDB / MySQL (sqlx on rustls, the `ring` provider, the platform's root
//! certificates), and the check of the URL's parameters.
//!
//! The URL's `ssl-mode` decides, as the `mysql` client's `--ssl-mode` does:
//!
//! | `ssl-mode` | encrypted | certificate checked | host name checked |
//! |---|---|---|---|
//! | `DISABLED` | no | – | – |
//! | `PREFERRED` (the default) | if the server offers TLS | no | no |
//! | `REQUIRED` | yes, or no connection | no | no |
//! | `VERIFY_CA` | yes | against `ssl-ca`, else the system roots | no |
//! | `VERIFY_IDENTITY` | yes | against `ssl-ca`, else the system roots | yes |
//!
//! [`check_url`] refuses, before any connection, a parameter sqlx does not read (sqlx ignores
//! it: a misspelt `ssl_mode=REQUIRED` meant no TLS at all), an `ssl-mode` value sqlx does not
//! know and a certificate file that cannot be read. A refused handshake is recognised among
//! sqlx's errors by [`tls_failure`]. All are configuration errors
//! ([`ErrorKind::InvalidInput`]).

use chokaq_core::url_params::UrlParams;
use chokaq_core::{Error, ErrorKind, Result};

/// The parameters sqlx reads from a MySQL URL.
const KNOWN: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslca",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "charset",
    "collation",
    "statement-cache-capacity",
    "socket",
    "timezone",
    "time-zone",
];

const MODES: &[&str] = &["disabled", "preferred", "required", "verify_ca", "verify_identity"];

/// Checks the parameters of a `mysql://` URL without connecting. The error names the
/// parameter (and the file, for a certificate that cannot be read), never the URL.
pub fn check_url(url: &str) -> Result<()> {
    let params = UrlParams::parse(url, "mysql")?;
    params.refuse_unknown("mysql", KNOWN)?;
    if let Some(mode) = params.get(&["sslmode", "ssl-mode"]) {
        if !MODES.contains(&mode.to_ascii_lowercase().as_str()) {
            return Err(UrlParams::value_error(
                "mysql",
                "ssl-mode",
                mode,
                "DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY",
            ));
        }
    }
    for (keys, what) in [
        (&["sslca", "ssl-ca"][..], "ssl-ca"),
        (&["sslcert", "ssl-cert"][..], "ssl-cert"),
        (&["sslkey", "ssl-key"][..], "ssl-key"),
    ] {
        if let Some(path) = params.get(keys) {
            readable_file(what, path)?;
        }
    }
    if params.get(&["sslcert", "ssl-cert"]).is_some() != params.get(&["sslkey", "ssl-key"]).is_some() {
        return Err(Error::invalid("mysql: ssl-cert and ssl-key go together: the URL gives only one of them"));
    }
    Ok(())
}

/// A certificate or key the URL names must be a file this process can read (sqlx also takes
/// inline PEM).
fn readable_file(key: &str, path: &str) -> Result<()> {
    if path.starts_with("-----BEGIN") {
        return Ok(());
    }
    match std::fs::File::open(path) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::invalid(format!("mysql: the {key} file {path:?} of the URL cannot be read: {e}"))),
    }
}

/// The cause, if `e` is a TLS failure (see `chokaq_postgres::tls_failure`).
pub fn tls_failure(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Tls(inner) => Some(inner.to_string()),
        sqlx::Error::Io(io) => io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()).map(|r| match r {
            // sqlx 0.8.6 checks the name for verify-ca / VERIFY_CA too (it ignores only the
            // older variant of this error: launchbadge/sqlx#3793): say what works.
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName | rustls::CertificateError::NotValidForNameContext { .. },
            ) => format!("{r}: connect by a host name the certificate holds (verify-ca checks it too in this build)"),
            _ => r.to_string(),
        }),
        _ => None,
    }
}

/// The configuration error for a TLS failure: its cause and what to look at.
pub(crate) fn tls_error(cause: &str, e: sqlx::Error) -> Error {
    Error::with_source(
        ErrorKind::InvalidInput,
        format!(
            "mysql: TLS to the database failed: {cause} (check the URL's ssl-mode and ssl-ca, and the server's \
             certificate; docs/security.md)"
        ),
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_parameters() {
        for m in ["DISABLED", "preferred", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"] {
            check_url(&format!("mysql://u@h/db?ssl-mode={m}")).unwrap();
        }
        check_url("mysql://u@h/db?charset=utf8mb4&sslmode=required").unwrap();
        let e = check_url("mysql://u:hunter2@h/db?ssl_mode=REQUIRED").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains("unknown URL parameter \"ssl_mode\""), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = check_url("mysql://u@h/db?ssl-mode=VERIFY-FULL").unwrap_err();
        assert!(e.message().contains("invalid ssl-mode \"VERIFY-FULL\""), "{e}");
        let e = check_url("mysql://u@h/db?ssl-mode=VERIFY_CA&ssl-ca=/nonexistent/ca.pem").unwrap_err();
        assert!(e.message().contains("ssl-ca file \"/nonexistent/ca.pem\""), "{e}");
    }
}
