//! The codec helpers on the committed samples (fate-samples/, see its README).

use super::*;
use crate::error::ErrorCode;

const H264: &[u8] = include_bytes!("../../../fate-samples/test-25fps.h264");
const HEVC: &[u8] = include_bytes!("../../../fate-samples/test-25fps.h265");
const AV1_IVF: &[u8] = include_bytes!("../../../fate-samples/test-25fps.av1.ivf");

/// The first frame of an IVF file (32-byte file header, 12-byte frame headers).
fn ivf_first_frame(ivf: &[u8]) -> &[u8] {
    let size = u32::from_le_bytes(ivf[32..36].try_into().unwrap()) as usize;
    &ivf[44..44 + size]
}

fn avcc_from(annexb: &[u8]) -> Vec<u8> {
    let nals = nal_units(annexb);
    let sps: Vec<_> = nals.iter().filter(|n| n[0] & 0x1F == 7).collect();
    let pps: Vec<_> = nals.iter().filter(|n| n[0] & 0x1F == 8).collect();
    let mut v = vec![
        1,
        sps[0][1],
        sps[0][2],
        sps[0][3],
        0xFF,
        0xE0 | sps.len() as u8,
    ];
    for s in &sps {
        v.extend((s.len() as u16).to_be_bytes());
        v.extend_from_slice(s);
    }
    v.push(pps.len() as u8);
    for p in &pps {
        v.extend((p.len() as u16).to_be_bytes());
        v.extend_from_slice(p);
    }
    v
}

fn hvcc_from(annexb: &[u8]) -> Vec<u8> {
    let mut v = vec![1u8; 22];
    let nals = nal_units(annexb);
    v.push(3);
    for t in [32u8, 33, 34] {
        let of: Vec<_> = nals.iter().filter(|n| (n[0] >> 1) & 0x3F == t).collect();
        v.push(0x80 | t);
        v.extend((of.len() as u16).to_be_bytes());
        for n in of {
            v.extend((n.len() as u16).to_be_bytes());
            v.extend_from_slice(n);
        }
    }
    v
}

#[test]
fn h264_sample_keyframe_and_avcc_agree() {
    let first_au = &H264[..2000];
    let ps = keyframe_extradata(Codec::H264, first_au).unwrap();
    // SPS + PPS only: the SEIs before them are dropped.
    let types: Vec<u8> = nal_units(&ps).iter().map(|n| n[0] & 0x1F).collect();
    assert_eq!(types, vec![7, 8]);
    let from_avcc = ring_extradata(Codec::H264, &avcc_from(&ps)).unwrap();
    assert_eq!(from_avcc, ps);
    assert_eq!(ring_extradata(Codec::H264, &ps).unwrap(), ps);
    let i = video_info(Codec::H264, &ps).unwrap();
    assert_eq!((i.width, i.height, i.profile, i.level), (320, 240, 77, 13));
}

#[test]
fn hevc_sample_keyframe_and_hvcc_agree() {
    let ps = keyframe_extradata(Codec::Hevc, &HEVC[..3000]).unwrap();
    let types: Vec<u8> = nal_units(&ps).iter().map(|n| (n[0] >> 1) & 0x3F).collect();
    assert_eq!(types, vec![32, 33, 34]);
    assert_eq!(ring_extradata(Codec::Hevc, &hvcc_from(&ps)).unwrap(), ps);
    let i = video_info(Codec::Hevc, &ps).unwrap();
    assert_eq!((i.width, i.height, i.profile, i.level), (320, 240, 1, 60));
}

#[test]
fn av1_sample_sequence_header() {
    let tu = ivf_first_frame(AV1_IVF);
    let sh = keyframe_extradata(Codec::Av1, tu).unwrap();
    assert_eq!(sh[0] >> 3 & 0xF, 1);
    let mut av1c = vec![0x81, 0, 0x0C, 0];
    av1c.extend_from_slice(&sh);
    assert_eq!(ring_extradata(Codec::Av1, &av1c).unwrap(), sh);
    assert_eq!(ring_extradata(Codec::Av1, tu).unwrap(), sh);
    let i = video_info(Codec::Av1, &sh).unwrap();
    assert_eq!(
        (i.width, i.height, i.chroma_format, i.bit_depth),
        (320, 240, 1, 8)
    );
}

#[test]
fn errors_name_the_problem() {
    assert_eq!(Codec::from_id(12345).unwrap_err().code(), ErrorCode::Format);
    assert!(ring_extradata(Codec::H264, &[]).unwrap().is_empty());
    // Annex B with no parameter set.
    let e = ring_extradata(Codec::H264, &[0, 0, 0, 1, 0x65, 0x88]).unwrap_err();
    assert!(e.to_string().contains("no parameter set"), "{e}");
    assert!(ring_extradata(Codec::Hevc, &[1, 2, 3]).is_err());
    assert!(ring_extradata(Codec::Av1, &[0x81, 0]).is_err());
    assert_eq!(
        video_info(Codec::H264, &[0, 0, 0, 1, 0x68, 1])
            .unwrap_err()
            .code(),
        ErrorCode::NotFound
    );
    // Too large for the ring.
    let mut big = Vec::new();
    for _ in 0..2000 {
        big.extend([0, 0, 0, 1, 0x68, 0xEE]);
    }
    assert!(ring_extradata(Codec::H264, &big).is_err());
}

#[test]
fn every_prefix_of_every_sample_is_handled_without_panicking() {
    for (codec, data) in [
        (Codec::H264, &H264[..600]),
        (Codec::Hevc, &HEVC[..600]),
        (Codec::Av1, &ivf_first_frame(AV1_IVF)[..200]),
    ] {
        for n in 0..data.len() {
            let d = &data[..n];
            let _ = ring_extradata(codec, d);
            if let Ok(e) = keyframe_extradata(codec, d) {
                let _ = video_info(codec, &e);
            }
            let _ = video_info(codec, d);
        }
    }
}
