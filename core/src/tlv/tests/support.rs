//! Helpers of the TLV tests: frames built by hand, encoding, the example of every message.

use crate::error::ErrorCode;
use crate::tlv::*;

/// A TLV frame: header (type, payload length) + payload.
pub(super) fn frame(msg_type: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(&msg_type.to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

pub(super) fn enc(m: &Message) -> Vec<u8> {
    encode(m).unwrap_or_else(|e| panic!("encode({m:?}) failed: {e}"))
}

pub(super) fn payload_of(m: &Message) -> Vec<u8> {
    enc(m)[HEADER_LEN..].to_vec()
}

/// Decoding must fail with a protocol error.
#[track_caller]
pub(super) fn assert_protocol_err(buf: &[u8]) -> String {
    match decode(buf) {
        Ok(m) => panic!("decoded {m:?} from {buf:02X?}; expected a protocol error"),
        Err(e) => {
            assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
            e.message().to_owned()
        }
    }
}

/// What a message looks like after encode → decode: the failure form of HELLO_RESP keeps
/// only `result` (§3.4); everything else is unchanged.
pub(super) fn normalized(m: &Message) -> Message {
    match m {
        Message::HelloResp(h) if h.result < 0 => Message::HelloResp(HelloResp::failure(h.result)),
        other => other.clone(),
    }
}

pub(super) fn meta_from(bytes: &[u8]) -> FrameMeta {
    FrameMeta::read_from_bytes(bytes).unwrap()
}

pub(super) fn sample_meta() -> FrameMeta {
    FrameMeta {
        format: 1,
        width: 1920,
        height: 1080,
        pitch_y: 2048,
        pitch_uv: 2048,
        bits_per_pixel: 12,
        frame_size_bytes: 2048 * 1080 * 3 / 2,
        reserved: [0; 32],
    }
}

pub(super) fn hello_req(name: &str) -> HelloReq {
    HelloReq {
        proto_version: 4,
        consumer_name: name.to_owned(),
        cuda_device: 0,
        mode: 0,
        subscribe_flags: 0,
    }
}

pub(super) fn hello_resp(shm_path: &str, packets: Option<HelloRespPackets>) -> HelloResp {
    HelloResp {
        result: 0,
        proto_version: 4,
        ring_size: 4,
        ownership_mode: 0,
        meta: sample_meta(),
        shm_path: shm_path.to_owned(),
        publisher_flags: 0,
        packets,
    }
}

pub(super) fn packets(path: &str) -> HelloRespPackets {
    HelloRespPackets {
        packet_shm_path: path.to_owned(),
        codec_id: 27,
        initial_packet_seq: 9,
    }
}

pub(super) fn vmm_fds(fd_count: u32) -> VmmFds {
    VmmFds {
        fd_count,
        frame_size_bytes: 4 << 20,
        vmm_granularity: 2 << 20,
        memory_kind: 0,
    }
}

/// The byte offsets, inside a whole frame, of every u32 length field of an encoding: the
/// header's payload_length and the length prefixes of the variable fields.
pub(super) fn length_field_offsets(m: &Message) -> Vec<usize> {
    let h = HEADER_LEN;
    let mut v = vec![4];
    match m {
        Message::HelloReq(_) => v.push(h + 4),
        Message::HelloResp(r) if r.result >= 0 => {
            let shm_len_at = h + 16 + 64;
            v.push(shm_len_at);
            if r.packets.is_some() {
                v.push(shm_len_at + 4 + r.shm_path.len() + 12);
            }
        }
        Message::Error { .. } => v.push(h + 4),
        _ => {}
    }
    v
}

/// One example of every variant (and of both HELLO_RESP forms).
pub(super) fn examples() -> Vec<Message> {
    vec![
        Message::HelloReq(hello_req("ffmpeg-cam1")),
        Message::HelloReq(hello_req("")),
        Message::HelloResp(hello_resp("cuframes-cam1", None)),
        Message::HelloResp(hello_resp(
            "/cuframes-cam1",
            Some(packets("cuframes-cam1-packets")),
        )),
        Message::HelloResp(hello_resp("", Some(packets("")))),
        Message::HelloResp(HelloResp::failure(-5)),
        Message::SubscribeReq { proto_version: 4 },
        Message::SubscribeResp(SubscribeResp {
            result: 0,
            assigned_bit: 3,
            initial_seq: 42,
        }),
        Message::SubscribeResp(SubscribeResp {
            result: -4,
            assigned_bit: 0,
            initial_seq: 0,
        }),
        Message::VmmFds(vmm_fds(16)),
        Message::Unsubscribe,
        Message::Shutdown { reason: 2 },
        Message::Ping { token: 0xDEAD_BEEF },
        Message::Pong { token: u64::MAX },
        Message::Error {
            code: -7,
            message: "subscriber timed out — ACK missing".to_owned(),
        },
        Message::Error {
            code: -2,
            message: String::new(),
        },
    ]
}
