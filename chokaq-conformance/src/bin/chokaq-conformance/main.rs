//! `chokaq-conformance`: runs the whole conformance suite against your own database.
//!
//! ```text
//! CHOKAQ_CONFORMANCE_URL=postgres://user:pw@host/db cargo run -p chokaq-conformance --features postgres
//! ```
//!
//! [`chokaq_conformance::Runner`] does the work (options, output, exit status; see
//! docs/conformance.md); this binary only chooses the backend by the URL's scheme
//! ([`backends::harness_for`]), one cargo feature per backend.

mod backends;

use std::process::ExitCode;

use chokaq_conformance::Runner;

fn main() -> ExitCode {
    let runner = Runner::new(backends::harness_for);
    // The hidden `--inject-fault NAME`: PostgreSQL with one deliberately broken statement.
    #[cfg(feature = "fault-injection")]
    let runner = runner.faults(&backends::FAULT_NAMES);
    runner.main()
}

#[cfg(test)]
mod tests {
    use chokaq_conformance::Target;

    use super::*;

    fn target(url: &str, fault: Option<&str>) -> Target {
        let mut t = Target::new(url);
        t.fault = fault.map(String::from);
        t
    }

    #[test]
    fn a_fault_needs_a_postgres_url() {
        for url in ["sqlite:///tmp/x.db", "server=tcp:h,1433;user=u", "mysql://u:pw@h/db", ""] {
            let e = backends::harness_for(&target(url, Some("cap_plain_count"))).expect_err(url);
            assert!(!e.contains("pw@"), "{e}");
        }
    }

    #[test]
    fn errors_never_quote_the_url() {
        for url in [
            "mysql://u:s3cr3t@h/db",
            "mssql://sa:s3cr3t@h:1433/db",
            "sqlserver://sa:s3cr3t@h",
            "password=s3cr3t;server=x:1",
            "s3cr3t",
            "",
        ] {
            if let Err(e) = backends::harness_for(&target(url, None)) {
                assert!(!e.contains("s3cr3t"), "{url}: {e}");
            }
        }
    }

    #[test]
    fn sql_server_urls_are_accepted_or_need_the_feature() {
        for url in ["mssql://sa:pw@h:1433/db", "sqlserver://sa:pw@h", "server=tcp:h,1433;user=sa;password=pw"] {
            let r = backends::harness_for(&target(url, None));
            if cfg!(feature = "mssql") {
                assert!(r.is_ok(), "{url}: {:?}", r.err());
            } else {
                let e = r.expect_err(url);
                assert!(e.contains("--features mssql"), "{e}");
            }
        }
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn every_fault_name_opens_a_harness() {
        for name in backends::FAULT_NAMES {
            assert!(backends::harness_for(&target("postgres://u@h/db", Some(name))).is_ok(), "{name}");
        }
        assert!(backends::harness_for(&target("postgres://u@h/db", Some("nope"))).is_err());
    }
}
