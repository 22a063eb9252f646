//! Seed corpus for the fuzz target `tlv_decode` (docs/fuzzing.md):
//! `CUFRAMES_FUZZ_SEEDS=fuzz/seeds/tlv_decode cargo test -p cuframes-core --lib
//! tlv::tests::fuzz_seeds::write_fuzz_seeds -- --ignored`

use super::support::*;
use crate::tlv::*;

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
