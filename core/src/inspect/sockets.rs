//! Is a publisher listening on its socket? Answered from `/proc/net/unix` (the kernel's list
//! of Unix sockets of our network namespace), never by connecting: a connection would make the
//! publisher start a handshake.

use std::path::{Path, PathBuf};

/// `__SO_ACCEPTCON` in the Flags column: the socket is listening.
const SO_ACCEPTCON: u32 = 1 << 16;
/// `SS_CONNECTED` in the St column.
const SS_CONNECTED: u8 = 3;

/// One bound Unix socket from `/proc/net/unix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixEntry {
    /// A listening socket (`__SO_ACCEPTCON`).
    pub listening: bool,
    /// A connected socket (`SS_CONNECTED`).
    pub connected: bool,
    /// The path as it was bound (accepted connections carry their listener's path).
    pub path: String,
}

/// The sockets of our network namespace that have a path.
pub fn read_proc_net_unix() -> std::io::Result<Vec<UnixEntry>> {
    Ok(parse_proc_net_unix(&std::fs::read_to_string(
        "/proc/net/unix",
    )?))
}

/// Parse the text of `/proc/net/unix` (header line, then
/// `Num RefCount Protocol Flags Type St Inode [Path]`); lines without a path are skipped.
pub fn parse_proc_net_unix(text: &str) -> Vec<UnixEntry> {
    text.lines().skip(1).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<UnixEntry> {
    let mut rest = line.trim_start_matches(' ');
    let mut fields = [""; 7];
    for f in fields.iter_mut() {
        let end = rest.find(' ').unwrap_or(rest.len());
        *f = &rest[..end];
        rest = rest[end..].trim_start_matches(' ');
    }
    if rest.is_empty() || fields[6].is_empty() {
        return None;
    }
    let flags = u32::from_str_radix(fields[3], 16).ok()?;
    let state = u8::from_str_radix(fields[5], 16).ok()?;
    Some(UnixEntry {
        listening: flags & SO_ACCEPTCON != 0,
        connected: state == SS_CONNECTED,
        path: rest.to_owned(),
    })
}

/// What we know about a publisher's socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketState {
    /// No file at the path.
    Missing,
    /// Something that is not a socket has the path: not ours, never removed.
    NotASocket,
    /// A socket of our network namespace listens on it; `connections` are the accepted
    /// connections (subscribers and handshakes in progress).
    Listening {
        /// Accepted connections on it.
        connections: usize,
    },
    /// A socket file nobody in our network namespace listens on: stale, or its publisher is
    /// in another network namespace (a container without the host network).
    NotListening,
    /// `/proc/net/unix` could not be read.
    Unknown(String),
}

impl SocketState {
    /// The state's name, as the tool prints it.
    pub fn name(&self) -> &'static str {
        match self {
            SocketState::Missing => "missing",
            SocketState::NotASocket => "not-a-socket",
            SocketState::Listening { .. } => "listening",
            SocketState::NotListening => "not-listening",
            SocketState::Unknown(_) => "unknown",
        }
    }

    /// Whether something is at the path.
    pub fn exists(&self) -> bool {
        !matches!(self, SocketState::Missing)
    }
}

/// The state of the socket at `path`, given the socket table (`Err` = unreadable).
pub fn socket_state(path: &Path, table: &Result<Vec<UnixEntry>, String>) -> SocketState {
    let Some(meta) = super::objects::ObjectMeta::of(path) else {
        return SocketState::Missing;
    };
    if !meta.is_socket {
        return SocketState::NotASocket;
    }
    let entries = match table {
        Ok(e) => e,
        Err(msg) => return SocketState::Unknown(msg.clone()),
    };
    let canonical = std::fs::canonicalize(path).ok();
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let same = |p: &str| -> bool {
        if Path::new(p) == path {
            return true;
        }
        // The publisher may have bound it through another spelling of the directory
        // (a symlink, `..`): compare canonical paths, but only for a matching file name.
        if !p.starts_with('/')
            || file_name.as_deref() != Path::new(p).file_name().and_then(|n| n.to_str())
        {
            return false;
        }
        let c: Option<PathBuf> = std::fs::canonicalize(p).ok();
        c.is_some() && c == canonical
    };
    let mut listening = false;
    let mut connections = 0;
    for e in entries.iter().filter(|e| same(&e.path)) {
        if e.listening {
            listening = true;
        } else if e.connected {
            connections += 1;
        }
    }
    if listening {
        SocketState::Listening { connections }
    } else {
        SocketState::NotListening
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_format() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31594 /run/cuframes/cam1.sock\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 31600 /run/cuframes/cam1.sock\n\
            0000000000000000: 00000003 00000000 00000000 0001 03   575\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31595 /tmp/with space.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 31596 @abstract\n";
        let e = parse_proc_net_unix(text);
        assert_eq!(e.len(), 4);
        assert!(e[0].listening && !e[0].connected);
        assert_eq!(e[0].path, "/run/cuframes/cam1.sock");
        assert!(!e[1].listening && e[1].connected);
        assert_eq!(e[2].path, "/tmp/with space.sock");
        assert_eq!(e[3].path, "@abstract");
    }

    #[test]
    fn garbage_lines_are_skipped() {
        let e = parse_proc_net_unix("header\nnot a line at all\n\n1: 2 3 zz 1 1 5 /x\n");
        assert!(e.is_empty());
    }
}
