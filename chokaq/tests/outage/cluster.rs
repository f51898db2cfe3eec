//! The throwaway PostgreSQL cluster: its binaries, start, stop, restart and removal.

use super::*;

#[derive(Debug, Clone)]
pub(crate) struct PgBin {
    pub(crate) dir: PathBuf,
    /// Run the binaries as the `postgres` OS user (the test runs as root).
    pub(crate) as_postgres: bool,
}

impl PgBin {
    /// The newest `/usr/lib/postgresql/<version>/bin` with the binaries the case needs, or the
    /// directory `CHOKAQ_OUTAGE_PG_BIN` names; `Err` says why there is none.
    pub(crate) fn find() -> Result<PgBin, String> {
        let needed = ["initdb", "pg_ctl", "postgres", "psql"];
        let dir = match std::env::var_os("CHOKAQ_OUTAGE_PG_BIN") {
            Some(d) => PathBuf::from(d),
            None => {
                let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
                    .map_err(|_| "no PostgreSQL binaries: /usr/lib/postgresql does not exist".to_string())?
                    .filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let v = e.file_name().to_string_lossy().split('.').next()?.parse::<u32>().ok()?;
                        Some((v, e.path().join("bin")))
                    })
                    .collect();
                found.sort();
                found.pop().map(|(_, p)| p).ok_or("no PostgreSQL binaries under /usr/lib/postgresql")?
            }
        };
        for b in needed {
            if !dir.join(b).is_file() {
                return Err(format!("no PostgreSQL binary {b} in {}", dir.display()));
            }
        }
        // The effective uid of this process.
        let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
        if root {
            let runuser =
                ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"].iter().any(|p| Path::new(p).is_file());
            if !runuser {
                return Err("running as root and runuser is missing (initdb refuses root)".to_string());
            }
            let user = std::process::Command::new("id").args(["-u", "postgres"]).output();
            if !user.map(|o| o.status.success()).unwrap_or(false) {
                return Err("running as root and there is no postgres OS user to run the server".to_string());
            }
        }
        Ok(PgBin { dir, as_postgres: root })
    }

    pub(crate) fn command(&self, prog: &str) -> std::process::Command {
        let path = self.dir.join(prog);
        if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            std::process::Command::new(path)
        }
    }
}

/// A cluster in a temporary directory; stopped (`-m immediate`) and deleted on drop.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) bin: PgBin,
    pub(crate) root: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) port: u16,
}

pub(crate) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?;
    Ok(l.local_addr().map_err(err)?.port())
}

pub(crate) async fn run_cmd(what: &str, cmd: std::process::Command) -> Result<(), String> {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let out = cmd.output().await.map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Cluster {
    pub(crate) async fn create(bin: PgBin) -> Result<Cluster, String> {
        let root = std::env::temp_dir().join(format!("chokaq_outage_{:016x}", rand::random::<u64>()));
        if bin.as_postgres {
            let mut mk = std::process::Command::new("runuser");
            mk.args(["-u", "postgres", "--", "mkdir", "-m", "700"]).arg(&root);
            run_cmd("mkdir as postgres", mk).await?;
        } else {
            std::fs::create_dir(&root).map_err(err)?;
        }
        let c = Cluster { data: root.join("data"), log: root.join("server.log"), port: free_port()?, root, bin };
        let mut init = c.bin.command("initdb");
        init.arg("-D").arg(&c.data).args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
        run_cmd("initdb", init).await?;
        // fsync and full_page_writes off are safe here: the server may crash (`-m immediate`),
        // the operating system does not. synchronous_commit stays on: off, an immediate restart
        // loses the last commits the server acknowledged (seen: completions reported done, then
        // gone, and their jobs rescued and run again).
        let conf = format!(
            "\n# chokaq outage test\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nfull_page_writes = off\nmax_connections = 100\n",
            c.port,
            c.root.display()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(c.data.join("postgresql.conf"))
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .map_err(err)?;
        c.pg_ctl(&["start"]).await?;
        Ok(c)
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl -D <data> -l <log> -w -t 60 <args>`; returns when pg_ctl does (with `-w`: the
    /// server accepts connections, or is gone).
    pub(crate) async fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let mut c = self.bin.command("pg_ctl");
        c.arg("-D").arg(&self.data).arg("-l").arg(&self.log).args(["-w", "-t", "60"]).args(args);
        run_cmd(&format!("pg_ctl {}", args.join(" ")), c).await.map_err(|e| format!("{e}\n{}", self.log_tail()))
    }

    /// Takes the server through `kind`; returns once it accepts connections again.
    pub(crate) async fn outage(&self, kind: Kind) -> Result<(), String> {
        match kind {
            Kind::RestartFast => self.pg_ctl(&["-m", "fast", "restart"]).await,
            Kind::RestartImmediate => self.pg_ctl(&["-m", "immediate", "restart"]).await,
            Kind::ShortStop | Kind::LongStop | Kind::VeryLongStop => {
                self.pg_ctl(&["-m", "fast", "stop"]).await?;
                // The outage itself (not a synchronisation): the server stays down this long.
                tokio::time::sleep(match kind {
                    Kind::ShortStop => SHORT_STOP,
                    Kind::LongStop => LONG_STOP,
                    _ => VERY_LONG_STOP,
                })
                .await;
                self.pg_ctl(&["start"]).await
            }
        }
    }

    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!("server log (last lines):\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
    }

    /// Runs one statement with psql; returns the unaligned, space-separated rows.
    pub(crate) async fn psql(&self, sql: &str) -> Result<Vec<String>, String> {
        let mut c = tokio::process::Command::new(self.bin.dir.join("psql"));
        c.args(["-X", "-q", "-A", "-t", "-F", " ", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &self.port.to_string(), "-d", "postgres", "-c", sql])
            .stdin(Stdio::null());
        let out = c.output().await.map_err(|e| format!("psql: {e}"))?;
        if !out.status.success() {
            return Err(format!("psql failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_string).collect())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut c = self.bin.command("pg_ctl");
        c.arg("-D").arg(&self.data).args(["-m", "immediate", "-w", "stop"]);
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let _ = c.status();
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            eprintln!("could not delete the test cluster at {}: {e}", self.root.display());
        }
    }
}
