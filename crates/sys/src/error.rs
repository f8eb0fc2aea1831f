//! Errors of the kernel layer: every failure names its cause and the fix.
//!
//! This module owns the translation of errno values into explanations a user
//! can act on. It must never guess: when the cause is ambiguous the message
//! lists the possibilities.

use std::fmt;
use std::io;

/// What kind of failure, so that callers can react (e.g. fall back to
/// best-effort mode on [`ErrorKind::Permission`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// EPERM/EACCES: missing privilege (root or CAP_SYS_NICE).
    Permission,
    /// EBUSY: the kernel's own admission control refused the bandwidth.
    Busy,
    /// EINVAL: a parameter outside its legal range.
    Invalid,
    /// ESRCH/ENOENT: the thread, process or file does not exist.
    NotFound,
    /// The kernel lacks the feature (no cpuset controller, no SCHED_DEADLINE).
    Unsupported,
    /// Any other I/O failure.
    Io,
}

/// A kernel-layer failure: what was attempted, why it failed, how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    /// What was being done, e.g. `sched_setattr(tid 1234, SCHED_DEADLINE ...)`.
    pub action: String,
    /// Why it failed, in words.
    pub cause: String,
    /// What the user can do about it.
    pub fix: String,
    pub errno: Option<i32>,
}

pub type Result<T> = std::result::Result<T, Error>;

/// How to grant the privilege SCHED_DEADLINE and SCHED_FIFO need.
pub const GRANT_CAP_SYS_NICE: &str = "run as root, or grant the capability once with \
`sudo setcap cap_sys_nice+ep $(command -v tessera)` (SCHED_FIFO alone can also be allowed \
with an `rtprio` limit in /etc/security/limits.d/; SCHED_DEADLINE always needs CAP_SYS_NICE)";

impl Error {
    pub fn new(
        kind: ErrorKind,
        action: impl Into<String>,
        cause: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Error {
            kind,
            action: action.into(),
            cause: cause.into(),
            fix: fix.into(),
            errno: None,
        }
    }

    /// An error from an errno with a generic explanation for its kind; the
    /// callers that know better (sched, cgroup) refine cause and fix.
    pub fn from_io(action: impl Into<String>, err: &io::Error) -> Self {
        let errno = err.raw_os_error();
        let (kind, fix) = match errno {
            Some(libc::EPERM) | Some(libc::EACCES) => (ErrorKind::Permission, GRANT_CAP_SYS_NICE),
            Some(libc::EBUSY) => (
                ErrorKind::Busy,
                "release other reservations or ask for less bandwidth",
            ),
            Some(libc::EINVAL) => (ErrorKind::Invalid, "check the parameters' legal ranges"),
            Some(libc::ESRCH) | Some(libc::ENOENT) => (
                ErrorKind::NotFound,
                "check that the thread or process still exists",
            ),
            Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => (
                ErrorKind::Unsupported,
                "this kernel lacks the feature; use a Linux 5.x+ kernel with it enabled",
            ),
            _ => (ErrorKind::Io, "see the cause"),
        };
        Error {
            kind,
            action: action.into(),
            cause: err.to_string(),
            fix: fix.to_string(),
            errno,
        }
    }

    /// The last OS error for `action`.
    pub fn last_os(action: impl Into<String>) -> Self {
        Self::from_io(action, &io::Error::last_os_error())
    }

    pub fn with_cause(mut self, cause: impl Into<String>) -> Self {
        self.cause = cause.into();
        self
    }

    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = fix.into();
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.action, self.cause)?;
        if !self.fix.is_empty() {
            write!(f, " (fix: {})", self.fix)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Reads a whole small file (sysfs, procfs, cgroupfs) as text. These
/// files say their size is 0, so `fs::read_to_string` probes them with
/// reads of 32, 32, 64, 128… bytes (6–8 system calls for a /proc status):
/// one page read at once costs two, which an RTKit request, reading a
/// dozen such files before it replies, waits for.
pub fn read_text(path: &std::path::Path) -> Result<String> {
    let failed = |e: std::io::Error| Error::from_io(format!("read {}", path.display()), &e);
    let bytes = std::fs::File::open(path)
        .and_then(read_pages)
        .map_err(failed)?;
    String::from_utf8(bytes).map_err(|e| {
        failed(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            e.to_string(),
        ))
    })
}

/// Reads to the end a page at a time, without asking the file's size.
fn read_pages(mut file: std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = vec![0; 4096];
    let mut len = 0;
    loop {
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if len == bytes.len() {
            bytes.resize(len * 2, 0);
        }
    }
    bytes.truncate(len);
    Ok(bytes)
}

/// Writes a small file (sysfs, cgroupfs) in one write, as the kernel expects.
pub fn write_text(path: &std::path::Path, text: &str) -> Result<()> {
    std::fs::write(path, text)
        .map_err(|e| Error::from_io(format!("write {:?} to {}", text, path.display()), &e))
}
