//! `PacketPublisher`: encoded packets into a packet ring.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuframes_core::packet::PacketRingConfig;
use cuframes_core::publisher::Publisher as CorePublisher;
use cuframes_core::wire::{CODEC_ID_H264, NO_PTS, PACKET_FLAG_KEY};
use cuframes_core::ErrorCode;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::packet::{codec_id, codec_name};
use crate::publisher::create_publisher;
use crate::{duration, error, lock, to_py};

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
