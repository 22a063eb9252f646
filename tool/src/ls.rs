//! `cuframes ls`: every publisher, one row each.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use cuframes_core::inspect;

use crate::console::Console;
use crate::json::{info_json, J};
use crate::text::{frames_summary, packets_summary, rate, short_error, socket_short, table};

pub fn ls(c: &mut Console<'_>, dir: &Path, json: bool, interval: Duration) -> Result<bool> {
    let infos = c.sample(dir, None, interval)?;
    let clean = infos.iter().all(|i| i.errors().is_empty());
    if json {
        let j = J::Obj(vec![
            ("runtime_dir", J::Str(dir.display().to_string())),
            ("publishers", J::Arr(infos.iter().map(info_json).collect())),
        ]);
        writeln!(c.out, "{}", j.render())?;
        return Ok(clean);
    }
    if infos.is_empty() {
        writeln!(
            c.out,
            "no publishers in {} and no cuframes objects in {}",
            dir.display(),
            inspect::SHM_DIR
        )?;
        return Ok(true);
    }
    let mut rows = vec![[
        "KEY", "STATE", "PID", "SOCKET", "FRAMES", "SUBS", "SEQ", "FPS", "PACKETS", "PKT SEQ",
        "PKT/S", "MB/S",
    ]
    .map(String::from)];
    for i in &infos {
        let (frames, seq) = match &i.frames {
            None => ("-".into(), "-".into()),
            Some(o) => match &o.content {
                Ok(f) => (frames_summary(f), f.global_seq.to_string()),
                Err(e) => (short_error(e), "?".into()),
            },
        };
        let (packets, pseq) = match &i.packets {
            None => ("-".into(), "-".into()),
            Some(o) => match &o.content {
                Ok(p) => (packets_summary(p), p.global_seq.to_string()),
                Err(e) => (short_error(e), "?".into()),
            },
        };
        rows.push([
            i.key.clone(),
            i.liveness.name().into(),
            i.pid().map_or("?".into(), |p| p.to_string()),
            socket_short(&i.socket),
            frames,
            i.subscriber_count().map_or("?".into(), |n| n.to_string()),
            seq,
            rate(i.rates.frames_per_sec, 1.0),
            packets,
            pseq,
            rate(i.rates.packets_per_sec, 1.0),
            rate(i.rates.packet_bytes_per_sec, 1e6),
        ]);
    }
    write!(c.out, "{}", table(&rows))?;
    for i in &infos {
        for e in i.errors() {
            writeln!(c.err, "{}: {}", i.key, e.message())?;
        }
    }
    Ok(clean)
}
