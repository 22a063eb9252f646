//! A child process of a benchmark: this binary re-executed in a role, which prints one line
//! when it is ready and its results on a later line of its stdout.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A started child: the process, its stdout, and the ready line it printed first.
pub struct Started {
    /// The child process.
    pub child: Child,
    /// Its stdout, after the ready line.
    pub out: BufReader<ChildStdout>,
    /// Its first line (with the newline).
    pub ready: String,
}

/// This binary, to run again as a child (callers add the arguments or environment of its role).
pub fn this_binary() -> Command {
    Command::new(std::env::current_exe().unwrap())
}

/// Spawns `cmd` with its stdout piped and waits for its first line (the child is ready then).
pub fn start(mut cmd: Command) -> Started {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    Started { child, out, ready }
}
