//! File-system I/O load: threads that write blocks to a file of their own,
//! flush them to the device every few MiB (`fdatasync`), and start over at
//! the top of the file when it reaches its size — page-cache, block-layer
//! and journal work for the kernel, on behalf of a best-effort task.
//!
//! Each thread removes its file when its window ends. It must never write
//! outside the directory it is given, nor pick its scheduling.

use crate::threads::{LoadThreads, Setup, Window};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq)]
pub struct IoSpec {
    pub name: String,
    pub threads: usize,
    /// Directory of the files (a temporary one usually).
    pub dir: PathBuf,
    pub block_kib: usize,
    /// Size at which a file is rewritten from its start.
    pub file_mib: usize,
    /// Data written between two `fdatasync`s.
    pub sync_mib: usize,
    pub window: Window,
}

/// Starts the writers. Units: bytes written.
pub fn spawn(spec: &IoSpec, setup: impl FnMut(usize) -> Setup) -> std::io::Result<LoadThreads> {
    let spec = spec.clone();
    let (name, threads, window) = (spec.name.clone(), spec.threads, spec.window);
    LoadThreads::spawn(&name, "bytes", threads, window, setup, move |i, span| {
        let path = spec.dir.join(format!(
            "tessera-io-{}-{}-{i}.dat",
            std::process::id(),
            spec.name
        ));
        let result = write_until_stopped(&spec, &path, span);
        let removed = std::fs::remove_file(&path);
        let written = result?;
        removed.map_err(|e| format!("remove {}: {e}", path.display()))?;
        Ok(written)
    })
}

fn write_until_stopped(
    spec: &IoSpec,
    path: &PathBuf,
    span: &crate::threads::Span,
) -> Result<u64, String> {
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = File::create(path).map_err(io)?;
    let block = vec![0xA5u8; spec.block_kib.max(1) << 10];
    let (file_size, sync_every) = (
        (spec.file_mib.max(1) << 20) as u64,
        (spec.sync_mib.max(1) << 20) as u64,
    );
    let (mut written, mut position, mut unsynced) = (0u64, 0u64, 0u64);
    while span.running() {
        file.write_all(&block).map_err(io)?;
        let n = block.len() as u64;
        written += n;
        position += n;
        unsynced += n;
        if unsynced >= sync_every {
            file.sync_data().map_err(io)?;
            unsynced = 0;
        }
        if position >= file_size {
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            position = 0;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn writes_then_removes_its_files() {
        let dir = std::env::temp_dir().join(format!("tessera-io-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = IoSpec {
            name: "io".into(),
            threads: 2,
            dir: dir.clone(),
            block_kib: 64,
            file_mib: 2,
            sync_mib: 1,
            window: Window::lasting(Duration::from_millis(300)),
        };
        let load = spawn(&spec, |_| Box::new(|| Ok(()))).unwrap();
        load.start(tessera_sys::clock::monotonic_ns());
        let report = load.join();
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(report.errors().is_empty(), "{}", report.describe());
        assert!(report.units() >= 2 * 64 * 1024, "{}", report.describe());
        assert!(left.is_empty(), "files left behind: {left:?}");
    }
}
