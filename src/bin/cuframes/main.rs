//! `cuframes`: the operator tool. See, watch and clean what publishers are running.
//!
//! It only reads: SHM objects are mapped read-only, sockets are never connected to (except by
//! `clean`, which checks a dead-looking socket the way a new publisher would before removing
//! it). The exporter serves the same numbers over HTTP for Prometheus. See
//! `docs/operations.md`.

mod args;
mod clean;
mod exporter;
mod json;
mod ls;
mod stat;
mod text;

use std::process::ExitCode;

use cuframes_core::Error;

use args::{parse_args, Command, USAGE};
use clean::clean;
use exporter::exporter;
use ls::ls;
use stat::{stat, watch};

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("cuframes: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match args.command {
        Command::Help => {
            print!("{USAGE}");
            Ok(true)
        }
        Command::Ls { json, interval } => ls(&args.runtime_dir, json, interval),
        Command::Stat {
            key,
            watch: None,
            json,
            interval,
        } => stat(&args.runtime_dir, &key, json, interval),
        Command::Stat {
            key,
            watch: Some(every),
            json,
            interval,
        } => watch(&args.runtime_dir, &key, json, every, interval),
        Command::Clean {
            dry_run,
            json,
            keys,
        } => clean(&args.runtime_dir, &keys, dry_run, json),
        Command::Exporter(opts) => exporter(&args.runtime_dir, &opts),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cuframes: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A core error as the operator should read it (its message; the code only when it adds).
pub fn core_err(e: Error) -> anyhow::Error {
    anyhow::anyhow!("{}", e.message())
}
