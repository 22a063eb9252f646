//! The socket messages of §3 as TLV frames: `[type u32][payload_length u32][payload]`.
//!
//! Decoding is strict and total: every length is checked against the bytes actually present
//! before it is used, nothing is allocated beyond [`MAX_PAYLOAD`], names and paths are checked
//! for length and character set, and no input makes it panic (fuzzed: `fuzz/`).
//! Reserved bytes are written as zero and ignored on read (§7.3), except where a resolution
//! gives them a meaning (R3 subscribe flags, R14 memory kind).
//!
//! One file on purpose: each message's fields, its encoding and its checks are read side by
//! side against the tables of the spec, so the types, the encoder and the decoder stay
//! together (about 730 lines); the tests are in `tlv/tests/`.

use zerocopy::FromBytes;

use crate::error::{Error, Result};
use crate::wire::frame::FrameMeta;
use crate::wire::{MAX_CONSUMER_NAME_LEN, MAX_RING_SIZE};

/// Bytes of the TLV header.
pub const HEADER_LEN: usize = 8;
/// Largest payload accepted. The largest legitimate message (HELLO_RESP with two maximal
/// paths) is under 700 bytes; anything bigger is a confused or hostile peer.
pub const MAX_PAYLOAD: usize = 4096;
/// Longest SHM path on the wire (`cuframes-` + 63-byte key + `-packets` + '/').
pub const MAX_SHM_PATH_LEN: usize = 255;
/// Longest ERROR message text.
pub const MAX_ERROR_MESSAGE_LEN: usize = 1024;
/// Small messages (R22) carry at most this much payload; the rest is ignored.
pub const MAX_SMALL_PAYLOAD: usize = 64;
/// SCM_RIGHTS descriptors per VMM_FDS (§3.7): 1..=16.
pub const MAX_FDS: usize = MAX_RING_SIZE;

/// Message type ids (§3.2).
pub mod msg_type {
    /// HELLO_REQ: the subscriber introduces itself.
    pub const HELLO_REQ: u32 = 0x01;
    /// HELLO_RESP: the publisher's answer with the ring's description.
    pub const HELLO_RESP: u32 = 0x02;
    /// SUBSCRIBE_REQ: the subscriber asks for a bit of the ring.
    pub const SUBSCRIBE_REQ: u32 = 0x03;
    /// SUBSCRIBE_RESP: the bit assigned and the sequence number to start from.
    pub const SUBSCRIBE_RESP: u32 = 0x04;
    /// VMM_FDS: the slot descriptors, as SCM_RIGHTS.
    pub const VMM_FDS: u32 = 0x05;
    /// Extension (negotiated): the subscriber's ACK page, one memfd as SCM_RIGHTS.
    pub const ACK_PAGE: u32 = 0x06;
    /// GOP_STORE (extension): the publisher's GOP store for a packet subscriber.
    pub const GOP_STORE: u32 = 0x07;
    /// UNSUBSCRIBE: the subscriber leaves.
    pub const UNSUBSCRIBE: u32 = 0x10;
    /// Legacy v1–v3 EVENT_FD: refused in v4.
    pub const EVENT_FD_LEGACY: u32 = 0x20;
    /// SHUTDOWN: the publisher ends the stream.
    pub const SHUTDOWN: u32 = 0x30;
    /// PING: a liveness probe, answered by PONG with the same token.
    pub const PING: u32 = 0xF0;
    /// PONG: the answer to a PING.
    pub const PONG: u32 = 0xF1;
    /// ERROR: an error code and its text; the connection ends.
    pub const ERROR: u32 = 0xFE;
}

/// HELLO_REQ (§3.3, R3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloReq {
    /// The protocol version the subscriber speaks (`PROTOCOL_VERSION`).
    pub proto_version: u32,
    /// The subscriber's name, shown by the tool (at most 31 bytes).
    pub consumer_name: String,
    /// The CUDA device the subscriber reads on, or -1 for host memory.
    pub cuda_device: i32,
    /// How the subscriber reads: COPY or ZERO_COPY (`wire::SubscriberMode`).
    pub mode: u32,
    /// R3: first 4 bytes of the trailing reserved field; 0 = frames only.
    pub subscribe_flags: u32,
}

