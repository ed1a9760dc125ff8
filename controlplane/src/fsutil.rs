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
