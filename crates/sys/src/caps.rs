//! Who we are: root, CAP_SYS_NICE, or neither (best-effort mode).
//!
//! It only reads the process's credentials; it must never try to raise them.

use std::path::Path;

const CAP_SYS_NICE: u32 = 23;

/// Whether the effective capability set holds CAP_SYS_NICE (root has it).
pub fn has_sys_nice() -> bool {
    effective_caps().is_some_and(|caps| caps & (1 << CAP_SYS_NICE) != 0)
}

/// Whether the effective user is root (cgroupfs writes need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: as above.
    unsafe { libc::geteuid() }
}

/// For this crate's privileged tests: whether to go on (root), else prints
/// that `test` skipped because it `needs` root — a failure under CI=true.
#[cfg(test)]
pub(crate) fn root_or_skip(test: &str, needs: &str) -> bool {
    if is_root() {
        return true;
    }
    let msg = format!("SKIPPED {test}: {needs} needs root");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}, and CI=true requires privileged tests to run");
    }
    eprintln!("{msg}");
    false
}

fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string(Path::new("/proc/self/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
}