/// The packet-ring tail of HELLO_RESP (§10.9, R4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloRespPackets {
    /// Empty = the publisher has no packet ring.
    pub packet_shm_path: String,
    /// The codec of the packets (`AV_CODEC_ID_*`).
    pub codec_id: u32,
    /// The packet ring's `global_seq` when the response was sent: where reading starts.
    pub initial_packet_seq: u64,
}

/// HELLO_RESP (§3.4). A failed response (`result < 0`) is the short form: result + reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloResp {
    /// 0, or a negative error code (then only this field is sent).
    pub result: i32,
    /// The protocol version the publisher speaks.
    pub proto_version: u32,
    /// Slots in the frame ring (1..=16).
    pub ring_size: u32,
    /// The policy of the ring (`wire::Policy`): DROP_OLDEST or STRICT_WAIT.
    pub ownership_mode: u32,
    /// The frames' format, size and planes.
    pub meta: FrameMeta,
    /// The frame SHM's name relative to /dev/shm (or a generation name of it).
    pub shm_path: String,
    /// Extension: the first 4 of the 12 reserved bytes after `shm_path` (`PUBLISHER_*`
    /// flags; 0 from a plain v4 publisher).
    pub publisher_flags: u32,
    /// `None` when the payload ends right after `reserved` (R4).
    pub packets: Option<HelloRespPackets>,
}

impl HelloResp {
    /// The short failure form of §3.4.
    pub fn failure(result: i32) -> HelloResp {
        HelloResp {
            result,
            proto_version: 0,
            ring_size: 0,
            ownership_mode: 0,
            meta: FrameMeta::default(),
            shm_path: String::new(),
            publisher_flags: 0,
            packets: None,
        }
    }
}

/// SUBSCRIBE_RESP (§3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribeResp {
    /// 0, or a negative error code.
    pub result: i32,
    /// The subscriber's bit in the ACK bitmaps (1..=31 on success).
    pub assigned_bit: u32,
    /// The frame ring's `global_seq` at SUBSCRIBE: frames after it are this subscriber's.
    pub initial_seq: u64,
}

/// VMM_FDS (§3.7, R14, R20); the descriptors travel beside it as SCM_RIGHTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmmFds {
    /// Descriptors beside the message, one per slot (1..=16).
    pub fd_count: u32,
    /// Bytes to map per slot.
    pub frame_size_bytes: u64,
    /// The publisher's allocation granularity (VMM granularity, or the page size).
    pub vmm_granularity: u64,
    /// R14: first 4 bytes of reserved; 0 = CUDA VMM, 1 = host memfd.
    pub memory_kind: u32,
}

/// ACK_PAGE (extension, 0x06): sent after VMM_FDS to a subscriber that asked for an ACK page
/// (`SUBSCRIBE_ACK_PAGE`) of a publisher that offers them (`PUBLISHER_ACK_PAGES`); exactly one
/// sealed memfd travels beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckPageMsg {
    /// Always 1.
    pub fd_count: u32,
    /// Size of the memfd (`wire::ack_page::ACK_PAGE_SIZE`).
    pub page_size: u32,
}

/// GOP_STORE (extension, 0x07): sent last in the handshake to a packet subscriber that asked
/// for the GOP store (`SUBSCRIBE_GOP_STORE`) of a publisher that offers it
/// (`PUBLISHER_GOP_STORE`); the sealed memfd of the store travels beside it, or nothing when
/// the publisher keeps no store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GopStoreMsg {
    /// 1 with a store, 0 without.
    pub fd_count: u32,
    /// Size of the store's memfd (0 without one).
    pub store_size: u64,
}

