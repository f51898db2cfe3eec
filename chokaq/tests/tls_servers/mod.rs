//! The throwaway servers and certificates of `tests/tls.rs`: a certificate authority and a
//! server certificate for `localhost` made with the `openssl` command, a PostgreSQL cluster
//! (`initdb`, `pg_ctl`, as in `tests/outage.rs`) and a MariaDB server (`mariadb-install-db`,
//! `mariadbd`, as `scripts/test.sh` starts one) serving them. Each is deleted on drop.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

fn run(what: &str, cmd: &mut Command) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}): {} {}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    Ok(l.local_addr().map_err(err)?.port())
}

fn temp_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("chokaq_tls_{tag}_{:016x}", rand::random::<u64>()))
}

/// A CA, a server certificate and key for `localhost` (DNS name only: connecting to
/// `127.0.0.1` with host-name verification is refused), and a second, unrelated CA.
#[derive(Debug)]
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    /// Makes them with the `openssl` command; `Err` says why it cannot.
    pub fn make() -> Result<Certs, String> {
        if Command::new("openssl").arg("version").stdout(Stdio::null()).status().is_err() {
            return Err("no openssl command to make the test certificates".into());
        }
        let dir = temp_dir("certs");
        std::fs::create_dir(&dir).map_err(err)?;
        let c = Certs { dir };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for (name, cn) in [("ca", "chokaq test CA"), ("other_ca", "chokaq unrelated CA")] {
            run(
                "openssl req (CA)",
                Command::new("openssl")
                    .args(["req", "-x509"])
                    .args(ec)
                    .args(["-days", "2", "-subj", &format!("/CN={cn}")])
                    .args(["-addext", "basicConstraints=critical,CA:TRUE"])
                    .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
                    .arg("-keyout")
                    .arg(c.path(&format!("{name}.key")))
                    .arg("-out")
                    .arg(c.path(&format!("{name}.pem"))),
            )?;
        }
        run(
            "openssl req (server)",
            Command::new("openssl")
                .arg("req")
                .args(ec)
                .args(["-subj", "/CN=localhost"])
                .arg("-keyout")
                .arg(c.path("server.key"))
                .arg("-out")
                .arg(c.path("server.csr")),
        )?;
        std::fs::write(
            c.path("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=serverAuth\n",
        )
        .map_err(err)?;
        run(
            "openssl x509 (server)",
            Command::new("openssl")
                .args(["x509", "-req", "-days", "2", "-set_serial", "2"])
                .arg("-in")
                .arg(c.path("server.csr"))
                .arg("-CA")
                .arg(c.path("ca.pem"))
                .arg("-CAkey")
                .arg(c.path("ca.key"))
                .arg("-extfile")
                .arg(c.path("server.ext"))
                .arg("-out")
                .arg(c.path("server.pem")),
        )?;
        Ok(c)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// The PostgreSQL binaries (the newest under /usr/lib/postgresql), run as the `postgres` OS
/// user when the test runs as root.
#[derive(Debug, Clone)]
pub struct PgBin {
    dir: PathBuf,
    as_postgres: bool,
}

impl PgBin {
    pub fn find() -> Result<PgBin, String> {
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .map_err(|_| "no PostgreSQL binaries: /usr/lib/postgresql does not exist".to_string())?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let v = e.file_name().to_string_lossy().split('.').next()?.parse::<u32>().ok()?;
                Some((v, e.path().join("bin")))
            })
            .collect();
        found.sort();
        let dir = found.pop().map(|(_, p)| p).ok_or("no PostgreSQL binaries under /usr/lib/postgresql")?;
        for b in ["initdb", "pg_ctl", "postgres"] {
            if !dir.join(b).is_file() {
                return Err(format!("no PostgreSQL binary {b} in {}", dir.display()));
            }
        }
        let root = is_root();
        if root && !Command::new("id").args(["-u", "postgres"]).output().map(|o| o.status.success()).unwrap_or(false) {
            return Err("running as root and there is no postgres OS user to run the server".into());
        }
        Ok(PgBin { dir, as_postgres: root })
    }

    fn command(&self, prog: &str) -> Command {
        let path = self.dir.join(prog);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }
}

/// A cluster with `ssl = on` and the server certificate of [`Certs`].
#[derive(Debug)]
pub struct PgCluster {
    bin: PgBin,
    root: PathBuf,
    data: PathBuf,
    pub port: u16,
}

