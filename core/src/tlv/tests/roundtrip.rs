//! Property-based round trips (encode → decode is the identity on valid messages, `encode`
//! never sends what `decode` refuses) and what a decoder ignores.

use proptest::prelude::*;

use super::strategies::*;
use super::support::*;
use crate::error::ErrorCode;
use crate::tlv::*;

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
            Message::GopStore(_) => (h + 4..h + 8).collect(),
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

#[test]
fn every_example_round_trips() {
    for m in examples() {
        assert_eq!(decode(&enc(&m)).unwrap(), m, "{}", m.name());
    }
}