/// Every message of §3.2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// HELLO_REQ.
    HelloReq(HelloReq),
    /// HELLO_RESP.
    HelloResp(HelloResp),
    /// SUBSCRIBE_REQ.
    SubscribeReq {
        /// The protocol version the subscriber speaks.
        proto_version: u32,
    },
    /// SUBSCRIBE_RESP.
    SubscribeResp(SubscribeResp),
    /// VMM_FDS.
    VmmFds(VmmFds),
    /// ACK_PAGE (extension).
    AckPage(AckPageMsg),
    /// GOP_STORE (extension).
    GopStore(GopStoreMsg),
    /// UNSUBSCRIBE.
    Unsubscribe,
    /// SHUTDOWN.
    Shutdown {
        /// Why the publisher ends (`wire::ShutdownReason`).
        reason: u32,
    },
    /// PING.
    Ping {
        /// Echoed by the PONG.
        token: u64,
    },
    /// PONG.
    Pong {
        /// The token of the PING answered.
        token: u64,
    },
    /// ERROR.
    Error {
        /// A negative error code (`ErrorCode`).
        code: i32,
        /// What went wrong, in words (at most 1024 bytes).
        message: String,
    },
}

impl Message {
    /// The message's type id (`msg_type`).
    pub fn type_id(&self) -> u32 {
        match self {
            Message::HelloReq(_) => msg_type::HELLO_REQ,
            Message::HelloResp(_) => msg_type::HELLO_RESP,
            Message::SubscribeReq { .. } => msg_type::SUBSCRIBE_REQ,
            Message::SubscribeResp(_) => msg_type::SUBSCRIBE_RESP,
            Message::VmmFds(_) => msg_type::VMM_FDS,
            Message::AckPage(_) => msg_type::ACK_PAGE,
            Message::GopStore(_) => msg_type::GOP_STORE,
            Message::Unsubscribe => msg_type::UNSUBSCRIBE,
            Message::Shutdown { .. } => msg_type::SHUTDOWN,
            Message::Ping { .. } => msg_type::PING,
            Message::Pong { .. } => msg_type::PONG,
            Message::Error { .. } => msg_type::ERROR,
        }
    }

    /// The message's name ("HELLO_REQ", ...), for errors and logs.
    pub fn name(&self) -> &'static str {
        type_name(self.type_id())
    }
}

/// The name of a message type, for errors and logs.
pub fn type_name(id: u32) -> &'static str {
    match id {
        msg_type::HELLO_REQ => "HELLO_REQ",
        msg_type::HELLO_RESP => "HELLO_RESP",
        msg_type::SUBSCRIBE_REQ => "SUBSCRIBE_REQ",
        msg_type::SUBSCRIBE_RESP => "SUBSCRIBE_RESP",
        msg_type::VMM_FDS => "VMM_FDS",
        msg_type::ACK_PAGE => "ACK_PAGE",
        msg_type::GOP_STORE => "GOP_STORE",
        msg_type::UNSUBSCRIBE => "UNSUBSCRIBE",
        msg_type::EVENT_FD_LEGACY => "EVENT_FD (legacy)",
        msg_type::SHUTDOWN => "SHUTDOWN",
        msg_type::PING => "PING",
        msg_type::PONG => "PONG",
        msg_type::ERROR => "ERROR",
        _ => "unknown",
    }
}

// ---------------------------------------------------------------------------------------
// Encoding

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    /// A u32 length followed by the bytes.
    fn string(&mut self, s: &str) -> &mut Self {
        self.u32(s.len() as u32).bytes(s.as_bytes())
    }
}

