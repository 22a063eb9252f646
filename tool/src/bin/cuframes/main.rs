//! `cuframes`: the operator tool. See, watch and clean what publishers are running (the views
//! are the library's, `cuframes_tool::run`, which `python -m cuframes` runs too); the exporter,
//! which serves the same numbers over HTTP for Prometheus, is this binary's own. See
//! `docs/operations.md`.

mod exporter;

use std::process::ExitCode;

use cuframes_tool::Console;

fn main() -> ExitCode {
    // Not locked for the whole run: the exporter's threads write to them too.
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    // Ctrl-C ends the process (SIGINT's default action): nothing to ask between waits.
    let mut never = || false;
    let mut console = Console {
        out: &mut out,
        err: &mut err,
        interrupted: &mut never,
    };
    let status = cuframes_tool::run(
        std::env::args().skip(1).collect(),
        &mut console,
        Some(&exporter::exporter),
    );
    ExitCode::from(status)
}
