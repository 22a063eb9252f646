//! Text output for people: tables and the `stat` page.

use std::fmt::Write as _;
use std::time::Duration;

use cuframes_core::inspect::{
    self, FrameSnapshot, PacketSnapshot, PublisherInfo, ShmObject, SocketState, SubscriberSnapshot,
};
use cuframes_core::Error;

pub fn short_error(e: &Error) -> String {
    match e.code() {
        cuframes_core::ErrorCode::Permission => "unreadable (permission)".into(),
        cuframes_core::ErrorCode::Protocol => "corrupt".into(),
        cuframes_core::ErrorCode::NotFound => "vanished".into(),
        _ => "error".into(),
    }
}

pub fn socket_short(s: &SocketState) -> String {
    match s {
        SocketState::Listening { .. } => "listening".into(),
        SocketState::NotListening => "stale".into(),
        SocketState::Missing => "none".into(),
        SocketState::NotASocket => "not-a-socket".into(),
        SocketState::Unknown(_) => "?".into(),
    }
}

pub fn frames_summary(f: &FrameSnapshot) -> String {
    format!(
        "{} {}x{} ring {} {} {}",
        f.format.name(),
        f.width,
        f.height,
        f.ring_size,
        f.policy.name(),
        f.memory_kind.map_or("?", |k| k.name())
    )
}

pub fn packets_summary(p: &PacketSnapshot) -> String {
    format!(
        "{} {} slots {}",
        p.codec_name(),
        p.ring_slots,
        bytes(p.data_size as u64)
    )
}

pub fn rate(v: Option<f64>, unit: f64) -> String {
    v.map_or("-".into(), |v| format!("{:.2}", v / unit))
}

pub fn bytes(n: u64) -> String {
    if n >= 1 << 20 && n % (1 << 10) == 0 {
        format!("{:.1}MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1}KiB", n as f64 / 1024.0)
    } else {
        format!("{n}B")
    }
}

pub fn age(d: Option<Duration>) -> String {
    match d {
        None => "never".into(),
        Some(d) if d.as_secs() >= 3600 => {
            format!("{}h{:02}m", d.as_secs() / 3600, d.as_secs() / 60 % 60)
        }
        Some(d) if d.as_secs() >= 60 => format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60),
        Some(d) => format!("{:.2}s", d.as_secs_f64()),
    }
}