/// Encode a message as a whole TLV frame. Fails (InvalidArg) when a field breaks the limits
/// that a decoder enforces, so that we never send what a strict peer must refuse.
pub fn encode(msg: &Message) -> Result<Vec<u8>> {
    validate_outgoing(msg)?;
    let mut w = Writer(Vec::with_capacity(64));
    w.u32(msg.type_id()).u32(0);
    match msg {
        Message::HelloReq(h) => {
            w.u32(h.proto_version)
                .string(&h.consumer_name)
                .i32(h.cuda_device)
                .u32(h.mode)
                .u32(h.subscribe_flags)
                .zeros(8);
        }
        Message::HelloResp(h) if h.result < 0 => {
            w.i32(h.result).zeros(12);
        }
        Message::HelloResp(h) => {
            w.i32(h.result)
                .u32(h.proto_version)
                .u32(h.ring_size)
                .u32(h.ownership_mode)
                .bytes(zerocopy::IntoBytes::as_bytes(&h.meta))
                .string(&h.shm_path)
                .u32(h.publisher_flags)
                .zeros(8);
            if let Some(p) = &h.packets {
                w.string(&p.packet_shm_path)
                    .u32(p.codec_id)
                    .u64(p.initial_packet_seq);
            }
        }
        Message::SubscribeReq { proto_version } => {
            w.u32(*proto_version).zeros(12);
        }
        Message::SubscribeResp(s) => {
            w.i32(s.result)
                .u32(s.assigned_bit)
                .u64(s.initial_seq)
                .zeros(12);
        }
        Message::VmmFds(v) => {
            w.u32(v.fd_count)
                .u64(v.frame_size_bytes)
                .u64(v.vmm_granularity)
                .u32(v.memory_kind)
                .zeros(8);
        }
        Message::AckPage(a) => {
            w.u32(a.fd_count).u32(a.page_size).zeros(8);
        }
        Message::GopStore(g) => {
            w.u32(g.fd_count).zeros(4).u64(g.store_size);
        }
        Message::Unsubscribe => {}
        Message::Shutdown { reason } => {
            w.u32(*reason).zeros(12);
        }
        Message::Ping { token } | Message::Pong { token } => {
            w.u64(*token);
        }
        Message::Error { code, message } => {
            w.i32(*code).string(message).zeros(12);
        }
    }
    let payload_len = (w.0.len() - HEADER_LEN) as u32;
    w.0[4..8].copy_from_slice(&payload_len.to_le_bytes());
    Ok(w.0)
}

fn validate_outgoing(msg: &Message) -> Result<()> {
    // The checks are the decoder's (Protocol errors); an outgoing message that fails one is
    // the caller's mistake, so every failure is reported as InvalidArg.
    let check = || -> Result<()> {
        match msg {
            Message::HelloReq(h) => check_consumer_name(h.consumer_name.as_bytes()).map(|_| ()),
            Message::HelloResp(h) if h.result >= 0 => {
                check_shm_path(h.shm_path.as_bytes(), "shm_path")?;
                if let Some(p) = &h.packets {
                    check_shm_path(p.packet_shm_path.as_bytes(), "packet_shm_path")?;
                }
                if h.ring_size as usize > MAX_RING_SIZE {
                    return Err(Error::invalid(format!(
                        "HELLO_RESP: ring_size {} exceeds {MAX_RING_SIZE}",
                        h.ring_size
                    )));
                }
                Ok(())
            }
            Message::SubscribeResp(s) if s.result == 0 && !(1..=31).contains(&s.assigned_bit) => {
                Err(Error::invalid(format!(
                    "SUBSCRIBE_RESP: assigned_bit {} is not in 1..31",
                    s.assigned_bit
                )))
            }
            Message::VmmFds(v) if v.frame_size_bytes == 0 => {
                Err(Error::invalid("VMM_FDS: frame_size_bytes is 0"))
            }
            Message::VmmFds(v) => check_fd_count(v.fd_count),
            Message::AckPage(a) => check_ack_page(a),
            Message::GopStore(g) => check_gop_store(g),
            Message::Error { message, .. } if message.len() > MAX_ERROR_MESSAGE_LEN => {
                Err(Error::invalid(format!(
                    "ERROR message is {} bytes; at most {MAX_ERROR_MESSAGE_LEN}",
                    message.len()
                )))
            }
            _ => Ok(()),
        }
    };
    check().map_err(|e| Error::invalid(e.message().to_owned()))
}

