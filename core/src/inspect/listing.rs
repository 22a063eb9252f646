//! The publishers of a runtime directory: which SHM objects and sockets belong to which key,
//! what their rings say, and whether each publisher is alive (see the module doc of
//! `inspect`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::frame_ring::{read_frame_shm, FrameSnapshot};
use super::objects::{self, ObjectMeta, SHM_DIR};
use super::ownership;
use super::packet_ring::{read_packet_shm, PacketSnapshot};
use super::sockets::{self, SocketState};
use crate::error::{Error, ErrorCode, Result};
use crate::paths::{shm_name_keys, split_generation, validate_key, Key};
use crate::wire::{FRAME_MAGIC, LEGACY_FRAME_MAGIC, PACKET_MAGIC};

/// An SHM object without a valid header that is younger than this may be one a publisher is
/// creating right now (the header is written after `shm_open`): it is never judged dead.
pub const CREATION_GRACE: Duration = Duration::from_secs(10);

/// One SHM object of a publisher: its `stat` and what reading it gave.
#[derive(Debug, Clone)]
pub struct ShmObject<T> {
    /// Name relative to /dev/shm (`cuframes-<key>` or `cuframes-<key>-packets`, or a
    /// generation name of one: `<name>.<16 hex>`).
    pub name: String,
    /// Its `stat`, or `None` when it vanished.
    pub meta: Option<ObjectMeta>,
    /// The snapshot, or why it could not be taken (`Permission`: not readable by us;
    /// `Protocol`: corrupt; `NotFound`: vanished meanwhile).
    pub content: Result<T>,
}

impl<T> ShmObject<T> {
    /// The object's path under /dev/shm.
    pub fn path(&self) -> PathBuf {
        objects::shm_path(&self.name)
    }
}

/// Is the publisher alive?
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Alive, and why we think so.
    Alive(String),
    /// Dead, and why we think so: `clean` may remove its objects.
    Dead(String),
    /// Cannot tell (an object we may not read, one being created): treated as alive.
    Unknown(String),
    /// Its ring's owner is not its publisher's: the object's uid differs from the socket's
    /// owner or from the uid its producer process runs as (what a publisher refuses at
    /// create; a planted object naming pid 1). Neither alive nor removable by `clean`.
    Foreign(String),
}

impl Liveness {
    /// "alive", "dead", "unknown" or "foreign".
    pub fn name(&self) -> &'static str {
        match self {
            Liveness::Alive(_) => "alive",
            Liveness::Dead(_) => "dead",
            Liveness::Unknown(_) => "unknown",
            Liveness::Foreign(_) => "foreign",
        }
    }

    /// Why the verdict is what it is.
    pub fn reason(&self) -> &str {
        match self {
            Liveness::Alive(r)
            | Liveness::Dead(r)
            | Liveness::Unknown(r)
            | Liveness::Foreign(r) => r,
        }
    }

    /// Whether the verdict is `Alive`.
    pub fn is_alive(&self) -> bool {
        matches!(self, Liveness::Alive(_))
    }

    /// Whether the verdict is `Dead`.
    pub fn is_dead(&self) -> bool {
        matches!(self, Liveness::Dead(_))
    }
}

/// Rates between two snapshots of the same publisher.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Frames published per second.
    pub frames_per_sec: Option<f64>,
    /// Packets published per second.
    pub packets_per_sec: Option<f64>,
    /// Packet payload bytes per second.
    pub packet_bytes_per_sec: Option<f64>,
}

impl Rates {
    /// Rates from `earlier` to `later` (`None` where a ring is missing in either, or its
    /// counters went backwards: the publisher was replaced).
    pub fn between(earlier: &PublisherInfo, later: &PublisherInfo) -> Rates {
        let mut r = Rates::default();
        if let (Some(a), Some(b)) = (earlier.frame_snapshot(), later.frame_snapshot()) {
            let dt = b.taken.saturating_duration_since(a.taken).as_secs_f64();
            if dt > 0.0 && b.global_seq >= a.global_seq && a.producer_pid == b.producer_pid {
                r.frames_per_sec = Some((b.global_seq - a.global_seq) as f64 / dt);
            }
        }
        if let (Some(a), Some(b)) = (earlier.packet_snapshot(), later.packet_snapshot()) {
            let dt = b.taken.saturating_duration_since(a.taken).as_secs_f64();
            if dt > 0.0
                && b.global_seq >= a.global_seq
                && b.write_offset >= a.write_offset
                && a.producer_pid == b.producer_pid
            {
                r.packets_per_sec = Some((b.global_seq - a.global_seq) as f64 / dt);
                r.packet_bytes_per_sec = Some((b.write_offset - a.write_offset) as f64 / dt);
            }
        }
        r
    }
}

