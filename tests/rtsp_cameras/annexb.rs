//! Access units of an Annex B stream, compared by their NAL units: start code lengths (3 or 4
//! bytes) and trailing zero bytes are how a stream is framed, not what it carries, and RTP
//! depacketisation rewrites them.

use std::path::Path;

use super::camera::Codec;

/// One access unit: its NAL units (without start codes and trailing zero bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct AccessUnit {
    pub nals: Vec<Vec<u8>>,
}

impl std::fmt::Debug for AccessUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sizes: Vec<String> = self
            .nals
            .iter()
            .map(|n| format!("0x{:02x}:{}", n.first().copied().unwrap_or(0), n.len()))
            .collect();
        write!(f, "AU[{}]", sizes.join(" "))
    }
}

/// The NAL units of an Annex B byte stream, bounds-checked (garbage gives garbage units,
/// never a panic).
pub fn nal_units(data: &[u8]) -> Vec<Vec<u8>> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= data.len() {
        if data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut out = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(data.len(), |&n| n - 3);
        let mut nal = &data[s..end];
        while let [rest @ .., 0] = nal {
            nal = rest;
        }
        if !nal.is_empty() {
            out.push(nal.to_vec());
        }
    }
    out
}

fn nal_type(codec: Codec, nal: &[u8]) -> u8 {
    match codec {
        Codec::H264 => nal[0] & 0x1f,
        Codec::Hevc => (nal[0] >> 1) & 0x3f,
    }
}

/// A picture's slice (one per picture in the clips).
pub fn is_vcl(codec: Codec, nal: &[u8]) -> bool {
    let t = nal_type(codec, nal);
    match codec {
        Codec::H264 => (1..=5).contains(&t),
        Codec::Hevc => t <= 31,
    }
}

/// A picture a decoder can start on (H.264 IDR, HEVC IRAP).
pub fn is_key(codec: Codec, au: &AccessUnit) -> bool {
    au.nals.iter().any(|n| {
        let t = nal_type(codec, n);
        match codec {
            Codec::H264 => t == 5,
            Codec::Hevc => (16..=23).contains(&t),
        }
    })
}

/// Access units: the non-VCL units before a picture's slice, then the slice (single-slice
/// pictures). Units after the last slice (an end of stream) are left out. A non-VCL unit
/// identical to one before it in the same access unit is left out too: muxers and bitstream
/// filters prepend the stream's parameter sets to a keyframe that has them already (HEVC in
/// Matroska and back), and a repeated identical parameter set carries nothing.
pub fn access_units(codec: Codec, data: &[u8]) -> Vec<AccessUnit> {
    let mut out = Vec::new();
    let mut cur: Vec<Vec<u8>> = Vec::new();
    for nal in nal_units(data) {
        let vcl = is_vcl(codec, &nal);
        if !vcl && cur.contains(&nal) {
            continue;
        }
        cur.push(nal);
        if vcl {
            out.push(AccessUnit {
                nals: std::mem::take(&mut cur),
            });
        }
    }
    out
}

pub fn read_access_units(codec: Codec, path: &Path) -> Vec<AccessUnit> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    access_units(codec, &data)
}

/// Where in the looped `clip` the access units `got` start: they must be consecutive access
/// units of the clip played in a loop, each identical (every NAL unit, byte for byte).
/// Returns the index in the clip of the first one.
pub fn assert_window_of_loop(what: &str, got: &[AccessUnit], clip: &[AccessUnit]) -> usize {
    assert!(!got.is_empty(), "{what}: no access unit");
    let n = clip.len();
    let start = (0..n)
        .find(|&o| {
            got.iter()
                .enumerate()
                .all(|(i, au)| *au == clip[(o + i) % n])
        })
        .unwrap_or_else(|| {
            // Say where the best candidate first differs.
            let o = (0..n).find(|&o| got[0] == clip[o]);
            match o {
                None => panic!(
                    "{what}: the first access unit {:?} is none of the clip's",
                    got[0]
                ),
                Some(o) => {
                    let i = got
                        .iter()
                        .enumerate()
                        .position(|(i, au)| *au != clip[(o + i) % n])
                        .unwrap();
                    panic!(
                        "{what}: access unit {i} of {} differs from the clip's {}: {:?} vs {:?}",
                        got.len(),
                        (o + i) % n,
                        got[i],
                        clip[(o + i) % n]
                    )
                }
            }
        });
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_code_lengths_and_trailing_zeros_do_not_matter() {
        let a = [
            0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 0, 0, 1, 0x65, 9, 9,
        ];
        let b = [
            0, 0, 1, 0x67, 1, 2, 0, 0, 0, 1, 0x68, 3, 0, 0, 1, 0x65, 9, 9, 0,
        ];
        assert_eq!(access_units(Codec::H264, &a), access_units(Codec::H264, &b));
        let aus = access_units(Codec::H264, &a);
        assert_eq!(aus.len(), 1);
        assert!(is_key(Codec::H264, &aus[0]));
        let c = [0, 0, 1, 0x65, 9, 8];
        assert_ne!(access_units(Codec::H264, &a), access_units(Codec::H264, &c));
        // Parameter sets repeated in one access unit count once; a different one does not.
        let twice = [
            0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 1,
            0x65, 9, 9,
        ];
        assert_eq!(access_units(Codec::H264, &twice), aus);
        let other = [
            0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 1, 0x67, 1, 7, 0, 0, 1, 0x65, 9, 9,
        ];
        assert_ne!(access_units(Codec::H264, &other), aus);
    }

    #[test]
    fn garbage_never_panics() {
        for data in [&[][..], &[0], &[0, 0, 1], &[0, 0, 1, 0], &[1, 2, 3, 0, 0]] {
            let _ = access_units(Codec::Hevc, data);
            let _ = access_units(Codec::H264, data);
        }
    }
}