// ---------------------------------------------------------------------------------------
// Decoding

/// Parse a TLV header: (type, payload_length), refusing oversized payloads before anything
/// is read or allocated.
pub fn decode_header(header: &[u8; HEADER_LEN]) -> Result<(u32, usize)> {
    let msg_type = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(Error::protocol(format!(
            "{} (0x{msg_type:02X}) declares a {len}-byte payload; at most {MAX_PAYLOAD} accepted",
            type_name(msg_type)
        )));
    }
    Ok((msg_type, len))
}

/// Decode one whole frame held in `buf`: the header's length must match the bytes present.
pub fn decode(buf: &[u8]) -> Result<Message> {
    let header: &[u8; HEADER_LEN] = buf
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| {
            Error::protocol(format!("truncated TLV header: {} of 8 bytes", buf.len()))
        })?;
    let (msg_type, len) = decode_header(header)?;
    let payload = &buf[HEADER_LEN..];
    if payload.len() != len {
        return Err(Error::protocol(format!(
            "{}: header declares {len} payload bytes but {} are present",
            type_name(msg_type),
            payload.len()
        )));
    }
    decode_payload(msg_type, payload)
}

/// A bounds-checked cursor over a payload.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| {
                Error::protocol(format!(
                    "{}: truncated at {field} (needs {n} bytes at offset {}, payload is {})",
                    self.what,
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self, field: &str) -> Result<u32> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self, field: &str) -> Result<i32> {
        Ok(self.u32(field)? as i32)
    }
    fn u64(&mut self, field: &str) -> Result<u64> {
        let b = self.take(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A u32 length then that many bytes, with the length capped before it is trusted.
    fn lstring(&mut self, field: &str, max: usize) -> Result<&'a [u8]> {
        let len = self.u32(field)? as usize;
        if len > max {
            return Err(Error::protocol(format!(
                "{}: {field} length {len} exceeds {max}",
                self.what
            )));
        }
        self.take(len, field)
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn finish(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(Error::protocol(format!(
                "{}: {} unexpected trailing bytes",
                self.what,
                self.remaining()
            )));
        }
        Ok(())
    }
}

