//! `cuframes clean`: remove what dead publishers left behind.

use std::path::Path;

use anyhow::Result;
use cuframes_core::inspect;
use cuframes_core::paths::Key;

use crate::console::Console;
use crate::core_err;
use crate::json::clean_json;

pub fn clean(
    c: &mut Console<'_>,
    dir: &Path,
    keys: &[Key],
    dry_run: bool,
    json: bool,
) -> Result<bool> {
    let filter = (!keys.is_empty()).then_some(keys);
    let report = inspect::clean(dir, filter, dry_run).map_err(core_err)?;
    if json {
        writeln!(c.out, "{}", clean_json(&report).render())?;
        return Ok(report.failed.is_empty());
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for r in &report.removed {
        writeln!(
            c.out,
            "{verb} {} {} (key {}: {})",
            r.what, r.path, r.key, r.reason
        )?;
    }
    for (key, why) in &report.kept {
        writeln!(c.out, "kept {key}: {why}")?;
    }
    for (path, why) in &report.failed {
        writeln!(c.err, "cuframes: could not remove {path}: {why}")?;
    }
    if report.removed.is_empty() && report.failed.is_empty() {
        writeln!(
            c.out,
            "nothing to clean{}",
            if keys.is_empty() {
                String::new()
            } else {
                format!(
                    " for {}",
                    keys.iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )?;
    }
    Ok(report.failed.is_empty())
}
