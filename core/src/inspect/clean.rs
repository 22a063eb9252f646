//! `cuframes clean`: remove the sockets and SHM objects of dead publishers, never a live
//! one's. The verdict is the one of [`super::list`] (socket listening per `/proc/net/unix`,
//! producer pids alive); a "dead" key is then checked once more as `Publisher::create`
//! checks it (§1): by connecting to its socket. A connection that is accepted means a live
//! publisher this process cannot see (another network namespace, a different path to the
//! same directory): the key is kept. A refused one disturbs nobody.

use std::ffi::CString;
use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::listing::{list, Liveness, PublisherInfo};
use super::objects::{self, ObjectMeta};
use super::sockets::SocketState;
use crate::error::{Error, ErrorCode, Result};
use crate::liveness::{self, Recorded};
use crate::paths::Key;
use crate::sock;
use crate::wire::{PRODUCER_PID_OFFSET, SHM_MAGICS};

/// One object removed (or, with `dry_run`, that would be).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// The key the object belonged to.
    pub key: String,
    /// "socket", "frame SHM", "packet SHM" or "SHM generation".
    pub what: &'static str,
    /// The object's path.
    pub path: String,
    /// Why the key was judged dead.
    pub reason: String,
}

/// What [`clean`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Whether nothing was removed, only reported.
    pub dry_run: bool,
    /// What was removed (or would be).
    pub removed: Vec<Removal>,
    /// Keys left alone, with the reason (alive, or cannot tell).
    pub kept: Vec<(String, String)>,
    /// Objects that could not be removed, with the error.
    pub failed: Vec<(String, String)>,
}

/// Remove what dead publishers left (only `keys` when given). With `dry_run`, only say
/// what would be removed.
pub fn clean(runtime_dir: &Path, keys: Option<&[Key]>, dry_run: bool) -> Result<CleanReport> {
    let mut report = CleanReport {
        dry_run,
        ..Default::default()
    };
    for info in list(runtime_dir, keys)? {
        let reason = match &info.liveness {
            Liveness::Dead(r) => r.clone(),
            Liveness::Alive(r) => {
                report.kept.push((info.key.clone(), format!("alive: {r}")));
                continue;
            }
            Liveness::Unknown(r) => {
                report.kept.push((
                    info.key.clone(),
                    format!("cannot tell whether it is alive: {r}"),
                ));
                continue;
            }
            Liveness::Foreign(r) => {
                report
                    .kept
                    .push((info.key.clone(), format!("not its publisher's: {r}")));
                continue;
            }
        };
        if let Some(why) = confirm_socket_dead(&info) {
            report.kept.push((info.key.clone(), why));
            continue;
        }
        remove_key(&info, &reason, dry_run, &mut report);
    }
    Ok(report)
}

/// How long a socket has to accept the confirming connection: a live publisher accepts at
/// once.
const CONNECT_WITHIN: Duration = Duration::from_secs(1);

/// `None` when the socket (if any) refuses connections, else why the key must be kept.
fn confirm_socket_dead(info: &PublisherInfo) -> Option<String> {
    if !matches!(
        info.socket,
        SocketState::NotListening | SocketState::Unknown(_)
    ) {
        return None;
    }
    // Bounded: a socket whose listener never accepts (its backlog full) must not hang the
    // tool; it has a live listener, so the key is kept.
    let deadline = Instant::now() + CONNECT_WITHIN;
    match sock::connect_within(&info.socket_path, deadline) {
        Ok(_) => Some(format!(
            "alive: {} accepts connections (a publisher outside this network namespace?)",
            info.socket_path.display()
        )),
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::NotFound) => None,
        Err(e) if e.kind() == ErrorKind::TimedOut => Some(format!(
            "alive: a process listens on {} but does not accept connections ({e})",
            info.socket_path.display()
        )),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Some(format!(
            "cannot tell whether it is alive: {}",
            objects::permission_error(&info.socket_path, "write (w)", "connect to").message()
        )),
        Err(e) => Some(format!(
            "cannot tell whether it is alive: connect {}: {e}",
            info.socket_path.display()
        )),
    }
}

