//! Writing a file so that readers see the old one or the whole new one, never a part: the
//! bytes go to a temporary file of the destination's directory, which is synced and then
//! renamed over the destination.
//!
//! The temporary file has no name while it is written (`O_TMPFILE`): a writer killed then
//! (SIGKILL, Ctrl-C's default action, the OOM killer) leaves nothing behind. Once whole it is
//! linked under a temporary name (`linkat`, which never replaces an existing name) and renamed
//! at once. Where the filesystem has no `O_TMPFILE`, the file is created under its temporary
//! name from the start.
//!
//! The destination is never opened. A symlink planted at its path is replaced by the new
//! file (rename(2) replaces the link itself), so nothing is ever written where such a link
//! points; a temporary name is only ever made new (`O_EXCL` with `O_NOFOLLOW`, or `linkat`):
//! never through an existing name, link or not. A failure at any step removes the temporary
//! file and leaves the destination as it was.

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
    let name = name.to_string_lossy();
    if let Some(mut file) =
        create_unnamed(&dir).with_context(|| format!("cannot write {}", path.display()))?
    {
        fill(&mut file)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write {}", path.display()))?;
        let temp = link_temp(&file, &dir, &name)
            .with_context(|| format!("cannot write {}", path.display()))?;
        drop(file);
        let renamed = std::fs::rename(&temp, path)
            .with_context(|| format!("cannot rename {} to {}", temp.display(), path.display()));
        if renamed.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        return renamed;
    }
    let (mut file, temp) =
        create_temp(&dir, &name).with_context(|| format!("cannot write {}", path.display()))?;
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

/// A new file without a name in `dir` (`O_TMPFILE`), or None where the filesystem or the
/// kernel has none (then a named temporary file is used) or /proc, through which it is
/// linked, is not mounted.
fn create_unnamed(dir: &Path) -> Result<Option<File>> {
    if !Path::new("/proc/self/fd").is_dir() {
        return Ok(None);
    }
    match OpenOptions::new()
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
    {
        Ok(f) => Ok(Some(f)),
        // open(2): EOPNOTSUPP where the filesystem lacks it, EISDIR or EINVAL from kernels
        // that do not know the flag.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) =>
        {
            Ok(None)
        }
        Err(e) => {
            Err(e).with_context(|| format!("cannot create a temporary file in {}", dir.display()))
        }
    }
}

/// Give the unnamed `file` a new temporary name in `dir` (`linkat` through /proc, which
/// fails on an existing name instead of replacing it).
fn link_temp(file: &File, dir: &Path, name: &str) -> Result<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| anyhow!("a /proc path with a NUL"))?;
    let mut last = None;
    for _ in 0..TEMP_ATTEMPTS {
        let temp = temp_name(dir, name);
        let to = std::ffi::CString::new(temp.as_os_str().as_bytes())
            .map_err(|_| anyhow!("{} holds a NUL byte", temp.display()))?;
        // SAFETY: two NUL-terminated paths that live through the call.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc == 0 {
            return Ok(temp);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(e).with_context(|| format!("cannot link {}", temp.display()));
        }
        last = Some(e);
    }
    Err(last.map_or_else(|| anyhow!("no attempt"), Into::into)).with_context(|| {
        format!(
            "cannot name a temporary file in {}: {TEMP_ATTEMPTS} names taken",
            dir.display()
        )
    })
}

/// A temporary name `.<name>.<pid>.<n>.tmp` in `dir`, another one each call.
fn temp_name(dir: &Path, name: &str) -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    // The clock's nanoseconds make the name hard to guess in advance, the counter unique in
    // this process.
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(
        ".{name}.{}.{:x}.tmp",
        std::process::id(),
        salt.wrapping_add(n.wrapping_mul(0x9E37_79B9))
    ))
}

/// A new file `.<name>.<pid>.<n>.tmp` in `dir`, made by this call (`O_CREAT | O_EXCL`).
fn create_temp(dir: &Path, name: &str) -> Result<(File, PathBuf)> {
    let mut last = None;
    for _ in 0..TEMP_ATTEMPTS {
        let temp = temp_name(dir, name);
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
    fn the_image_has_no_name_until_it_is_whole_and_the_named_fallback_works() {
        let d = scratch("unnamed");
        let out = d.join("snap.png");
        write_atomically(&out, |f| {
            // Being written: nothing in the directory yet.
            assert!(std::fs::read_dir(&d).unwrap().next().is_none());
            f.write_all(b"whole")
        })
        .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"whole");
        // Where O_TMPFILE is missing: a named temporary file, new, in the directory.
        let (mut f, temp) = create_temp(&d, "snap.png").unwrap();
        f.write_all(b"x").unwrap();
        assert_eq!(temp.parent(), Some(d.as_path()));
        assert!(temp
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".snap.png."));
        std::fs::remove_file(&temp).unwrap();
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
