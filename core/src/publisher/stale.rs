//! Crash recovery at create (§1): a dead publisher's socket and SHM objects are removed; a
//! live publisher makes create fail with ALREADY_EXISTS.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::liveness::{is_alive, recorded_producer, Recorded};
use crate::paths::Key;
use crate::shm;
use crate::sock;
use crate::wire::{FRAME_MAGIC, LEGACY_FRAME_MAGIC, PACKET_MAGIC, PRODUCER_PID_OFFSET};

/// How long the key's socket has to accept our connection: a live publisher accepts at
/// once (its server thread polls the listener), whatever its load.
const LISTENER_ANSWER: Duration = Duration::from_secs(1);

/// Remove what a dead predecessor left behind, or fail if it is alive.
pub fn recover(key: &Key, socket_path: &Path) -> Result<()> {
    // A socket that accepts connections has a live owner, whatever its SHM says, unless
    // the process that listens on it (SO_PEERCRED of a connection names the process that
    // called listen) is dead: then a process that inherited the socket through fork (a
    // worker that never exec'd) keeps it open, and the key's publisher is gone.
    // Bounded: a listener that never accepts (its backlog full) is someone's live socket
    // that does not answer, never one to unlink, and must not hold up this create.
    let deadline = Instant::now() + LISTENER_ANSWER;
    let stale_listener = match sock::connect_within(socket_path, deadline) {
        Ok(stream) => match listener_pid(&stream) {
            Some(pid) if !is_alive(pid) => true,
            _ => {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!("a live publisher is listening on {}", socket_path.display()),
                ))
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return Err(Error::new(
                ErrorCode::AlreadyExists,
                format!(
                    "a live process listens on {} but does not answer ({e}); it was not \
                     removed",
                    socket_path.display()
                ),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        // ECONNREFUSED: nobody listens; the path is stale.
        Err(_) => true,
    };
    if stale_listener {
        std::fs::remove_file(socket_path)
            .or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .map_err(|e| {
                Error::new(
                    ErrorCode::Permission,
                    format!("cannot remove stale {}: {e}", socket_path.display()),
                )
            })?;
    }
    recover_shm(&key.frame_shm_name(), &[FRAME_MAGIC, LEGACY_FRAME_MAGIC])?;
    recover_shm(&key.packet_shm_name(), &[PACKET_MAGIC])?;
    recover_generations(key)
}

/// A dead predecessor's rings under generation names (kept there while another user held
/// the key's names, or staged when it died mid-replacement) go too; a live one's makes
/// create fail as at the key's names. What is not provably ours is left alone, silently:
/// nobody reads those names but the publisher that announces them.
fn recover_generations(key: &Key) -> Result<()> {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Ok(());
    };
    let (frame, packets) = (key.frame_shm_name(), key.packet_shm_name());
    for name in dir
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
    {
        let magics: &[u32] = match crate::paths::split_generation(&name) {
            (base, Some(_)) if base == frame => &[FRAME_MAGIC, LEGACY_FRAME_MAGIC],
            (base, Some(_)) if base == packets => &[PACKET_MAGIC],
            _ => continue,
        };
        match judge(&name, magics) {
            Ok(Leftover::Dead) => shm::unlink(&name)?,
            Ok(Leftover::Alive(pid)) => {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!("/dev/shm/{name} belongs to live process {pid}"),
                ))
            }
            Ok(Leftover::Nothing | Leftover::Foreign(_)) | Err(_) => {}
        }
    }
    Ok(())
}

/// The process that listens on the socket `stream` is connected to (its pid at listen time).
fn listener_pid(stream: &UnixStream) -> Option<u64> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let pid = getsockopt(stream, PeerCredentials).ok()?.pid();
    u64::try_from(pid).ok().filter(|&p| p > 0)
}

/// What is at a key's SHM name, as far as recovery is concerned.
#[derive(Debug, PartialEq, Eq)]
enum Leftover {
    Nothing,
    /// Ours (our uid, one of our magics, or truncated below a header by a crash mid-create)
    /// and its producer is gone: safe to remove.
    Dead,
    /// Its producer, a process of the object's owner, is alive.
    Alive(u64),
    /// Another uid holds the name (whatever it put there): never touched. It cannot stop
    /// us either: our ring then lives under its generation name (`shm::place`).
    Foreign(u32),
}

