//! A build-like load, as seed 004's competing "make" of a C program: real
//! compiler processes, each compiling a generated C file again and again
//! (`gcc -O2`, the object thrown away; gcc's own temporary files give the
//! file system some work). CPU-bound mostly, with a new process every
//! second or two, as a build is; pair it with the `io` load for the disc.
//!
//! It runs as one external process group (see [`crate::external`]), so
//! stopping it ends every compiler. The source is one file in the given
//! directory, `tessera-build-unit.c`, rewritten whole (atomically) by each
//! load and left for the next, as the video players' file is. It must
//! never write anything else, nor pick its scheduling.

use std::io;
use std::path::{Path, PathBuf};

use crate::external::ExternalSpec;
use crate::threads::Window;

/// Pairs of generated functions in the source: about 1.5 s of `gcc -O2` on
/// a 2-vCPU KVM guest per compile.
const FUNCTION_PAIRS: usize = 100;
/// The source's name in the directory.
const SOURCE: &str = "tessera-build-unit.c";

/// `processes` compiler loops in one shell's process group, compiling the
/// source it writes into `dir`.
pub fn spec(name: &str, processes: usize, window: Window, dir: &Path) -> io::Result<ExternalSpec> {
    let source = write_source(dir)?;
    Ok(ExternalSpec {
        name: name.into(),
        program: "sh".into(),
        args: vec!["-c".into(), script(processes, &source)],
        window,
        // Shared by every run (written whole, then renamed into place).
        files: Vec::new(),
    })
}

/// Writes the source under a name of this process's, then renames it into
/// place: a compiler of another run never reads half a file.
fn write_source(dir: &Path) -> io::Result<PathBuf> {
    let path = dir.join(SOURCE);
    let partial = dir.join(format!("{SOURCE}.{}", std::process::id()));
    std::fs::write(&partial, c_source())?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// The shell script: `processes` loops in the background; a failing
/// compile ends its loop (and shows as the load's early end).
fn script(processes: usize, source: &Path) -> String {
    format!(
        "for i in $(seq {processes}); do \
         (while gcc -O2 -c '{}' -o /dev/null; do :; done) & done; wait",
        source.display()
    )
}

/// A C file with loops and structs for the optimiser to chew on.
fn c_source() -> String {
    (0..FUNCTION_PAIRS)
        .map(|i| {
            let width = i % 7 + 2;
            format!(
                "double f{i}(const double *a, int n) {{ double s = {i}.0; \
                 for (int k = 0; k < n; k++) {{ s += a[k] * {i}.5 / (k + 1); \
                 if (s > 1e9) s -= a[(k * {i}) % n]; }} return s; }}\n\
                 struct s{i} {{ int x[{width}]; double y; }};\n\
                 int g{i}(struct s{i} *p, int n) {{ int t = 0; \
                 for (int k = 0; k < n; k++) {{ for (int j = 0; j < {width}; j++) \
                 t ^= p[k].x[j] * (j + {i}); t += (int)p[k].y; }} return t; }}\n"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::external::ExternalLoad;
    use std::time::Duration;
    use tessera_sys::process::installed;

    #[test]
    fn compilers_run_until_the_window_ends() {
        if !installed("gcc") {
            eprintln!("SKIPPED compilers_run_until_the_window_ends: gcc not installed");
            return;
        }
        let dir = std::env::temp_dir().join(format!("tessera-build-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let window = Window::lasting(Duration::from_millis(2500));
        let spec = spec("build", 2, window, &dir).unwrap();
        let load = ExternalLoad::spawn(spec, Box::new(|_| Ok(()))).unwrap();
        load.start(tessera_sys::clock::monotonic_ns());
        let report = load.join();
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        // Still compiling when stopped: no compile failed and ended it.
        assert!(
            report.ending.starts_with("stopped"),
            "{}",
            report.describe()
        );
        assert!(report.error.is_none(), "{}", report.describe());
        assert_eq!(files, [SOURCE], "the source and nothing else");
    }
}
