//! A memory-bandwidth streamer (STREAM's triad, a = b + s·c) over arrays
//! larger than the last-level cache: it evicts its neighbours' cache lines
//! and takes memory bandwidth, the interference that CPU reservations do not
//! isolate.
//!
//! The arrays are allocated on the load's thread after its setup, before the
//! release; the timed loop never allocates. It must never pick its
//! scheduling (the setup hook does).

use crate::threads::{LoadThreads, Setup, Window};

/// Elements processed between two looks at the window (1 MiB per array).
const CHUNK: usize = (1 << 20) / std::mem::size_of::<f64>();

#[derive(Debug, Clone, PartialEq)]
pub struct StreamSpec {
    pub name: String,
    pub threads: usize,
    /// Working set of each thread, all three arrays together.
    pub mebibytes: usize,
    pub window: Window,
}

/// Bytes one triad moves per element: read b and c, write a.
const BYTES_PER_ELEMENT: u64 = 3 * std::mem::size_of::<f64>() as u64;

/// Starts the streamer's threads. Units: bytes moved.
pub fn spawn(spec: &StreamSpec, setup: impl FnMut(usize) -> Setup) -> std::io::Result<LoadThreads> {
    let elements = (spec.mebibytes.max(3) << 20) / BYTES_PER_ELEMENT as usize;
    LoadThreads::spawn(
        &spec.name,
        "bytes",
        spec.threads,
        spec.window,
        setup,
        move |_, span| {
            let mut a = vec![0.0f64; elements];
            let b = vec![1.0f64; elements];
            let c = vec![2.0f64; elements];
            let mut moved = 0u64;
            'passes: loop {
                for ((a, b), c) in a
                    .chunks_mut(CHUNK)
                    .zip(b.chunks(CHUNK))
                    .zip(c.chunks(CHUNK))
                {
                    if !span.running() {
                        break 'passes;
                    }
                    triad(a, b, c);
                    moved += a.len() as u64 * BYTES_PER_ELEMENT;
                }
            }
            // Keep the result observable so the loop is not optimised away.
            std::hint::black_box(&a);
            Ok(moved)
        },
    )
}

fn triad(a: &mut [f64], b: &[f64], c: &[f64]) {
    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
        *a = b + 3.0 * c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn streams_memory_for_its_window() {
        let spec = StreamSpec {
            name: "stream".into(),
            threads: 1,
            mebibytes: 24,
            window: Window::lasting(Duration::from_millis(300)),
        };
        let load = spawn(&spec, |_| Box::new(|| Ok(()))).unwrap();
        load.start(tessera_sys::clock::monotonic_ns());
        let report = load.join();
        assert!(report.errors().is_empty(), "{}", report.describe());
        assert!(
            report.units() >= 1 << 20,
            "moved at least a chunk: {}",
            report.describe()
        );
        assert!(report.cpu_ns() > 0);
    }

    #[test]
    fn the_triad_computes_b_plus_three_c() {
        let mut a = [0.0; 3];
        triad(&mut a, &[1.0, 2.0, 3.0], &[1.0, 1.0, 2.0]);
        assert_eq!(a, [4.0, 5.0, 9.0]);
    }
}