/// Everything known about one key.
#[derive(Debug, Clone)]
pub struct PublisherInfo {
    /// The key.
    pub key: String,
    /// `<runtime_dir>/<key>.sock`.
    pub socket_path: PathBuf,
    /// Whether the socket exists and listens.
    pub socket: SocketState,
    /// Its frame SHM, when there is one.
    pub frames: Option<ShmObject<FrameSnapshot>>,
    /// Its packet SHM, when there is one.
    pub packets: Option<ShmObject<PacketSnapshot>>,
    /// Whether the publisher is alive.
    pub liveness: Liveness,
    /// Where the owners do not match (empty when they do): the ring's uid against the
    /// socket's owner and against the uid its live producer process runs as, one line per
    /// mismatch. Any makes `liveness` [`Liveness::Foreign`].
    pub owner_mismatch: Vec<String>,
    /// The key's other SHM objects: generation names (`cuframes-<key>.<16 hex>`, a ring
    /// staged for a replacement, or kept there while another user held the key's name) not
    /// shown as its ring, and the key's own names when its ring is elsewhere (then held by
    /// someone else).
    pub others: Vec<OtherObject>,
    /// Filled by [`sample`] (and by callers that compare two snapshots).
    pub rates: Rates,
}

/// An SHM object of a key that is not the ring shown for it.
#[derive(Debug, Clone)]
pub struct OtherObject {
    /// Its name relative to /dev/shm.
    pub name: String,
    /// Its `stat`, or `None` when it vanished.
    pub meta: Option<ObjectMeta>,
    /// The producer pid recorded in it, when it has one of our magics and we may read it.
    pub producer_pid: Option<u64>,
}

impl PublisherInfo {
    /// The frame ring's snapshot, when it could be taken.
    pub fn frame_snapshot(&self) -> Option<&FrameSnapshot> {
        self.frames.as_ref().and_then(|o| o.content.as_ref().ok())
    }

    /// The packet ring's snapshot, when it could be taken.
    pub fn packet_snapshot(&self) -> Option<&PacketSnapshot> {
        self.packets.as_ref().and_then(|o| o.content.as_ref().ok())
    }

    /// The producer pid recorded in the SHM (frames first).
    pub fn pid(&self) -> Option<u64> {
        self.frame_snapshot()
            .map(|f| f.producer_pid)
            .or_else(|| self.packet_snapshot().map(|p| p.producer_pid))
    }

    /// Subscribers: the frame SHM's slots in use when there is one, else the connections
    /// accepted on the socket (packets-only publisher), else unknown.
    pub fn subscriber_count(&self) -> Option<usize> {
        if let Some(f) = self.frame_snapshot() {
            return Some(f.subscribers.len());
        }
        if self.frames.is_none() {
            if let SocketState::Listening { connections } = self.socket {
                return Some(connections);
            }
        }
        None
    }

    /// Errors met while reading this key's objects (permission, corruption).
    pub fn errors(&self) -> Vec<&Error> {
        let mut v = Vec::new();
        if let Some(Err(e)) = self.frames.as_ref().map(|o| &o.content) {
            v.push(e);
        }
        if let Some(Err(e)) = self.packets.as_ref().map(|o| &o.content) {
            v.push(e);
        }
        v
    }
}

/// Which SHM objects /dev/shm holds for which key (its names and generation names).
#[derive(Debug, Default, Clone)]
struct Found {
    socket: bool,
    frame: Vec<String>,
    packets: Vec<String>,
}

/// The keys of `/dev/shm/cuframes-*` objects. `cuframes-X-packets` is the packet ring of
/// `X` or the frame ring of `X-packets` (a valid key): the magic decides, and the suffix when
/// the object cannot be read.
fn scan_shm(found: &mut BTreeMap<String, Found>) -> Result<()> {
    let dir = match std::fs::read_dir(SHM_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(objects::permission_error(
                Path::new(SHM_DIR),
                "read and execute (r-x)",
                "list",
            ))
        }
        Err(e) => return Err(Error::new(ErrorCode::Io, format!("list {SHM_DIR}: {e}"))),
    };
    for entry in dir.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        // A generation name belongs to the key of the name before its '.'.
        let (as_frame_key, as_packet_key) = shm_name_keys(&name);
        let (key, is_packets) = match (as_frame_key, as_packet_key) {
            (Some(fk), Some(pk)) => match objects::read_magic(&name) {
                Some(FRAME_MAGIC | LEGACY_FRAME_MAGIC) => (fk, false),
                Some(PACKET_MAGIC) => (pk, true),
                _ => (pk, true),
            },
            (Some(fk), None) => (fk, false),
            (None, Some(pk)) => (pk, true),
            (None, None) => continue,
        };
        let key = key.to_owned();
        let f = found.entry(key).or_default();
        if is_packets {
            f.packets.push(name);
        } else {
            f.frame.push(name);
        }
    }
    Ok(())
}

