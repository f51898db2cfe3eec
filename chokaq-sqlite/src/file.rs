//! The database file before SQLite opens it: created owner-only, or required to exist.

use std::path::Path;

use chokaq_core::{Error, ErrorKind, Result};

/// Makes sure the database file at `path` may be opened. A missing file is created empty and
/// owner-only (`0600` on Unix, whatever the umask: the mode is set again after the create)
/// when `create` is set, and is an `InvalidInput` error otherwise. SQLite creates the `-wal`
/// and `-shm` files with the mode of the database file, so they are owner-only too. An
/// existing file is left as it is. No message names the path (it may come from a URL).
pub(crate) fn prepare(path: &Path, create: bool) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    if !create {
        return Err(Error::invalid(
            "sqlite: the database file does not exist (it is not created for this use; migrate creates it)",
        ));
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(file) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io_error)?;
            }
            drop(file);
            Ok(())
        }
        // Another process created it meanwhile: its creator chose the mode.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_error(e)),
    }
}

/// A missing directory or a refused permission is the path's fault, which no retry fixes:
/// `InvalidInput` (the command line's exit 2) naming the cause. Anything else (a full disk,
/// say) stays `Unavailable`.
fn io_error(e: std::io::Error) -> Error {
    let cause = match e.kind() {
        std::io::ErrorKind::NotFound => "its directory does not exist",
        std::io::ErrorKind::PermissionDenied => "this user may not create files in its directory",
        std::io::ErrorKind::ReadOnlyFilesystem => "its file system is read-only",
        std::io::ErrorKind::NotADirectory => "a component of its path is not a directory",
        _ => {
            return Error::with_source(
                ErrorKind::Unavailable,
                format!("sqlite: cannot create the database file: {}", e.kind()),
                e,
            )
        }
    };
    Error::with_source(ErrorKind::InvalidInput, format!("sqlite: cannot create the database file: {cause}"), e)
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("chokaq_sqlite_file_{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn created_owner_only_and_existing_left_alone() {
        let d = dir();
        let p = d.join("jobs.db");
        prepare(&p, true).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        prepare(&p, true).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640, "an existing file is kept");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_file_without_create_is_invalid_input_and_not_created() {
        let d = dir();
        let p = d.join("secret-name.db");
        let e = prepare(&p, false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("does not exist"), "{e}");
        assert!(!e.to_string().contains("secret-name"), "{e}");
        assert!(!p.exists());
        // A missing directory is the path's fault, not the database's (issue 40, L9: it was
        // Unavailable, the command line's exit 5 "try again").
        let e = prepare(&d.join("no-dir").join("x.db"), true).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.message().contains("its directory does not exist"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
