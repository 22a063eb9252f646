//! The subscriber's side of §4: HELLO → SUBSCRIBE → VMM_FDS, every answer checked.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

use crate::cuda::GpuUuid;
use crate::error::{Error, ErrorCode, Result};
use crate::format::FrameGeometry;
use crate::paths::{parse_wire_shm_name, Key};
use crate::shm::Mapping;
use crate::sock;
use crate::tlv::{HelloReq, HelloResp, Message, SubscribeResp, VmmFds};
use crate::wire::frame::FRAME_SHM_SIZE;
use crate::wire::meta_ext::MetaExt;
use crate::wire::*;

/// What the handshake established.
pub struct Established {
    pub stream: UnixStream,
    /// The uid of the process listening on the socket (SO_PEERCRED of our connection).
    pub publisher_uid: u32,
    pub hello: HelloResp,
    pub subscribed: SubscribeResp,
    /// Present when frames were asked for: the layout, the VMM_FDS message and its fds.
    pub frames: Option<(FrameGeometry, VmmFds, Vec<OwnedFd>)>,
    /// The frame SHM, opened between HELLO_RESP and SUBSCRIBE (see `run`) when frames were
    /// asked for: its descriptor and a mapping of it, writable only for header ACKs.
    pub frame_shm: Option<(OwnedFd, Mapping)>,
    /// Our ACK page, when we asked for one and the publisher offers them.
    pub ack_page: Option<OwnedFd>,
    /// The publisher's GOP store, when we asked for it and the publisher keeps one.
    pub gop_store: Option<OwnedFd>,
    /// This process's ordinal of the ring's GPU, when the publisher announced its UUID.
    pub cuda_device: Option<i32>,
}

/// The publisher a subscriber accepts: the one listening as this uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub uid: u32,
    /// Where the uid comes from: the `publisher_uid` option, or (pinned) the publisher this
    /// subscriber connected to first.
    pub pinned: bool,
}

/// Connect to `socket_path` and run the handshake before `deadline`, with the publisher
/// listening as `expected`'s uid when one is given.
pub fn run(
    key: &Key,
    socket_path: &Path,
    hello: &HelloReq,
    want_frames: bool,
    expected: Option<Expected>,
    deadline: Instant,
) -> Result<Established> {
    loop {
        match attempt(key, socket_path, hello, want_frames, expected, deadline) {
            // The ring HELLO_RESP described was replaced before SUBSCRIBE: the next attempt
            // meets the new one (a replacement is no reason to fail a connect).
            Err(e) if e.message() == RING_REPLACED && Instant::now() < deadline => continue,
            other => return other,
        }
    }
}

/// The frame SHM that HELLO_RESP named (the key's name, or the generation name a ring
/// keeps while another user holds that), opened with the one hardened open, and only if
/// the publisher at the other end of `sock` (SO_PEERCRED) owns it: a name in /dev/shm is
/// anyone's to create first. A generation name that is gone was a replaced ring's: the
/// handshake starts over (as for a ring replaced under a SUBSCRIBE).
fn open_frame_shm(
    sock: std::os::fd::BorrowedFd<'_>,
    name: &str,
    writable: bool,
) -> Result<(OwnedFd, Mapping)> {
    let (fd, map) = match crate::shm::open(name, FRAME_SHM_SIZE, writable) {
        Err(e)
            if e.code() == ErrorCode::NotFound
                && crate::paths::split_generation(name).1.is_some() =>
        {
            return Err(Error::new(ErrorCode::Disconnected, RING_REPLACED))
        }
        other => other?,
    };
    match refuse_unless_publishers(sock, fd.as_fd(), name) {
        // Another uid's object under a generation name: the publisher's ring of that name
        // was replaced and removed, and someone who saw the name (any group member can read
        // HELLO_RESP or list /dev/shm) made it again. The ring HELLO_RESP described is gone
        // as much as when the name is free: the handshake starts over and meets the new ring
        // (refusing for good would let that user end every reader that connects during a
        // replacement).
        Err(e)
            if e.code() == ErrorCode::Permission
                && crate::paths::split_generation(name).1.is_some() =>
        {
            Err(Error::new(ErrorCode::Disconnected, RING_REPLACED))
        }
        other => other.map(|()| (fd, map)),
    }
}

