//! Golden encodings, written out from the tables of protocol-v4.md §3.1–§3.9, §10.9 and R3,
//! R4, R14, R22 — not produced by the encoder.

use super::support::*;
use crate::tlv::*;

#[test]
fn golden_hello_req() {
    // §3.3 with R3 flags = WANTS_FRAMES|WANTS_PACKETS.
    #[rustfmt::skip]
    let expected: &[u8] = &[
        0x01, 0x00, 0x00, 0x00,             // message_type HELLO_REQ
        0x1F, 0x00, 0x00, 0x00,             // payload_length 31
        0x04, 0x00, 0x00, 0x00,             // proto_version 4
        0x03, 0x00, 0x00, 0x00,             // consumer_name_len 3
        b'c', b'a', b'm',                   // consumer_name
        0xFF, 0xFF, 0xFF, 0xFF,             // cuda_device -1
        0x01, 0x00, 0x00, 0x00,             // mode ZERO_COPY
        0x03, 0x00, 0x00, 0x00,             // reserved[0..4] = subscribe_flags (R3)
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // reserved[4..12]
    ];
    let m = Message::HelloReq(HelloReq {
        proto_version: 4,
        consumer_name: "cam".into(),
        cuda_device: -1,
        mode: 1,
        subscribe_flags: 3,
    });
    assert_eq!(enc(&m), expected);
    assert_eq!(decode(expected).unwrap(), m);
}

#[test]
fn golden_hello_resp_with_packet_tail() {
    // §3.4 + §2.1 frame_meta + R4 tail (§10.9 fields after reserved).
    #[rustfmt::skip]
    let expected: &[u8] = &[
        0x02, 0x00, 0x00, 0x00,             // HELLO_RESP
        0x92, 0x00, 0x00, 0x00,             // payload_length 146
        0x00, 0x00, 0x00, 0x00,             // result 0
        0x04, 0x00, 0x00, 0x00,             // proto_version_actual 4
        0x04, 0x00, 0x00, 0x00,             // ring_size 4
        0x00, 0x00, 0x00, 0x00,             // ownership_mode LIBRARY
        // frame_meta (64 bytes)
        0x01, 0x00, 0x00, 0x00,             // 0x00 format NV12
        0x80, 0x07, 0x00, 0x00,             // 0x04 width 1920
        0x38, 0x04, 0x00, 0x00,             // 0x08 height 1080
        0x00, 0x08, 0x00, 0x00,             // 0x0C pitch_y 2048
        0x00, 0x08, 0x00, 0x00,             // 0x10 pitch_uv 2048
        0x0C, 0x00, 0x00, 0x00,             // 0x14 bits_per_pixel 12
        0x00, 0xA0, 0x32, 0x00, 0x00, 0x00, 0x00, 0x00, // 0x18 frame_size_bytes 3317760
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // 0x20 reserved
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0x0D, 0x00, 0x00, 0x00,             // shm_path_len 13
        b'c', b'u', b'f', b'r', b'a', b'm', b'e', b's', b'-', b'c', b'a', b'm', b'1',
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved (12)
        0x15, 0x00, 0x00, 0x00,             // packet_shm_path_len 21
        b'c', b'u', b'f', b'r', b'a', b'm', b'e', b's', b'-', b'c', b'a', b'm', b'1',
        b'-', b'p', b'a', b'c', b'k', b'e', b't', b's',
        0x1B, 0x00, 0x00, 0x00,             // codec_id 27 (AV_CODEC_ID_H264)
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // initial_packet_seq 9
    ];
    let m = Message::HelloResp(hello_resp(
        "cuframes-cam1",
        Some(packets("cuframes-cam1-packets")),
    ));
    assert_eq!(enc(&m), expected);
    assert_eq!(decode(expected).unwrap(), m);
    // Without the tail (R4): the same bytes up to and including reserved.
    let m = Message::HelloResp(hello_resp("cuframes-cam1", None));
    let mut short = expected[..8 + 109].to_vec();
    short[4] = 109;
    assert_eq!(enc(&m), short);
}

