//! Where the SQL Server of a conformance run comes from: a plain decision over the
//! environment, unit-tested in `tests/source.rs` (no server, no Docker needed).
//!
//! 1. A child process of a run (the multi-process cases) reopens its parent's server: the
//!    parent hands its URL down (`chokaq_conformance::ENV_CHILD_URL`); the child never starts
//!    anything.
//! 2. `CHOKAQ_TEST_MSSQL_URL` set: that server.
//! 3. `CHOKAQ_TEST_MSSQL_DOCKER=1` and a Docker engine answering: a SQL Server 2022 container
//!    started through testcontainers for this test binary, stopped when it ends.
//! 4. Neither: every case is ignored, with the reason (and `CHOKAQ_TEST_REQUIRE=mssql` turns
//!    that into failures).

// Shared by the conformance binaries and the unit tests; each uses only part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

/// An ADO.NET connection string of a server where the login may create databases.
pub const ENV_URL: &str = "CHOKAQ_TEST_MSSQL_URL";
/// `1` (or `true`, `yes`, `on`): start SQL Server in Docker when no URL is set.
pub const ENV_DOCKER: &str = "CHOKAQ_TEST_MSSQL_DOCKER";
/// The image the Docker path starts (default [`DEFAULT_IMAGE`]).
pub const ENV_IMAGE: &str = "CHOKAQ_TEST_MSSQL_IMAGE";
/// SQL Server 2022.
pub const DEFAULT_IMAGE: &str = "mcr.microsoft.com/mssql/server:2022-latest";

/// What the decision looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// `CHOKAQ_TEST_MSSQL_URL`, if set and not blank.
    pub url: Option<String>,
    /// This process is a child of a conformance run.
    pub child: bool,
    /// `CHOKAQ_TEST_MSSQL_DOCKER` is on.
    pub docker: bool,
    /// Only listing the cases (`--list`): nothing runs, so nothing is started.
    pub listing: bool,
}

impl Inputs {
    /// The inputs of this process: its environment and its arguments.
    pub fn from_env(args: &[String]) -> Inputs {
        Inputs {
            url: std::env::var(ENV_URL).ok().filter(|s| !s.trim().is_empty()),
            child: std::env::var(chokaq_conformance::ENV_CHILD_SCHEMA).is_ok_and(|s| !s.is_empty()),
            docker: switch_on(std::env::var(ENV_DOCKER).ok().as_deref()),
            listing: args.iter().any(|a| a == "--list"),
        }
    }
}

/// Where the server comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The server at this connection string.
    Url(String),
    /// The parent process's server (a child of a run).
    Parent,
    /// A container started for this run.
    Docker,
    /// No server: the cases are ignored with this reason.
    Unavailable(String),
}

/// The decision. `docker_reachable` is asked only when the Docker switch is on and no URL is
/// set; it says why Docker cannot be used, if it cannot.
pub fn decide(inputs: &Inputs, docker_reachable: impl FnOnce() -> Result<(), String>) -> Source {
    if inputs.child {
        return Source::Parent;
    }
    if let Some(url) = &inputs.url {
        return Source::Url(url.clone());
    }
    if !inputs.docker {
        return Source::Unavailable(format!(
            "no SQL Server is configured: set {ENV_URL} to an ADO.NET connection string of a server where the login \
             may create databases, e.g. {ENV_URL}='server=tcp:127.0.0.1,1433;user=sa;password=...;\
             TrustServerCertificate=true;Encrypt=false', or {ENV_DOCKER}=1 to start SQL Server 2022 in Docker \
             through testcontainers"
        ));
    }
    if inputs.listing {
        return Source::Unavailable("only listing the cases: no SQL Server is started".to_string());
    }
    match docker_reachable() {
        Ok(()) => Source::Docker,
        Err(why) => Source::Unavailable(format!(
            "{ENV_DOCKER} is set but no Docker engine is reachable ({why}); start Docker, or set {ENV_URL} instead"
        )),
    }
}

/// Whether an on/off variable is on: `1`, `true`, `yes` or `on`, in any case.
pub fn switch_on(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Where the Docker engine listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerEndpoint {
    /// A Unix socket.
    Unix(PathBuf),
    /// `host:port` over TCP.
    Tcp(String),
}

/// The endpoint `DOCKER_HOST` names (`unix:///path`, `tcp://host:port`), else the default
/// socket `/var/run/docker.sock`, as the Docker client (and testcontainers) read it.
pub fn docker_endpoint(docker_host: Option<&str>) -> Result<DockerEndpoint, String> {
    let Some(host) = docker_host.map(str::trim).filter(|h| !h.is_empty()) else {
        return Ok(DockerEndpoint::Unix(PathBuf::from("/var/run/docker.sock")));
    };
    if let Some(path) = host.strip_prefix("unix://") {
        return Ok(DockerEndpoint::Unix(PathBuf::from(path)));
    }
    if let Some(addr) = host.strip_prefix("tcp://") {
        let addr = addr.trim_end_matches('/');
        return if addr.contains(':') {
            Ok(DockerEndpoint::Tcp(addr.to_string()))
        } else {
            Ok(DockerEndpoint::Tcp(format!("{addr}:2375")))
        };
    }
    Err(format!("DOCKER_HOST={host:?} is neither unix:// nor tcp://"))
}

/// Whether something answers at the Docker endpoint of this process (`DOCKER_HOST`, else the
/// default socket): a connection is opened and closed, nothing is sent.
pub fn probe_docker() -> Result<(), String> {
    match docker_endpoint(std::env::var("DOCKER_HOST").ok().as_deref())? {
        DockerEndpoint::Unix(path) => {
            std::os::unix::net::UnixStream::connect(&path).map(drop).map_err(|e| format!("{}: {e}", path.display()))
        }
        DockerEndpoint::Tcp(addr) => {
            use std::net::ToSocketAddrs;
            let mut last = format!("{addr}: no address");
            for a in addr.to_socket_addrs().map_err(|e| format!("{addr}: {e}"))? {
                match std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
                    Ok(_) => return Ok(()),
                    Err(e) => last = format!("{addr}: {e}"),
                }
            }
            Err(last)
        }
    }
}

/// `repository:tag` split for testcontainers (`latest` when no tag is given).
pub fn split_image(image: &str) -> (String, String) {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (image[..slash + i].to_string(), image[slash + i + 1..].to_string()),
        None => (image.to_string(), "latest".to_string()),
    }
}
