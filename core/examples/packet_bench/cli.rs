//! The command line (`[SECS [PACKETS]]`) and the roles of the reader processes this binary
//! starts of itself: the role in `PKT_BENCH_ROLE`, its argument in `PKT_BENCH_ARG` (both ends
//! of the encoding in one place).

use std::process::Command;

const ROLE_ENV: &str = "PKT_BENCH_ROLE";
const ARG_ENV: &str = "PKT_BENCH_ARG";

/// The operator's arguments.
pub struct Args {
    /// Seconds of the throttled runs (6 unless given).
    pub secs: u64,
    /// Packets of the unthrottled runs (20 000 unless given).
    pub fast_n: usize,
}

impl Args {
    /// This process's arguments.
    pub fn parse() -> Args {
        let args: Vec<String> = std::env::args().collect();
        Args {
            secs: args.get(1).and_then(|a| a.parse().ok()).unwrap_or(6),
            fast_n: args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20_000),
        }
    }
}

/// What a reader process does.
#[derive(Clone, Copy)]
pub enum Role {
    /// `next_packet` into one buffer of its own.
    Ring,
    /// The demuxer's pattern with two copies: into the reader's buffer, then a fresh packet.
    Demuxer2,
    /// The demuxer's pattern with one copy: `next_packet_into` a fresh packet.
    Demuxer1,
    /// As `Demuxer1`, spinning before each sleep.
    Demuxer1Spin,
    /// The Unix stream socket's reader.
    Unix,
    /// The UDP reader.
    Udp,
}

impl Role {
    /// The role's name in `PKT_BENCH_ROLE`.
    fn name(self) -> &'static str {
        match self {
            Role::Ring => "ring",
            Role::Demuxer2 => "ring-demuxer-2",
            Role::Demuxer1 => "ring-demuxer-1",
            Role::Demuxer1Spin => "ring-demuxer-1-spin",
            Role::Unix => "unix",
            Role::Udp => "udp",
        }
    }

    /// This binary as a reader in this role, with `arg` (the SHM name or socket path).
    pub fn command(self, arg: &str) -> Command {
        let mut cmd = crate::bench_common::child::this_binary();
        cmd.env(ROLE_ENV, self.name()).env(ARG_ENV, arg);
        cmd
    }
}

/// The role of this process and its argument, when it is a reader.
pub fn role() -> Option<(Role, String)> {
    let role = std::env::var(ROLE_ENV).ok()?;
    let arg = std::env::var(ARG_ENV).unwrap_or_default();
    let role = [
        Role::Ring,
        Role::Demuxer2,
        Role::Demuxer1,
        Role::Demuxer1Spin,
        Role::Unix,
        Role::Udp,
    ]
    .into_iter()
    .find(|r| r.name() == role)
    .unwrap_or_else(|| panic!("unknown role {role}"));
    Some((role, arg))
}
