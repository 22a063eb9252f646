//! Tests of the TLV codec (§3, R3, R4, R14, R19, R22).
//!
//! - property-based round trips of every message with arbitrary valid fields;
//! - totality: arbitrary bytes, every truncation and every corrupted length field give `Err`
//!   (or, for arbitrary bytes, an `Ok` message that re-encodes to itself), never a panic;
//! - one unit test per validation rule;
//! - golden encodings written out byte by byte from the tables of `protocol-v4.md`, so the
//!   layout is checked against the spec and not against the encoder.

use proptest::prelude::*;

use super::*;
use crate::error::ErrorCode;

// ---------------------------------------------------------------------------------------
// Helpers

/// A TLV frame: header (type, payload length) + payload.
fn frame(msg_type: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len());
    v.extend_from_slice(&msg_type.to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

fn enc(m: &Message) -> Vec<u8> {
    encode(m).unwrap_or_else(|e| panic!("encode({m:?}) failed: {e}"))
}

fn payload_of(m: &Message) -> Vec<u8> {
    enc(m)[HEADER_LEN..].to_vec()
}

/// Decoding must fail with a protocol error.
#[track_caller]
fn assert_protocol_err(buf: &[u8]) -> String {
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
fn normalized(m: &Message) -> Message {
    match m {
        Message::HelloResp(h) if h.result < 0 => Message::HelloResp(HelloResp::failure(h.result)),
        other => other.clone(),
    }
}

fn meta_from(bytes: &[u8]) -> FrameMeta {
    FrameMeta::read_from_bytes(bytes).unwrap()
}

fn sample_meta() -> FrameMeta {
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

fn hello_req(name: &str) -> HelloReq {
    HelloReq {
        proto_version: 4,
        consumer_name: name.to_owned(),
        cuda_device: 0,
        mode: 0,
        subscribe_flags: 0,
    }
}

fn hello_resp(shm_path: &str, packets: Option<HelloRespPackets>) -> HelloResp {
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

fn packets(path: &str) -> HelloRespPackets {
    HelloRespPackets {
        packet_shm_path: path.to_owned(),
        codec_id: 27,
        initial_packet_seq: 9,
    }
}

fn vmm_fds(fd_count: u32) -> VmmFds {
    VmmFds {
        fd_count,
        frame_size_bytes: 4 << 20,
        vmm_granularity: 2 << 20,
        memory_kind: 0,
    }
}

/// The byte offsets, inside a whole frame, of every u32 length field of an encoding: the
/// header's payload_length and the length prefixes of the variable fields.
fn length_field_offsets(m: &Message) -> Vec<usize> {
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
fn examples() -> Vec<Message> {
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

// ---------------------------------------------------------------------------------------
// Strategies: arbitrary *valid* messages

fn consumer_name() -> impl Strategy<Value = String> {
    "[ -~]{0,31}"
}

fn shm_path() -> impl Strategy<Value = String> {
    prop_oneof!["[A-Za-z0-9_-]{0,255}", "/[A-Za-z0-9_-]{0,254}"]
}

/// UTF-8 text of at most 1024 bytes: arbitrary chars (≤ 4 bytes each) or long ASCII.
fn error_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<char>(), 0..=256).prop_map(|c| c.into_iter().collect()),
        "[ -~]{0,1024}",
    ]
}

fn frame_meta() -> impl Strategy<Value = FrameMeta> {
    prop::collection::vec(any::<u8>(), 64).prop_map(|b| meta_from(&b))
}

fn packets_tail() -> impl Strategy<Value = HelloRespPackets> {
    (shm_path(), any::<u32>(), any::<u64>()).prop_map(|(packet_shm_path, codec_id, seq)| {
        HelloRespPackets {
            packet_shm_path,
            codec_id,
            initial_packet_seq: seq,
        }
    })
}

fn hello_resp_ok() -> impl Strategy<Value = HelloResp> {
    (
        0..=i32::MAX,
        any::<u32>(),
        0..=MAX_RING_SIZE as u32,
        any::<u32>(),
        frame_meta(),
        shm_path(),
        any::<u32>(),
        prop::option::of(packets_tail()),
    )
        .prop_map(
            |(
                result,
                proto_version,
                ring_size,
                ownership_mode,
                meta,
                shm_path,
                publisher_flags,
                packets,
            )| {
                HelloResp {
                    result,
                    proto_version,
                    ring_size,
                    ownership_mode,
                    meta,
                    shm_path,
                    publisher_flags,
                    packets,
                }
            },
        )
}

fn subscribe_resp() -> impl Strategy<Value = SubscribeResp> {
    prop_oneof![
        (1..=31u32, any::<u64>()).prop_map(|(assigned_bit, initial_seq)| SubscribeResp {
            result: 0,
            assigned_bit,
            initial_seq,
        }),
        (
            any::<i32>().prop_filter("nonzero", |r| *r != 0),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(|(result, assigned_bit, initial_seq)| SubscribeResp {
                result,
                assigned_bit,
                initial_seq,
            }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            any::<u32>(),
            consumer_name(),
            any::<i32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(proto_version, consumer_name, cuda_device, mode, flags)| {
                Message::HelloReq(HelloReq {
                    proto_version,
                    consumer_name,
                    cuda_device,
                    mode,
                    subscribe_flags: flags,
                })
            }),
        hello_resp_ok().prop_map(Message::HelloResp),
        (i32::MIN..0).prop_map(|r| Message::HelloResp(HelloResp::failure(r))),
        any::<u32>().prop_map(|proto_version| Message::SubscribeReq { proto_version }),
        subscribe_resp().prop_map(Message::SubscribeResp),
        Just(Message::AckPage(AckPageMsg {
            fd_count: 1,
            page_size: crate::wire::ack_page::ACK_PAGE_SIZE as u32,
        })),
        (1..=MAX_FDS as u32, 1..=u64::MAX, any::<u64>(), any::<u32>()).prop_map(
            |(fd_count, frame_size_bytes, vmm_granularity, memory_kind)| {
                Message::VmmFds(VmmFds {
                    fd_count,
                    frame_size_bytes,
                    vmm_granularity,
                    memory_kind,
                })
            }
        ),
        Just(Message::Unsubscribe),
        any::<u32>().prop_map(|reason| Message::Shutdown { reason }),
        any::<u64>().prop_map(|token| Message::Ping { token }),
        any::<u64>().prop_map(|token| Message::Pong { token }),
        (any::<i32>(), error_text()).prop_map(|(code, message)| Message::Error { code, message }),
    ]
}

/// Arbitrary messages with *unconstrained* fields (any string, any count): some of them
/// break the limits, and `encode` must then refuse them rather than send them.
fn any_message() -> impl Strategy<Value = Message> {
    let text = || {
        prop_oneof![
            ".{0,40}",
            "[A-Za-z0-9_/-]{0,260}",
            prop::collection::vec(any::<char>(), 250..300).prop_map(|c| c.into_iter().collect()),
            "[ -~]{1020,1030}",
        ]
    };
    prop_oneof![
        (
            any::<u32>(),
            text(),
            any::<i32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(
                |(proto_version, consumer_name, cuda_device, mode, subscribe_flags)| {
                    Message::HelloReq(HelloReq {
                        proto_version,
                        consumer_name,
                        cuda_device,
                        mode,
                        subscribe_flags,
                    })
                }
            ),
        (
            any::<i32>(),
            any::<u32>(),
            prop_oneof![0..=20u32, any::<u32>()],
            frame_meta(),
            text(),
            prop::option::of((text(), any::<u32>(), any::<u64>())),
        )
            .prop_map(|(result, proto_version, ring_size, meta, shm_path, p)| {
                Message::HelloResp(HelloResp {
                    result,
                    proto_version,
                    ring_size,
                    ownership_mode: 0,
                    meta,
                    shm_path,
                    publisher_flags: 0,
                    packets: p.map(|(path, codec_id, seq)| HelloRespPackets {
                        packet_shm_path: path,
                        codec_id,
                        initial_packet_seq: seq,
                    }),
                })
            }),
        (
            prop_oneof![Just(0i32), any::<i32>()],
            prop_oneof![0..=33u32, any::<u32>()],
            any::<u64>()
        )
            .prop_map(|(result, assigned_bit, initial_seq)| {
                Message::SubscribeResp(SubscribeResp {
                    result,
                    assigned_bit,
                    initial_seq,
                })
            }),
        (
            prop_oneof![0..=18u32, any::<u32>()],
            prop_oneof![Just(0u64), any::<u64>()],
            any::<u64>(),
            any::<u32>()
        )
            .prop_map(
                |(fd_count, frame_size_bytes, vmm_granularity, memory_kind)| {
                    Message::VmmFds(VmmFds {
                        fd_count,
                        frame_size_bytes,
                        vmm_granularity,
                        memory_kind,
                    })
                }
            ),
        (any::<i32>(), text()).prop_map(|(code, message)| Message::Error { code, message }),
        message(),
    ]
}

/// The type ids a decoder knows, plus the legacy and a few unknown ones.
fn some_type() -> impl Strategy<Value = u32> {
    prop_oneof![
        prop::sample::select(vec![
            msg_type::HELLO_REQ,
            msg_type::HELLO_RESP,
            msg_type::SUBSCRIBE_REQ,
            msg_type::SUBSCRIBE_RESP,
            msg_type::VMM_FDS,
            msg_type::UNSUBSCRIBE,
            msg_type::EVENT_FD_LEGACY,
            msg_type::SHUTDOWN,
            msg_type::PING,
            msg_type::PONG,
            msg_type::ERROR,
        ]),
        any::<u32>(),
    ]
}

/// Decode `buf` and, when that succeeds, check that the message is well formed: it
/// re-encodes, and the re-encoding decodes to the same message.
fn check_decoded_is_canonical(buf: &[u8]) -> std::result::Result<(), TestCaseError> {
    let first = decode(buf);
    if buf.len() >= HEADER_LEN {
        let header: [u8; HEADER_LEN] = buf[..HEADER_LEN].try_into().unwrap();
        match decode_header(&header) {
            Ok((t, len)) => {
                let split = decode_payload(t, &buf[HEADER_LEN..]);
                if len == buf.len() - HEADER_LEN {
                    prop_assert_eq!(first.as_ref().ok(), split.as_ref().ok());
                } else {
                    prop_assert!(first.is_err());
                }
            }
            Err(_) => prop_assert!(first.is_err()),
        }
    } else {
        prop_assert!(first.is_err());
    }
    if let Ok(m) = first {
        let again = encode(&m);
        prop_assert!(again.is_ok(), "decoded {:?} does not re-encode", m);
        let again = again.unwrap();
        prop_assert_eq!(decode(&again).ok(), Some(normalized(&m)));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Property tests

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// encode → decode is the identity on valid messages, through `decode` and through the
    /// streaming pair `decode_header` + `decode_payload`.
    #[test]
    fn round_trip(m in message()) {
        let buf = enc(&m);
        prop_assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), m.type_id());
        let header: [u8; HEADER_LEN] = buf[..HEADER_LEN].try_into().unwrap();
        let (t, len) = decode_header(&header).unwrap();
        prop_assert_eq!(t, m.type_id());
        prop_assert_eq!(len, buf.len() - HEADER_LEN);
        prop_assert!(len <= MAX_PAYLOAD);
        prop_assert_eq!(decode_payload(t, &buf[HEADER_LEN..]).unwrap(), m.clone());
        prop_assert_eq!(decode(&buf).unwrap(), m);
    }

    /// Whatever the fields, `encode` either refuses (InvalidArg) or produces a frame that a
    /// strict decoder accepts and decodes back to the message (§3.4 short form aside).
    #[test]
    fn encode_never_sends_what_decode_refuses(m in any_message()) {
        match encode(&m) {
            Ok(buf) => prop_assert_eq!(decode(&buf).ok(), Some(normalized(&m))),
            Err(e) => prop_assert_eq!(e.code(), ErrorCode::InvalidArg),
        }
    }

    /// Arbitrary bytes: no panic; `Ok` only for a well-formed message.
    #[test]
    fn decode_arbitrary_bytes(buf in prop::collection::vec(any::<u8>(), 0..600)) {
        check_decoded_is_canonical(&buf)?;
    }

    /// Arbitrary payloads behind a plausible header (a known type, the right length), so
    /// that the payload parsers themselves see random input.
    #[test]
    fn decode_arbitrary_payloads(
        t in some_type(),
        payload in prop::collection::vec(any::<u8>(), 0..400),
    ) {
        check_decoded_is_canonical(&frame(t, &payload))?;
    }

    /// Valid encodings with random bytes overwritten: no panic, and any `Ok` is canonical.
    #[test]
    fn decode_mutated_encodings(
        m in message(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut buf = enc(&m);
        for (i, b) in edits {
            let i = i.index(buf.len());
            buf[i] = b;
        }
        check_decoded_is_canonical(&buf)?;
    }

    /// Every truncation of every valid encoding is refused. With the header left alone the
    /// length check refuses it; with the header fixed up to the shorter payload the payload
    /// parser must refuse it too, except the one legitimate prefix: a HELLO_RESP cut right
    /// after `reserved` is the same response without a packet ring (R4).
    #[test]
    fn truncations_are_refused(m in message()) {
        let buf = enc(&m);
        for cut in 0..buf.len() {
            let short = &buf[..cut];
            prop_assert!(decode(short).is_err(), "prefix of {} bytes decoded", cut);
            if cut >= HEADER_LEN {
                let fixed = frame(m.type_id(), &short[HEADER_LEN..]);
                match decode(&fixed) {
                    Err(e) => prop_assert_eq!(e.code(), ErrorCode::Protocol),
                    Ok(got) => {
                        let Message::HelloResp(h) = &m else {
                            return Err(TestCaseError::fail(format!(
                                "{cut}-byte prefix of {m:?} decoded as {got:?}"
                            )));
                        };
                        let p = h.packets.as_ref().expect("only the R4 tail may be cut");
                        let tail = 4 + p.packet_shm_path.len() + 4 + 8;
                        prop_assert_eq!(cut, buf.len() - tail);
                        let without = HelloResp { packets: None, ..h.clone() };
                        prop_assert_eq!(got, Message::HelloResp(without));
                    }
                }
            }
        }
    }

    /// Any length field (the header's or a string's) set to another value is refused.
    #[test]
    fn corrupted_length_fields_are_refused(
        m in message(),
        which in any::<prop::sample::Index>(),
        new_len in prop_oneof![0..300u32, any::<u32>()],
        delta in prop_oneof![Just(1i64), Just(-1i64), -20i64..20],
        use_delta in any::<bool>(),
    ) {
        let mut buf = enc(&m);
        let offsets = length_field_offsets(&m);
        let at = offsets[which.index(offsets.len())];
        let old = u32::from_le_bytes(buf[at..at + 4].try_into().unwrap());
        let new = if use_delta { (old as i64 + delta) as u32 } else { new_len };
        prop_assume!(new != old);
        buf[at..at + 4].copy_from_slice(&new.to_le_bytes());
        match decode(&buf) {
            Ok(got) => {
                return Err(TestCaseError::fail(format!(
                    "length at {at} {old} -> {new}: {m:?} decoded as {got:?}"
                )))
            }
            Err(e) => prop_assert_eq!(e.code(), ErrorCode::Protocol),
        }
    }

    /// R22: PING/PONG/UNSUBSCRIBE take up to 64 payload bytes and ignore what follows the
    /// token; more than 64 are refused.
    #[test]
    fn small_messages_ignore_extra_bytes(
        token in any::<u64>(),
        extra in prop::collection::vec(any::<u8>(), 0..=80),
    ) {
        let mut ping = token.to_le_bytes().to_vec();
        ping.extend_from_slice(&extra);
        let ok = ping.len() <= MAX_SMALL_PAYLOAD;
        let got = decode(&frame(msg_type::PING, &ping));
        prop_assert_eq!(got.ok(), ok.then_some(Message::Ping { token }));
        let got = decode(&frame(msg_type::PONG, &ping));
        prop_assert_eq!(got.ok(), ok.then_some(Message::Pong { token }));
        let got = decode(&frame(msg_type::UNSUBSCRIBE, &extra));
        prop_assert_eq!(got.ok(), (extra.len() <= 64).then_some(Message::Unsubscribe));
    }

    /// §7.3: reserved bytes are written as zero and ignored on read (except R3/R14 bytes).
    #[test]
    fn reserved_bytes_are_zero_and_ignored(m in message(), fill in 1..=255u8) {
        let buf = enc(&m);
        // Offsets (in the frame) of the reserved bytes that carry no meaning.
        let h = HEADER_LEN;
        let reserved: Vec<usize> = match &m {
            Message::HelloReq(r) => {
                let at = h + 16 + r.consumer_name.len() + 4;
                (at..at + 8).collect()
            }
            Message::HelloResp(r) if r.result < 0 => (h + 4..h + 16).collect(),
            Message::HelloResp(r) => {
                // The first 4 of the 12 reserved bytes carry publisher_flags (extension).
                let at = h + 16 + 64 + 4 + r.shm_path.len() + 4;
                (at..at + 8).collect()
            }
            Message::SubscribeReq { .. } => (h + 4..h + 16).collect(),
            Message::SubscribeResp(_) => (h + 16..h + 28).collect(),
            Message::VmmFds(_) => (h + 24..h + 32).collect(),
            Message::AckPage(_) => (h + 8..h + 16).collect(),
            Message::Shutdown { .. } => (h + 4..h + 16).collect(),
            Message::Error { message, .. } => {
                let at = h + 8 + message.len();
                (at..at + 12).collect()
            }
            Message::Unsubscribe | Message::Ping { .. } | Message::Pong { .. } => vec![],
        };
        let mut dirty = buf.clone();
        for &i in &reserved {
            prop_assert_eq!(buf[i], 0, "reserved byte {} is not zero", i);
            dirty[i] = fill;
        }
        prop_assert_eq!(decode(&dirty).unwrap(), m);
    }
}

// ---------------------------------------------------------------------------------------
// Unit tests: one per validation rule

#[test]
fn every_example_round_trips() {
    for m in examples() {
        assert_eq!(decode(&enc(&m)).unwrap(), m, "{}", m.name());
    }
}

#[test]
fn header_length_must_match_bytes_present() {
    for m in examples() {
        let buf = enc(&m);
        let mut longer = buf.clone();
        longer.push(0);
        assert!(assert_protocol_err(&longer).contains("present"));
        for declared in [0u32, 1, (buf.len() - HEADER_LEN) as u32 + 1] {
            let mut wrong = buf.clone();
            wrong[4..8].copy_from_slice(&declared.to_le_bytes());
            if declared as usize != buf.len() - HEADER_LEN {
                assert_protocol_err(&wrong);
            }
        }
    }
    for n in 0..HEADER_LEN {
        assert!(assert_protocol_err(&[0u8; HEADER_LEN][..n]).contains("header"));
    }
}

#[test]
fn oversized_payload_is_refused_from_the_header_alone() {
    for len in [MAX_PAYLOAD as u32 + 1, 1 << 20, u32::MAX] {
        let mut header = [0u8; HEADER_LEN];
        header[..4].copy_from_slice(&msg_type::ERROR.to_le_bytes());
        header[4..].copy_from_slice(&len.to_le_bytes());
        let e = decode_header(&header).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Protocol);
        // decode() refuses it on the 8 header bytes alone, before looking for the payload.
        assert!(assert_protocol_err(&header).contains("at most 4096"));
    }
    let mut header = [0u8; HEADER_LEN];
    header[4..].copy_from_slice(&(MAX_PAYLOAD as u32).to_le_bytes());
    assert_eq!(decode_header(&header).unwrap(), (0, MAX_PAYLOAD));
    // The streaming entry point refuses an oversized payload too.
    let big = vec![0u8; MAX_PAYLOAD + 1];
    assert!(decode_payload(msg_type::ERROR, &big).is_err());
}

#[test]
fn consumer_name_limits() {
    let ok = "x".repeat(MAX_CONSUMER_NAME_LEN);
    let m = Message::HelloReq(hello_req(&ok));
    assert_eq!(decode(&enc(&m)).unwrap(), m);

    // Too long: refused by encode (InvalidArg) and, on the wire, by decode (Protocol).
    let long = "x".repeat(MAX_CONSUMER_NAME_LEN + 1);
    let e = encode(&Message::HelloReq(hello_req(&long))).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
    let mut p = 4u32.to_le_bytes().to_vec();
    p.extend_from_slice(&32u32.to_le_bytes());
    p.extend_from_slice(long.as_bytes());
    p.extend_from_slice(&[0; 20]);
    assert!(assert_protocol_err(&frame(msg_type::HELLO_REQ, &p)).contains("consumer_name"));

    // Non-printable bytes: control characters, DEL, high bytes, valid non-ASCII UTF-8.
    for bad in [
        &b"cam\x00"[..],
        b"\x1f",
        b"a\x7fb",
        b"\xff",
        "é".as_bytes(),
        b"tab\t",
    ] {
        let mut p = 4u32.to_le_bytes().to_vec();
        p.extend_from_slice(&(bad.len() as u32).to_le_bytes());
        p.extend_from_slice(bad);
        p.extend_from_slice(&[0; 20]);
        let msg = assert_protocol_err(&frame(msg_type::HELLO_REQ, &p));
        assert!(msg.contains("printable"), "{msg}");
        if let Ok(s) = std::str::from_utf8(bad) {
            let e = encode(&Message::HelloReq(hello_req(s))).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidArg);
        }
    }
    // Space and '~' are the ends of the printable range.
    let m = Message::HelloReq(hello_req(" ~"));
    assert_eq!(decode(&enc(&m)).unwrap(), m);
}

#[test]
fn shm_path_limits() {
    for good in [
        "",
        "/",
        "cuframes-cam1",
        "/cuframes-cam1",
        "A_z-09",
        "cuframes-cam1.0123456789abcdef",
    ] {
        let m = Message::HelloResp(hello_resp(good, Some(packets(good))));
        assert_eq!(decode(&enc(&m)).unwrap(), m);
    }
    let max = "a".repeat(MAX_SHM_PATH_LEN);
    let m = Message::HelloResp(hello_resp(&max, Some(packets(&max))));
    assert_eq!(decode(&enc(&m)).unwrap(), m);
    let max_slash = format!("/{}", "a".repeat(MAX_SHM_PATH_LEN - 1));
    let m = Message::HelloResp(hello_resp(&max_slash, None));
    assert_eq!(decode(&enc(&m)).unwrap(), m);

    let long = "a".repeat(MAX_SHM_PATH_LEN + 1);
    let bad_chars = [
        "a/b",
        "//a",
        "a.b",
        "a b",
        "../x",
        "a\0",
        "é",
        "a/",
        "a.0123456789ABCDEF",
        "a..0123456789abcdef",
        "a/.0123456789abcdef",
    ];
    for bad in bad_chars.iter().copied().chain([long.as_str()]) {
        // In shm_path.
        let m = Message::HelloResp(hello_resp(bad, None));
        assert_eq!(encode(&m).unwrap_err().code(), ErrorCode::InvalidArg);
        let p = hello_resp_payload(bad, None);
        let msg = assert_protocol_err(&frame(msg_type::HELLO_RESP, &p));
        assert!(msg.contains("shm_path"), "{bad:?}: {msg}");
        // In packet_shm_path.
        let m = Message::HelloResp(hello_resp("ok", Some(packets(bad))));
        assert_eq!(encode(&m).unwrap_err().code(), ErrorCode::InvalidArg);
        let p = hello_resp_payload("ok", Some(bad));
        let msg = assert_protocol_err(&frame(msg_type::HELLO_RESP, &p));
        assert!(msg.contains("packet_shm_path"), "{bad:?}: {msg}");
    }
}

/// A HELLO_RESP payload built by hand (§3.4 + R4 tail), for paths `encode` would refuse.
fn hello_resp_payload(path: &str, packet_path: Option<&str>) -> Vec<u8> {
    let mut p = Vec::new();
    for v in [0u32, 4, 4, 0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(&[0; 64]);
    p.extend_from_slice(&(path.len() as u32).to_le_bytes());
    p.extend_from_slice(path.as_bytes());
    p.extend_from_slice(&[0; 12]);
    if let Some(pp) = packet_path {
        p.extend_from_slice(&(pp.len() as u32).to_le_bytes());
        p.extend_from_slice(pp.as_bytes());
        p.extend_from_slice(&27u32.to_le_bytes());
        p.extend_from_slice(&9u64.to_le_bytes());
    }
    p
}

#[test]
fn fd_count_must_be_1_to_16() {
    for n in [1, 2, 15, 16] {
        let m = Message::VmmFds(vmm_fds(n));
        assert_eq!(decode(&enc(&m)).unwrap(), m);
    }
    for n in [0, 17, 1000, u32::MAX] {
        let e = encode(&Message::VmmFds(vmm_fds(n))).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArg);
        let mut p = payload_of(&Message::VmmFds(vmm_fds(1)));
        p[..4].copy_from_slice(&n.to_le_bytes());
        assert!(assert_protocol_err(&frame(msg_type::VMM_FDS, &p)).contains("fd_count"));
    }
}

#[test]
fn legacy_and_unknown_types_are_refused() {
    // EVENT_FD (v1–v3) with the payloads it used to have, and with none.
    for payload in [&[][..], &[0u8; 4], &[0u8; 16]] {
        let msg = assert_protocol_err(&frame(msg_type::EVENT_FD_LEGACY, payload));
        assert!(msg.contains("EVENT_FD"), "{msg}");
    }
    let known = [1, 2, 3, 4, 5, 0x10, 0x30, 0xF0, 0xF1, 0xFE];
    for t in (0..=0x1FFu32).chain([0x100, 0x1_0001, 0x8000_0001, u32::MAX]) {
        if known.contains(&t) {
            continue;
        }
        for payload in [&[][..], &[0u8; 8], &[0u8; 16]] {
            assert_protocol_err(&frame(t, payload));
        }
    }
}

#[test]
fn trailing_bytes_are_refused() {
    // Every fixed-layout message (and HELLO_RESP after its R4 tail) refuses trailing bytes.
    for m in examples() {
        if matches!(
            m,
            Message::Unsubscribe | Message::Ping { .. } | Message::Pong { .. }
        ) {
            continue; // R22: these ignore extra bytes (tested separately).
        }
        let mut p = payload_of(&m);
        p.push(0);
        // (A HELLO_RESP without a tail plus one byte is a truncated R4 tail; the short
        // failure form plus one byte is a truncated full response: refused all the same.)
        assert_protocol_err(&frame(m.type_id(), &p));
        p.extend_from_slice(&[0; 20]);
        assert_protocol_err(&frame(m.type_id(), &p));
    }
    let mut p = payload_of(&Message::Shutdown { reason: 0 });
    p.push(0);
    let msg = assert_protocol_err(&frame(msg_type::SHUTDOWN, &p));
    assert!(msg.contains("trailing"), "{msg}");
}

#[test]
fn r3_subscribe_flags_follow_the_consumer_name() {
    for name in ["", "a", "ffmpeg-cam1", &"n".repeat(31)] {
        let m = Message::HelloReq(HelloReq {
            subscribe_flags: 0xA1B2_C3D4,
            ..hello_req(name)
        });
        let p = payload_of(&m);
        assert_eq!(p.len(), 4 + 4 + name.len() + 4 + 4 + 12);
        let at = 16 + name.len();
        assert_eq!(&p[at..at + 4], &0xA1B2_C3D4u32.to_le_bytes(), "{name:?}");
        // Not at the fixed "+28" of §10.9 (unless the name happens to be 12 bytes).
        assert!(p[at + 4..].iter().all(|b| *b == 0));
        // And decoding reads them from there.
        let mut p2 = p.clone();
        p2[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
        let Message::HelloReq(h) = decode(&frame(msg_type::HELLO_REQ, &p2)).unwrap() else {
            panic!()
        };
        assert_eq!(h.subscribe_flags, 2);
    }
}

#[test]
fn r14_memory_kind_is_the_start_of_vmm_fds_reserved() {
    let m = Message::VmmFds(VmmFds {
        memory_kind: 1,
        ..vmm_fds(4)
    });
    let p = payload_of(&m);
    assert_eq!(p.len(), 32);
    assert_eq!(&p[20..24], &1u32.to_le_bytes());
    assert!(p[24..].iter().all(|b| *b == 0));
    let mut p2 = p.clone();
    p2[20..24].copy_from_slice(&0u32.to_le_bytes());
    let Message::VmmFds(v) = decode(&frame(msg_type::VMM_FDS, &p2)).unwrap() else {
        panic!()
    };
    assert_eq!(v.memory_kind, 0);
}

#[test]
fn r22_small_messages() {
    // The canonical encodings.
    assert_eq!(
        enc(&Message::Unsubscribe),
        frame(msg_type::UNSUBSCRIBE, &[])
    );
    assert_eq!(
        enc(&Message::Ping { token: 5 }),
        frame(msg_type::PING, &5u64.to_le_bytes())
    );
    // Up to 64 bytes accepted, the rest ignored.
    let mut p = 77u64.to_le_bytes().to_vec();
    p.resize(64, 0xEE);
    assert_eq!(
        decode(&frame(msg_type::PING, &p)).unwrap(),
        Message::Ping { token: 77 }
    );
    assert_eq!(
        decode(&frame(msg_type::PONG, &p)).unwrap(),
        Message::Pong { token: 77 }
    );
    assert_eq!(
        decode(&frame(msg_type::UNSUBSCRIBE, &p)).unwrap(),
        Message::Unsubscribe
    );
    // 65 refused.
    p.push(0);
    for t in [msg_type::PING, msg_type::PONG, msg_type::UNSUBSCRIBE] {
        assert!(assert_protocol_err(&frame(t, &p)).contains("at most 64"));
    }
    // PING/PONG need their 8-byte token.
    for n in 0..8 {
        assert_protocol_err(&frame(msg_type::PING, &[1; 8][..n]));
        assert_protocol_err(&frame(msg_type::PONG, &[1; 8][..n]));
    }
}

#[test]
fn hello_resp_forms() {
    // R4: a response ending right after `reserved` has no packet ring.
    let m = Message::HelloResp(hello_resp("cuframes-cam1", None));
    assert_eq!(payload_of(&m).len(), 96 + 13);
    // An empty packet path is still a tail (16 bytes), distinct from no tail.
    let m2 = Message::HelloResp(hello_resp("cuframes-cam1", Some(packets(""))));
    assert_eq!(payload_of(&m2).len(), 96 + 13 + 16);
    assert_ne!(decode(&enc(&m2)).unwrap(), m);
    // A partial tail is refused (1..15 bytes after reserved).
    let full = payload_of(&m2);
    for cut in 96 + 13 + 1..full.len() {
        assert_protocol_err(&frame(msg_type::HELLO_RESP, &full[..cut]));
    }
    // Failure form: exactly result + 12 reserved bytes, encoded for any result < 0 (the
    // other fields are not sent).
    let fail = HelloResp {
        ring_size: 4,
        shm_path: "x".into(),
        ..HelloResp::failure(-5)
    };
    let buf = enc(&Message::HelloResp(fail));
    assert_eq!(buf.len(), HEADER_LEN + 16);
    assert_eq!(
        decode(&buf).unwrap(),
        Message::HelloResp(HelloResp::failure(-5))
    );
    // A full-form failure response is also accepted (§3.4: "may be shorter").
    let mut full_fail = hello_resp("cuframes-cam1", None);
    full_fail.result = -3;
    let mut p = payload_of(&Message::HelloResp(hello_resp("cuframes-cam1", None)));
    p[..4].copy_from_slice(&(-3i32).to_le_bytes());
    assert_eq!(
        decode(&frame(msg_type::HELLO_RESP, &p)).unwrap(),
        Message::HelloResp(full_fail)
    );
    // result >= 0 has no short form.
    let mut short = 0i32.to_le_bytes().to_vec();
    short.extend_from_slice(&[0; 12]);
    assert_protocol_err(&frame(msg_type::HELLO_RESP, &short));
    // A failure payload of a length that is neither form is refused.
    for n in [4usize, 8, 15, 17, 40] {
        let mut p = (-1i32).to_le_bytes().to_vec();
        p.resize(n, 0);
        assert_protocol_err(&frame(msg_type::HELLO_RESP, &p));
    }
}

#[test]
fn ring_size_is_at_most_16() {
    let mut h = hello_resp("cuframes-cam1", None);
    h.ring_size = 16;
    let m = Message::HelloResp(h.clone());
    assert_eq!(decode(&enc(&m)).unwrap(), m);
    h.ring_size = 17;
    assert_eq!(
        encode(&Message::HelloResp(h)).unwrap_err().code(),
        ErrorCode::InvalidArg
    );
    let mut p = payload_of(&m);
    p[8..12].copy_from_slice(&17u32.to_le_bytes());
    assert!(assert_protocol_err(&frame(msg_type::HELLO_RESP, &p)).contains("ring_size"));
}

#[test]
fn assigned_bit_is_1_to_31_on_success() {
    for bit in [0u32, 32, u32::MAX] {
        let s = SubscribeResp {
            result: 0,
            assigned_bit: bit,
            initial_seq: 1,
        };
        assert_eq!(
            encode(&Message::SubscribeResp(s)).unwrap_err().code(),
            ErrorCode::InvalidArg
        );
        let mut p = payload_of(&Message::SubscribeResp(SubscribeResp {
            assigned_bit: 1,
            ..s
        }));
        p[4..8].copy_from_slice(&bit.to_le_bytes());
        assert!(assert_protocol_err(&frame(msg_type::SUBSCRIBE_RESP, &p)).contains("assigned_bit"));
    }
    // A failed SUBSCRIBE_RESP carries no bit.
    let s = Message::SubscribeResp(SubscribeResp {
        result: -4,
        assigned_bit: 0,
        initial_seq: 0,
    });
    assert_eq!(decode(&enc(&s)).unwrap(), s);
}

#[test]
fn vmm_fds_frame_size_must_not_be_zero() {
    let v = VmmFds {
        frame_size_bytes: 0,
        ..vmm_fds(2)
    };
    assert_eq!(
        encode(&Message::VmmFds(v)).unwrap_err().code(),
        ErrorCode::InvalidArg
    );
    let mut p = payload_of(&Message::VmmFds(vmm_fds(2)));
    p[4..12].copy_from_slice(&0u64.to_le_bytes());
    assert!(assert_protocol_err(&frame(msg_type::VMM_FDS, &p)).contains("frame_size_bytes"));
}

#[test]
fn error_message_limits() {
    let max = "é".repeat(MAX_ERROR_MESSAGE_LEN / 2);
    let m = Message::Error {
        code: -1,
        message: max.clone(),
    };
    assert_eq!(decode(&enc(&m)).unwrap(), m);
    let long = format!("{max}x");
    let e = encode(&Message::Error {
        code: -1,
        message: long.clone(),
    })
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
    let mut p = (-1i32).to_le_bytes().to_vec();
    p.extend_from_slice(&(long.len() as u32).to_le_bytes());
    p.extend_from_slice(long.as_bytes());
    p.extend_from_slice(&[0; 12]);
    assert_protocol_err(&frame(msg_type::ERROR, &p));
    // Not UTF-8.
    let mut p = (-1i32).to_le_bytes().to_vec();
    p.extend_from_slice(&2u32.to_le_bytes());
    p.extend_from_slice(b"\xC3\x28");
    p.extend_from_slice(&[0; 12]);
    assert!(assert_protocol_err(&frame(msg_type::ERROR, &p)).contains("UTF-8"));
}

#[test]
fn string_lengths_are_capped_before_use() {
    // A huge declared length in a small payload is refused without reading or allocating.
    let mut p = 4u32.to_le_bytes().to_vec();
    p.extend_from_slice(&u32::MAX.to_le_bytes());
    p.extend_from_slice(&[0; 20]);
    assert_protocol_err(&frame(msg_type::HELLO_REQ, &p));
    let mut p = (-1i32).to_le_bytes().to_vec();
    p.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_protocol_err(&frame(msg_type::ERROR, &p));
    let mut p = hello_resp_payload("", None);
    p[80..84].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    assert_protocol_err(&frame(msg_type::HELLO_RESP, &p));
}

// ---------------------------------------------------------------------------------------
// Golden encodings, written out from the tables of protocol-v4.md §3.1–§3.9, §10.9 and R3,
// R4, R14, R22 — not produced by the encoder.

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

// ---------------------------------------------------------------------------------------
// Seed corpus for the fuzz target `tlv_decode` (docs/fuzzing.md):
// CUFRAMES_FUZZ_SEEDS=fuzz/seeds/tlv_decode cargo test -p cuframes-core --lib \
//     tlv::tests::write_fuzz_seeds -- --ignored

#[test]
#[ignore = "writes the fuzz seed corpus; run by hand"]
fn write_fuzz_seeds() {
    let dir = std::env::var("CUFRAMES_FUZZ_SEEDS").expect("set CUFRAMES_FUZZ_SEEDS to a folder");
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds: Vec<Vec<u8>> = examples().iter().map(enc).collect();
    // R22: a PING with the most payload a decoder accepts.
    let mut ping = 7u64.to_le_bytes().to_vec();
    ping.resize(MAX_SMALL_PAYLOAD, 0xAA);
    seeds.push(frame(msg_type::PING, &ping));
    // Longest names and paths.
    seeds.push(enc(&Message::HelloReq(hello_req(&"~".repeat(31)))));
    let long = format!("/{}", "p".repeat(MAX_SHM_PATH_LEN - 1));
    seeds.push(enc(&Message::HelloResp(hello_resp(
        &long,
        Some(packets(&long)),
    ))));
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(format!("{dir}/seed-{i:02}"), s).unwrap();
    }
}
