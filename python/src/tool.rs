//! `python -m cuframes ls|stat|clean|snapshot`: the operator tool's commands from Python. The
//! code is the `cuframes` binary's (the crate `cuframes-tool`, [`cuframes_tool::run`]); only
//! where it writes and how it waits differ. It writes to Python's `sys.stdout` / `sys.stderr` (what
//! pytest's capsys, a redirect or a notebook see), or to fd 1 / fd 2 when they are None, and
//! runs without the GIL, looking at Python's signals between the slices of every wait, so
//! that Ctrl-C ends `stat --watch` at once with KeyboardInterrupt. `exporter` is the binary's
//! alone: it says so (status 2).

use std::io::{self, Write};
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::values::lock;

/// The first Python exception met while writing or looking at signals: raised once the
/// command has returned (a KeyboardInterrupt stays a KeyboardInterrupt).
type Pending = Mutex<Option<PyErr>>;

fn keep(pending: &Pending, e: PyErr) {
    lock(pending).get_or_insert(e);
}

/// `sys.stdout` or `sys.stderr` as an `io::Write`. Bytes are passed on as whole UTF-8
/// characters (the tool writes text; a character cut between two writes waits for its end).
struct PyStream<'a> {
    name: &'static str,
    pending: &'a Pending,
    held: Vec<u8>,
}

impl<'a> PyStream<'a> {
    fn new(name: &'static str, pending: &'a Pending) -> Self {
        PyStream {
            name,
            pending,
            held: Vec::new(),
        }
    }

    /// Hand what is held, up to its last whole character, to Python's stream.
    fn pass_on(&mut self) -> io::Result<()> {
        let whole = match std::str::from_utf8(&self.held) {
            Ok(s) => s.len(),
            // A character cut at the end: keep its start for the next write.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Not UTF-8 at all (never written by the tool): shown with replacement characters.
            Err(_) => self.held.len(),
        };
        if whole == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.held[..whole]).into_owned();
        self.held.drain(..whole);
        self.with_stream(
            |s| s.call_method1("write", (text.as_str(),)).map(drop),
            |fd| fd.write_all(text.as_bytes()),
        )
    }

    /// Run `py_op` on Python's stream, or `fd_op` on fd 1 / fd 2 when it is None.
    fn with_stream(
        &self,
        py_op: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<()>,
        fd_op: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let r = Python::with_gil(|py| -> PyResult<Option<()>> {
            let stream = py.import("sys")?.getattr(self.name)?;
            if stream.is_none() {
                return Ok(None);
            }
            py_op(&stream).map(Some)
        });
        match r {
            Ok(Some(())) => Ok(()),
            Ok(None) if self.name == "stdout" => fd_op(&mut io::stdout().lock()),
            Ok(None) => fd_op(&mut io::stderr().lock()),
            Err(e) => {
                let msg = format!("cannot write to sys.{}: {e}", self.name);
                keep(self.pending, e);
                Err(io::Error::other(msg))
            }
        }
    }
}

impl Write for PyStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.held.extend_from_slice(buf);
        self.pass_on()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.pass_on()?;
        self.with_stream(|s| s.call_method0("flush").map(drop), |fd| fd.flush())
    }
}

/// Run the operator tool's command line `argv` (without the program name: `["ls", "--json"]`)
/// as the `cuframes` binary would, writing to `sys.stdout` / `sys.stderr`; returns the exit
/// status (0 success, 1 an error, 2 usage). Ctrl-C raises KeyboardInterrupt.
#[pyfunction]
#[pyo3(name = "_tool_main")]
pub(crate) fn tool_main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let pending: Pending = Mutex::new(None);
    let ran = py.allow_threads(|| {
        let mut out = PyStream::new("stdout", &pending);
        let mut err = PyStream::new("stderr", &pending);
        let mut interrupted = || match Python::with_gil(|py| py.check_signals()) {
            Ok(()) => false,
            Err(e) => {
                keep(&pending, e);
                true
            }
        };
        let mut console = cuframes_tool::Console {
            out: &mut out,
            err: &mut err,
            interrupted: &mut interrupted,
        };
        // No panic crosses into Python's frames unannounced: it becomes a RuntimeError.
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            cuframes_tool::run(argv, &mut console, None)
        }))
    });
    if let Some(e) = lock(&pending).take() {
        return Err(e);
    }
    match ran {
        Ok(status) => Ok(i32::from(status)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(PyRuntimeError::new_err(format!(
                "cuframes tool: internal error: {what}"
            )))
        }
    }
}
