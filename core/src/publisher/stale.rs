//! Crash recovery at create (§1): a dead publisher's socket and SHM objects are removed; a
//! live publisher makes create fail with ALREADY_EXISTS.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::error::{Error, ErrorCode, Result};
use crate::liveness::is_alive;
use crate::paths::Key;
use crate::shm;
use crate::wire::{FRAME_MAGIC, LEGACY_FRAME_MAGIC, PACKET_MAGIC};

/// Remove what a dead predecessor left behind, or fail if it is alive.
pub fn recover(key: &Key, socket_path: &Path) -> Result<()> {
    // A socket that accepts connections has a live owner, whatever its SHM says.
    match UnixStream::connect(socket_path) {
        Ok(_) => {
            return Err(Error::new(
                ErrorCode::AlreadyExists,
                format!("a live publisher is listening on {}", socket_path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => {
            // ECONNREFUSED: nobody listens; the path is stale.
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
    }
    recover_shm(
        &key.frame_shm_name(),
        &[FRAME_MAGIC, LEGACY_FRAME_MAGIC],
        0x18,
    )?;
    recover_shm(&key.packet_shm_name(), &[PACKET_MAGIC], 0x18)?;
    Ok(())
}

/// The producer pid of an SHM object of ours, if it has one of `magics`.
pub fn owner_pid(name: &str, magics: &[u32], pid_offset: usize) -> Result<Option<u64>> {
    let (_fd, map) = match shm::open(name, 0, false) {
        Ok(x) => x,
        Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if map.len() < pid_offset + 8 {
        return Ok(Some(0));
    }
    let magic = map.load_u32(0, Ordering::Acquire);
    if !magics.contains(&magic) {
        return Ok(Some(0));
    }
    Ok(Some(map.load_u64(pid_offset, Ordering::Acquire)))
}

fn recover_shm(name: &str, magics: &[u32], pid_offset: usize) -> Result<()> {
    match owner_pid(name, magics, pid_offset) {
        Ok(None) => Ok(()),
        Ok(Some(pid)) if pid != 0 && is_alive(pid) => Err(Error::new(
            ErrorCode::AlreadyExists,
            format!("/dev/shm/{name} belongs to live process {pid}"),
        )),
        Ok(Some(_)) => shm::unlink(name),
        // Unreadable (a header we cannot parse, or not ours to open): leave it for the operator.
        Err(e) => Err(e),
    }
}
