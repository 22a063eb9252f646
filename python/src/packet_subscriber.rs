//! `PacketSubscriber`: encoded packets out of a publisher's packet ring.

use std::sync::Mutex;

use cuframes_core::subscriber::{Subscriber as CoreSubscriber, SubscriberOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::packet::{codec_name, Packet};
use crate::{duration, lock, opt_ts, to_py, until_disconnected, wait_in_slices};

/// Subscribes to a publisher's packets. Iterating yields packets until the publisher shuts
/// down; `next(timeout)` returns None on timeout.
///
/// `max_packet_ring_size` (bytes; None: 256 MiB) bounds the publisher's data ring this
/// subscriber maps (a larger one is refused); `max_packet_size` (bytes; None: 64 MiB) the
/// packets it reads (a larger one is skipped, and the stream resumes at the next keyframe,
/// flagged as a discontinuity).
///
/// After `os.fork()` (or multiprocessing's "fork" start method) the child inherits this
/// object, but the subscription stays the parent's: in the child, `close()`, garbage
/// collection and the exit only let go of the child's copy (no UNSUBSCRIBE: the parent goes
/// on reading). Do not read through it in the child (it would take the parent's messages):
/// connect a new subscriber there.
#[pyclass(module = "cuframes", frozen)]
pub struct PacketSubscriber {
    inner: Mutex<Option<(CoreSubscriber, Vec<u8>)>>,
    #[pyo3(get)]
    codec_id: u32,
    extradata: Vec<u8>,
}

impl PacketSubscriber {
    fn next_impl(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Packet>> {
        let got = wait_in_slices(py, timeout, |slice| {
            lock(&self.inner)
                .as_mut()
                .map(|(s, buf)| s.next_packet(Some(slice), buf).map(|i| (i, buf.clone())))
        })?;
        Ok(got.map(|(info, data)| Packet {
            data: PyBytes::new(py, &data).unbind(),
            seq: info.seq,
            pts_ns: opt_ts(info.pts_ns),
            dts_ns: opt_ts(info.dts_ns),
            flags: info.flags,
        }))
    }

    fn close_impl(&self, py: Python<'_>) {
        let s = py.allow_threads(|| lock(&self.inner).take());
        drop(s);
    }
}

#[pymethods]
impl PacketSubscriber {
    #[new]
    #[pyo3(signature = (key, name="python", runtime_dir=None, connect_timeout=5.0,
                        max_packet_ring_size=None, max_packet_size=None, publisher_uid=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        key: &str,
        name: &str,
        runtime_dir: Option<std::path::PathBuf>,
        connect_timeout: f64,
        max_packet_ring_size: Option<u64>,
        max_packet_size: Option<u64>,
        publisher_uid: Option<u32>,
    ) -> PyResult<Self> {
        let defaults = SubscriberOptions::default();
        let options = SubscriberOptions {
            runtime_dir,
            name: name.to_string(),
            want_frames: false,
            want_packets: true,
            connect_timeout: duration("connect_timeout", connect_timeout)?,
            max_packet_ring_size: max_packet_ring_size.unwrap_or(defaults.max_packet_ring_size),
            max_packet_size: max_packet_size.unwrap_or(defaults.max_packet_size),
            publisher_uid,
            ..defaults
        };
        let (sub, extradata) = py
            .allow_threads(|| {
                let mut s = CoreSubscriber::connect(key, &options)?;
                let extradata = s.packet_extradata()?;
                Ok::<_, cuframes_core::Error>((s, extradata))
            })
            .map_err(to_py)?;
        let codec_id = sub.packet_codec_id().unwrap_or(0);
        Ok(PacketSubscriber {
            inner: Mutex::new(Some((sub, Vec::new()))),
            codec_id,
            extradata,
        })
    }

    /// "h264", "hevc", "av1" (or "codec-N" for another AV_CODEC_ID_*).
    #[getter]
    fn codec(&self) -> String {
        codec_name(self.codec_id)
    }

    /// The extradata as it was at connection (Annex B parameter sets / AV1 sequence header).
    #[getter]
    fn extradata<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.extradata)
    }

    /// The next packet, waiting at most `timeout` seconds (None: until one comes); None on
    /// timeout. At the end of the stream: `cuframes.Error` with code DISCONNECTED.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Packet>> {
        self.next_impl(py, timeout)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Packet>> {
        until_disconnected(py, self.next_impl(py, None))
    }

    fn close(&self, py: Python<'_>) {
        self.close_impl(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close_impl(py);
        false
    }
}
