//! Unix-socket transport of TLV messages, with SCM_RIGHTS descriptors (§3.1, §3.7).
//!
//! Blocking helpers with deadlines for the subscriber's handshake, and for the publisher's
//! server loop, which must never block on a peer, a non-blocking accumulator of what a peer
//! sends ([`Inbox`], for one that sends half a message and stalls) and a bounded queue of what
//! it is sent ([`Outbox`], for one that does not read).

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::error::{Error, ErrorCode, Result};
use crate::tlv::{self, Message, HEADER_LEN, MAX_FDS};

/// Send one message, with `fds` attached as SCM_RIGHTS when non-empty. MSG_NOSIGNAL: a
/// vanished peer is an error, never a SIGPIPE that kills the process.
pub fn send(sock: BorrowedFd<'_>, msg: &Message, fds: &[RawFd]) -> Result<()> {
    let bytes = tlv::encode(msg)?;
    let mut sent = 0;
    while sent < bytes.len() {
        let iov = [IoSlice::new(&bytes[sent..])];
        let cmsg_storage;
        let cmsgs: &[ControlMessage<'_>] = if sent == 0 && !fds.is_empty() {
            cmsg_storage = [ControlMessage::ScmRights(fds)];
            &cmsg_storage
        } else {
            &[]
        };
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) => sent += n,
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => {
                // Non-blocking socket with a full buffer: wait briefly for room, then give up
                // on a peer that does not read.
                wait_fd(
                    sock,
                    PollFlags::POLLOUT,
                    Some(Instant::now() + Duration::from_secs(1)),
                )?;
            }
            Err(e) => return Err(Error::os(format!("send {}", msg.name()), e)),
        }
    }
    Ok(())
}

/// At most this many bytes wait in an [`Outbox`]: a peer that leaves more unread is not
/// reading (a HELLO_RESP, a SUBSCRIBE_RESP and a VMM_FDS are a few hundred bytes).
pub const OUTBOX_LIMIT: usize = 64 * 1024;

/// Messages for one peer that its socket has not taken yet. [`Outbox::flush`] writes what the
/// socket takes now and never waits; the server polls for POLLOUT while something is queued.
#[derive(Default)]
pub struct Outbox {
    queue: VecDeque<Outgoing>,
    bytes: usize,
}

struct Outgoing {
    bytes: Vec<u8>,
    sent: usize,
    /// Passed with the first byte (SCM_RIGHTS); kept open until then.
    fds: Vec<OwnedFd>,
}

impl Outbox {
    /// Queue `msg` (with `fds`, passed as SCM_RIGHTS). TIMEOUT when the peer already has
    /// [`OUTBOX_LIMIT`] bytes unread: it does not read its socket.
    pub fn push(&mut self, msg: &Message, fds: Vec<OwnedFd>) -> Result<()> {
        let bytes = tlv::encode(msg)?;
        if self.bytes + bytes.len() > OUTBOX_LIMIT {
            return Err(Error::new(
                ErrorCode::Timeout,
                format!(
                    "the peer does not read its socket ({} bytes unread)",
                    self.bytes
                ),
            ));
        }
        self.bytes += bytes.len();
        self.queue.push_back(Outgoing {
            bytes,
            sent: 0,
            fds,
        });
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Write as much as `sock` takes now, without waiting.
    pub fn flush(&mut self, sock: BorrowedFd<'_>) -> Result<()> {
        while let Some(out) = self.queue.front_mut() {
            let iov = [IoSlice::new(&out.bytes[out.sent..])];
            let raw: Vec<RawFd> = out.fds.iter().map(|f| f.as_raw_fd()).collect();
            let cmsg_storage;
            let cmsgs: &[ControlMessage<'_>] = if out.sent == 0 && !raw.is_empty() {
                cmsg_storage = [ControlMessage::ScmRights(&raw)];
                &cmsg_storage
            } else {
                &[]
            };
            let flags = MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT;
            match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, flags, None) {
                Ok(n) => {
                    out.sent += n;
                    self.bytes -= n;
                    if n > 0 {
                        // The kernel holds its own references to descriptors in flight.
                        out.fds.clear();
                    }
                    if out.sent == out.bytes.len() {
                        self.queue.pop_front();
                    }
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return Ok(()),
                Err(e) => return Err(Error::os("send", e)),
            }
        }
        Ok(())
    }
}

/// Wait until `fd` is ready for `events` or the deadline passes (Timeout).
pub fn wait_fd(fd: BorrowedFd<'_>, events: PollFlags, deadline: Option<Instant>) -> Result<()> {
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::new(
                        ErrorCode::Timeout,
                        "timed out waiting on the socket",
                    ));
                }
                PollTimeout::try_from(left.as_millis().clamp(1, i32::MAX as u128) as i32)
                    .unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(fd, events)];
        match poll(&mut fds, timeout) {
            Ok(0) => continue,
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(Error::os("poll", e)),
        }
    }
}

