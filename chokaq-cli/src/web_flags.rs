//! `chokaq web`'s limits and logging: the allowed host names, the timeouts, the connection
//! caps (issue 40) and the access log's level, flattened into [`crate::WebArgs`].

use std::time::Duration;

use clap::{Args, ValueEnum};

/// The dashboard's limits (defaults as `chokaq_web::WebOptions::new`) and its log.
#[derive(Debug, Clone, Args)]
pub struct WebFlags {
    /// Another host name the dashboard is reached by (`jobs.example.com` or
    /// `jobs.example.com:8443`; repeat for more). Without authentication a request for any
    /// other name than localhost or a loopback address is refused (DNS rebinding), and a
    /// POST's Origin must name the request's host or an allowed one.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// How long a client may take to send a request's headers (e.g. 10s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::parse::duration)]
    pub header_read_timeout: Duration,
    /// How long a POST may take to send its body.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::parse::duration)]
    pub body_timeout: Duration,
    /// How long one request may take from its headers to its answer (then 503). Also the
    /// deadline of the request's database reads: the database stops their statements when it
    /// passes, or when the request is dropped first (SQL Server: the dashboard only stops
    /// waiting).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::parse::duration)]
    pub request_timeout: Duration,
    /// How many connections are served at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub max_connections: usize,
    /// How many of them one client address (an IPv6 /64) may hold; one more is answered 429.
    /// Behind a reverse proxy every connection comes from the proxy: set it to
    /// --max-connections there.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_connections_per_peer: usize,
    /// The log on stderr: one line per request (method, path, status, ms; never a token,
    /// cookie or query) and the dashboard's warnings and errors.
    #[arg(long, value_name = "LEVEL", value_enum, default_value_t = LogLevel::Info)]
    pub log: LogLevel,
}

/// `--log`: how much `chokaq web` writes on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// Failed requests (5xx) and errors.
    Error,
    /// Also refused requests (4xx) and warnings.
    Warn,
    /// Also every other request (the default).
    Info,
    /// Also connection-level detail.
    Debug,
}

impl WebFlags {
    /// `options` with these limits and allowed hosts (`WebOptions::validate` checks them).
    pub fn apply(&self, options: chokaq_web::WebOptions) -> chokaq_web::WebOptions {
        let mut o = options
            .header_read_timeout(self.header_read_timeout)
            .body_timeout(self.body_timeout)
            .request_timeout(self.request_timeout)
            .max_connections(self.max_connections)
            .max_connections_per_peer(self.max_connections_per_peer);
        for h in &self.allow_host {
            o = o.allow_host(h.clone());
        }
        o
    }

    /// Sends the dashboard's log (and the backends' warnings) to stderr at `--log`'s level,
    /// without colours. Does nothing when a subscriber is already set.
    pub fn init_log(&self) {
        let level = match self.log {
            LogLevel::Off => return,
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        };
        // The database drivers stay at warn: their info and debug lines are every statement.
        let filter = tracing_subscriber::EnvFilter::new(format!("{level},sqlx=warn,tiberius=warn"));
        let _ =
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).try_init();
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        f: WebFlags,
    }

    #[test]
    fn defaults_match_web_options() {
        let f = T::try_parse_from(["t"]).unwrap().f;
        let o = f.apply(chokaq_web::WebOptions::new(chokaq_web::Auth::None));
        let d = chokaq_web::WebOptions::new(chokaq_web::Auth::None);
        assert_eq!(
            (o.header_read_timeout, o.body_timeout, o.request_timeout, o.max_connections, o.max_connections_per_peer),
            (d.header_read_timeout, d.body_timeout, d.request_timeout, d.max_connections, d.max_connections_per_peer)
        );
        assert!(o.allowed_hosts.is_empty());
        assert_eq!(f.log, LogLevel::Info);
    }

    #[test]
    fn flags_reach_the_options() {
        let f = T::try_parse_from([
            "t",
            "--allow-host",
            "jobs.example.com",
            "--allow-host=ops.example.com:8443",
            "--header-read-timeout",
            "5s",
            "--body-timeout",
            "2s",
            "--request-timeout",
            "1m30s",
            "--max-connections",
            "100",
            "--max-connections-per-peer",
            "100",
            "--log",
            "warn",
        ])
        .unwrap()
        .f;
        let o = f.apply(chokaq_web::WebOptions::new(chokaq_web::Auth::None));
        assert_eq!(o.allowed_hosts, ["jobs.example.com", "ops.example.com:8443"]);
        assert_eq!(o.header_read_timeout, Duration::from_secs(5));
        assert_eq!(o.body_timeout, Duration::from_secs(2));
        assert_eq!(o.request_timeout, Duration::from_secs(90));
        assert_eq!((o.max_connections, o.max_connections_per_peer), (100, 100));
        assert_eq!(f.log, LogLevel::Warn);
        assert!(o.validate().is_ok());
        let bad = T::try_parse_from(["t", "--max-connections-per-peer", "0"]).unwrap().f;
        let e = bad.apply(chokaq_web::WebOptions::new(chokaq_web::Auth::None)).validate().unwrap_err();
        assert!(e.to_string().contains("max_connections_per_peer"), "{e}");
        assert!(T::try_parse_from(["t", "--request-timeout", "soon"]).is_err());
        let bad = T::try_parse_from(["t", "--allow-host", "a b/c"]).unwrap().f;
        assert!(bad.apply(chokaq_web::WebOptions::new(chokaq_web::Auth::None)).validate().is_err());
    }
}