impl PgCluster {
    pub fn start(bin: PgBin, certs: &Certs) -> Result<PgCluster, String> {
        let root = temp_dir("pg");
        if bin.as_postgres {
            run(
                "mkdir as postgres",
                Command::new("runuser").args(["-u", "postgres", "--", "mkdir", "-m", "700"]).arg(&root),
            )?;
        } else {
            std::fs::create_dir(&root).map_err(err)?;
        }
        let c = PgCluster { data: root.join("data"), port: free_port()?, root, bin };
        run(
            "initdb",
            c.bin.command("initdb").arg("-D").arg(&c.data).args(["-U", "postgres", "-A", "trust", "--no-sync"]),
        )?;
        // The server reads its key only if the server's user owns it, mode 0600.
        let owner = std::fs::metadata(&c.data).map_err(err)?;
        for f in ["server.pem", "server.key"] {
            let to = c.data.join(f);
            std::fs::copy(certs.path(f), &to).map_err(err)?;
            std::os::unix::fs::chown(&to, Some(owner.uid()), Some(owner.gid())).map_err(err)?;
            std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600)).map_err(err)?;
        }
        let conf = format!(
            "\n# chokaq TLS test\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n",
            c.port,
            c.root.display()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(c.data.join("postgresql.conf"))
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .map_err(err)?;
        let log = c.root.join("server.log");
        run(
            "pg_ctl start",
            c.bin.command("pg_ctl").arg("-D").arg(&c.data).arg("-l").arg(&log).args(["-w", "-t", "60", "start"]),
        )
        .map_err(|e| format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default()))?;
        Ok(c)
    }

    /// `postgres://postgres@HOST:PORT/postgres?PARAMS`.
    pub fn url(&self, host: &str, params: &str) -> String {
        let q = if params.is_empty() { String::new() } else { format!("?{params}") };
        format!("postgres://postgres@{host}:{}/postgres{q}", self.port)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self
            .bin
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

// ---------------------------------------------------------------------------------------------
// MariaDB

/// `mariadbd` and `mariadb-install-db`, if installed.
pub fn mariadb_bins() -> Result<(PathBuf, PathBuf), String> {
    let find = |names: &[&str]| {
        names
            .iter()
            .flat_map(|n| ["/usr/sbin", "/usr/bin", "/usr/local/bin"].map(|d| Path::new(d).join(n)))
            .find(|p| p.is_file())
    };
    let server = find(&["mariadbd", "mysqld"]).ok_or("no mariadbd binary")?;
    let install = find(&["mariadb-install-db", "mysql_install_db"]).ok_or("no mariadb-install-db")?;
    Ok((server, install))
}

/// A MariaDB server with the server certificate of [`Certs`] and `require_secure_transport`
/// on: a session in clear is refused, so every session chokaq opens is encrypted.
#[derive(Debug)]
pub struct Mariadb {
    child: std::process::Child,
    root: PathBuf,
    pub port: u16,
}

impl Mariadb {
    pub fn start((server, install): (PathBuf, PathBuf), certs: &Certs) -> Result<Mariadb, String> {
        let root = temp_dir("my");
        std::fs::create_dir(&root).map_err(err)?;
        let user = if is_root() { "root".to_string() } else { std::env::var("USER").unwrap_or_default() };
        run(
            "mariadb-install-db",
            Command::new(install)
                .arg("--no-defaults")
                .arg(format!("--user={user}"))
                .arg(format!("--datadir={}", root.join("data").display()))
                .args(["--auth-root-authentication-method=normal", "--skip-test-db"]),
        )?;
        let port = free_port()?;
        let child = Command::new(server)
            .arg("--no-defaults")
            .arg(format!("--user={user}"))
            .arg(format!("--datadir={}", root.join("data").display()))
            .arg(format!("--socket={}", root.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", root.join("mysqld.pid").display()))
            .arg(format!("--log-error={}", root.join("server.log").display()))
            .arg(format!("--port={port}"))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve", "--require-secure-transport=ON"])
            .arg(format!("--ssl-cert={}", certs.path("server.pem").display()))
            .arg(format!("--ssl-key={}", certs.path("server.key").display()))
            .arg(format!("--ssl-ca={}", certs.path("ca.pem").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("mariadbd: {e}"))?;
        let mut m = Mariadb { child, root, port };
        // Accepting connections: poll the port, with a deadline.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(m);
            }
            if let Ok(Some(status)) = m.child.try_wait() {
                return Err(format!("mariadbd exited ({status}): {}", m.log_tail()));
            }
            if Instant::now() > deadline {
                return Err(format!("mariadbd did not listen within 60 s: {}", m.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// `mysql://root@HOST:PORT/mysql?PARAMS`.
    pub fn url(&self, host: &str, params: &str) -> String {
        let q = if params.is_empty() { String::new() } else { format!("?{params}") };
        format!("mysql://root@{host}:{}/mysql{q}", self.port)
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
