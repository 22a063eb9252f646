//! The command line: the operator's flags, and the arguments of the child processes this binary
//! starts of itself (both ends of their encoding in one place).
//!
//! ```text
//! frame_bench [--frames N] [--wake-ups-only | --tables-1-2]   # the tables (a CUDA device)
//! frame_bench --host-probe                                    # host-memory ring, no GPU
//! frame_bench --child KEY pages|header SPIN_US zero_copy|copy read|probe
//! frame_bench --futex-child SHM_NAME sleep|spin
//! frame_bench --idle-child KEY
//! ```

use std::time::Duration;

use crate::config::Acks;

/// What this process does.
pub enum Invocation {
    /// A subscriber of one run (`child::run`).
    Child(ChildArgs),
    /// The futex baseline's waiting side.
    FutexChild { name: String, spin: bool },
    /// The idle subscriber whose CPU table 1 reports.
    IdleChild { key: String },
    /// The spinning path on a host-memory ring only.
    HostProbe,
    /// The tables on the GPU.
    Tables(Tables),
}

/// Which tables run, with how many frames.
pub struct Tables {
    /// `--frames N` (300 unless given).
    pub frames: u64,
    /// `--wake-ups-only`: table 1 only.
    pub wake_ups_only: bool,
    /// `--tables-1-2`: tables 1 and 2.
    pub tables_1_2: bool,
}

/// A subscriber child's arguments.
pub struct ChildArgs {
    pub key: String,
    pub acks: Acks,
    pub spin: Duration,
    /// COPY mode instead of zero copy.
    pub copy: bool,
    /// The subscriber is the probe (`probe::child`).
    pub probe: bool,
}

impl ChildArgs {
    /// The arguments that make this binary a child with these settings (read back by `parse`).
    pub fn to_args(&self) -> Vec<String> {
        [
            "--child",
            &self.key,
            if self.acks == Acks::Header {
                "header"
            } else {
                "pages"
            },
            &self.spin.as_micros().to_string(),
            if self.copy { "copy" } else { "zero_copy" },
            if self.probe { "probe" } else { "read" },
        ]
        .map(String::from)
        .to_vec()
    }
}

/// The futex child's arguments (read back by `parse`).
pub fn futex_child_args(name: &str, spin: bool) -> [&str; 3] {
    ["--futex-child", name, if spin { "spin" } else { "sleep" }]
}

/// The idle child's arguments (read back by `parse`).
pub fn idle_child_args(key: &str) -> [&str; 2] {
    ["--idle-child", key]
}

/// What `args` (this process's, the program name first) ask for.
pub fn parse(args: Vec<String>) -> Invocation {
    let arg = |i: usize| args.get(i).map(String::as_str);
    if arg(1) == Some("--child") {
        let acks = if arg(3) == Some("header") {
            Acks::Header
        } else {
            Acks::Pages
        };
        let spin = arg(4).and_then(|v| v.parse().ok()).unwrap_or(0);
        return Invocation::Child(ChildArgs {
            key: args[2].clone(),
            acks,
            spin: Duration::from_micros(spin),
            copy: arg(5) == Some("copy"),
            probe: arg(6) == Some("probe"),
        });
    }
    if arg(1) == Some("--futex-child") {
        return Invocation::FutexChild {
            name: args[2].clone(),
            spin: arg(3) == Some("spin"),
        };
    }
    if arg(1) == Some("--idle-child") {
        return Invocation::IdleChild {
            key: args[2].clone(),
        };
    }
    if args.iter().any(|a| a == "--host-probe") {
        return Invocation::HostProbe;
    }
    Invocation::Tables(Tables {
        frames: args
            .iter()
            .position(|a| a == "--frames")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
        wake_ups_only: args.iter().any(|a| a == "--wake-ups-only"),
        tables_1_2: args.iter().any(|a| a == "--tables-1-2"),
    })
}
