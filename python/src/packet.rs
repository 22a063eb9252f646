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
/// One encoded packet.
#[pyclass(module = "cuframes", frozen)]
pub struct Packet {
    #[pyo3(get)]
    pub(crate) data: Py<PyBytes>,
    #[pyo3(get)]
    pub(crate) seq: u64,
    #[pyo3(get)]
    pub(crate) pts_ns: Option<i64>,
    #[pyo3(get)]
    pub(crate) dts_ns: Option<i64>,
    #[pyo3(get)]
    pub(crate) flags: u32,
}

#[pymethods]
impl Packet {
    #[getter]
    fn keyframe(&self) -> bool {
        self.flags & PACKET_FLAG_KEY != 0
    }

    /// The first packet after packets were lost (an overrun): decoding restarts here.
    #[getter]
    fn discontinuity(&self) -> bool {
        self.flags & PACKET_FLAG_DISCONTINUITY != 0
    }

    #[getter]
    fn corrupt(&self) -> bool {
        self.flags & PACKET_FLAG_CORRUPT != 0
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.data.bind(py).as_bytes().len()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<cuframes.Packet seq={} {} bytes{}>",
            self.seq,
            self.data.bind(py).as_bytes().len(),
            if self.keyframe() { " key" } else { "" }
        )
    }
}