/// Receive into `buf`, collecting any descriptors. Returns the bytes read (0 = EOF).
fn recv_some(sock: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<usize> {
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
    loop {
        let mut iov = [IoSliceMut::new(buf)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
                for c in msg
                    .cmsgs()
                    .map_err(|e| Error::os("recvmsg control data", e))?
                {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: the kernel just installed these descriptors for us.
                        fds.extend(
                            raw.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                if truncated {
                    return Err(Error::protocol(format!(
                        "peer sent more descriptors than the {MAX_FDS} a message may carry"
                    )));
                }
                return Ok(msg.bytes);
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(Error::os("recvmsg", e)),
        }
    }
}

/// Blocking receive of one whole message (and its descriptors) before `deadline`.
/// EOF before any byte is `Disconnected`; EOF inside a message is a protocol error.
pub fn recv(sock: BorrowedFd<'_>, deadline: Option<Instant>) -> Result<(Message, Vec<OwnedFd>)> {
    let mut fds = Vec::new();
    let mut header = [0u8; HEADER_LEN];
    read_exact(sock, &mut header, deadline, &mut fds, true)?;
    let (msg_type, len) = tlv::decode_header(&header)?;
    let mut payload = vec![0u8; len];
    read_exact(sock, &mut payload, deadline, &mut fds, false)?;
    if fds.len() > MAX_FDS {
        return Err(Error::protocol(format!(
            "{} descriptors received; at most {MAX_FDS}",
            fds.len()
        )));
    }
    let msg = tlv::decode_payload(msg_type, &payload)?;
    if !matches!(
        msg,
        Message::VmmFds(_) | Message::AckPage(_) | Message::GopStore(_)
    ) && !fds.is_empty()
    {
        return Err(Error::protocol(format!(
            "{} arrived with descriptors attached",
            msg.name()
        )));
    }
    Ok((msg, fds))
}

fn read_exact(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    deadline: Option<Instant>,
    fds: &mut Vec<OwnedFd>,
    at_message_start: bool,
) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        wait_fd(sock, PollFlags::POLLIN, deadline)?;
        match recv_some(sock, &mut buf[got..], fds) {
            Ok(0) if got == 0 && at_message_start => {
                return Err(Error::new(
                    ErrorCode::Disconnected,
                    "the publisher closed the connection",
                ))
            }
            Ok(0) => {
                return Err(Error::protocol(
                    "connection closed in the middle of a message",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.code() == ErrorCode::Timeout => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Non-blocking accumulation of messages from a peer that may trickle bytes.
/// Descriptors a peer attaches are discarded by the kernel (plain `recv` takes no control
/// data): no message towards a publisher carries any.
#[derive(Default)]
pub struct Inbox {
    buf: Vec<u8>,
}

/// What [`Inbox::pump`] found.
pub enum Pumped {
    /// Messages decoded (possibly none yet).
    Messages(Vec<Message>),
    /// The peer closed the connection.
    Closed,
}

impl Inbox {
    /// Read what is available without blocking and decode every complete message.
    /// A malformed message is an error: the caller drops the peer.
    pub fn pump(&mut self, sock: BorrowedFd<'_>) -> Result<Pumped> {
        let mut chunk = [0u8; 1024];
        let mut closed = false;
        loop {
            match nix::sys::socket::recv(sock.as_raw_fd(), &mut chunk, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf.len() > HEADER_LEN + tlv::MAX_PAYLOAD + chunk.len() {
                        break; // decode below refuses the oversized message
                    }
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => break,
                Err(Errno::ECONNRESET) => {
                    closed = true;
                    break;
                }
                Err(e) => return Err(Error::os("recv", e)),
            }
        }
        let mut out = Vec::new();
        loop {
            if self.buf.len() < HEADER_LEN {
                break;
            }
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&self.buf[..HEADER_LEN]);
            let (msg_type, len) = tlv::decode_header(&header)?;
            if self.buf.len() < HEADER_LEN + len {
                break;
            }
            let msg = tlv::decode_payload(msg_type, &self.buf[HEADER_LEN..HEADER_LEN + len])?;
            self.buf.drain(..HEADER_LEN + len);
            out.push(msg);
        }
        if closed && out.is_empty() {
            if !self.buf.is_empty() {
                return Err(Error::protocol(
                    "connection closed in the middle of a message",
                ));
            }
            return Ok(Pumped::Closed);
        }
        Ok(Pumped::Messages(out))
    }
}

/// Connect to the Unix socket at `path`, giving up at `deadline`: a listener that never
/// accepts (its backlog full, whether by load or by a peer that fills it on purpose) must not
/// hold up a subscriber, a publisher's create or an operator tool. The socket is made
/// non-blocking with SOCK_CLOEXEC; on Linux a non-blocking connect to a full backlog fails
/// with EAGAIN at once (AF_UNIX connects never return EINPROGRESS), so it is tried again after
/// short sleeps until the deadline, then fails with `ErrorKind::TimedOut` naming the path.
/// Other failures are the kernel's, as `UnixStream::connect` reports them (NotFound,
/// ConnectionRefused, PermissionDenied), so callers keep telling them apart. The stream comes
/// back in blocking mode; callers set the mode they need.
pub fn connect_within(path: &std::path::Path, deadline: Instant) -> std::io::Result<UnixStream> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let addr = UnixAddr::new(path).map_err(std::io::Error::from)?;
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(std::io::Error::from)?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match connect(fd.as_raw_fd(), &addr) {
            Ok(()) | Err(Errno::EISCONN) => break,
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => {
                // The listener's backlog is full: it may accept soon (a busy publisher), or
                // never. The socket stays unconnected, so the same one is tried again.
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(never_accepted(path, started));
                }
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(Errno::EINPROGRESS | Errno::EALREADY) => {
                // Not what AF_UNIX does on Linux; handled as for other families: wait for
                // the connect to complete, then read its outcome.
                if wait_fd(fd.as_fd(), PollFlags::POLLOUT, Some(deadline)).is_err() {
                    return Err(never_accepted(path, started));
                }
                let err = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::SocketError)
                    .map_err(std::io::Error::from)?;
                if err != 0 {
                    return Err(std::io::Error::from_raw_os_error(err));
                }
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// What [`connect_within`] says of a listener that did not accept in time.
fn never_accepted(path: &std::path::Path, started: Instant) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "{} did not accept a connection within {} ms (its listener does not accept \
             connections: its backlog is full)",
            path.display(),
            started.elapsed().as_millis()
        ),
    )
}

/// The uid, gid and pid of the process at the other end (SO_PEERCRED).
pub fn peer_credentials(sock: BorrowedFd<'_>) -> Result<(u32, u32, u32)> {
    let cred =
        nix::sys::socket::getsockopt(&sock.as_fd(), nix::sys::socket::sockopt::PeerCredentials)
            .map_err(|e| Error::os("getsockopt SO_PEERCRED", e))?;
    Ok((cred.uid(), cred.gid(), cred.pid() as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "cuframes-sock-{tag}-{}-{:x}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A listener that accepts: connected, in blocking mode, closed on exec.
    #[test]
    fn connects_to_a_listener_in_blocking_mode() {
        let dir = scratch("ok");
        let path = dir.join("s.sock");
        let _l = UnixListener::bind(&path).unwrap();
        let s = connect_within(&path, Instant::now() + Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
        let s = s.unwrap();
        let fl = nix::fcntl::fcntl(&s, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert_eq!(fl & libc::O_NONBLOCK, 0);
        let fd = nix::fcntl::fcntl(&s, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(fd & libc::FD_CLOEXEC, 0);
    }

    /// A listener whose backlog is full never accepts: TimedOut at the deadline, naming the
    /// path; a connect of std (blocking) waits there for ever.
    #[test]
    fn a_full_backlog_times_out_at_the_deadline() {
        let dir = scratch("full");
        let path = dir.join("s.sock");
        let l = UnixListener::bind(&path).unwrap();
        // SAFETY: listen on a socket we own; a second listen only changes the backlog.
        assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
        // Fill it: connections that are never accepted, until one is refused for room.
        let mut held = Vec::new();
        let err = loop {
            match connect_within(&path, Instant::now()) {
                Ok(s) => held.push(s),
                Err(e) => break e,
            }
            assert!(held.len() < 4096, "the backlog never filled");
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        let started = Instant::now();
        let got = connect_within(&path, started + Duration::from_millis(300));
        let took = started.elapsed();
        let _ = std::fs::remove_dir_all(&dir);
        let e = got.expect_err("connected to a full backlog");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }
}
