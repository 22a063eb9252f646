//! `Packet` and the codec names every packet endpoint shares.

use cuframes_core::wire::{
    CODEC_ID_AV1, CODEC_ID_H264, CODEC_ID_HEVC, PACKET_FLAG_CORRUPT, PACKET_FLAG_DISCONTINUITY,
    PACKET_FLAG_KEY,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

pub(crate) fn codec_id(codec: &Bound<'_, PyAny>) -> PyResult<u32> {
    if let Ok(id) = codec.extract::<u32>() {
        return Ok(id);
    }
    let name: String = codec.extract().map_err(|_| {
        PyTypeError::new_err(
            "codec must be a name (\"h264\", \"hevc\", \"av1\") or an AV_CODEC_ID_* int",
        )
    })?;
    match name.to_ascii_lowercase().as_str() {
        "h264" | "h.264" | "avc" => Ok(CODEC_ID_H264),
        "hevc" | "h265" | "h.265" => Ok(CODEC_ID_HEVC),
        "av1" => Ok(CODEC_ID_AV1),
        other => Err(PyValueError::new_err(format!(
            "codec must be \"h264\", \"hevc\" or \"av1\", not {other:?}"
        ))),
    }
}

pub(crate) fn codec_name(id: u32) -> String {
    match id {
        CODEC_ID_H264 => "h264".into(),
        CODEC_ID_HEVC => "hevc".into(),
        CODEC_ID_AV1 => "av1".into(),
        other => format!("codec-{other}"),
    }
}
/// One encoded packet: `data` (Annex B H.264/HEVC, or AV1 OBUs), its timestamps and flags.
#[pyclass(module = "cuframes", frozen)]
pub struct Packet {
    /// The packet's bytes.
    #[pyo3(get)]
    pub(crate) data: Py<PyBytes>,
    /// The packet's sequence number in its stream (1 for the first packet published).
    #[pyo3(get)]
    pub(crate) seq: u64,
    /// Presentation time in nanoseconds, or None if unknown. `time` is the same in seconds.
    #[pyo3(get)]
    pub(crate) pts_ns: Option<i64>,
    /// Decoding time in nanoseconds, or None if unknown.
    #[pyo3(get)]
    pub(crate) dts_ns: Option<i64>,
    /// The wire flags (`keyframe`, `discontinuity` and `corrupt` read them).
    #[pyo3(get)]
    pub(crate) flags: u32,
}

#[pymethods]
impl Packet {
    /// True for a packet a decoder can start at (a keyframe).
    #[getter]
    fn keyframe(&self) -> bool {
        self.flags & PACKET_FLAG_KEY != 0
    }

    /// The first packet after packets were lost (an overrun): decoding restarts here.
    #[getter]
    fn discontinuity(&self) -> bool {
        self.flags & PACKET_FLAG_DISCONTINUITY != 0
    }

    /// True when the publisher marked the packet corrupt (as FFmpeg's AV_PKT_FLAG_CORRUPT).
    #[getter]
    fn corrupt(&self) -> bool {
        self.flags & PACKET_FLAG_CORRUPT != 0
    }

    /// Presentation time in seconds (`pts_ns * time_base`), or None without a pts.
    #[getter]
    fn time(&self) -> Option<f64> {
        self.pts_ns.map(|p| p as f64 / 1e9)
    }

    /// The unit of `pts_ns` and `dts_ns`: `fractions.Fraction(1, 1_000_000_000)`.
    #[getter]
    fn time_base<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::ndarray::time_base(py)
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.data.bind(py).as_bytes().len()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let ts =
            |t: Option<i64>| t.map_or("None".to_string(), |t| format!("{:.6}", t as f64 / 1e9));
        format!(
            "<cuframes.Packet seq={} {} bytes time={} dts={}{}{}{}>",
            self.seq,
            self.data.bind(py).as_bytes().len(),
            ts(self.pts_ns),
            ts(self.dts_ns),
            if self.keyframe() { " key" } else { "" },
            if self.discontinuity() {
                " discontinuity"
            } else {
                ""
            },
            if self.corrupt() { " corrupt" } else { "" }
        )
    }
}