/// PERMISSION unless the SHM object open as `fd` (`/dev/shm/<name>`) belongs to the
/// publisher at the other end of `sock` (SO_PEERCRED, which no peer can forge): checked on
/// the object opened (fstat), not on the name, so it cannot change in between. For every
/// ring a subscriber maps, frames and packets alike.
pub(crate) fn refuse_unless_publishers(
    sock: std::os::fd::BorrowedFd<'_>,
    fd: std::os::fd::BorrowedFd<'_>,
    name: &str,
) -> Result<()> {
    let (publisher_uid, _, _) = sock::peer_credentials(sock)?;
    let owner = nix::sys::stat::fstat(fd)
        .map_err(|e| Error::os(format!("fstat /dev/shm/{name}"), e))?
        .st_uid;
    if owner != publisher_uid {
        return Err(Error::new(
            ErrorCode::Permission,
            format!(
                "{FOREIGN_OBJECT} /dev/shm/{name}: it belongs to uid {owner}, not to the \
                 publisher (uid {publisher_uid})"
            ),
        ));
    }
    Ok(())
}

const FOREIGN_OBJECT: &str = "refused the SHM object";

/// True for the error of a ring refused because its SHM object belongs to another uid than
/// the publisher's ([`refuse_unless_publishers`]): someone else holds the name the
/// publisher announced, which a publisher that is itself verified (SO_PEERCRED) only
/// announces while its own object is there, so it is a race with a publisher that went or
/// replaced its ring in between.
pub fn is_foreign_object(e: &Error) -> bool {
    e.code() == ErrorCode::Permission && e.message().starts_with(FOREIGN_OBJECT)
}

/// Why an attempt is made again: the publisher refused SUBSCRIBE because its frame ring is
/// not the one its HELLO_RESP described any more.
const RING_REPLACED: &str =
    "publisher refused SUBSCRIBE: its frame ring was replaced during the handshake";

/// The start of the error [`check_identity`] returns: how a caller tells a publisher of the
/// wrong uid from one that refused us.
const IMPOSTOR: &str = "refused the process listening on";

/// True for the error of a connection refused because the process listening on the key's
/// socket runs as another uid than the expected one.
pub fn is_impostor(e: &Error) -> bool {
    e.code() == ErrorCode::Permission && e.message().starts_with(IMPOSTOR)
}

/// Refuse a listener of another uid than `expected`'s, before anything is sent to it (not
/// even our HELLO): whoever can create names in the runtime directory can bind the key's
/// socket while its publisher is away, and SO_PEERCRED names the uid that called listen,
/// which no peer can forge.
fn check_identity(
    stream: &UnixStream,
    socket_path: &Path,
    expected: Option<Expected>,
) -> Result<u32> {
    let (uid, _gid, pid) = sock::peer_credentials(stream.as_fd())?;
    match expected {
        Some(want) if want.uid != uid => {
            let why = if want.pinned {
                "the uid of the publisher this subscriber connected to first: another user \
                 may have taken the key while its publisher was away"
            } else {
                "the publisher_uid option"
            };
            Err(Error::new(
                ErrorCode::Permission,
                format!(
                    "{IMPOSTOR} {} (pid {pid}): it runs as uid {uid}, uid {} was expected \
                     ({why})",
                    socket_path.display(),
                    want.uid
                ),
            ))
        }
        _ => Ok(uid),
    }
}

