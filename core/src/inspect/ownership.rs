//! Whose is a ring? A publisher creates its socket and its SHM objects as the same uid, and
//! records its own pid in them; anyone who can create files in /dev/shm can plant an object
//! with a valid header that names a live pid of somebody else (pid 1). Publishers refuse
//! such objects at create (they are not theirs); the operator tools flag them the same way
//! instead of calling them alive: the object's owner is checked against the socket's owner
//! and against the uid the recorded producer process runs as.

use super::objects::ObjectMeta;

/// The uids of process `pid` (real, effective, saved, filesystem: `Uid:` of
/// `/proc/PID/status`); `None` when there is no such process (or /proc says nothing).
pub fn process_uids(pid: u64) -> Option<[u32; 4]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut uids = [0u32; 4];
    let mut fields = line.split_whitespace();
    for u in &mut uids {
        *u = fields.next()?.parse().ok()?;
    }
    Some(uids)
}

/// What does not match for SHM object `name` (its `meta`, the producer pid recorded in it,
/// the socket owner's uid): one line per mismatch, empty when everything that can be
/// checked matches. A producer that is gone is not checked (a dead publisher's leftovers
/// are judged by [`super::clean()`]); an object we could not stat is not either.
pub fn mismatch(
    name: &str,
    meta: Option<&ObjectMeta>,
    producer_pid: Option<u64>,
    socket_uid: Option<u32>,
) -> Vec<String> {
    let Some(owner) = meta.map(|m| m.uid) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(socket) = socket_uid.filter(|&s| s != owner) {
        out.push(format!(
            "/dev/shm/{name} belongs to uid {owner}, its socket to uid {socket}"
        ));
    }
    if let Some(pid) = producer_pid.filter(|&p| crate::liveness::is_alive(p)) {
        if let Some(uids) = process_uids(pid).filter(|u| !u.contains(&owner)) {
            out.push(format!(
                "/dev/shm/{name} belongs to uid {owner}, its producer pid {pid} runs as uid {}",
                uids[1]
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_as_its_uid() {
        // SAFETY: getuid/geteuid have no preconditions.
        let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
        let uids = process_uids(u64::from(std::process::id())).unwrap();
        assert_eq!((uids[0], uids[1]), (uid, euid));
        assert_eq!(process_uids(u64::from(u32::MAX)), None);
    }
}