/// Judge `/dev/shm/<name>` without trusting anything another user could have put there: a
/// non-regular file, an object of another uid, or one with a magic that is not ours is left
/// alone with a clear error (only what is provably ours and dead is ever removed).
fn judge(name: &str, magics: &[u32]) -> Result<Leftover> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let path = format!("/dev/shm/{name}");
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Leftover::Nothing),
        Err(e) => return Err(Error::new(ErrorCode::Io, format!("lstat {path}: {e}"))),
    };
    let keep = |why: String| {
        Err(Error::new(
            ErrorCode::AlreadyExists,
            format!("{path} {why}; it was not removed (remove it by hand if it is stale)"),
        ))
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Ok(Leftover::Foreign(meta.uid()));
    }
    if !meta.file_type().is_file() {
        let kind = if meta.file_type().is_symlink() {
            "a symlink"
        } else if meta.file_type().is_fifo() {
            "a FIFO"
        } else {
            "not a regular file"
        };
        return keep(format!("is {kind}"));
    }
    if (meta.len() as usize) < PRODUCER_PID_OFFSET + 8 {
        // Ours, but shorter than a header: a predecessor died while creating it.
        return Ok(Leftover::Dead);
    }
    let (_fd, map) = shm::open(name, PRODUCER_PID_OFFSET + 8, false)?;
    let pid = match recorded_producer(&map, magics) {
        Recorded::Producer(pid) => pid,
        Recorded::ForeignMagic(magic) => {
            return keep(format!(
                "has magic 0x{magic:08X}, which is not a cuframes ring of this kind"
            ))
        }
        // Shrunk since the lstat above: as short as a crash mid-create leaves it.
        Recorded::TooShort => return Ok(Leftover::Dead),
    };
    // A live pid only counts if it is a process of the object's owner: pids are reused.
    if is_alive(pid) && process_uid(pid) == Some(me) {
        return Ok(Leftover::Alive(pid));
    }
    Ok(Leftover::Dead)
}

/// The real uid of process `pid`, from /proc.
fn process_uid(pid: u64) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

