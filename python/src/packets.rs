//! `PacketPublisher`, `PacketSubscriber` and `Packet`: the encoded-packet ring.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuframes_core::packet::PacketRingConfig;
use cuframes_core::publisher::Publisher as CorePublisher;
use cuframes_core::subscriber::{Subscriber as CoreSubscriber, SubscriberOptions};
use cuframes_core::wire::{
    CODEC_ID_AV1, CODEC_ID_H264, CODEC_ID_HEVC, NO_PTS, PACKET_FLAG_CORRUPT,
    PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY,
};
use cuframes_core::ErrorCode;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::publisher::create_publisher;
use crate::{duration, error, lock, opt_ts, to_py, until_disconnected, wait_in_slices};

fn codec_id(codec: &Bound<'_, PyAny>) -> PyResult<u32> {
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

fn codec_name(id: u32) -> String {
    match id {
        CODEC_ID_H264 => "h264".into(),
        CODEC_ID_HEVC => "hevc".into(),
        CODEC_ID_AV1 => "av1".into(),
        other => format!("codec-{other}"),
    }
}

/// Publishes encoded packets (Annex B H.264/HEVC, AV1 OBUs).
///
/// After `os.fork()` (or multiprocessing's "fork" start method) the child inherits this
/// object, but the publisher stays the parent's: in the child, `close()`, leaving a `with`
/// block, garbage collection and the exit only let go of the child's copy (no shutdown,
/// nothing removed, the parent goes on publishing). Do not publish through it in the child:
/// create a publisher there (another key), or start children with "spawn".
#[pyclass(module = "cuframes", frozen, subclass, weakref)]
pub struct PacketPublisher {
    /// As in `Publisher`: calls work on a clone, the lock is never held across a wait.
    inner: Mutex<Option<Arc<CorePublisher>>>,
    #[pyo3(get)]
    codec_id: u32,
}

impl PacketPublisher {
    fn get(&self) -> PyResult<Arc<CorePublisher>> {
        lock(&self.inner)
            .clone()
            .ok_or_else(|| error(ErrorCode::InvalidArg, "the publisher is closed"))
    }

    fn close_impl(&self, py: Python<'_>) {
        let p = py.allow_threads(|| lock(&self.inner).take());
        py.allow_threads(move || drop(p));
    }
}

#[pymethods]
impl PacketPublisher {
    #[new]
    #[pyo3(signature = (key, codec=None, extradata=b"".to_vec(),
                        ring_slots=64, data_size=8 << 20, runtime_dir=None))]
    fn new(
        py: Python<'_>,
        key: &str,
        codec: Option<Bound<'_, PyAny>>,
        extradata: Vec<u8>,
        ring_slots: u32,
        data_size: u32,
        runtime_dir: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let codec_id = match codec {
            Some(c) => codec_id(&c)?,
            None => CODEC_ID_H264,
        };
        let config = PacketRingConfig {
            codec_id,
            extradata,
            ring_slots,
            data_size,
        };
        let p = create_publisher(py, key, runtime_dir, |p| p.enable_packets(config))?;
        Ok(PacketPublisher {
            inner: Mutex::new(Some(p)),
            codec_id,
        })
    }

    #[getter]
    fn codec(&self) -> String {
        codec_name(self.codec_id)
    }

    /// Set the extradata once, before the first packet, when it was not given at creation.
    fn set_extradata(&self, extradata: &[u8]) -> PyResult<()> {
        self.get()?.set_packet_extradata(extradata).map_err(to_py)
    }

    /// Publish one packet; returns its seq. None timestamps are "unknown".
    #[pyo3(signature = (data, pts_ns=None, dts_ns=None, keyframe=false))]
    fn publish(
        &self,
        py: Python<'_>,
        data: &[u8],
        pts_ns: Option<i64>,
        dts_ns: Option<i64>,
        keyframe: bool,
    ) -> PyResult<u64> {
        let p = self.get()?;
        let flags = if keyframe { PACKET_FLAG_KEY } else { 0 };
        py.allow_threads(|| {
            p.publish_packet(
                data,
                pts_ns.unwrap_or(NO_PTS),
                dts_ns.unwrap_or(NO_PTS),
                flags,
            )
        })
        .map_err(to_py)
    }

    #[getter]
    fn subscriber_count(&self) -> usize {
        lock(&self.inner)
            .as_ref()
            .map_or(0, |p| p.subscriber_count())
    }

    /// Wait until at least `count` subscribers are connected; False on timeout.
    #[pyo3(signature = (count=1, timeout=5.0))]
    fn wait_for_subscribers(&self, py: Python<'_>, count: usize, timeout: f64) -> PyResult<bool> {
        let deadline = Instant::now() + duration("timeout", timeout)?;
        loop {
            if self.subscriber_count() >= count {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            py.allow_threads(|| std::thread::sleep(Duration::from_millis(5)));
            py.check_signals()?;
        }
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

/// One encoded packet.
#[pyclass(module = "cuframes", frozen)]
pub struct Packet {
    #[pyo3(get)]
    data: Py<PyBytes>,
    #[pyo3(get)]
    seq: u64,
    #[pyo3(get)]
    pts_ns: Option<i64>,
    #[pyo3(get)]
    dts_ns: Option<i64>,
    #[pyo3(get)]
    flags: u32,
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
