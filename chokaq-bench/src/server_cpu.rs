//! The database server's CPU time, read from `/proc` when the server runs on this machine:
//! the user and system time of the postmaster and every process it started (backends, the WAL
//! writer, the checkpointer, autovacuum), plus the time of its children that exited (the
//! postmaster's `cutime` and `cstime`: a backend whose connection closed). A workload's figure
//! is the difference of two readings, so anything else the server runs meanwhile counts too:
//! run the bench on a quiet server.

use std::path::Path;

/// How the server's CPU is read: the postmaster's pid and the kernel's clock ticks per second.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerCpu {
    postmaster: u32,
    ticks_per_s: u64,
}

/// One process's line of `/proc/<pid>/stat`, the fields the reading needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    comm_is_postgres: bool,
    ppid: u32,
    /// utime + stime, in clock ticks.
    own: u64,
    /// cutime + cstime: exited, waited-for children.
    children: u64,
}

fn parse_stat(line: &str) -> Option<Stat> {
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split at the last ')'.
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = &line[open + 1..close];
    let rest: Vec<&str> = line[close + 1..].split_whitespace().collect();
    // rest[0] = state (field 3), rest[1] = ppid (4), rest[11..15] = utime stime cutime cstime (14-17).
    let num = |i: usize| rest.get(i).and_then(|s| s.parse::<u64>().ok());
    let ppid = num(1)? as u32;
    let (utime, stime, cutime, cstime) = (num(11)?, num(12)?, num(13)?, num(14)?);
    Some(Stat { comm_is_postgres: comm == "postgres", ppid, own: utime + stime, children: cutime + cstime })
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

impl ServerCpu {
    /// The reader for the server whose backend has pid `backend` (from `pg_backend_pid()`), or
    /// why the server's CPU cannot be read here: the pid must be a `postgres` process of this
    /// machine whose parent, the postmaster, is one too.
    pub(crate) fn detect(backend: u32) -> Result<ServerCpu, String> {
        if !Path::new("/proc/self/stat").exists() {
            return Err("no /proc on this machine".into());
        }
        let not_here = || {
            "the server does not run on this machine (its backend's pid is not a local postgres process)".to_string()
        };
        let b = read_stat(backend).ok_or_else(not_here)?;
        if !b.comm_is_postgres {
            return Err(not_here());
        }
        let pm = read_stat(b.ppid).ok_or_else(not_here)?;
        if !pm.comm_is_postgres {
            return Err(not_here());
        }
        Ok(ServerCpu { postmaster: b.ppid, ticks_per_s: ticks_per_s() })
    }

    /// The server's CPU time so far, in microseconds: the postmaster's own and its exited
    /// children's, plus every live child's own.
    pub(crate) fn read_us(&self) -> u64 {
        let mut ticks = 0u64;
        if let Some(pm) = read_stat(self.postmaster) {
            ticks += pm.own + pm.children;
        }
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
                if pid == self.postmaster {
                    continue;
                }
                if let Some(s) = read_stat(pid).filter(|s| s.ppid == self.postmaster) {
                    ticks += s.own;
                }
            }
        }
        ticks * 1_000_000 / self.ticks_per_s
    }
}

/// `getconf CLK_TCK` (100 on every Linux this runs on; the kernel's USER_HZ).
fn ticks_per_s() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_stat_line() {
        let line = "4242 (postgres) S 100 4242 4242 0 -1 4194560 1000 0 0 0 37 12 5 6 20 0 1 0 1 0 0";
        assert_eq!(parse_stat(line), Some(Stat { comm_is_postgres: true, ppid: 100, own: 49, children: 11 }));
        let odd = "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 1 0 0";
        assert_eq!(parse_stat(odd), Some(Stat { comm_is_postgres: false, ppid: 1, own: 3, children: 7 }));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_no_server() {
        let me = std::process::id();
        assert!(ServerCpu::detect(me).is_err());
        assert!(ServerCpu::detect(u32::MAX).is_err());
    }
}