#[test]
fn golden_hello_resp_failure() {
    // §3.4 short form: result + reserved.
    #[rustfmt::skip]
    let expected: &[u8] = &[
        0x02, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,
        0xFC, 0xFF, 0xFF, 0xFF,             // result -4 (TOO_MANY)
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
    ];
    let m = Message::HelloResp(HelloResp::failure(-4));
    assert_eq!(enc(&m), expected);
    assert_eq!(decode(expected).unwrap(), m);
}

#[test]
fn golden_subscribe() {
    // §3.5
    #[rustfmt::skip]
    let req: &[u8] = &[
        0x03, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,
        0x04, 0x00, 0x00, 0x00,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let m = Message::SubscribeReq { proto_version: 4 };
    assert_eq!(enc(&m), req);
    assert_eq!(decode(req).unwrap(), m);
    // §3.6
    #[rustfmt::skip]
    let resp: &[u8] = &[
        0x04, 0x00, 0x00, 0x00, 0x1C, 0x00, 0x00, 0x00, // SUBSCRIBE_RESP, 28
        0x00, 0x00, 0x00, 0x00,                         // result 0
        0x05, 0x00, 0x00, 0x00,                         // assigned_bit 5
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // initial_seq
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let m = Message::SubscribeResp(SubscribeResp {
        result: 0,
        assigned_bit: 5,
        initial_seq: 0x0102_0304_0506_0708,
    });
    assert_eq!(enc(&m), resp);
    assert_eq!(decode(resp).unwrap(), m);
}

#[test]
fn golden_vmm_fds() {
    // §3.7 with R14 memory_kind = host memfd.
    #[rustfmt::skip]
    let expected: &[u8] = &[
        0x05, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, // VMM_FDS, 32
        0x04, 0x00, 0x00, 0x00,                         // fd_count 4
        0x00, 0x00, 0x60, 0x00, 0x00, 0x00, 0x00, 0x00, // frame_size_bytes 6 MiB
        0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, // vmm_granularity 2 MiB
        0x01, 0x00, 0x00, 0x00,                         // reserved[0..4] memory_kind 1
        0, 0, 0, 0, 0, 0, 0, 0,                         // reserved[4..12]
    ];
    let m = Message::VmmFds(VmmFds {
        fd_count: 4,
        frame_size_bytes: 6 << 20,
        vmm_granularity: 2 << 20,
        memory_kind: 1,
    });
    assert_eq!(enc(&m), expected);
    assert_eq!(decode(expected).unwrap(), m);
}

#[test]
fn golden_small_messages() {
    // R22: UNSUBSCRIBE is empty.
    let unsubscribe: &[u8] = &[0x10, 0, 0, 0, 0, 0, 0, 0];
    // §3.8: SHUTDOWN reason 2 (upgrade).
    #[rustfmt::skip]
    let shutdown: &[u8] = &[
        0x30, 0, 0, 0, 0x10, 0, 0, 0,
        0x02, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    // R22: PING/PONG carry an 8-byte token.
    let ping: &[u8] = &[
        0xF0, 0, 0, 0, 8, 0, 0, 0, 0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01,
    ];
    let pong: &[u8] = &[
        0xF1, 0, 0, 0, 8, 0, 0, 0, 0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01,
    ];
    // §3.9: ERROR NOT_FOUND "no".
    #[rustfmt::skip]
    let error: &[u8] = &[
        0xFE, 0, 0, 0, 0x16, 0, 0, 0,       // ERROR, 22
        0xFB, 0xFF, 0xFF, 0xFF,             // error_code -5
        0x02, 0, 0, 0,                      // message_len 2
        b'n', b'o',
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // reserved
    ];
    let token = 0x0123_4567_89AB_CDEF;
    let cases = [
        (unsubscribe, Message::Unsubscribe),
        (shutdown, Message::Shutdown { reason: 2 }),
        (ping, Message::Ping { token }),
        (pong, Message::Pong { token }),
        (
            error,
            Message::Error {
                code: -5,
                message: "no".into(),
            },
        ),
    ];
    for (bytes, m) in cases {
        assert_eq!(enc(&m), bytes, "{}", m.name());
        assert_eq!(decode(bytes).unwrap(), m);
    }
}
