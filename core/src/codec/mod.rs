//! Codec helpers for the packet ring (§10.3, R30): the ring carries H.264/HEVC as Annex B
//! (start codes) and AV1 as low-overhead OBUs, and its extradata is the Annex B parameter sets
//! (SPS/PPS, VPS/SPS/PPS) or the AV1 sequence header OBU. Producers often hold something else
//! (`avcC`/`hvcC`/`av1C` from MP4 or Matroska), and consumers want the picture size; this
//! module converts and parses, bounds-checked, never panicking on hostile input
//! (`fuzz/fuzz_targets/codec_extradata.rs`).

mod annexb;
mod av1;
mod bits;
mod extradata;
mod h264;
mod hevc;
mod info;

pub use annexb::{avcc_to_annexb, hvcc_to_annexb, is_annexb, nal_units};
pub use av1::{
    av1c_to_sequence_header, leb128, obus, sequence_header_obu, Obu, OBU_SEQUENCE_HEADER,
    OBU_TEMPORAL_DELIMITER,
};
pub use extradata::{keyframe_extradata, ring_extradata, video_info};
pub use info::{Codec, VideoInfo, MAX_DIMENSION};

#[cfg(test)]
mod tests;