pub fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut width = [0usize; N];
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (k, c) in r.iter().enumerate() {
            if k + 1 == N {
                line.push_str(c);
            } else {
                let _ = write!(line, "{c:<w$}  ", w = width[k]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn stat_text(i: &PublisherInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} ({})",
        i.key,
        i.liveness.name(),
        i.liveness.reason()
    );
    let sock = match &i.socket {
        SocketState::Listening { connections } => {
            format!("listening, {connections} connection(s)")
        }
        SocketState::NotListening => {
            "not listening (stale, or in another network namespace)".into()
        }
        SocketState::Missing => "missing".into(),
        SocketState::NotASocket => "not a socket (ignored)".into(),
        SocketState::Unknown(m) => format!("unknown: {m}"),
    };
    let _ = writeln!(s, "  socket   {}  {sock}", i.socket_path.display());
    match &i.frames {
        None => {
            let _ = writeln!(s, "  frames   none");
        }
        Some(ShmObject {
            content: Err(e),
            name,
            ..
        }) => {
            let _ = writeln!(s, "  frames   /dev/shm/{name}: {}", e.message());
        }
        Some(ShmObject { content: Ok(f), .. }) => frames_text(&mut s, f, i.rates.frames_per_sec),
    }
    match &i.packets {
        None => {
            let _ = writeln!(s, "  packets  none");
        }
        Some(ShmObject {
            content: Err(e),
            name,
            ..
        }) => {
            let _ = writeln!(s, "  packets  /dev/shm/{name}: {}", e.message());
        }
        Some(ShmObject { content: Ok(p), .. }) => packets_text(&mut s, p, &i.rates),
    }
    for m in &i.owner_mismatch {
        let _ = writeln!(s, "  owner    mismatch: {m}");
    }
    for o in &i.others {
        let uid = o.meta.as_ref().map_or("?".into(), |m| m.uid.to_string());
        let pid = o.producer_pid.map_or("-".into(), pid_text);
        let _ = writeln!(
            s,
            "  other    /dev/shm/{}  uid {uid}  producer pid {pid}",
            o.name
        );
    }
    s
}

pub fn pid_text(pid: u64) -> String {
    if cuframes_core::liveness::is_alive(pid) {
        format!("{pid}")
    } else {
        format!("{pid} (gone)")
    }
}

pub fn frames_text(s: &mut String, f: &FrameSnapshot, fps: Option<f64>) {
    let _ = writeln!(
        s,
        "  frames   /dev/shm/{}  {}  pitch {}/{}  {} bytes/frame",
        f.shm_name,
        frames_summary(f),
        f.pitch_y,
        f.pitch_uv,
        f.frame_size_bytes
    );
    let _ = writeln!(
        s,
        "           seq {}  {} fps  producer pid {}  library {}.{}.{}  shutdown {}  sleeping readers {}",
        f.global_seq,
        rate(fps, 1.0),
        pid_text(f.producer_pid),
        f.lib_version.0,
        f.lib_version.1,
        f.lib_version.2,
        if f.shutdown { "yes" } else { "no" },
        f.waiters
    );
    for w in &f.warnings {
        let _ = writeln!(s, "           warning: {w}");
    }
    if f.subscribers.is_empty() {
        let _ = writeln!(s, "  subscribers: none");
        return;
    }
    let mut rows = vec![[
        "BIT",
        "NAME",
        "PID",
        "STATE",
        "READS",
        "LAG",
        "LAST ACK",
        "DELIVERED",
        "DROPS",
        "OVERRUN",
        "TORN",
    ]
    .map(String::from)];
    for sub in &f.subscribers {
        rows.push(subscriber_row(sub));
    }
    for line in table(&rows).lines() {
        let _ = writeln!(s, "    {line}");
    }
}

pub fn subscriber_row(sub: &SubscriberSnapshot) -> [String; 11] {
    [
        sub.bit.to_string(),
        if sub.name.is_empty() {
            "-".into()
        } else {
            sub.name.clone()
        },
        pid_text(sub.pid),
        sub.state_name().into(),
        if sub.reads_frames {
            "frames"
        } else {
            "packets"
        }
        .into(),
        if sub.reads_frames {
            sub.lag.to_string()
        } else {
            "-".into()
        },
        if sub.ack_age.is_some() {
            format!("{} ago", age(sub.ack_age))
        } else {
            "never".into()
        },
        sub.delivered.to_string(),
        sub.drops().to_string(),
        sub.dropped_overrun.to_string(),
        sub.dropped_torn.to_string(),
    ]
}

pub fn packets_text(s: &mut String, p: &PacketSnapshot, r: &inspect::Rates) {
    let _ = writeln!(
        s,
        "  packets  /dev/shm/{}  {} (codec id {})  {} slots  {} data  extradata {} bytes",
        p.shm_name,
        p.codec_name(),
        p.codec_id,
        p.ring_slots,
        bytes(p.data_size as u64),
        p.extradata_size
    );
    let keyframe = match p.keyframe_age_packets() {
        None => "no keyframe yet".to_string(),
        Some(n) => format!(
            "last keyframe seq {} ({n} packets ago{}{})",
            p.last_keyframe_seq,
            p.keyframe_age()
                .map_or(String::new(), |d| format!(", {} of stream", age(Some(d)))),
            if p.keyframe_in_ring {
                ""
            } else {
                // The ring lost it; subscribers get it from the GOP store, which the
                // inspector cannot see (a memfd of the publisher's).
                ", no longer in the ring: late subscribers start from the GOP store if it kept this GOP"
            }
        ),
    };
    let _ = writeln!(
        s,
        "           seq {}  {} pkt/s  {} MB/s  {} bytes total  producer pid {}  shutdown {}",
        p.global_seq,
        rate(r.packets_per_sec, 1.0),
        rate(r.packet_bytes_per_sec, 1e6),
        p.write_offset,
        pid_text(p.producer_pid),
        if p.shutdown { "yes" } else { "no" }
    );
    let _ = writeln!(s, "           {keyframe}");
    for w in &p.warnings {
        let _ = writeln!(s, "           warning: {w}");
    }
}
