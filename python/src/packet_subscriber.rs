//! `PacketSubscriber`: encoded packets out of a publisher's packet ring.

use cuframes_core::packet_ring::PacketInfo;
use cuframes_core::subscriber::{Subscriber as CoreSubscriber, SubscriberOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::endpoint::ReadEndpoint;
use crate::packet::{codec_name, Packet};
use crate::reading::{connect_waiting, ReadError, Reading, Timing};
use crate::values::opt_ts;

/// A packet read, not yet handed to Python.
type Read = (PacketInfo, Vec<u8>);

/// Subscribe to the packets of the publisher of `key`.
///
/// Iterating (`for packet in sub`, `async for packet in sub`) yields packets until the
/// publisher shuts down; an abnormal end (dropped by the publisher, a publisher that
/// crashed, a protocol error) raises `cuframes.Error` saying why, and `end_reason` names it.
/// `next(timeout)` and `await anext(timeout)` return None after `timeout` seconds, and raise
/// `cuframes.Error` (DISCONNECTED) at any end. Waiting releases the GIL; Ctrl-C interrupts it.
///
/// Parameters:
///   key: the publisher's key.
///   name: shown to operators (printable ASCII, at most 31 bytes).
///   runtime_dir: the socket directory (default $CUFRAMES_RUNTIME_DIR, else /run/cuframes).
///   wait_publisher: seconds to wait for a missing publisher (and its packet ring) to
///     appear; 0 fails at once.
///   handshake_timeout: seconds the handshake with the publisher may take.
///   read_timeout: iteration, and next()/anext() without a timeout, raise cuframes.Error
///     (TIMEOUT) when nothing arrives for this many seconds; None or 0 waits forever.
///   reconnect: seconds to wait for a restarted publisher of the key and go on with it, at
///     its newest keyframe (flagged as a discontinuity); None: the stream ends when the
///     publisher goes.
///   spin: seconds to poll for a packet before each sleep (lower latency, a busy CPU
///     meanwhile; 0 sleeps at once).
///   max_packet_ring_size: the largest data ring (bytes) to map; a larger one is refused
///     (cuframes.Error, NO_MEMORY). None: 256 MiB.
///   max_packet_size: the largest packet (bytes) to read; a larger one is skipped and the
///     stream resumes at the next keyframe, flagged as a discontinuity. None: 64 MiB.
///   publisher_uid: accept only a publisher running as this uid (None: any uid at first,
///     the same uid on every later connection).
///   connect_timeout: deprecated name of handshake_timeout.
///
/// After `os.fork()` (or multiprocessing's "fork" start method) the child inherits this
/// object, but the subscription stays the parent's: in the child, `close()`, garbage
/// collection and the exit only let go of the child's copy (no UNSUBSCRIBE: the parent goes
/// on reading). Do not read through it in the child (it would take the parent's messages):
/// connect a new subscriber there.
#[pyclass(module = "cuframes", frozen)]
pub struct PacketSubscriber {
    /// The subscription (with the buffer packets are read into) and the packet read for an
    /// `anext()`, shared by the readers.
    endpoint: ReadEndpoint<(CoreSubscriber, Vec<u8>), Read>,
    key: String,
    #[pyo3(get)]
    codec_id: u32,
    extradata: Vec<u8>,
}

impl PacketSubscriber {
    fn packet(py: Python<'_>, (info, data): Read) -> Packet {
        Packet {
            data: PyBytes::new(py, &data).unbind(),
            seq: info.seq,
            pts_ns: opt_ts(info.pts_ns),
            dts_ns: opt_ts(info.dts_ns),
            flags: info.flags,
        }
    }
}

/// One read of the next packet within a slice.
fn read_packet(
    (sub, buf): &mut (CoreSubscriber, Vec<u8>),
    slice: std::time::Duration,
) -> Result<Read, ReadError> {
    match sub.next_packet(Some(slice), buf) {
        Ok(info) => Ok((info, buf.clone())),
        Err(e) => Err(ReadError::of(sub, e)),
    }
}

#[pymethods]
impl PacketSubscriber {
    #[new]
    #[pyo3(signature = (key, name="python", runtime_dir=None, *, wait_publisher=0.0,
                        handshake_timeout=5.0, read_timeout=None, reconnect=None, spin=0.0,
                        max_packet_ring_size=None, max_packet_size=None, publisher_uid=None,
                        connect_timeout=None),
           text_signature = "(key, name='python', runtime_dir=None, *, wait_publisher=0.0, \
                             handshake_timeout=5.0, read_timeout=None, reconnect=None, \
                             spin=0.0, max_packet_ring_size=None, max_packet_size=None, \
                             publisher_uid=None, connect_timeout=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        key: &str,
        name: &str,
        runtime_dir: Option<std::path::PathBuf>,
        wait_publisher: f64,
        handshake_timeout: f64,
        read_timeout: Option<f64>,
        reconnect: Option<f64>,
        spin: f64,
        max_packet_ring_size: Option<u64>,
        max_packet_size: Option<u64>,
        publisher_uid: Option<u32>,
        connect_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let timing = Timing::new(
            py,
            wait_publisher,
            handshake_timeout,
            connect_timeout,
            reconnect,
            spin,
        )?;
        let reading = Reading::new(read_timeout)?;
        let defaults = SubscriberOptions::default();
        let mut options = SubscriberOptions {
            runtime_dir,
            name: name.to_string(),
            want_frames: false,
            want_packets: true,
            max_packet_ring_size: max_packet_ring_size.unwrap_or(defaults.max_packet_ring_size),
            max_packet_size: max_packet_size.unwrap_or(defaults.max_packet_size),
            publisher_uid,
            ..defaults
        };
        timing.apply(&mut options);
        let (sub, extradata) = connect_waiting(py, key, &options, timing.wait_publisher, |s| {
            s.packet_extradata()
        })?;
        let codec_id = sub.packet_codec_id().unwrap_or(0);
        Ok(PacketSubscriber {
            endpoint: ReadEndpoint::new((sub, Vec::new()), reading, "PacketSubscriber"),
            key: key.to_string(),
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

    /// The next packet, waiting at most `timeout` seconds; None when it runs out. Without a
    /// timeout: waits read_timeout (then cuframes.Error TIMEOUT), or forever. At the end of
    /// the stream, whatever the reason: cuframes.Error with code DISCONNECTED (the message
    /// says why; `end_reason` names it).
    #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=None)")]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Packet>> {
        let p = self.endpoint.next(py, timeout, read_packet)?;
        Ok(p.map(|p| Self::packet(py, p)))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Packet>> {
        let p = self.endpoint.iter_next(py, read_packet)?;
        Ok(p.map(|p| Self::packet(py, p)))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// `async for`: the next packet, without blocking the event loop (the wait runs on a
    /// thread of cuframes' own); StopAsyncIteration at a clean end.
    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::reading::aio_next(slf.as_any(), None, true)
    }

    /// Awaitable: the next packet, or None after `timeout` seconds, as `next()` but without
    /// blocking the event loop. A packet that arrives for a task cancelled meanwhile is kept
    /// for the next read.
    #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=None)")]
    fn anext<'py>(slf: &Bound<'py, Self>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        crate::reading::aio_next(slf.as_any(), timeout, false)
    }

    /// For `cuframes._aio`: read the next packet into the pending slot.
    #[pyo3(signature = (timeout, iterating, cancel))]
    fn _wait_pending(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        iterating: bool,
        cancel: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.endpoint
            .wait_pending(py, timeout, iterating, cancel, read_packet)
    }

    /// For `cuframes._aio`: the pending packet (None if another reader took it).
    fn _take_pending(&self, py: Python<'_>) -> PyResult<Option<Packet>> {
        let p = self.endpoint.take_pending(py)?;
        Ok(p.map(|p| Self::packet(py, p)))
    }

    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    #[getter]
    fn closed(&self) -> bool {
        self.endpoint.reading.is_closed()
    }

    /// Why the stream ended: None while it goes on; "shutdown", "kicked", "publisher_lost",
    /// "protocol_error" or "closed" (see Subscriber.end_reason).
    #[getter]
    fn end_reason(&self) -> Option<&'static str> {
        self.endpoint.reading.end_reason()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "<cuframes.PacketSubscriber key={} codec='{}' {}>",
            crate::reading::py_repr(py, &self.key)?,
            codec_name(self.codec_id),
            self.endpoint.reading.state()
        ))
    }

    /// Unsubscribe.
    fn close(&self, py: Python<'_>) {
        self.endpoint.close(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.endpoint.close(py);
        false
    }
}
