//! The console service (seed 000 §2: "printing a string is just sending a
//! one-way message on a dedicated channel to the console service"):
//! real-time threads log lines without allocating, locking or making a
//! system call; a console thread, in a cell of its own, writes them out.
//!
//! Each writer has its own `rtrb` ring of fixed-size lines, so writers never
//! contend. A line is formatted in place (truncated at [`LINE_BYTES`]); when
//! a writer's ring is full the line is dropped and counted — a writer never
//! waits for the console. The console thread polls the rings every
//! [`POLL`], which keeps wake-up system calls off the writers' path.
//!
//! This module owns the rings and the console thread. A [`ConsoleWriter`]
//! must never allocate, block or print; the console thread must never run
//! writers' code.

use std::fmt::{self, Write as _};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rtrb::{Consumer, Producer, RingBuffer};

use crate::Setup;

/// Longest line kept; longer ones are cut.
pub const LINE_BYTES: usize = 120;
/// How often the console thread looks at the rings.
pub const POLL: Duration = Duration::from_millis(10);

#[derive(Clone, Copy)]
struct Line {
    len: u8,
    bytes: [u8; LINE_BYTES],
}

impl Default for Line {
    fn default() -> Line {
        Line {
            len: 0,
            bytes: [0; LINE_BYTES],
        }
    }
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let start = usize::from(self.len);
        let n = s.len().min(LINE_BYTES - start);
        self.bytes[start..start + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n as u8;
        Ok(())
    }
}

/// A real-time thread's way to the console.
pub struct ConsoleWriter {
    ring: Producer<Line>,
    dropped: Arc<AtomicU64>,
}

impl ConsoleWriter {
    /// Logs one line (`format_args!`), cut at [`LINE_BYTES`]. Returns false,
    /// and counts it, when the console is a ring's length behind.
    /// Never allocates or blocks.
    pub fn line(&mut self, args: fmt::Arguments<'_>) -> bool {
        if self.ring.is_full() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut line = Line::default();
        // Line's writer cuts instead of failing, so this cannot error.
        let _ = line.write_fmt(args);
        // Only this writer pushes, so the room seen above is still there.
        let _ = self.ring.push(line);
        true
    }
}

/// Writers are made before the console starts.
pub struct ConsoleBuilder {
    capacity: usize,
    rings: Vec<(Consumer<Line>, Arc<AtomicU64>)>,
}

impl ConsoleBuilder {
    /// Each writer's ring holds `capacity` lines (≥ 1).
    pub fn new(capacity: usize) -> ConsoleBuilder {
        ConsoleBuilder {
            capacity: capacity.max(1),
            rings: Vec::new(),
        }
    }

    /// A new writer with a ring of its own.
    pub fn writer(&mut self) -> ConsoleWriter {
        let (producer, consumer) = RingBuffer::new(self.capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        self.rings.push((consumer, Arc::clone(&dropped)));
        ConsoleWriter {
            ring: producer,
            dropped,
        }
    }

    /// Starts the console thread: `setup` first (join the console's cell),
    /// then every line, each ended by a newline, to `sink`.
    pub fn start(self, sink: Box<dyn Write + Send>, setup: Setup) -> std::io::Result<Console> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("tessera-console".into())
            .spawn(move || serve(self.rings, sink, setup, &flag))?;
        Ok(Console {
            stop,
            thread: Some(thread),
        })
    }
}

/// What the console wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsoleReport {
    pub lines: u64,
    /// Lines writers dropped because the console was behind.
    pub dropped: u64,
}

/// The running console thread.
pub struct Console {
    stop: Arc<AtomicBool>,
    /// `None` once joined.
    thread: Option<JoinHandle<Result<ConsoleReport, String>>>,
}

impl Console {
    /// Writes what is still queued, stops, and reports.
    pub fn stop(mut self) -> Result<ConsoleReport, String> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .expect("joined only here")
            .join()
            .map_err(|_| "the console thread panicked".to_string())?
    }
}

/// A console dropped without [`Console::stop`] (its owner failed to start)
/// still ends its thread.
impl Drop for Console {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

fn serve(
    mut rings: Vec<(Consumer<Line>, Arc<AtomicU64>)>,
    sink: Box<dyn Write + Send>,
    setup: Setup,
    stop: &AtomicBool,
) -> Result<ConsoleReport, String> {
    setup().map_err(|e| format!("the console's setup: {e}"))?;
    let mut sink = std::io::BufWriter::new(sink);
    let mut report = ConsoleReport::default();
    let fail = |e: std::io::Error| format!("the console's output: {e}");
    loop {
        // Read the flag first: lines committed before it was raised are
        // drained by this pass.
        let stopping = stop.load(Ordering::Acquire);
        for (ring, _) in &mut rings {
            while let Ok(line) = ring.pop() {
                sink.write_all(&line.bytes[..usize::from(line.len)])
                    .and_then(|()| sink.write_all(b"\n"))
                    .map_err(fail)?;
                report.lines += 1;
            }
        }
        sink.flush().map_err(fail)?;
        if stopping {
            break;
        }
        std::thread::sleep(POLL);
    }
    report.dropped = rings.iter().map(|(_, d)| d.load(Ordering::Relaxed)).sum();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A sink the test can read after the console stopped.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn nothing() -> Setup {
        Box::new(|| Ok(()))
    }

    #[test]
    fn lines_from_two_writers_reach_the_sink_whole_and_in_each_writers_order() {
        let mut builder = ConsoleBuilder::new(64);
        let mut a = builder.writer();
        let mut b = builder.writer();
        let sink = Shared::default();
        let console = builder.start(Box::new(sink.clone()), nothing()).unwrap();
        for i in 0..20 {
            assert!(a.line(format_args!("a {i}")));
            assert!(b.line(format_args!("b {i} {:.1}", i as f64 / 2.0)));
        }
        let report = console.stop().unwrap();
        assert_eq!(
            report,
            ConsoleReport {
                lines: 40,
                dropped: 0
            }
        );
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let of = |p: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(p))
                .map(String::from)
                .collect()
        };
        assert_eq!(
            of("a "),
            (0..20).map(|i| format!("a {i}")).collect::<Vec<_>>()
        );
        assert_eq!(of("b ")[3], "b 3 1.5");
    }

    #[test]
    fn a_long_line_is_cut_and_a_full_ring_drops_and_counts() {
        let mut builder = ConsoleBuilder::new(2);
        let mut w = builder.writer();
        let long = "x".repeat(500);
        assert!(w.line(format_args!("{long}")));
        assert!(w.line(format_args!("second")));
        assert!(!w.line(format_args!("third")), "the ring holds two lines");
        let sink = Shared::default();
        let report = builder
            .start(Box::new(sink.clone()), nothing())
            .unwrap()
            .stop()
            .unwrap();
        assert_eq!(
            report,
            ConsoleReport {
                lines: 2,
                dropped: 1
            }
        );
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().next().unwrap().len(), LINE_BYTES);
    }

    #[test]
    fn a_failing_setup_is_reported_and_nothing_is_written() {
        let mut builder = ConsoleBuilder::new(4);
        let mut w = builder.writer();
        w.line(format_args!("never"));
        let console = builder
            .start(
                Box::new(Shared::default()),
                Box::new(|| Err("no cell".into())),
            )
            .unwrap();
        let err = console.stop().unwrap_err();
        assert!(err.contains("no cell"), "{err}");
    }
}
