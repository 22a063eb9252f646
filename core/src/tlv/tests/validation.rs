//! Totality of the decoder (arbitrary and corrupted input is refused, never a panic) and one
//! unit test per validation rule.

use proptest::prelude::*;

use super::strategies::*;
use super::support::*;
use crate::error::ErrorCode;
use crate::tlv::*;

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

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

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
fn gop_store_counts() {
    // One descriptor with a size, or none and 0; anything else is refused.
    for (fd_count, size, ok) in [
        (1u32, 4096u64, true),
        (0, 0, true),
        (0, 4096, false),
        (1, 0, false),
        (2, 4096, false),
        (u32::MAX, 1, false),
    ] {
        let mut p = Vec::new();
        p.extend_from_slice(&fd_count.to_le_bytes());
        p.extend_from_slice(&[0; 4]);
        p.extend_from_slice(&size.to_le_bytes());
        let f = frame(msg_type::GOP_STORE, &p);
        if ok {
            assert!(decode(&f).is_ok(), "{fd_count} {size}");
        } else {
            assert!(assert_protocol_err(&f).contains("GOP_STORE"));
        }
    }
    assert_protocol_err(&frame(msg_type::GOP_STORE, &[0; 8]));
    assert_protocol_err(&frame(msg_type::GOP_STORE, &[0; 24]));
}

#[test]
fn legacy_and_unknown_types_are_refused() {
    // EVENT_FD (v1–v3) with the payloads it has in those versions, and with none.
    for payload in [&[][..], &[0u8; 4], &[0u8; 16]] {
        let msg = assert_protocol_err(&frame(msg_type::EVENT_FD_LEGACY, payload));
        assert!(msg.contains("EVENT_FD"), "{msg}");
    }
    // GOP_STORE (0x07) without a store is 16 zero bytes: valid (see gop_store_counts).
    let known = [1, 2, 3, 4, 5, 7, 0x10, 0x30, 0xF0, 0xF1, 0xFE];
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
