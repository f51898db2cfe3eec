//! TLS to PostgreSQL (sqlx on rustls, the `ring` provider, the platform's root certificates).
//!
//! The URL's `sslmode` decides, as libpq's does, with one difference sqlx has: `allow` connects
//! in clear, like `disable`.
//!
//! | `sslmode` | encrypted | certificate checked | host name checked |
//! |---|---|---|---|
//! | `disable`, `allow` | no | – | – |
//! | `prefer` (the default) | if the server offers TLS | no | no |
//! | `require` | yes, or no connection | no | no |
//! | `verify-ca` | yes | against `sslrootcert`, else the system roots | no |
//! | `verify-full` | yes | against `sslrootcert`, else the system roots | yes |
//!
//! [`check_url`] refuses, before any connection, an unknown URL parameter, an `sslmode` value
//! sqlx does not know and an `sslrootcert` / `sslcert` / `sslkey` file that cannot be read;
//! [`tls_failure`] recognises a refused handshake among sqlx's errors. Both are configuration
//! errors ([`ErrorKind::InvalidInput`]): trying again cannot fix them.

use chokaq_core::url_params::UrlParams;
use chokaq_core::{Error, ErrorKind, Result};

/// The parameters sqlx reads from a PostgreSQL URL; any other one is refused (sqlx would
/// ignore it, and log it with its value).
const KNOWN: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

const MODES: &[&str] = &["disable", "allow", "prefer", "require", "verify-ca", "verify-full"];

/// Checks the TLS and other parameters of a PostgreSQL URL without connecting. The error
/// names the parameter (and the file, for a certificate that cannot be read), never the URL.
pub fn check_url(url: &str) -> Result<()> {
    let params = UrlParams::parse(url, "postgres")?;
    params.refuse_unknown("postgres", KNOWN)?;
    if let Some(mode) = params.get(&["sslmode", "ssl-mode"]) {
        if !MODES.contains(&mode.to_ascii_lowercase().as_str()) {
            return Err(UrlParams::value_error("postgres", "sslmode", mode, &MODES.join(", ")));
        }
    }
    for (keys, what) in [
        (&["sslrootcert", "ssl-root-cert", "ssl-ca"][..], "sslrootcert"),
        (&["sslcert", "ssl-cert"][..], "sslcert"),
        (&["sslkey", "ssl-key"][..], "sslkey"),
    ] {
        if let Some(path) = params.get(keys) {
            readable_file("postgres", what, path)?;
        }
    }
    if params.get(&["sslcert", "ssl-cert"]).is_some() != params.get(&["sslkey", "ssl-key"]).is_some() {
        return Err(Error::invalid("postgres: sslcert and sslkey go together: the URL gives only one of them"));
    }
    Ok(())
}

/// A certificate or key the URL names must be a file this process can read (sqlx also takes
/// inline PEM, which is accepted as it is).
pub(crate) fn readable_file(backend: &str, key: &str, path: &str) -> Result<()> {
    if path.starts_with("-----BEGIN") {
        return Ok(());
    }
    match std::fs::File::open(path) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::invalid(format!("{backend}: the {key} file {path:?} of the URL cannot be read: {e}"))),
    }
}

/// The cause, if `e` is a TLS failure: a handshake the server or this client refused (an
/// untrusted certificate, a host name the certificate does not name), a server without TLS
/// where the URL requires it, an unreadable CA file. `None` for anything else.
pub fn tls_failure(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Tls(inner) => Some(inner.to_string()),
        // sqlx reports a refused handshake as the I/O error of the socket, which wraps the
        // `rustls::Error`.
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
pub(crate) fn tls_error(backend: &str, cause: &str, params: &str, e: sqlx::Error) -> Error {
    Error::with_source(
        ErrorKind::InvalidInput,
        format!("{backend}: TLS to the database failed: {cause} (check the URL's {params}; docs/security.md)"),
        e,
    )
}

/// [`tls_error`] for PostgreSQL.
pub(crate) fn pg_tls_error(cause: &str, e: sqlx::Error) -> Error {
    tls_error("postgres", cause, "sslmode and sslrootcert, and the server's certificate", e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_parameters() {
        for m in MODES {
            check_url(&format!("postgres://u@h/db?sslmode={m}")).unwrap();
        }
        check_url("postgres://u:p@h/db?sslmode=VERIFY-FULL&application_name=x").unwrap();
        let e = check_url("postgres://u:hunter2@h/db?sslmode=verify_full").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains("sslmode \"verify_full\"") && !e.to_string().contains("hunter2"), "{e}");
        let e = check_url("postgres://u:hunter2@h/db?ssl_mode=require").unwrap_err();
        assert!(e.message().contains("unknown URL parameter \"ssl_mode\""), "{e}");
        let e = check_url("postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem").unwrap_err();
        assert!(e.message().contains("sslrootcert file \"/nonexistent/ca.pem\""), "{e}");
        let e = check_url("postgres://u@h/db?sslcert=/dev/null").unwrap_err();
        assert!(e.message().contains("go together"), "{e}");
    }
}