/// Decode a payload of a known type.
pub fn decode_payload(msg_type: u32, payload: &[u8]) -> Result<Message> {
    if payload.len() > MAX_PAYLOAD {
        return Err(Error::protocol(format!(
            "payload of {} bytes exceeds {MAX_PAYLOAD}",
            payload.len()
        )));
    }
    let mut r = Reader {
        buf: payload,
        pos: 0,
        what: type_name(msg_type),
    };
    let msg = match msg_type {
        msg_type::HELLO_REQ => {
            let proto_version = r.u32("proto_version")?;
            let name = r.lstring("consumer_name", MAX_CONSUMER_NAME_LEN)?;
            let consumer_name = check_consumer_name(name)?;
            let cuda_device = r.i32("cuda_device")?;
            let mode = r.u32("mode")?;
            let subscribe_flags = r.u32("reserved/subscribe_flags")?;
            r.take(8, "reserved")?;
            r.finish()?;
            Message::HelloReq(HelloReq {
                proto_version,
                consumer_name,
                cuda_device,
                mode,
                subscribe_flags,
            })
        }
        msg_type::HELLO_RESP => decode_hello_resp(&mut r)?,
        msg_type::SUBSCRIBE_REQ => {
            let proto_version = r.u32("proto_version")?;
            r.take(12, "reserved")?;
            r.finish()?;
            Message::SubscribeReq { proto_version }
        }
        msg_type::SUBSCRIBE_RESP => {
            let result = r.i32("result")?;
            let assigned_bit = r.u32("assigned_bit")?;
            let initial_seq = r.u64("initial_seq")?;
            r.take(12, "reserved")?;
            r.finish()?;
            if result == 0 && !(1..=31).contains(&assigned_bit) {
                return Err(Error::protocol(format!(
                    "SUBSCRIBE_RESP: assigned_bit {assigned_bit} is not in 1..31"
                )));
            }
            Message::SubscribeResp(SubscribeResp {
                result,
                assigned_bit,
                initial_seq,
            })
        }
        msg_type::ACK_PAGE => {
            let a = AckPageMsg {
                fd_count: r.u32("fd_count")?,
                page_size: r.u32("page_size")?,
            };
            r.take(8, "reserved")?;
            r.finish()?;
            check_ack_page(&a)?;
            Message::AckPage(a)
        }
        msg_type::GOP_STORE => {
            let fd_count = r.u32("fd_count")?;
            r.take(4, "reserved")?;
            let g = GopStoreMsg {
                fd_count,
                store_size: r.u64("store_size")?,
            };
            r.finish()?;
            check_gop_store(&g)?;
            Message::GopStore(g)
        }
        msg_type::VMM_FDS => {
            let fd_count = r.u32("fd_count")?;
            check_fd_count(fd_count)?;
            let frame_size_bytes = r.u64("frame_size_bytes")?;
            let vmm_granularity = r.u64("vmm_granularity")?;
            let memory_kind = r.u32("reserved/memory_kind")?;
            r.take(8, "reserved")?;
            r.finish()?;
            if frame_size_bytes == 0 {
                return Err(Error::protocol("VMM_FDS: frame_size_bytes is 0"));
            }
            Message::VmmFds(VmmFds {
                fd_count,
                frame_size_bytes,
                vmm_granularity,
                memory_kind,
            })
        }
        msg_type::UNSUBSCRIBE => {
            check_small(payload, "UNSUBSCRIBE")?;
            Message::Unsubscribe
        }
        msg_type::SHUTDOWN => {
            let reason = r.u32("reason")?;
            r.take(12, "reserved")?;
            r.finish()?;
            Message::Shutdown { reason }
        }
        msg_type::PING | msg_type::PONG => {
            check_small(payload, type_name(msg_type))?;
            let token = r.u64("token")?;
            if msg_type == msg_type::PING {
                Message::Ping { token }
            } else {
                Message::Pong { token }
            }
        }
        msg_type::ERROR => {
            let code = r.i32("error_code")?;
            let text = r.lstring("message", MAX_ERROR_MESSAGE_LEN)?;
            let message = std::str::from_utf8(text)
                .map_err(|_| Error::protocol("ERROR: message is not UTF-8"))?
                .to_owned();
            r.take(12, "reserved")?;
            r.finish()?;
            Message::Error { code, message }
        }
        msg_type::EVENT_FD_LEGACY => {
            return Err(Error::protocol(
                "EVENT_FD (0x20) is a v1–v3 message, not part of protocol v4",
            ))
        }
        other => {
            return Err(Error::protocol(format!(
                "unknown message type 0x{other:02X}"
            )))
        }
    };
    Ok(msg)
}

fn decode_hello_resp(r: &mut Reader<'_>) -> Result<Message> {
    let result = r.i32("result")?;
    if result < 0 && r.remaining() == 12 {
        r.take(12, "reserved")?;
        return Ok(Message::HelloResp(HelloResp::failure(result)));
    }
    let proto_version = r.u32("proto_version_actual")?;
    let ring_size = r.u32("ring_size")?;
    let ownership_mode = r.u32("ownership_mode")?;
    let meta_bytes = r.take(64, "frame_meta")?;
    let meta = FrameMeta::read_from_bytes(meta_bytes)
        .map_err(|_| Error::protocol("HELLO_RESP: frame_meta"))?;
    let shm_path = check_shm_path(r.lstring("shm_path", MAX_SHM_PATH_LEN)?, "shm_path")?;
    let publisher_flags = r.u32("reserved/publisher_flags")?;
    r.take(8, "reserved")?;
    let packets = if r.remaining() == 0 {
        None
    } else {
        let path = check_shm_path(
            r.lstring("packet_shm_path", MAX_SHM_PATH_LEN)?,
            "packet_shm_path",
        )?;
        let codec_id = r.u32("codec_id")?;
        let initial_packet_seq = r.u64("initial_packet_seq")?;
        Some(HelloRespPackets {
            packet_shm_path: path,
            codec_id,
            initial_packet_seq,
        })
    };
    r.finish()?;
    if result >= 0 && ring_size as usize > MAX_RING_SIZE {
        return Err(Error::protocol(format!(
            "HELLO_RESP: ring_size {ring_size} exceeds {MAX_RING_SIZE}"
        )));
    }
    Ok(Message::HelloResp(HelloResp {
        result,
        proto_version,
        ring_size,
        ownership_mode,
        meta,
        shm_path,
        publisher_flags,
        packets,
    }))
}