fn scan_runtime_dir(dir: &Path, found: &mut BTreeMap<String, Found>) -> Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(objects::permission_error(
                dir,
                "read and execute (r-x)",
                "list the runtime directory",
            ))
        }
        Err(e) => {
            return Err(Error::new(
                ErrorCode::Io,
                format!("list {}: {e}", dir.display()),
            ))
        }
    };
    for entry in rd.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if let Some(key) = name.strip_suffix(".sock") {
            if validate_key(key).is_ok() {
                found.entry(key.to_owned()).or_default().socket = true;
            }
        }
    }
    Ok(())
}

fn judge(info: &PublisherInfo) -> Liveness {
    if !info.owner_mismatch.is_empty() {
        return Liveness::Foreign(format!(
            "owner mismatch: {}",
            info.owner_mismatch.join("; ")
        ));
    }
    if let SocketState::Listening { .. } = info.socket {
        return Liveness::Alive(format!("{} is listening", info.socket_path.display()));
    }
    let mut unknown: Vec<String> = Vec::new();
    let mut dead: Vec<String> = Vec::new();
    let mut check = |name: &str,
                     meta: &Option<ObjectMeta>,
                     content: std::result::Result<u64, &Error>|
     -> Option<Liveness> {
        match content {
            Ok(pid) if crate::liveness::is_alive(pid) => Some(Liveness::Alive(format!(
                "producer pid {pid} of /dev/shm/{name} is alive"
            ))),
            Ok(pid) => {
                let msg = format!("producer pid {pid} is gone");
                if !dead.contains(&msg) {
                    dead.push(msg);
                }
                None
            }
            Err(e) if e.code() == ErrorCode::NotFound => None,
            Err(e) if e.code() == ErrorCode::Protocol => {
                let young = meta
                    .as_ref()
                    .map_or(true, |m| m.age_secs() < CREATION_GRACE.as_secs_f64());
                if young {
                    unknown.push(format!(
                        "/dev/shm/{name} has no valid header yet (being created?)"
                    ));
                } else {
                    dead.push(format!("/dev/shm/{name} has no valid header"));
                }
                None
            }
            Err(e) => {
                unknown.push(e.message().to_owned());
                None
            }
        }
    };
    if let Some(o) = &info.frames {
        if let Some(l) = check(&o.name, &o.meta, o.content.as_ref().map(|s| s.producer_pid)) {
            return l;
        }
    }
    if let Some(o) = &info.packets {
        if let Some(l) = check(&o.name, &o.meta, o.content.as_ref().map(|s| s.producer_pid)) {
            return l;
        }
    }
    match &info.socket {
        SocketState::Unknown(msg) => unknown.push(format!(
            "cannot tell whether {} listens: {msg}",
            info.socket_path.display()
        )),
        SocketState::NotListening => dead.insert(
            0,
            format!("nobody listens on {}", info.socket_path.display()),
        ),
        _ => {}
    }
    if !unknown.is_empty() {
        return Liveness::Unknown(unknown.join("; "));
    }
    Liveness::Dead(if dead.is_empty() {
        "nothing left".into()
    } else {
        dead.join("; ")
    })
}

fn proc_unix_table() -> std::result::Result<Vec<sockets::UnixEntry>, String> {
    sockets::read_proc_net_unix().map_err(|e| format!("cannot read /proc/net/unix: {e}"))
}

fn build(
    runtime_dir: &Path,
    key: &str,
    found: &Found,
    table: &std::result::Result<Vec<sockets::UnixEntry>, String>,
) -> PublisherInfo {
    let socket_path = runtime_dir.join(format!("{key}.sock"));
    let socket = sockets::socket_state(&socket_path, table);
    let socket_uid = ObjectMeta::of(&socket_path).map(|m| m.uid);
    let mut others = Vec::new();
    let frames = choose(
        &found.frame,
        socket_uid,
        read_frame_shm,
        |s| s.producer_pid,
        &mut others,
    );
    let packets = choose(
        &found.packets,
        socket_uid,
        read_packet_shm,
        |s| s.producer_pid,
        &mut others,
    );
    let mut owner_mismatch = Vec::new();
    if let Some(o) = &frames {
        let pid = o.content.as_ref().ok().map(|s| s.producer_pid);
        owner_mismatch.extend(ownership::mismatch(
            &o.name,
            o.meta.as_ref(),
            pid,
            socket_uid,
        ));
    }
    if let Some(o) = &packets {
        let pid = o.content.as_ref().ok().map(|s| s.producer_pid);
        owner_mismatch.extend(ownership::mismatch(
            &o.name,
            o.meta.as_ref(),
            pid,
            socket_uid,
        ));
    }
    let mut info = PublisherInfo {
        key: key.to_owned(),
        socket_path,
        socket,
        frames,
        packets,
        liveness: Liveness::Unknown(String::new()),
        owner_mismatch,
        others,
        rates: Rates::default(),
    };
    info.liveness = judge(&info);
    info
}

