//! Writing a file so that readers see the old one or the whole new one, never a part: the
//! bytes go to a temporary file of the destination's directory, which is synced and then
//! renamed over the destination.
//!
//! The destination is never opened. A symlink planted at its path is replaced by the new
//! file (rename(2) replaces the link itself), so nothing is ever written where such a link
//! points; the temporary file is created with `O_EXCL` (never through an existing name,
//! link or not) and `O_NOFOLLOW`. A failure at any step removes the temporary file and leaves
//! the destination as it was.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{anyhow, Context, Result};

/// Names tried for the temporary file before giving up (each one taken already, e.g. planted).
const TEMP_ATTEMPTS: u32 = 16;

/// Write what `fill` writes to `path`, atomically (see the module documentation). The file
/// gets mode 0666 less the umask, as any new file.
pub fn write_atomically(path: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> Result<()> {
    let name = path
        .file_name()
        .filter(|n| !n.is_empty() && *n != "." && *n != "..")
        .ok_or_else(|| anyhow!("{} does not name a file", path.display()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (mut file, temp) = create_temp(&dir, &name.to_string_lossy())
        .with_context(|| format!("cannot write {}", path.display()))?;
    let written = fill(&mut file)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temp.display()))
        .and_then(|()| {
            drop(file);
            std::fs::rename(&temp, path)
                .with_context(|| format!("cannot rename {} to {}", temp.display(), path.display()))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// A new file `.<name>.<pid>.<n>.tmp` in `dir`, made by this call (`O_CREAT | O_EXCL`).
fn create_temp(dir: &Path, name: &str) -> Result<(File, PathBuf)> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    // The clock's nanoseconds make the name hard to guess in advance, the counter unique in
    // this process.
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for _ in 0..TEMP_ATTEMPTS {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(
            ".{name}.{}.{:x}.tmp",
            std::process::id(),
            salt.wrapping_add(n.wrapping_mul(0x9E37_79B9))
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
        {
            Ok(f) => return Ok((f, temp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("cannot create a temporary file in {}", dir.display())
                })
            }
        }
    }
    Err(last.map_or_else(|| anyhow!("no attempt"), Into::into)).with_context(|| {
        format!(
            "cannot create a temporary file in {}: {TEMP_ATTEMPTS} names taken",
            dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "cuframes-atomic-{tag}-{}-{:x}",
            std::process::id(),
            cuframes_core::testing::unique_suffix()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn replaces_a_file_and_a_planted_symlink_without_writing_through_it() {
        let d = scratch("link");
        let target = d.join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        let out = d.join("snap.png");
        std::os::unix::fs::symlink(&target, &out).unwrap();
        write_atomically(&out, |f| f.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        write_atomically(&out, |f| f.write_all(b"newer")).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"newer");
        assert!(leftovers(&d).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failure_leaves_the_destination_and_no_temporary_file() {
        let d = scratch("fail");
        let out = d.join("snap.png");
        std::fs::write(&out, b"old").unwrap();
        let e = write_atomically(&out, |_| Err(io::Error::other("disk full"))).unwrap_err();
        assert!(format!("{e:#}").contains("disk full"), "{e:#}");
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        assert!(leftovers(&d).is_empty());
        // A directory at the path: the rename fails, nothing is left behind.
        let sub = d.join("dir");
        std::fs::create_dir(&sub).unwrap();
        let e = write_atomically(&sub, |f| f.write_all(b"x")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot rename"), "{e:#}");
        assert!(leftovers(&d).is_empty());
        // A parent that is a file, and a path without a file name.
        let e = write_atomically(&out.join("x.png"), |f| f.write_all(b"x")).unwrap_err();
        assert!(format!("{e:#}").contains("temporary file"), "{e:#}");
        assert!(write_atomically(Path::new("/"), |f| f.write_all(b"x")).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