fn attempt(
    key: &Key,
    socket_path: &Path,
    hello: &HelloReq,
    want_frames: bool,
    expected: Option<Expected>,
    deadline: Instant,
) -> Result<Established> {
    let stream = sock::connect_within(socket_path, deadline).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(
            ErrorCode::NotFound,
            format!(
                "no publisher for key {key:?}: {} does not exist",
                socket_path.display()
            ),
        ),
        std::io::ErrorKind::ConnectionRefused => Error::new(
            ErrorCode::NotFound,
            format!(
                "no publisher for key {key:?}: {} is stale (its publisher died)",
                socket_path.display()
            ),
        ),
        std::io::ErrorKind::TimedOut => Error::new(
            ErrorCode::Timeout,
            format!("no publisher for key {key:?} answers in time: {e}"),
        ),
        std::io::ErrorKind::PermissionDenied => Error::new(
            ErrorCode::Permission,
            format!(
                "cannot connect to {}: permission denied (needs write access to the socket)",
                socket_path.display()
            ),
        ),
        _ => Error::new(
            ErrorCode::Io,
            format!("connect {}: {e}", socket_path.display()),
        ),
    })?;
    let publisher_uid = check_identity(&stream, socket_path, expected)?;
    let fd = stream.as_fd();
    sock::send(fd, &Message::HelloReq(hello.clone()), &[])?;
    let resp = match expect(fd, deadline, "HELLO_RESP")? {
        (Message::HelloResp(r), _) => r,
        (other, _) => return Err(unexpected(&other, "HELLO_RESP")),
    };
    if resp.result < 0 {
        return Err(refused(resp.result, "HELLO"));
    }
    if resp.proto_version != PROTOCOL_VERSION {
        return Err(Error::protocol(format!(
            "publisher speaks protocol {}, not 4",
            resp.proto_version
        )));
    }
    let layout = if want_frames {
        if resp.ring_size == 0 || resp.ring_size as usize > MAX_RING_SIZE {
            return Err(Error::protocol(format!(
                "HELLO_RESP ring_size {} is not in 1..16",
                resp.ring_size
            )));
        }
        let name = parse_wire_shm_name(&resp.shm_path)?;
        if !key.is_frame_shm(&name) {
            return Err(Error::protocol(format!(
                "HELLO_RESP names SHM {name:?}; key {key:?} must use {:?} (or a generation \
                 name of it)",
                key.frame_shm_name()
            )));
        }
        Some((FrameGeometry::from_meta(&resp.meta)?, name))
    } else {
        None
    };
    // Before SUBSCRIBE, so that a GPU we cannot use costs the publisher no bit.
    let cuda_device = match MetaExt::read(&resp.meta).gpu_uuid {
        Some(uuid) if want_frames => Some(crate::cuda::resolve_device(
            Some(GpuUuid(uuid)),
            hello.cuda_device,
            crate::cuda::visible_gpus(),
        )?),
        _ => None,
    };
    let ack_pages = hello.subscribe_flags & SUBSCRIBE_ACK_PAGE != 0
        && resp.publisher_flags & PUBLISHER_ACK_PAGES != 0;
    // The frame SHM by the name HELLO_RESP gave, before SUBSCRIBE: every generation of a
    // replaced ring has the key's name (R19; or its own while another user holds that,
    // gone once replaced, which starts the handshake over), and the publisher admits a SUBSCRIBE only for the generation its
    // HELLO_RESP described. Opened now, the object is that generation or a later one, which
    // SUBSCRIBE then refuses; opened after SUBSCRIBE (as before), a replacement in between
    // gave us the next generation's header beside the slots VMM_FDS sent for this one:
    // refused when the geometry changed (the reader went on to the newest ring, missing
    // the frames of the one it was admitted to), undetected when it did not.
    #[cfg(feature = "testing")]
    if layout.is_some() {
        crate::testing::hooks::before_frame_shm_open(key.as_str());
    }
    let frame_shm = match &layout {
        Some((_, name)) => Some(open_frame_shm(fd, name, !ack_pages)?),
        None => None,
    };
    let layout = layout.map(|(layout, _)| layout);
    #[cfg(feature = "testing")]
    crate::testing::hooks::before_subscribe(key.as_str());
    sock::send(
        fd,
        &Message::SubscribeReq {
            proto_version: PROTOCOL_VERSION,
        },
        &[],
    )?;
    let subscribed = match expect(fd, deadline, "SUBSCRIBE_RESP")? {
        (Message::SubscribeResp(s), _) => s,
        (other, _) => return Err(unexpected(&other, "SUBSCRIBE_RESP")),
    };
    if subscribed.result == ErrorCode::Disconnected as i32 {
        return Err(Error::new(ErrorCode::Disconnected, RING_REPLACED));
    }
    if subscribed.result < 0 {
        return Err(refused(subscribed.result, "SUBSCRIBE"));
    }
    let frames = match layout {
        None => None,
        Some(layout) => {
            let (v, fds) = match expect(fd, deadline, "VMM_FDS")? {
                (Message::VmmFds(v), fds) => (v, fds),
                (other, _) => return Err(unexpected(&other, "VMM_FDS")),
            };
            if v.fd_count != resp.ring_size || fds.len() != v.fd_count as usize {
                return Err(Error::protocol(format!(
                    "VMM_FDS carries {} descriptors (fd_count {}), ring_size is {}",
                    fds.len(),
                    v.fd_count,
                    resp.ring_size
                )));
            }
            if v.frame_size_bytes < layout.frame_size as u64 {
                return Err(Error::protocol(format!(
                    "VMM_FDS frame_size_bytes {} is smaller than a frame ({} bytes)",
                    v.frame_size_bytes, layout.frame_size
                )));
            }
            if v.vmm_granularity == 0 || v.frame_size_bytes % v.vmm_granularity != 0 {
                return Err(Error::protocol(format!(
                    "VMM_FDS frame_size_bytes {} is not a multiple of the granularity {}",
                    v.frame_size_bytes, v.vmm_granularity
                )));
            }
            Some((layout, v, fds))
        }
    };
    let ack_page = if frames.is_some() && ack_pages {
        match expect(fd, deadline, "ACK_PAGE")? {
            (Message::AckPage(_), mut fds) if fds.len() == 1 => fds.pop(),
            (Message::AckPage(_), fds) => {
                return Err(Error::protocol(format!(
                    "ACK_PAGE carries {} descriptors, not 1",
                    fds.len()
                )))
            }
            (other, _) => return Err(unexpected(&other, "ACK_PAGE")),
        }
    } else {
        None
    };
    let gop_store = if hello.subscribe_flags & SUBSCRIBE_GOP_STORE != 0
        && resp.publisher_flags & PUBLISHER_GOP_STORE != 0
    {
        match expect(fd, deadline, "GOP_STORE")? {
            (Message::GopStore(g), mut fds) if fds.len() == g.fd_count as usize => fds.pop(),
            (Message::GopStore(g), fds) => {
                return Err(Error::protocol(format!(
                    "GOP_STORE carries {} descriptors, not its fd_count {}",
                    fds.len(),
                    g.fd_count
                )))
            }
            (other, _) => return Err(unexpected(&other, "GOP_STORE")),
        }
    } else {
        None
    };
    Ok(Established {
        stream,
        publisher_uid,
        hello: resp,
        subscribed,
        frames,
        frame_shm,
        ack_page,
        gop_store,
        cuda_device,
    })
}