/// How a candidate ring ranks in [`choose`]: (producer alive, owners match, the tool's
/// user's, at the key's name), compared in that order.
type Rank = (bool, bool, bool, bool);

/// The ring to show among a key's objects of one kind (its name and generation names):
/// the one whose owners match and whose producer lives (the publisher's current ring, at
/// its name or, while another user holds that, under its generation name), else one whose
/// owners match (a dead publisher's), one of the user running the tool first (without a
/// socket nothing else tells a dead publisher's objects from a planted one's, and `clean`
/// removes the chosen ring's owner's objects only), then the one at the key's name, then
/// the newest, then by name (one answer however close their times).
/// The rest go to `others`.
fn choose<T>(
    names: &[String],
    socket_uid: Option<u32>,
    read: impl Fn(&str) -> Result<T>,
    pid_of: impl Fn(&T) -> u64,
    others: &mut Vec<OtherObject>,
) -> Option<ShmObject<T>> {
    let euid = nix::unistd::geteuid().as_raw();
    let mut candidates: Vec<(Rank, ShmObject<T>)> = names
        .iter()
        .map(|name| {
            let meta = ObjectMeta::of(&objects::shm_path(name));
            let content = read(name);
            let pid = content.as_ref().ok().map(&pid_of);
            let matches = ownership::mismatch(name, meta.as_ref(), pid, socket_uid).is_empty();
            let live = matches && pid.is_some_and(crate::liveness::is_alive);
            let mine = meta.as_ref().is_some_and(|m| m.uid == euid);
            let canonical = split_generation(name).1.is_none();
            let rank = (live, matches, mine, canonical);
            (
                rank,
                ShmObject {
                    name: name.clone(),
                    meta,
                    content,
                },
            )
        })
        .collect();
    // Highest rank, then newest, then the last name.
    candidates.sort_by(|(ra, a), (rb, b)| {
        let key = |o: &ShmObject<T>| o.meta.as_ref().map(|m| m.modified);
        (ra, key(a), &a.name).cmp(&(rb, key(b), &b.name))
    });
    let chosen = candidates.pop().map(|(_, o)| o);
    for (_, o) in candidates {
        others.push(OtherObject {
            producer_pid: o.content.as_ref().ok().map(&pid_of),
            name: o.name,
            meta: o.meta,
        });
    }
    chosen
}

/// Every publisher of `runtime_dir` (its `*.sock`) and every `/dev/shm/cuframes-*` object
/// (a publisher of another runtime directory, or the leftovers of a dead one), by key; only
/// `keys` when given. One snapshot, no rates.
pub fn list(runtime_dir: &Path, keys: Option<&[Key]>) -> Result<Vec<PublisherInfo>> {
    let mut found = BTreeMap::new();
    scan_runtime_dir(runtime_dir, &mut found)?;
    scan_shm(&mut found)?;
    let table = proc_unix_table();
    Ok(found
        .iter()
        .filter(|(k, _)| keys.map_or(true, |ks| ks.iter().any(|w| w.as_str() == k.as_str())))
        .map(|(k, f)| build(runtime_dir, k, f, &table))
        .collect())
}

/// One key; `NotFound` when it has neither a socket nor an SHM object.
pub fn inspect(runtime_dir: &Path, key: &Key) -> Result<PublisherInfo> {
    list(runtime_dir, Some(std::slice::from_ref(key)))?
        .pop()
        .ok_or_else(|| {
            Error::new(
                ErrorCode::NotFound,
                format!(
                    "no publisher {:?}: neither {} nor /dev/shm/{}* exists",
                    key.as_str(),
                    runtime_dir.join(format!("{key}.sock")).display(),
                    key.frame_shm_name()
                ),
            )
        })
}

/// Two snapshots `interval` apart, with rates: the second snapshot is returned.
pub fn sample(
    runtime_dir: &Path,
    keys: Option<&[Key]>,
    interval: Duration,
) -> Result<Vec<PublisherInfo>> {
    let first = list(runtime_dir, keys)?;
    if interval.is_zero() {
        return Ok(first);
    }
    std::thread::sleep(interval);
    let mut second = list(runtime_dir, keys)?;
    for info in &mut second {
        if let Some(prev) = first.iter().find(|p| p.key == info.key) {
            info.rates = Rates::between(prev, info);
        }
    }
    Ok(second)
}
