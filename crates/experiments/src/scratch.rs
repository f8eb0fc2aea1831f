//! A scratch directory of one configuration (logs, records), removed when
//! dropped — on error too. A leaf the subjects that start external
//! programs share; it must never hold anything a report reads later.

use crate::harness::servers;
use std::fs;
use std::path::{Path, PathBuf};

pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// A new directory under the temporary directory, named `prefix` and
    /// this run's unique suffix.
    pub(crate) fn create(prefix: &str) -> Result<Scratch, String> {
        let dir = std::env::temp_dir().join(servers::unique(prefix));
        fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
