//! Fuzz target for the TLV codec of the socket messages (`cuframes_core::tlv`, §3).
//!
//! Arbitrary bytes go to `decode` (a whole frame) and to the streaming pair
//! `decode_header` + `decode_payload`. Neither may panic. Every message either path accepts
//! must re-encode, and the re-encoding must decode to the same message (a failed HELLO_RESP
//! in the long form comes back in the short form of §3.4, which keeps only `result`). The
//! frame meta extension of a HELLO_RESP (colour, GPU UUID) is read as a subscriber reads it.
#![no_main]

use cuframes_core::tlv::{
    decode, decode_header, decode_payload, encode, HelloResp, Message, HEADER_LEN,
};
use cuframes_core::wire::meta_ext::MetaExt;
use libfuzzer_sys::fuzz_target;

/// What a message becomes after encode → decode.
fn normalized(m: &Message) -> Message {
    match m {
        Message::HelloResp(h) if h.result < 0 => Message::HelloResp(HelloResp::failure(h.result)),
        other => other.clone(),
    }
}

/// The frame meta extension a subscriber reads from a HELLO_RESP (colour, GPU UUID): any
/// bytes give a value, and what it says is written back to the same bytes for the parts it
/// records (the rest of the 32 bytes is reserved and not kept).
fn check_meta_ext(m: &Message) {
    if let Message::HelloResp(h) = m {
        let ext = MetaExt::read(&h.meta);
        let mut again = h.meta;
        ext.write(&mut again);
        assert_eq!(MetaExt::read(&again), ext);
        if let Some(c) = ext.colour {
            // The typed views never panic on peer values.
            let _ = (c.rgb_matrix(), c.rgb_range(), c.sample_aspect_ratio());
        }
    }
}

/// `m` was decoded from some input: it must re-encode and decode back to itself.
fn check_canonical(m: &Message) {
    check_meta_ext(m);
    let bytes = encode(m).unwrap_or_else(|e| panic!("decoded {m:?} does not re-encode: {e}"));
    let header: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
    let (t, len) = decode_header(&header).expect("header of a re-encoding");
    assert_eq!(t, m.type_id());
    assert_eq!(len, bytes.len() - HEADER_LEN);
    let again = decode(&bytes).unwrap_or_else(|e| panic!("re-encoding of {m:?} refused: {e}"));
    assert_eq!(again, normalized(m));
    // Canonical form is a fixed point: encoding the re-decoded message gives the same bytes.
    assert_eq!(encode(&again).unwrap(), bytes);
}

fuzz_target!(|data: &[u8]| {
    let whole = decode(data);
    if let Ok(m) = &whole {
        check_canonical(m);
    }

    let Some(header) = data.get(..HEADER_LEN) else {
        assert!(whole.is_err());
        return;
    };
    let header: [u8; HEADER_LEN] = header.try_into().unwrap();
    let rest = &data[HEADER_LEN..];
    match decode_header(&header) {
        Ok((t, len)) => {
            // The payload as a stream reader would cut it (more bytes may follow: the next
            // message), and everything after the header regardless of the declared length.
            if let Some(payload) = rest.get(..len) {
                let split = decode_payload(t, payload);
                if let Ok(m) = &split {
                    check_canonical(m);
                }
                if len == rest.len() {
                    assert_eq!(whole.as_ref().ok(), split.as_ref().ok());
                }
            } else {
                assert!(whole.is_err());
            }
            if let Ok(m) = decode_payload(t, rest) {
                check_canonical(&m);
            }
        }
        Err(_) => assert!(whole.is_err()),
    }
});