/// Receive the next handshake message, answering PINGs and turning ERROR into an error.
fn expect(
    fd: std::os::fd::BorrowedFd<'_>,
    deadline: Instant,
    what: &str,
) -> Result<(Message, Vec<OwnedFd>)> {
    loop {
        let (msg, fds) = sock::recv(fd, Some(deadline)).map_err(|e| match e.code() {
            ErrorCode::Timeout => Error::new(
                ErrorCode::Timeout,
                format!("no {what} from the publisher in time"),
            ),
            _ => e,
        })?;
        match msg {
            Message::Ping { token } => sock::send(fd, &Message::Pong { token }, &[])?,
            Message::Error { code, message } => {
                let code = ErrorCode::from_i32(code).unwrap_or(ErrorCode::Protocol);
                return Err(Error::new(
                    code,
                    format!("publisher error during handshake: {message}"),
                ));
            }
            Message::Shutdown { .. } => {
                return Err(Error::new(
                    ErrorCode::Disconnected,
                    "the publisher is shutting down",
                ))
            }
            _ => return Ok((msg, fds)),
        }
    }
}

fn unexpected(msg: &Message, wanted: &str) -> Error {
    Error::protocol(format!("expected {wanted}, got {}", msg.name()))
}

fn refused(result: i32, step: &str) -> Error {
    let code = ErrorCode::from_i32(result).unwrap_or(ErrorCode::Protocol);
    let detail = match code {
        ErrorCode::NotFound => "the publisher has no ring of the kind requested",
        ErrorCode::TooMany => "the publisher already serves 31 subscribers",
        ErrorCode::Permission => {
            "the publisher does not accept this user or group (or, for frames, a subscriber \
             without ACK pages: see allow_legacy_subscribers)"
        }
        ErrorCode::Protocol => "protocol version mismatch",
        _ => code.description(),
    };
    Error::new(code, format!("publisher refused {step}: {detail}"))
}
