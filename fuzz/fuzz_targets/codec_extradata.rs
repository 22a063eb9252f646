//! Fuzz the codec helpers of the packet ring (`cuframes_core::codec`, §10.3, R30) on
//! arbitrary bytes: avcC/hvcC/av1C conversion, Annex B and OBU splitting, SPS and AV1
//! sequence header parsing. None may panic or read out of bounds. Whatever the conversion
//! accepts must fit the ring (<= 4096 bytes) and be stable: converting it again gives the same
//! bytes, and its picture size, when it parses, is within bounds.
#![no_main]

use cuframes_core::codec::{keyframe_extradata, ring_extradata, video_info, Codec, MAX_DIMENSION};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, data)) = data.split_first() else {
        return;
    };
    let codec = [Codec::H264, Codec::Hevc, Codec::Av1][usize::from(selector % 3)];
    if let Ok(ring) = ring_extradata(codec, data) {
        assert!(ring.len() <= 4096);
        if !ring.is_empty() {
            assert_eq!(
                ring_extradata(codec, &ring).unwrap(),
                ring,
                "not idempotent"
            );
        }
        if let Ok(i) = video_info(codec, &ring) {
            assert!(i.width > 0 && u64::from(i.width) <= MAX_DIMENSION);
            assert!(i.height > 0 && u64::from(i.height) <= MAX_DIMENSION);
        }
    }
    if let Ok(ps) = keyframe_extradata(codec, data) {
        assert!(ps.len() <= 4096);
        let _ = video_info(codec, &ps);
    }
    let _ = video_info(codec, data);
});
