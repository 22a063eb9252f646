//! Where a command writes, and how it waits: the `cuframes` binary gives it the process's
//! stdout and stderr; `python -m cuframes` gives it Python's `sys.stdout` / `sys.stderr` and
//! a look at Python's signals, so that Ctrl-C ends a wait (`stat --watch`, `--interval`) at
//! once there too.

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use cuframes_core::inspect::{self, PublisherInfo, Rates};
use cuframes_core::paths::Key;

use crate::core_err;

/// How long one sleep lasts before `interrupted` is asked again.
const SLICE: Duration = Duration::from_millis(50);

pub struct Console<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    /// Asked between the slices of every wait: `true` ends the command with [`Interrupted`].
    pub interrupted: &'a mut dyn FnMut() -> bool,
}

/// The command was ended by the caller's `interrupted` (Ctrl-C): no error to print.
#[derive(Debug)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

impl Console<'_> {
    /// Sleep `d`, in slices, asking `interrupted` between them.
    pub fn pause(&mut self, d: Duration) -> Result<()> {
        let end = Instant::now() + d;
        loop {
            if (self.interrupted)() {
                return Err(Interrupted.into());
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(SLICE));
        }
    }

    /// `inspect::sample` with an interruptible wait: two looks `interval` apart, the second
    /// with the rates between them.
    pub fn sample(
        &mut self,
        dir: &Path,
        keys: Option<&[Key]>,
        interval: Duration,
    ) -> Result<Vec<PublisherInfo>> {
        let first = inspect::list(dir, keys).map_err(core_err)?;
        if interval.is_zero() {
            return Ok(first);
        }
        self.pause(interval)?;
        let mut second = inspect::list(dir, keys).map_err(core_err)?;
        for info in &mut second {
            if let Some(prev) = first.iter().find(|p| p.key == info.key) {
                info.rates = Rates::between(prev, info);
            }
        }
        Ok(second)
    }
}
