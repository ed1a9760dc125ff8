//! Small file helpers for the data dir.

use std::io::Write;
use std::path::Path;

/// Writes a file readable only by its owner (mode 0600), atomically: credentials are
/// never visible half-written or with wider permissions.
pub fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Creates the data dir readable only by its owner (0700), or tightens one that exists:
/// it holds every Secret, the kubeconfigs of push-mode clusters among them, and the
/// tokens. Whatever in it group or others may use loses those bits (files keep their
/// owner's, directories become 0700). Returns what was tightened, for the log.
pub fn secure_data_dir(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mut tightened = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    // A file may vanish while the walk runs (SQLite removes its -wal and -shm files as
    // the last connection of a store that just stopped closes): what is gone needs no
    // tightening. The data dir itself must be there.
    let gone = |e: &std::io::Error, path: &Path| e.kind() == std::io::ErrorKind::NotFound && path != dir;
    while let Some(path) = pending.pop() {
        let meta = match std::fs::symlink_metadata(&path) {
            Err(e) if gone(&e, &path) => continue,
            other => other?,
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            // The owner keeps what it had (a directory keeps rwx); group and others lose all.
            let owner = if meta.is_dir() { 0o700 } else { mode & 0o700 };
            match std::fs::set_permissions(&path, std::fs::Permissions::from_mode(owner)) {
                Err(e) if gone(&e, &path) => continue,
                other => other?,
            }
            tightened.push(path.clone());
        }
        if meta.is_dir() {
            let entries = match std::fs::read_dir(&path) {
                Err(e) if gone(&e, &path) => continue,
                other => other?,
            };
            for entry in entries {
                match entry {
                    Ok(entry) => pending.push(entry.path()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(tightened)
}

/// Creates `path` empty and private (0600) if it does not exist. SQLite creates a
/// database's `-wal` and `-shm` files with the database file's permissions, so a store
/// created this way stays private whatever the process's umask.
pub fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `dir` and its missing parents readable only by their owner (0700).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Opens `path` for appending, creating it readable only by its owner (0600): a log in
/// the data dir, which may quote the objects it is about.
pub fn append_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_data_dir_is_created_private_and_an_open_one_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        assert!(secure_data_dir(&dir).unwrap().is_empty());
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(dir.join("logs")).unwrap();
        std::fs::write(dir.join("store.db"), b"x").unwrap();
        std::fs::set_permissions(dir.join("store.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(dir.join("logs/east.log"), b"x").unwrap();
        std::fs::set_permissions(dir.join("logs/east.log"), std::fs::Permissions::from_mode(0o664)).unwrap();
        write_private(&dir.join("admin.token"), b"t").unwrap();
        let mut tightened = secure_data_dir(&dir).unwrap();
        tightened.sort();
        assert_eq!(tightened, vec![dir.clone(), dir.join("logs"), dir.join("logs/east.log"), dir.join("store.db")]);
        assert_eq!((mode(&dir), mode(&dir.join("store.db")), mode(&dir.join("logs/east.log"))), (0o700, 0o600, 0o600));
        create_private(&dir.join("new.db")).unwrap();
        assert_eq!(mode(&dir.join("new.db")), 0o600);
        create_private_dir(&dir.join("clusters/east")).unwrap();
        append_private(&dir.join("logs/west.log")).unwrap();
        assert_eq!(
            (mode(&dir.join("clusters")), mode(&dir.join("clusters/east")), mode(&dir.join("logs/west.log"))),
            (0o700, 0o700, 0o600)
        );
    }
}
