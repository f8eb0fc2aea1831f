//! Files written whole and put in place atomically: a reader (or the
//! program started after a crash) finds the old contents or the new, never
//! a part of either.
//!
//! It owns how the new file replaces the old. It must never decide what a
//! file holds or when it is written.

use std::ffi::CString;
use std::io::{Error, ErrorKind, Result, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Writes `contents` to `path` through a new file beside it (`NAME.tmp`)
/// swapped in with `renameat2(RENAME_EXCHANGE)`, then removed with the old
/// contents.
///
/// Not a rename over the old file: ext4 starts writing back the new file's
/// data when a rename replaces another (its `auto_da_alloc`), which took
/// 0.3–3 ms on this project's machines, and the daemon saves its state
/// before it answers a realtime request. An exchange leaves that writeback
/// to the kernel's own time. Where exchange is not supported, or `path`
/// does not exist yet, it renames.
pub fn replace(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = beside(path);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(&tmp)?
        .write_all(contents)?;
    match exchange(&tmp, path) {
        Ok(()) => std::fs::remove_file(&tmp),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EINVAL)) => {
            std::fs::rename(&tmp, path)
        }
        Err(e) => Err(e),
    }
}

fn beside(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn exchange(a: &Path, b: &Path) -> Result<()> {
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(Error::other);
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both paths are NUL-terminated strings that outlive the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_created_then_replaced_and_nothing_is_left_beside_it() {
        let dir = std::env::temp_dir().join(format!("tessera-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        replace(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        replace(&path, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_temporary_file_left_by_a_crash_is_replaced() {
        let dir = std::env::temp_dir().join(format!("tessera-file-crash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        std::fs::write(dir.join("state.json.tmp"), b"half").unwrap();
        replace(&path, b"whole").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"whole");
        assert!(!dir.join("state.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