fn remove_key(info: &PublisherInfo, reason: &str, dry_run: bool, report: &mut CleanReport) {
    let mut removal = |what: &'static str, path: String| {
        report.removed.push(Removal {
            key: info.key.clone(),
            what,
            path,
            reason: reason.to_owned(),
        })
    };
    // SHM first: if a new publisher takes the key meanwhile, its objects carry a live pid
    // and the re-check below keeps them.
    let objects = [
        info.frames.as_ref().map(|o| (o.name.clone(), "frame SHM")),
        info.packets
            .as_ref()
            .map(|o| (o.name.clone(), "packet SHM")),
    ];
    let others = stale_others(info).map(|name| (name, "SHM generation"));
    for (name, what) in objects.into_iter().flatten().chain(others) {
        let path = objects::shm_path(&name);
        if let Some(pid) = live_owner(&name) {
            report.failed.push((
                path.display().to_string(),
                format!("kept: it now belongs to live process {pid}"),
            ));
            return;
        }
        if dry_run {
            removal(what, path.display().to_string());
            continue;
        }
        match unlink_shm(&name) {
            Ok(true) => removal(what, path.display().to_string()),
            Ok(false) => {}
            Err(e) => report
                .failed
                .push((path.display().to_string(), e.message().to_owned())),
        }
    }
    if matches!(
        info.socket,
        SocketState::NotListening | SocketState::Unknown(_)
    ) {
        let path = info.socket_path.display().to_string();
        if dry_run {
            removal("socket", path);
            return;
        }
        // Only a socket file, and only while it still refuses connections.
        if ObjectMeta::of(&info.socket_path).is_some_and(|m| m.is_socket)
            && confirm_socket_dead(info).is_none()
        {
            match std::fs::remove_file(&info.socket_path) {
                Ok(()) => removal("socket", path),
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                    let dir = info.socket_path.parent().unwrap_or(Path::new("/"));
                    report.failed.push((
                        path,
                        format!(
                            "{} (removing a file needs write and execute (wx) permission on \
                             the directory; with the sticky bit also ownership of the file)",
                            objects::permission_error(
                                dir,
                                "write and execute (wx)",
                                "remove a file from"
                            )
                            .message()
                        ),
                    ))
                }
                Err(e) => report.failed.push((path, e.to_string())),
            }
        }
    }
}

/// The key's other objects (generation names: a ring staged for a replacement or kept
/// there while another user held the key's name) that are safe to remove along with a dead
/// publisher's: one of our magics, a producer that is gone, and the owner of the objects
/// judged dead (the ring's, else the socket's, else this user): never another uid's, such
/// as a squatter's object at the key's name or at a generation name.
fn stale_others(info: &PublisherInfo) -> impl Iterator<Item = String> + '_ {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let publisher_uid = info
        .frames
        .as_ref()
        .and_then(|o| o.meta.as_ref())
        .or_else(|| info.packets.as_ref().and_then(|o| o.meta.as_ref()))
        .map(|m| m.uid)
        .or_else(|| ObjectMeta::of(&info.socket_path).map(|m| m.uid))
        .unwrap_or(me);
    info.others.iter().filter_map(move |o| {
        let generation = crate::paths::split_generation(&o.name).1.is_some();
        let owner = o.meta.as_ref().map(|m| m.uid);
        let dead = o.producer_pid.is_some_and(|p| !liveness::is_alive(p));
        (generation && owner == Some(publisher_uid) && dead).then(|| o.name.clone())
    })
}

/// The producer pid of an SHM object, if it is alive right now.
fn live_owner(name: &str) -> Option<u64> {
    let obj = objects::open_readonly(name, PRODUCER_PID_OFFSET + 8).ok()?;
    match liveness::recorded_producer(&obj.map, &SHM_MAGICS) {
        Recorded::Producer(pid) => liveness::is_alive(pid).then_some(pid),
        Recorded::ForeignMagic(_) | Recorded::TooShort => None,
    }
}

/// `shm_unlink`; `Ok(false)` when it was already gone.
fn unlink_shm(name: &str) -> Result<bool> {
    let path = objects::shm_path(name);
    let c = CString::new(format!("/{name}")).map_err(|_| Error::invalid("NUL in SHM name"))?;
    match nix::sys::mman::shm_unlink(c.as_c_str()) {
        Ok(()) => Ok(true),
        Err(Errno::ENOENT) => Ok(false),
        Err(Errno::EACCES | Errno::EPERM) => {
            // SAFETY: getuid takes no arguments, touches no memory of ours and cannot fail.
            let uid = unsafe { libc::getuid() };
            let owner = ObjectMeta::of(&path).map_or(String::from("its owner"), |m| {
                format!("its owner (uid {})", m.uid)
            });
            Err(Error::new(
                ErrorCode::Permission,
                format!(
                    "permission denied: cannot remove {}: {SHM} has the sticky bit, so only \
                     {owner} or root may remove it (this user is uid {uid})",
                    path.display(),
                    SHM = objects::SHM_DIR
                ),
            ))
        }
        Err(e) => Err(Error::os(format!("shm_unlink {}", path.display()), e)),
    }
}
