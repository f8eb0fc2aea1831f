//! The files that make tessera a system service — the binary, the daemon's
//! systemd unit, the D-Bus policy for RTKit's name, the default config —
//! and laying them down under a root or taking them away again. Their texts
//! live once, in crates/cli/dist/, which the Debian package's assets
//! ([package.metadata.deb] in crates/cli/Cargo.toml) name too.
//!
//! It must never overwrite a config that exists, never delete one that
//! differs from the shipped text (the admin changed it), never write outside
//! the root it is given, and never talk to the service manager or the bus
//! (install.rs does, and only on the live system).

use serde::Serialize;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tessera_broker::{BrokerError, ErrorCode};

/// One file tessera ships, by its path under the root.
pub struct Shipped {
    pub path: &'static str,
    pub mode: u32,
    pub content: Content,
}

pub enum Content {
    /// The tessera binary that runs this install: it installs itself.
    RunningBinary,
    /// Replaced on every install, removed on uninstall.
    Text(&'static str),
    /// The admin's file: written only where there is none, removed only
    /// while it is still the shipped text.
    Config(&'static str),
}

/// The unit's path under the root.
pub const UNIT_PATH: &str = "usr/lib/systemd/system/tessera.service";

/// Everything `tessera install` writes, in the order it writes them.
pub const SHIPPED: [Shipped; 4] = [
    Shipped {
        path: "usr/bin/tessera",
        mode: 0o755,
        content: Content::RunningBinary,
    },
    Shipped {
        path: UNIT_PATH,
        mode: 0o644,
        content: Content::Text(include_str!("../dist/tessera.service")),
    },
    Shipped {
        path: "usr/share/dbus-1/system.d/org.freedesktop.RealtimeKit1.tessera.conf",
        mode: 0o644,
        content: Content::Text(include_str!(
            "../dist/org.freedesktop.RealtimeKit1.tessera.conf"
        )),
    },
    Shipped {
        path: "etc/tessera/daemon.toml",
        mode: 0o644,
        content: Content::Config(include_str!("../dist/daemon.toml")),
    },
];

/// The directory only tessera's config lives in: removed with it when empty.
const CONFIG_DIR: &str = "etc/tessera";

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Written (it was missing or differed).
    Written,
    /// Already there as shipped, mode included.
    Unchanged,
    /// A config that differs from the shipped one: the admin's, left alone.
    Kept,
    Removed,
    /// Nothing there to remove.
    Absent,
}

impl Action {
    /// Its name, in the text and the JSON alike.
    pub fn name(self) -> &'static str {
        match self {
            Action::Written => "written",
            Action::Unchanged => "unchanged",
            Action::Kept => "kept",
            Action::Removed => "removed",
            Action::Absent => "absent",
        }
    }
}

impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[derive(Debug, Serialize)]
pub struct FileOutcome {
    pub path: PathBuf,
    pub action: Action,
    /// The file's mode now, in octal ("0644"); none once removed.
    pub mode: Option<String>,
}

/// Writes every shipped file under `root`.
pub fn install(root: &Path) -> Result<Vec<FileOutcome>, BrokerError> {
    SHIPPED.iter().map(|f| install_one(root, f)).collect()
}

/// Removes every shipped file under `root`, except a config the admin changed.
pub fn uninstall(root: &Path) -> Result<Vec<FileOutcome>, BrokerError> {
    let outcomes = SHIPPED
        .iter()
        .map(|f| uninstall_one(root, f))
        .collect::<Result<Vec<_>, _>>()?;
    // Only an empty one goes: a kept config (or anything else) keeps it.
    let _ = fs::remove_dir(root.join(CONFIG_DIR));
    Ok(outcomes)
}

