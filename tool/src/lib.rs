//! The operator tool's views: `ls`, `stat` (once or `--watch`), `clean` and `snapshot`, with
//! the command line of every command (`exporter` included). One implementation, run by the
//! `cuframes` binary (src/bin/cuframes) and by `python -m cuframes` (python/src/tool.rs)
//! through [`run`].
//!
//! The views only read: SHM objects are mapped read-only, sockets are never connected to
//! (except by `clean`, which checks a dead-looking socket the way a new publisher would before
//! removing it). `snapshot` subscribes, as a COPY-mode reader, for one frame. See
//! `docs/operations.md`.

mod args;
mod atomic_file;
mod clean;
mod console;
pub mod exporter_options;
mod json;
mod ls;
mod snapshot;
mod stat;
mod text;

use std::path::Path;

use cuframes_core::Error;

pub use args::USAGE;
pub use console::{Console, Interrupted};
pub use exporter_options::Options as ExporterOptions;
pub use snapshot::SnapshotOptions;

use args::{parse_args, subcommand, Command};

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: an error, or objects that could not be read or removed.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: the command line cannot be parsed (or asks for what this caller lacks).
pub const EXIT_USAGE: u8 = 2;
/// Exit status: ended by Ctrl-C (128 + SIGINT, as a shell reports it).
pub const EXIT_INTERRUPTED: u8 = 130;

/// The exporter, which only the binary has (it serves until stopped).
pub type Exporter<'a> = &'a dyn Fn(&Path, &ExporterOptions) -> anyhow::Result<bool>;

/// Run the command line `argv` (without the program name), writing to `console`; returns the
/// exit status. Without `exporter`, `exporter` says to use the `cuframes` binary.
pub fn run(argv: Vec<String>, console: &mut Console<'_>, exporter: Option<Exporter<'_>>) -> u8 {
    let status = run_inner(argv, console, exporter);
    // What is buffered is part of the answer; a failure to write it changes the status.
    let flushed = console.out.flush().and(console.err.flush());
    if flushed.is_err() && status == EXIT_OK {
        return EXIT_FAILED;
    }
    status
}

fn run_inner(argv: Vec<String>, console: &mut Console<'_>, exporter: Option<Exporter<'_>>) -> u8 {
    let wants_exporter = subcommand(&argv) == Some("exporter");
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(_) if wants_exporter && exporter.is_none() => return no_exporter(console),
        Err(msg) => {
            let _ = write!(console.err, "cuframes: {msg}\n\n{USAGE}");
            return EXIT_USAGE;
        }
    };
    let result = match args.command {
        Command::Help => write!(console.out, "{USAGE}")
            .map(|()| true)
            .map_err(Into::into),
        Command::Ls { json, interval } => ls::ls(console, &args.runtime_dir, json, interval),
        Command::Stat {
            key,
            watch: None,
            json,
            interval,
        } => stat::stat(console, &args.runtime_dir, &key, json, interval),
        Command::Stat {
            key,
            watch: Some(every),
            json,
            interval,
        } => stat::watch(console, &args.runtime_dir, &key, json, every, interval),
        Command::Clean {
            dry_run,
            json,
            keys,
        } => clean::clean(console, &args.runtime_dir, &keys, dry_run, json),
        Command::Snapshot { key, file, options } => {
            snapshot::snapshot(console, &args.runtime_dir, &key, &file, &options)
        }
        Command::Exporter(opts) => match exporter {
            Some(serve) => serve(&args.runtime_dir, &opts),
            None => return no_exporter(console),
        },
    };
    match result {
        Ok(true) => EXIT_OK,
        Ok(false) => EXIT_FAILED,
        Err(e) if e.is::<Interrupted>() => EXIT_INTERRUPTED,
        Err(e) => {
            let _ = writeln!(console.err, "cuframes: {e:#}");
            EXIT_FAILED
        }
    }
}

fn no_exporter(console: &mut Console<'_>) -> u8 {
    let _ = writeln!(
        console.err,
        "cuframes: the exporter is served by the cuframes binary only \
         (cuframes exporter --listen ADDRESS:PORT); here: ls, stat, clean, snapshot"
    );
    EXIT_USAGE
}

/// A core error as the operator should read it (its message; the code only when it adds).
pub(crate) fn core_err(e: Error) -> anyhow::Error {
    anyhow::anyhow!("{}", e.message())
}