fn recover_shm(name: &str, magics: &[u32]) -> Result<()> {
    match judge(name, magics)? {
        Leftover::Nothing => Ok(()),
        Leftover::Alive(pid) => Err(Error::new(
            ErrorCode::AlreadyExists,
            format!("/dev/shm/{name} belongs to live process {pid}"),
        )),
        Leftover::Dead => shm::unlink(name),
        Leftover::Foreign(uid) => {
            crate::util::diag!(
                "/dev/shm/{name} belongs to uid {uid}, not to this publisher: it is left \
                 alone, and this publisher's ring takes its own generation name instead"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn name(tag: &str) -> String {
        format!("cuframes-stale-{tag}-{}", std::process::id())
    }

    /// A truncated leftover is ours and dead, so it goes (kept, it would make the key
    /// impossible to re-create: "cannot map 0 bytes").
    #[test]
    fn a_truncated_leftover_of_ours_is_dead() {
        let n = name("trunc");
        let (_fd, _map) = shm::create(&n, 4096, 0o600).unwrap();
        nix::unistd::truncate(format!("/dev/shm/{n}").as_str(), 0).unwrap();
        assert_eq!(judge(&n, &[FRAME_MAGIC]).unwrap(), Leftover::Dead);
        recover_shm(&n, &[FRAME_MAGIC]).unwrap();
        assert!(!std::path::Path::new(&format!("/dev/shm/{n}")).exists());
    }

    /// An object whose magic recovery does not expect is kept (unlinking it would let key
    /// `K-packets` remove key K's packet ring).
    #[test]
    fn an_object_with_a_foreign_magic_is_kept() {
        let n = name("magic");
        let (_fd, map) = shm::create(&n, 4096, 0o600).unwrap();
        map.atomic_u32(0).store(0x1234_5678, Ordering::Release);
        let e = recover_shm(&n, &[FRAME_MAGIC]).err().unwrap();
        assert!(std::path::Path::new(&format!("/dev/shm/{n}")).exists());
        shm::unlink(&n).unwrap();
        assert!(e.message().contains("magic"), "{}", e.message());
    }

    /// A symlink at the name (create would fail with an unexplained ELOOP) and a FIFO
    /// (create would hang) are both kept, with a clear error, at once.
    #[test]
    fn links_and_fifos_are_kept_with_a_clear_error() {
        let n = name("link");
        let path = format!("/dev/shm/{n}");
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        let e = recover_shm(&n, &[FRAME_MAGIC]).err().unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(e.message().contains("symlink"), "{}", e.message());
        nix::unistd::mkfifo(
            path.as_str(),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let e = recover_shm(&n, &[FRAME_MAGIC]).err().unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(e.message().contains("FIFO"), "{}", e.message());
    }

    /// An object of another uid with the right magic and producer_pid 1 is another user's:
    /// it is kept, and it does not block the key (no ALREADY_EXISTS "live process 1"): the
    /// ring takes its generation name.
    #[test]
    fn an_object_of_another_uid_is_never_touched() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED (needs root to create an object owned by another uid)");
            return;
        }
        let n = name("foreign");
        let (fd, map) = shm::create(&n, 4096, 0o644).unwrap();
        map.atomic_u32(0).store(FRAME_MAGIC, Ordering::Release);
        map.atomic_u64(PRODUCER_PID_OFFSET)
            .store(1, Ordering::Release);
        nix::unistd::fchown(&fd, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let verdict = judge(&n, &[FRAME_MAGIC]);
        let recovered = recover_shm(&n, &[FRAME_MAGIC]);
        let kept = std::path::Path::new(&format!("/dev/shm/{n}")).exists();
        shm::unlink(&n).unwrap();
        assert_eq!(verdict.unwrap(), Leftover::Foreign(65534));
        recovered.unwrap();
        assert!(kept);
    }

    /// The disagreement one liveness function ended: recovery counted a zombie predecessor
    /// (exited, its parent not reaping it) as a live publisher and refused the key with
    /// ALREADY_EXISTS, while `cuframes ls` called the same key dead. Its objects are
    /// removed now.
    #[test]
    fn a_zombie_predecessor_is_dead() {
        let n = name("zombie");
        let (_fd, map) = shm::create(&n, 4096, 0o600).unwrap();
        map.atomic_u32(0).store(FRAME_MAGIC, Ordering::Release);
        let (mut child, pid) = crate::liveness::tests::zombie_child();
        map.atomic_u64(PRODUCER_PID_OFFSET)
            .store(pid, Ordering::Release);
        // The zombie still has its /proc entry, of our uid: only "alive" decided.
        // SAFETY: geteuid has no preconditions.
        assert_eq!(process_uid(pid), Some(unsafe { libc::geteuid() }));
        let verdict = judge(&n, &[FRAME_MAGIC]);
        let recovered = recover_shm(&n, &[FRAME_MAGIC]);
        child.wait().unwrap();
        let _ = shm::unlink(&n);
        assert_eq!(verdict.unwrap(), Leftover::Dead);
        recovered.unwrap();
    }

    /// A live producer of our uid keeps its object.
    #[test]
    fn a_live_producer_keeps_its_object() {
        let n = name("live");
        let (_fd, map) = shm::create(&n, 4096, 0o600).unwrap();
        map.atomic_u32(0).store(FRAME_MAGIC, Ordering::Release);
        map.atomic_u64(PRODUCER_PID_OFFSET)
            .store(u64::from(std::process::id()), Ordering::Release);
        let verdict = judge(&n, &[FRAME_MAGIC]);
        let e = recover_shm(&n, &[FRAME_MAGIC]).err();
        let exists = std::path::Path::new(&format!("/dev/shm/{n}")).exists();
        shm::unlink(&n).unwrap();
        assert_eq!(
            verdict.unwrap(),
            Leftover::Alive(u64::from(std::process::id()))
        );
        assert_eq!(e.expect("kept").code(), ErrorCode::AlreadyExists);
        assert!(exists);
    }
}
