//! `cuframes stat KEY [--watch]`: one publisher in detail, once or redrawn.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use cuframes_core::inspect::{self, PublisherInfo};
use cuframes_core::paths::Key;
use cuframes_core::Error;

use crate::console::Console;
use crate::core_err;
use crate::json::{info_json, J};
use crate::text::stat_text;

pub fn stat(
    c: &mut Console<'_>,
    dir: &Path,
    key: &Key,
    json: bool,
    interval: Duration,
) -> Result<bool> {
    let infos = c.sample(dir, Some(std::slice::from_ref(key)), interval)?;
    let Some(info) = infos.into_iter().next() else {
        // Let inspect() say what is missing.
        return Err(core_err(inspect::inspect(dir, key).err().unwrap_or_else(
            || {
                Error::new(
                    cuframes_core::ErrorCode::NotFound,
                    format!("no publisher {key}"),
                )
            },
        )));
    };
    if json {
        writeln!(c.out, "{}", info_json(&info).render())?;
    } else {
        write!(c.out, "{}", stat_text(&info))?;
    }
    let errors = info.errors();
    for e in &errors {
        writeln!(c.err, "cuframes: {}", e.message())?;
    }
    Ok(errors.is_empty())
}

pub fn watch(
    c: &mut Console<'_>,
    dir: &Path,
    key: &Key,
    json: bool,
    every: Duration,
    interval: Duration,
) -> Result<bool> {
    let keys = std::slice::from_ref(key);
    let mut prev: Option<PublisherInfo> = c.sample(dir, Some(keys), interval.min(every))?.pop();
    let mut first = true;
    loop {
        let cur = if first {
            first = false;
            prev.clone()
        } else {
            let mut cur = inspect::list(dir, Some(keys)).map_err(core_err)?.pop();
            if let (Some(c), Some(p)) = (cur.as_mut(), prev.as_ref()) {
                c.rates = inspect::Rates::between(p, c);
            }
            prev.clone_from(&cur);
            cur
        };
        let text = match (&cur, json) {
            (Some(info), true) => info_json(info).render() + "\n",
            (None, true) => {
                J::Obj(vec![
                    ("key", J::Str(key.to_string())),
                    ("error", J::Str(format!("no publisher {key}"))),
                ])
                .render()
                    + "\n"
            }
            (Some(info), false) => stat_text(info),
            (None, false) => format!("no publisher {key} (waiting)\n"),
        };
        if json {
            c.out.write_all(text.as_bytes())?;
        } else {
            // Clear the screen and go home, then draw: the redraw is in place.
            write!(
                c.out,
                "\x1b[H\x1b[2J{text}\n(every {:.1}s, Ctrl-C to stop)\n",
                every.as_secs_f64()
            )?;
        }
        c.out.flush()?;
        c.pause(every)?;
    }
}