fn check_small(payload: &[u8], what: &str) -> Result<()> {
    if payload.len() > MAX_SMALL_PAYLOAD {
        return Err(Error::protocol(format!(
            "{what}: {} payload bytes; at most {MAX_SMALL_PAYLOAD}",
            payload.len()
        )));
    }
    Ok(())
}

fn check_ack_page(a: &AckPageMsg) -> Result<()> {
    if a.fd_count != 1 || a.page_size as usize != crate::wire::ack_page::ACK_PAGE_SIZE {
        return Err(Error::protocol(format!(
            "ACK_PAGE: fd_count {} and page_size {} (expected 1 and {})",
            a.fd_count,
            a.page_size,
            crate::wire::ack_page::ACK_PAGE_SIZE
        )));
    }
    Ok(())
}

fn check_gop_store(g: &GopStoreMsg) -> Result<()> {
    if g.fd_count > 1 || (g.fd_count == 0) != (g.store_size == 0) {
        return Err(Error::protocol(format!(
            "GOP_STORE: fd_count {} with store_size {} (expected 1 and a size, or 0 and 0)",
            g.fd_count, g.store_size
        )));
    }
    Ok(())
}

fn check_fd_count(n: u32) -> Result<()> {
    if n == 0 || n as usize > MAX_FDS {
        return Err(Error::protocol(format!(
            "VMM_FDS: fd_count {n} is not in 1..{MAX_FDS}"
        )));
    }
    Ok(())
}

/// Consumer names: printable ASCII, at most 31 bytes (they are stored in a 32-byte field).
fn check_consumer_name(name: &[u8]) -> Result<String> {
    if name.len() > MAX_CONSUMER_NAME_LEN {
        return Err(Error::protocol(format!(
            "consumer_name is {} bytes; at most {MAX_CONSUMER_NAME_LEN}",
            name.len()
        )));
    }
    if let Some(b) = name.iter().find(|b| !(0x20..0x7F).contains(*b)) {
        return Err(Error::protocol(format!(
            "consumer_name contains byte 0x{b:02X}; printable ASCII only"
        )));
    }
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// SHM paths: `[A-Za-z0-9_-]` and an optional leading '/', at most 255 bytes (R19), with
/// an optional generation suffix: '.' and 16 lowercase hex digits (`wire::generation::split_generation`).
fn check_shm_path(path: &[u8], field: &str) -> Result<String> {
    if path.len() > MAX_SHM_PATH_LEN {
        return Err(Error::protocol(format!(
            "{field} is {} bytes; at most {MAX_SHM_PATH_LEN}",
            path.len()
        )));
    }
    let body = path.strip_prefix(b"/").unwrap_or(path);
    let body = match std::str::from_utf8(body).map(crate::wire::generation::split_generation) {
        Ok((base, Some(_))) => base.as_bytes(),
        _ => body,
    };
    if let Some(b) = body
        .iter()
        .find(|b| !(b.is_ascii_alphanumeric() || **b == b'_' || **b == b'-'))
    {
        return Err(Error::protocol(format!(
            "{field} contains byte 0x{b:02X}; only [A-Za-z0-9_-] allowed"
        )));
    }
    Ok(String::from_utf8_lossy(path).into_owned())
}

#[cfg(test)]
mod tests;
