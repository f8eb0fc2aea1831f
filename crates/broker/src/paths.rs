//! Where the broker keeps its socket, state file and lock.
//!
//! Root uses /run/tessera; other users their runtime directory. `TESSERA_RUN_DIR`
//! overrides both (tests use it to keep out of each other's way). It must never
//! create anything outside that directory.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub dir: PathBuf,
}

impl Paths {
    pub fn from_env() -> Paths {
        if let Some(dir) = std::env::var_os("TESSERA_RUN_DIR") {
            return Paths { dir: dir.into() };
        }
        if tessera_sys::caps::is_root() {
            return Paths {
                dir: "/run/tessera".into(),
            };
        }
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(format!("/tmp/tessera-{}", tessera_sys::caps::euid()))
            });
        Paths {
            dir: base.join("tessera"),
        }
    }

    pub fn at(dir: impl Into<PathBuf>) -> Paths {
        Paths { dir: dir.into() }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("tessera.sock")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    /// The monitor's time series (one JSON sample per line).
    pub fn monitor(&self) -> PathBuf {
        self.dir.join("monitor.jsonl")
    }

    pub fn lock(&self) -> PathBuf {
        self.dir.join("broker.lock")
    }

    /// Where service `name` listens unless it is told otherwise: beside the
    /// broker's socket, the directory created if need be (a failure shows
    /// when the service binds).
    pub fn service_socket(&self, name: &str) -> PathBuf {
        let _ = self.ensure();
        self.dir.join(format!("service-{name}.sock"))
    }

    /// Creates the directory, private to its owner.
    pub fn ensure(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.dir)
    }
}
