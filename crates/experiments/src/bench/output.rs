//! Where benchmark reports go: `results/<benchmark>-<unix time>` unless
//! asked otherwise, each file written with its path in the error, the
//! JSON of the figures beside them, and what a report says of a run that
//! stopped early. A leaf the benchmarks share; it must
//! never decide what goes in a report.

use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

/// results/`benchmark`-<unix time>.
pub fn default_dir(benchmark: &str) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Path::new("results").join(format!("{benchmark}-{now}"))
}

/// Writes `text` to `path`.
pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

/// Creates `dir` and writes `results` into it as `name`, pretty JSON.
pub fn write_json(dir: &Path, name: &str, results: &impl Serialize) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    write_file(&dir.join(name), &json)
}

/// A report's paragraph saying that the run stopped early and why; empty
/// when it did not.
pub fn stopped_early(why: Option<&str>) -> String {
    why.map(|why| format!("**The run stopped early: {why}.** What it measured is below.\n\n"))
        .unwrap_or_default()
}
