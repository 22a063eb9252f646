//! `Subscriber`: frames from a publisher.

use std::sync::{Arc, Mutex};

use cuframes_core::subscriber::{
    Frame as CoreFrame, Subscriber as CoreSubscriber, SubscriberOptions,
};
use cuframes_core::wire::SubscriberMode;
use pyo3::create_exception;
use pyo3::exceptions::{PyUserWarning, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::endpoint::ReadEndpoint;
use crate::export::{FrameShared, FrameState};
use crate::frame::{Frame, RgbSlot};
use crate::reading::{connect_waiting, ReadError, Reading, Timing};

create_exception!(
    cuframes,
    ZeroCopyRefusedWarning,
    PyUserWarning,
    "`Subscriber(mode=\"zero_copy\")` was given copies instead: the publisher's policy is \
     drop_oldest, under which a held frame can be rewritten (pass \
     accept_zero_copy_overwrite=True to take that risk, or mode=\"auto\" to copy quietly)."
);

/// Subscribe to the frames of the publisher of `key`.
///
/// Iterating (`for frame in sub`, `async for frame in sub`) yields frames until the publisher
/// shuts down; an abnormal end (dropped by the publisher for a missed ACK, a publisher that
/// crashed, a protocol error) raises `cuframes.Error` saying why, and `end_reason` names it.
/// `next(timeout)` and `await anext(timeout)` return None after `timeout` seconds, and raise
/// `cuframes.Error` (DISCONNECTED) at any end. Waiting releases the GIL; Ctrl-C interrupts it.
///
/// Parameters:
///   key: the publisher's key.
///   name: shown to operators (printable ASCII, at most 31 bytes).
///   mode: "auto" (zero copy where the publisher's policy allows it: strict_wait, or with
///     accept_zero_copy_overwrite; copies otherwise), "zero_copy" (the same, with a
///     ZeroCopyRefusedWarning when frames are copied) or "copy".
///   runtime_dir: the socket directory (default $CUFRAMES_RUNTIME_DIR, else /run/cuframes).
///   wait_publisher: seconds to wait for a missing publisher (and its ring) to appear;
///     0 fails at once.
///   handshake_timeout: seconds the handshake with the publisher may take.
///   read_timeout: iteration, and next()/anext() without a timeout, raise cuframes.Error
///     (TIMEOUT) when nothing arrives for this many seconds; None or 0 waits forever.
///   reconnect: seconds to wait for a restarted publisher of the key and go on with it
///     (None: the stream ends when the publisher goes).
///   spin: seconds to poll for a frame before each sleep (lower latency, a busy CPU
///     meanwhile; 0 sleeps at once).
///   accept_zero_copy_overwrite: allow zero copy under drop_oldest, although a held frame
///     can then be rewritten.
///   device: the GPU of a CUDA ring: -1 = the publisher's, found by its UUID; an explicit
///     ordinal that is another GPU is refused.
///   publisher_uid: accept only a publisher running as this uid (None: any uid at first,
///     the same uid on every later connection).
///   connect_timeout: deprecated name of handshake_timeout.
///
/// After `os.fork()` (or multiprocessing's "fork" start method) the child inherits this
/// object, but the subscription stays the parent's: in the child, `close()`, garbage
/// collection and the exit only let go of the child's copy (no UNSUBSCRIBE, no ACK: the
/// parent goes on reading, and frames it holds stay held). Do not read through it in the
/// child (it would take the parent's messages): connect a new subscriber there.
#[pyclass(module = "cuframes", frozen)]
pub struct Subscriber {
    /// The subscription and the frame read for an `anext()`, shared by the readers.
    endpoint: ReadEndpoint<CoreSubscriber, CoreFrame>,
    device: i32,
    key: String,
    /// The mode asked for ("auto", "zero_copy", "copy").
    mode: &'static str,
    /// Granted at the handshake, fixed for the subscription.
    zero_copy: bool,
    /// `to_rgb`'s kernel and buffer pool, made by the first conversion of a CUDA frame.
    rgb: RgbSlot,
}

impl Subscriber {
    fn wrap(&self, f: cuframes_core::subscriber::Frame) -> Frame {
        let memory = f.memory_kind();
        let zero_copy = f.is_zero_copy();
        Frame {
            seq: f.seq,
            pts_ns: crate::values::opt_ts(f.pts_ns),
            layout: f.layout.clone(),
            colour: f.colour,
            memory,
            zero_copy,
            // The ordinal this process sees the frame's GPU as (resolved from the publisher's
            // GPU UUID), which DLPack's device id must name.
            device: f.cuda_device().map_or(self.device.max(0), |d| d.ordinal()),
            rgb: self.rgb.clone(),
            shared: Arc::new(FrameShared {
                state: Mutex::new(FrameState {
                    frame: Some(f),
                    exports: 0,
                    released: false,
                    conversions: Vec::new(),
                    views: Default::default(),
                }),
                subscriber_closed: self.endpoint.reading.closed.clone(),
            }),
        }
    }
}

/// One read of the next frame within a slice.
fn read_frame(
    sub: &mut CoreSubscriber,
    slice: std::time::Duration,
) -> Result<CoreFrame, ReadError> {
    sub.next_frame(Some(slice))
        .map_err(|e| ReadError::of(sub, e))
}

#[pymethods]
impl Subscriber {
    #[new]
    #[pyo3(signature = (key, name="python", mode="auto", runtime_dir=None, *, wait_publisher=0.0,
                        handshake_timeout=5.0, read_timeout=None, reconnect=None, spin=0.0,
                        accept_zero_copy_overwrite=false, device=-1, publisher_uid=None,
                        connect_timeout=None),
           text_signature = "(key, name='python', mode='auto', runtime_dir=None, *, \
                             wait_publisher=0.0, handshake_timeout=5.0, read_timeout=None, \
                             reconnect=None, spin=0.0, accept_zero_copy_overwrite=False, \
                             device=-1, publisher_uid=None, connect_timeout=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        key: &str,
        name: &str,
        mode: &str,
        runtime_dir: Option<std::path::PathBuf>,
        wait_publisher: f64,
        handshake_timeout: f64,
        read_timeout: Option<f64>,
        reconnect: Option<f64>,
        spin: f64,
        accept_zero_copy_overwrite: bool,
        device: i32,
        publisher_uid: Option<u32>,
        connect_timeout: Option<f64>,
    ) -> PyResult<Self> {
        let (mode, core_mode) = match mode {
            "auto" => ("auto", SubscriberMode::ZeroCopy),
            "zero_copy" => ("zero_copy", SubscriberMode::ZeroCopy),
            "copy" => ("copy", SubscriberMode::Copy),
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode must be \"auto\", \"zero_copy\" or \"copy\", not {other:?}"
                )))
            }
        };
        let timing = Timing::new(
            py,
            wait_publisher,
            handshake_timeout,
            connect_timeout,
            reconnect,
            spin,
        )?;
        let reading = Reading::new(read_timeout)?;
        let mut options = SubscriberOptions {
            runtime_dir,
            name: name.to_string(),
            cuda_device: device,
            // "auto" asks for zero copy as `-f cuframes` does: the core grants it where the
            // publisher's policy allows it, and copies otherwise.
            mode: core_mode,
            want_frames: true,
            want_packets: false,
            accept_zero_copy_overwrite,
            publisher_uid,
            ..SubscriberOptions::default()
        };
        timing.apply(&mut options);
        let (sub, ()) = connect_waiting(py, key, &options, timing.wait_publisher, |_| Ok(()))?;
        let zero_copy = sub.is_zero_copy();
        if mode == "zero_copy" && !zero_copy {
            PyErr::warn(
                py,
                &py.get_type::<ZeroCopyRefusedWarning>(),
                c"zero copy refused: the publisher's policy is drop_oldest, under which a held \
                  frame can be rewritten, so frames are copied; pass \
                  accept_zero_copy_overwrite=True to take that risk, or mode=\"auto\" to copy \
                  without this warning",
                1,
            )?;
        }
        Ok(Subscriber {
            zero_copy,
            endpoint: ReadEndpoint::new(sub, reading, "Subscriber"),
            device,
            key: key.to_string(),
            mode,
            rgb: Arc::new(Mutex::new(None)),
        })
    }

    /// The next frame, waiting at most `timeout` seconds; None when it runs out. Without a
    /// timeout: waits read_timeout (then cuframes.Error TIMEOUT), or forever. At the end of
    /// the stream, whatever the reason: cuframes.Error with code DISCONNECTED (the message
    /// says why; `end_reason` names it).
    #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=None)")]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        let f = self.endpoint.next(py, timeout, read_frame)?;
        Ok(f.map(|f| self.wrap(f)))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        let f = self.endpoint.iter_next(py, read_frame)?;
        Ok(f.map(|f| self.wrap(f)))
    }

    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// `async for`: the next frame, without blocking the event loop (the wait runs on a
    /// thread of cuframes' own); StopAsyncIteration at a clean end.
    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::reading::aio_next(slf.as_any(), None, true)
    }

    /// Awaitable: the next frame, or None after `timeout` seconds, as `next()` but without
    /// blocking the event loop. A frame that arrives for a task cancelled meanwhile is kept
    /// for the next read.
    #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=None)")]
    fn anext<'py>(slf: &Bound<'py, Self>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        crate::reading::aio_next(slf.as_any(), timeout, false)
    }

    /// For `cuframes._aio`: read the next frame into the pending slot.
    #[pyo3(signature = (timeout, iterating, cancel))]
    fn _wait_pending(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        iterating: bool,
        cancel: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        self.endpoint
            .wait_pending(py, timeout, iterating, cancel, read_frame)
    }

    /// For `cuframes._aio`: the pending frame (None if another reader took it).
    fn _take_pending(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        let f = self.endpoint.take_pending(py)?;
        Ok(f.map(|f| self.wrap(f)))
    }

    /// True when frames come without a copy (zero copy granted).
    #[getter]
    fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// The mode asked for: "auto", "zero_copy" or "copy" (`zero_copy` says what was granted).
    #[getter]
    fn mode(&self) -> &'static str {
        self.mode
    }

    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    #[getter]
    fn closed(&self) -> bool {
        self.endpoint.reading.is_closed()
    }

    /// Why the stream ended: None while it goes on; "shutdown" (the publisher shut down),
    /// "kicked" (the publisher dropped this subscriber, e.g. for a missed ACK),
    /// "publisher_lost" (the publisher went without a shutdown, and did not come back within
    /// `reconnect`), "protocol_error", or "closed" (closed by this process).
    #[getter]
    fn end_reason(&self) -> Option<&'static str> {
        self.endpoint.reading.end_reason()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "<cuframes.Subscriber key={} mode='{}' zero_copy={} {}>",
            crate::reading::py_repr(py, &self.key)?,
            self.mode,
            if self.zero_copy { "True" } else { "False" },
            self.endpoint.reading.state()
        ))
    }

    /// Unsubscribe. Frames still held can no longer be exported (exports already made stay
    /// valid memory, but they no longer hold the slot for this subscriber).
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
