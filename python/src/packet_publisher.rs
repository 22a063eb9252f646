//! `PacketPublisher`: encoded packets into a packet ring.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::Publisher as CorePublisher;
use cuframes_core::wire::{CODEC_ID_H264, MAX_EXTRADATA_SIZE, NO_PTS, PACKET_FLAG_KEY};
use cuframes_core::ErrorCode;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::host_source::{self, Elements, Wanted};
use crate::packet::{codec_id, codec_name};
use crate::publisher::create_publisher;
use crate::{duration, error, lock, to_py};

/// Publishes encoded packets (Annex B H.264/HEVC, AV1 OBUs) under `key`.
///
/// Parameters:
///     key: the stream's name (letters, digits, `-`, `_`, `.`).
///     codec: "h264", "hevc" or "av1" (or a codec id).
///     extradata: the codec's out-of-band parameters (SPS/PPS...), any buffer; may be set
///         later, once, with `set_extradata`.
///     ring_slots: packets the ring holds.
///     data_size: bytes of packet data the ring holds (the largest packet's limit).
///     runtime_dir: where the socket lives (default: $CUFRAMES_RUNTIME_DIR, else /run/cuframes).
///
/// Use it as a context manager, or call `close()`.
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
    /// The codec's id in FFmpeg's numbering (`AVCodecID`).
    #[pyo3(get)]
    codec_id: u32,
    /// The packet data ring's size: the largest packet.
    data_size: u32,
    key: String,
}

/// The ring holds at most `MAX_EXTRADATA_SIZE` bytes of extradata (§10.3), as given.
fn extradata_wanted() -> Wanted {
    Wanted::up_to(
        MAX_EXTRADATA_SIZE,
        format!("codec extradata holds at most {MAX_EXTRADATA_SIZE} bytes (what the packet ring's header has room for)"),
    )
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
    #[pyo3(signature = (key, codec=None, extradata=None,
                        ring_slots=64, data_size=8 << 20, runtime_dir=None),
           text_signature = "(key, codec='h264', extradata=b'', ring_slots=64, \
                             data_size=8388608, runtime_dir=None)")]
    fn new(
        py: Python<'_>,
        key: &str,
        codec: Option<Bound<'_, PyAny>>,
        extradata: Option<Bound<'_, PyAny>>,
        ring_slots: u32,
        data_size: u32,
        runtime_dir: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let codec_id = match codec {
            Some(c) => codec_id(&c)?,
            None => CODEC_ID_H264,
        };
        let extradata = match &extradata {
            Some(e) => host_source::read(e, "extradata", Elements::AnyBytes, &extradata_wanted())?
                .as_slice()
                .to_vec(),
            None => Vec::new(),
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
            data_size,
            key: key.to_string(),
        })
    }

    /// The codec's name ("h264", "hevc", "av1").
    #[getter]
    fn codec(&self) -> String {
        codec_name(self.codec_id)
    }

    /// The stream's key.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// True once `close()` ran (or the `with` block was left).
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// Set the extradata (any buffer) once, before the first packet, when it was not given
    /// at creation.
    #[pyo3(text_signature = "($self, extradata)")]
    fn set_extradata(&self, extradata: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = host_source::read(
            extradata,
            "extradata",
            Elements::AnyBytes,
            &extradata_wanted(),
        )?;
        self.get()?
            .set_packet_extradata(bytes.as_slice())
            .map_err(to_py)
    }

    /// Publish one packet; returns its seq.
    ///
    /// Parameters:
    ///     data: the packet's bytes: bytes, bytearray, memoryview, a NumPy array or any object
    ///         with the buffer protocol or `__array_interface__` (its bytes in C order),
    ///         read at memcpy speed; more than data_size bytes: ValueError, before it is
    ///         read.
    ///     pts_ns, dts_ns: presentation and decoding times in nanoseconds; None: unknown.
    ///     keyframe: whether the packet starts a keyframe (a subscriber may start there).
    #[pyo3(signature = (data, pts_ns=None, dts_ns=None, keyframe=false))]
    fn publish(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        pts_ns: Option<i64>,
        dts_ns: Option<i64>,
        keyframe: bool,
    ) -> PyResult<u64> {
        // The ring refuses a packet larger than its data ring: refused here before a byte of
        // a (possibly broadcast, terabyte-sized) source is read.
        let wanted = Wanted::up_to(
            self.data_size as usize,
            format!(
                "a packet holds at most the ring's data_size, {} bytes (raise data_size)",
                self.data_size
            ),
        );
        let bytes = host_source::read(data, "data", Elements::AnyBytes, &wanted)?;
        let data = bytes.as_slice();
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

    /// Subscribers connected now.
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

    /// Shut down: subscribers read what was published, then their iteration ends. Closing
    /// twice is harmless.
    fn close(&self, py: Python<'_>) {
        self.close_impl(py);
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        let this = slf.get();
        Ok(match this.get() {
            Ok(p) => format!(
                "<cuframes.{name} key='{}' {} subscribers={}>",
                this.key,
                codec_name(this.codec_id),
                p.subscriber_count()
            ),
            Err(_) => format!("<cuframes.{name} key='{}' closed>", this.key),
        })
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
