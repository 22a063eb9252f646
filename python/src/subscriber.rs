//! `Subscriber`: frames from a publisher.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cuframes_core::subscriber::{Subscriber as CoreSubscriber, SubscriberOptions};
use cuframes_core::wire::SubscriberMode;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::export::{FrameShared, FrameState};
use crate::frame::{Frame, RgbSlot};
use crate::{duration, lock, to_py, until_disconnected, wait_in_slices};

/// Subscribe to a publisher's frames.
///
/// Waiting for a frame releases the GIL. Iterating yields frames until the publisher shuts
/// down; `next(timeout)` returns None on timeout.
///
/// After `os.fork()` (or multiprocessing's "fork" start method) the child inherits this
/// object, but the subscription stays the parent's: in the child, `close()`, garbage
/// collection and the exit only let go of the child's copy (no UNSUBSCRIBE, no ACK: the
/// parent goes on reading, and frames it holds stay held). Do not read through it in the
/// child (it would take the parent's messages): connect a new subscriber there.
#[pyclass(module = "cuframes", frozen)]
pub struct Subscriber {
    inner: Mutex<Option<CoreSubscriber>>,
    closed: Arc<AtomicBool>,
    device: i32,
    key: String,
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
            pts_ns: crate::opt_ts(f.pts_ns),
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
                }),
                subscriber_closed: self.closed.clone(),
            }),
        }
    }

    /// The next frame; Ok(None) on timeout. `end_ok`: DISCONNECTED is Ok(None) too.
    fn next_impl(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        let f = wait_in_slices(py, timeout, |slice| {
            lock(&self.inner)
                .as_mut()
                .map(|s| s.next_frame(Some(slice)))
        })?;
        Ok(f.map(|f| self.wrap(f)))
    }

    fn close_impl(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        let sub = py.allow_threads(|| lock(&self.inner).take());
        drop(sub);
    }
}

#[pymethods]
impl Subscriber {
    #[new]
    #[pyo3(signature = (key, name="python", mode="copy", runtime_dir=None, connect_timeout=5.0,
                        accept_zero_copy_overwrite=false, device=-1, spin=0.0, reconnect=None,
                        publisher_uid=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        key: &str,
        name: &str,
        mode: &str,
        runtime_dir: Option<std::path::PathBuf>,
        connect_timeout: f64,
        accept_zero_copy_overwrite: bool,
        device: i32,
        spin: f64,
        reconnect: Option<f64>,
        publisher_uid: Option<u32>,
    ) -> PyResult<Self> {
        let mode = match mode {
            "copy" => SubscriberMode::Copy,
            "zero_copy" => SubscriberMode::ZeroCopy,
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode must be \"copy\" or \"zero_copy\", not {other:?}"
                )))
            }
        };
        let options = SubscriberOptions {
            runtime_dir,
            name: name.to_string(),
            cuda_device: device,
            mode,
            want_frames: true,
            want_packets: false,
            connect_timeout: duration("connect_timeout", connect_timeout)?,
            accept_zero_copy_overwrite,
            spin: duration("spin", spin)?,
            reconnect: reconnect.map(|s| duration("reconnect", s)).transpose()?,
            publisher_uid,
            ..SubscriberOptions::default()
        };
        let sub = py
            .allow_threads(|| CoreSubscriber::connect(key, &options))
            .map_err(to_py)?;
        Ok(Subscriber {
            zero_copy: sub.is_zero_copy(),
            inner: Mutex::new(Some(sub)),
            closed: Arc::new(AtomicBool::new(false)),
            device,
            key: key.to_string(),
            rgb: Arc::new(Mutex::new(None)),
        })
    }

    /// The next frame, waiting at most `timeout` seconds (None: until one comes); None on
    /// timeout. At the end of the stream: `cuframes.Error` with code DISCONNECTED.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        self.next_impl(py, timeout)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        until_disconnected(py, self.next_impl(py, None))
    }

    /// True when frames come without a copy (zero_copy granted).
    #[getter]
    fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Unsubscribe. Frames still held can no longer be exported (exports already made stay
    /// valid memory, but they no longer hold the slot for this subscriber).
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

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
    }
}
