//! JSON output for programs, written by hand (no serde in this crate).

use std::fmt::Write as _;

use cuframes_core::inspect::{
    self, CleanReport, FrameSnapshot, PacketSnapshot, PublisherInfo, SocketState,
    SubscriberSnapshot,
};
use cuframes_core::Error;

pub fn clean_json(r: &CleanReport) -> J {
    J::Obj(vec![
        ("dry_run", J::Bool(r.dry_run)),
        (
            "removed",
            J::Arr(
                r.removed
                    .iter()
                    .map(|x| {
                        J::Obj(vec![
                            ("key", J::Str(x.key.clone())),
                            ("what", J::Str(x.what.into())),
                            ("path", J::Str(x.path.clone())),
                            ("reason", J::Str(x.reason.clone())),
                        ])
                    })
                    .collect(),
            ),
        ),
        (
            "kept",
            J::Arr(
                r.kept
                    .iter()
                    .map(|(k, why)| {
                        J::Obj(vec![
                            ("key", J::Str(k.clone())),
                            ("reason", J::Str(why.clone())),
                        ])
                    })
                    .collect(),
            ),
        ),
        (
            "failed",
            J::Arr(
                r.failed
                    .iter()
                    .map(|(p, e)| {
                        J::Obj(vec![
                            ("path", J::Str(p.clone())),
                            ("error", J::Str(e.clone())),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}

#[derive(Debug, Clone)]
pub enum J {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(&'static str, J)>),
}

impl J {
    pub fn opt_f(v: Option<f64>) -> J {
        v.map_or(J::Null, J::Float)
    }

    pub fn u(v: u64) -> J {
        J::Int(v as i128)
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Int(i) => {
                let _ = write!(out, "{i}");
            }
            J::Float(f) if f.is_finite() => {
                // Display of f64 never uses an exponent; round to keep it short.
                let r = (f * 1000.0).round() / 1000.0;
                let _ = write!(out, "{r}");
            }
            J::Float(_) => out.push_str("null"),
            J::Str(s) => escape(s, out),
            J::Arr(v) => {
                out.push('[');
                for (k, x) in v.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    x.write(out);
                }
                out.push(']');
            }
            J::Obj(v) => {
                out.push('{');
                for (k, (name, x)) in v.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    escape(name, out);
                    out.push(':');
                    x.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// A JSON string literal (RFC 8259 §7): quote, backslash and control characters escaped.
pub fn escape(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub fn error_json(e: &Error) -> J {
    J::Obj(vec![
        ("error", J::Str(e.message().to_owned())),
        ("code", J::Str(e.code().name().into())),
    ])
}

pub fn info_json(i: &PublisherInfo) -> J {
    let socket = {
        let mut v = vec![
            ("path", J::Str(i.socket_path.display().to_string())),
            ("state", J::Str(i.socket.name().into())),
        ];
        if let SocketState::Listening { connections } = i.socket {
            v.push(("connections", J::u(connections as u64)));
        }
        J::Obj(v)
    };
    let frames = match &i.frames {
        None => J::Null,
        Some(o) => match &o.content {
            Err(e) => with_shm(&o.name, error_json(e)),
            Ok(f) => frames_json(f, i.rates.frames_per_sec),
        },
    };
    let packets = match &i.packets {
        None => J::Null,
        Some(o) => match &o.content {
            Err(e) => with_shm(&o.name, error_json(e)),
            Ok(p) => packets_json(p, &i.rates),
        },
    };
    J::Obj(vec![
        ("key", J::Str(i.key.clone())),
        ("state", J::Str(i.liveness.name().into())),
        ("alive", J::Bool(i.liveness.is_alive())),
        ("reason", J::Str(i.liveness.reason().into())),
        ("pid", i.pid().map_or(J::Null, J::u)),
        (
            "subscriber_count",
            i.subscriber_count().map_or(J::Null, |n| J::u(n as u64)),
        ),
        (
            "owner_mismatch",
            J::Arr(i.owner_mismatch.iter().map(|m| J::Str(m.clone())).collect()),
        ),
        ("socket", socket),
        ("frames", frames),
        ("packets", packets),
        (
            "other_shm",
            J::Arr(i.others.iter().map(other_json).collect()),
        ),
    ])
}

/// One of the key's other SHM objects (a generation name, or its name held by another uid).
fn other_json(o: &cuframes_core::inspect::OtherObject) -> J {
    J::Obj(vec![
        ("shm", J::Str(format!("/dev/shm/{}", o.name))),
        (
            "uid",
            o.meta.as_ref().map_or(J::Null, |m| J::u(u64::from(m.uid))),
        ),
        ("producer_pid", o.producer_pid.map_or(J::Null, J::u)),
    ])
}

pub fn with_shm(name: &str, j: J) -> J {
    match j {
        J::Obj(mut v) => {
            v.insert(0, ("shm", J::Str(format!("/dev/shm/{name}"))));
            J::Obj(v)
        }
        other => other,
    }
}

pub fn frames_json(f: &FrameSnapshot, fps: Option<f64>) -> J {
    J::Obj(vec![
        ("shm", J::Str(format!("/dev/shm/{}", f.shm_name))),
        ("producer_pid", J::u(f.producer_pid)),
        (
            "producer_alive",
            J::Bool(cuframes_core::liveness::is_alive(f.producer_pid)),
        ),
        (
            "library_version",
            J::Str(format!(
                "{}.{}.{}",
                f.lib_version.0, f.lib_version.1, f.lib_version.2
            )),
        ),
        ("format", J::Str(f.format.name().into())),
        ("width", J::u(f.width as u64)),
        ("height", J::u(f.height as u64)),
        ("pitch_y", J::u(f.pitch_y as u64)),
        ("pitch_uv", J::u(f.pitch_uv as u64)),
        ("frame_size_bytes", J::u(f.frame_size_bytes)),
        ("ring_size", J::u(f.ring_size as u64)),
        ("policy", J::Str(f.policy.name().into())),
        (
            "memory",
            f.memory_kind.map_or(J::Null, |k| J::Str(k.name().into())),
        ),
        ("seq", J::u(f.global_seq)),
        ("fps", J::opt_f(fps)),
        ("shutdown", J::Bool(f.shutdown)),
        ("sleeping_readers", J::u(f.waiters as u64)),
        ("subscriber_bitmap", J::u(f.subscriber_bitmap)),
        (
            "subscribers",
            J::Arr(f.subscribers.iter().map(subscriber_json).collect()),
        ),
        (
            "warnings",
            J::Arr(f.warnings.iter().map(|w| J::Str(w.clone())).collect()),
        ),
    ])
}

pub fn subscriber_json(s: &SubscriberSnapshot) -> J {
    J::Obj(vec![
        ("bit", J::u(s.bit as u64)),
        ("name", J::Str(s.name.clone())),
        ("pid", J::u(s.pid)),
        ("pid_alive", J::Bool(s.pid_alive)),
        ("state", J::Str(s.state_name().into())),
        ("reads_frames", J::Bool(s.reads_frames)),
        ("lag", J::u(s.lag)),
        ("last_seen_seq", J::u(s.last_seen_seq)),
        (
            "last_ack_age_s",
            J::opt_f(s.ack_age.map(|d| d.as_secs_f64())),
        ),
        ("delivered", J::u(s.delivered)),
        ("drops", J::u(s.drops())),
        ("dropped_overrun", J::u(s.dropped_overrun)),
        ("dropped_torn", J::u(s.dropped_torn)),
    ])
}

pub fn packets_json(p: &PacketSnapshot, r: &inspect::Rates) -> J {
    J::Obj(vec![
        ("shm", J::Str(format!("/dev/shm/{}", p.shm_name))),
        ("producer_pid", J::u(p.producer_pid)),
        (
            "producer_alive",
            J::Bool(cuframes_core::liveness::is_alive(p.producer_pid)),
        ),
        ("codec", J::Str(p.codec_name())),
        ("codec_id", J::u(p.codec_id as u64)),
        ("ring_slots", J::u(p.ring_slots as u64)),
        ("data_size", J::u(p.data_size as u64)),
        ("extradata_size", J::u(p.extradata_size as u64)),
        ("seq", J::u(p.global_seq)),
        ("bytes", J::u(p.write_offset)),
        ("packets_per_s", J::opt_f(r.packets_per_sec)),
        (
            "mb_per_s",
            J::opt_f(r.packet_bytes_per_sec.map(|b| b / 1e6)),
        ),
        (
            "last_keyframe_seq",
            if p.last_keyframe_seq == 0 {
                J::Null
            } else {
                J::u(p.last_keyframe_seq)
            },
        ),
        (
            "keyframe_age_packets",
            p.keyframe_age_packets().map_or(J::Null, J::u),
        ),
        (
            "keyframe_age_s",
            J::opt_f(p.keyframe_age().map(|d| d.as_secs_f64())),
        ),
        ("keyframe_in_ring", J::Bool(p.keyframe_in_ring)),
        ("shutdown", J::Bool(p.shutdown)),
        (
            "warnings",
            J::Arr(p.warnings.iter().map(|w| J::Str(w.clone())).collect()),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let j = J::Obj(vec![("k", J::Str("a\"b\\c\nd\u{1}e\u{7f}é".into()))]);
        assert_eq!(j.render(), r#"{"k":"a\"b\\c\nd\u0001e\u007fé"}"#);
        assert_eq!(J::Float(f64::NAN).render(), "null");
        assert_eq!(J::Float(1.23456).render(), "1.235");
        assert_eq!(J::Float(30.0).render(), "30");
    }
}