fn install_one(root: &Path, file: &Shipped) -> Result<FileOutcome, BrokerError> {
    let path = root.join(file.path);
    let action = match &file.content {
        Content::Config(text) => match read_if_present(&path)? {
            Some(current) if current == text.as_bytes() => Action::Unchanged,
            Some(_) => Action::Kept,
            None => write(&path, text.as_bytes(), file.mode)?,
        },
        Content::Text(text) => replace(&path, text.as_bytes(), file.mode)?,
        Content::RunningBinary => replace(&path, &running_binary()?, file.mode)?,
    };
    Ok(FileOutcome {
        mode: mode_of(&path),
        path,
        action,
    })
}

fn uninstall_one(root: &Path, file: &Shipped) -> Result<FileOutcome, BrokerError> {
    let path = root.join(file.path);
    let action = match &file.content {
        _ if !present(&path)? => Action::Absent,
        Content::Config(text) if read_if_present(&path)?.as_deref() != Some(text.as_bytes()) => {
            Action::Kept
        }
        _ => {
            fs::remove_file(&path).map_err(|e| fs_error("remove", &path, e))?;
            Action::Removed
        }
    };
    Ok(FileOutcome {
        mode: mode_of(&path),
        path,
        action,
    })
}

/// The running executable's bytes, from /proc/self/exe: the image itself,
/// even when its file was replaced or deleted since it started.
fn running_binary() -> Result<Vec<u8>, BrokerError> {
    fs::read("/proc/self/exe").map_err(|e| fs_error("read", Path::new("/proc/self/exe"), e))
}

/// Writes `bytes` unless the file already holds them with `mode`.
fn replace(path: &Path, bytes: &[u8], mode: u32) -> Result<Action, BrokerError> {
    let same = read_if_present(path)?.is_some_and(|current| current == bytes)
        && mode_of(path).as_deref() == Some(octal(mode).as_str());
    match same {
        true => Ok(Action::Unchanged),
        false => write(path, bytes, mode),
    }
}

/// Writes through a temporary file renamed over the target, so that a
/// crash leaves the old file or the new one, and a running binary can be
/// replaced (writing into it would fail with ETXTBSY).
fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<Action, BrokerError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| fs_error("create", dir, e))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temporary = dir.join(format!(".{name}.tessera-new"));
    let written = write_synced(&temporary, bytes, mode).and_then(|()| fs::rename(&temporary, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(fs_error("write", path, e));
    }
    Ok(Action::Written)
}

fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    file.write_all(bytes)?;
    // The umask may have narrowed the mode given at creation.
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.sync_all()
}

fn present(path: &Path) -> Result<bool, BrokerError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(fs_error("look at", path, e)),
    }
}

fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, BrokerError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(fs_error("read", path, e)),
    }
}

fn mode_of(path: &Path) -> Option<String> {
    let mode = fs::metadata(path).ok()?.permissions().mode();
    Some(octal(mode & 0o7777))
}

fn octal(mode: u32) -> String {
    format!("{mode:04o}")
}

fn fs_error(what: &str, path: &Path, e: io::Error) -> BrokerError {
    let (code, fix) = match e.kind() {
        io::ErrorKind::PermissionDenied => (
            ErrorCode::Permission,
            "run it as root (sudo), or give --root a directory of yours",
        ),
        _ => (
            ErrorCode::State,
            "check the path and the free space, then run it again",
        ),
    };
    BrokerError::new(code, format!("{what} {}: {e}", path.display()), fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_config_loads_with_rtkit_on_and_fifo_fallback() {
        let text = SHIPPED
            .iter()
            .find_map(|f| match f.content {
                Content::Config(text) => Some(text),
                _ => None,
            })
            .expect("a config is shipped");
        let path = std::env::temp_dir().join(format!("tessera-dist-{}.toml", std::process::id()));
        fs::write(&path, text).unwrap();
        let loaded = tessera_broker::config::Config::load(Some(&path));
        let _ = fs::remove_file(&path);
        let config = loaded.expect("the shipped daemon.toml is valid");
        assert!(config.rtkit);
        assert_eq!(
            config.rtkit_fallback,
            tessera_broker::config::RtkitFallback::Fifo
        );
    }
}
