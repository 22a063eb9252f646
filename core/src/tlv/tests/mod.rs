//! Tests of the TLV codec (§3, R3, R4, R14, R19, R22).
//!
//! - `roundtrip`: property-based round trips of every message with arbitrary valid fields,
//!   and what a decoder tolerates (extra bytes of small messages, dirty reserved bytes);
//! - `validation`: totality (arbitrary bytes, every truncation and every corrupted length
//!   field give `Err`, or, for arbitrary bytes, an `Ok` message that re-encodes to itself,
//!   never a panic) and one unit test per validation rule;
//! - `golden`: encodings written out byte by byte from the tables of `protocol-v4.md`, so
//!   the layout is checked against the spec and not against the encoder;
//! - `fuzz_seeds`: the seed corpus of the fuzz target `tlv_decode`.
//!
//! `support` holds the helpers and example messages, `strategies` the generators of
//! messages for the property tests.

mod fuzz_seeds;
mod golden;
mod roundtrip;
mod strategies;
mod support;
mod validation;
