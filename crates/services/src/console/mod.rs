//! The console service (seed 000 §2: "printing a string is just sending a
//! one-way message on a dedicated channel to the console service"):
//! real-time threads log lines without allocating, locking, blocking or
//! making a system call; a console, in a cell of its own, writes them out.
//!
//! Each writer has its own channel (`tessera-channel`: a ring of fixed-size
//! line slots in shared memory), so writers never contend. A line is
//! formatted in place (cut at [`LINE_BYTES`]); when a writer's ring is full
//! the line is dropped and counted — a writer never waits for the console,
//! and a console that died only makes its writers drop. The console polls
//! the rings every [`POLL`] and never sleeps on them, which keeps wake-up
//! system calls off the writers' path.
//!
//! The same [`ConsoleWriter`] reaches either console:
//!
//! - [`ConsoleBuilder`] / [`Console`]: a console thread of this process,
//!   which writes its writers' lines as they are (an application's log);
//! - [`service`]: the console service as a process of its own (`tessera
//!   serve console`), which writes many processes' lines, each after its
//!   writer's name and pid; writers reach it with [`connect`];
//! - [`host`]: that process's life: its registration with the broker, its
//!   output, its cell.
//!
//! This module owns the consoles' threads. A [`ConsoleWriter`] must never
//! allocate, block or print; a console must never run writers' code, and
//! never trusts what a writer sent ([`WriterEnd::Broken`]).

pub mod host;
mod reader;
pub mod service;
mod writer;

pub use reader::{ConsoleReport, WriterEnd, WriterReport};
pub use service::{connect, ConsoleService, ServiceConfig};
pub use writer::{ConsoleWriter, LAST_WORD, LINE_BYTES};

use crate::control::{self, ThreadHook};
use reader::{Reader, Source, Style};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_channel::{Channel, ChannelError, Producer};

/// How often a console looks at the rings.
pub const POLL: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("a console channel: {0} (fix: {fix})", fix = .0.fix())]
    Channel(#[from] ChannelError),
    #[error("a console channel's socket pair: {0} (fix: raise the open-files limit, `ulimit -n`)")]
    Pair(std::io::Error),
    #[error("the console thread: {0}")]
    Thread(String),
    #[error("the console's socket {path}: {source} (fix: remove a stale socket file, or pick another path)")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot reach the console service at {path}: {source} (fix: start it with `tessera serve console`)")]
    Unreachable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the console's log {path}: {source} (fix: give a writable file to --log)")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Wire(#[from] control::WireError),
    #[error("the console service refused the writer: {0}")]
    Refused(String),
    #[error("the broker: {0}")]
    Broker(#[from] tessera_broker::BrokerError),
}

/// Writers of a console thread of this process, made before it starts.
pub struct ConsoleBuilder {
    lines: usize,
    sources: Vec<Source>,
}

impl ConsoleBuilder {
    /// Each writer's ring holds `capacity` lines (rounded up to a power of
    /// two, 1 to [`service::MAX_WRITER_LINES`]).
    pub fn new(capacity: usize) -> ConsoleBuilder {
        ConsoleBuilder {
            lines: capacity
                .clamp(1, service::MAX_WRITER_LINES)
                .next_power_of_two(),
            sources: Vec::new(),
        }
    }

    /// A new writer with a channel of its own, handed over within this
    /// process.
    pub fn writer(&mut self) -> Result<ConsoleWriter, ConsoleError> {
        let name = format!("writer-{}", self.sources.len());
        let (here, there) = UnixStream::pair().map_err(ConsoleError::Pair)?;
        let channel = Channel::create(&format!("console.{name}"), writer::SLOT, self.lines)?
            .hand_over_producer(&here)?;
        let writer = ConsoleWriter::new(Producer::open_from(&there)?);
        self.sources.push(Source::new(channel, name));
        Ok(writer)
    }

    /// Starts the console thread: `setup` first (join the console's cell),
    /// then every line, as written, each ended by a newline, to `sink`.
    /// A failed setup is this call's error.
    pub fn start(
        self,
        sink: Box<dyn Write + Send>,
        setup: Option<ThreadHook>,
    ) -> Result<Console, ConsoleError> {
        Console::start(Reader::new(sink, Style::Bare, self.sources), setup, None)
    }
}

/// A running console thread.
pub struct Console {
    stop: Arc<AtomicBool>,
    /// `None` once joined.
    thread: Option<JoinHandle<Option<Result<ConsoleReport, String>>>>,
}

impl Console {
    /// Runs `reader` on a thread of its own after `setup`, taking the
    /// writers `newcomers` brings as they come.
    fn start(
        reader: Reader,
        setup: Option<ThreadHook>,
        newcomers: Option<Receiver<Source>>,
    ) -> Result<Console, ConsoleError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = control::spawn_after_setup("tessera-console", setup, move || {
            serve(reader, newcomers, &flag)
        })
        .map_err(ConsoleError::Thread)?;
        Ok(Console {
            stop,
            thread: Some(thread),
        })
    }

    /// Writes what is still queued, stops, and reports.
    pub fn stop(mut self) -> Result<ConsoleReport, String> {
        self.stop.store(true, Ordering::Release);
        match self.thread.take().expect("joined only here").join() {
            Ok(Some(served)) => served,
            // Its setup failed, which `start` returned.
            Ok(None) => Err("the console thread never served".into()),
            Err(_) => Err("the console thread panicked".into()),
        }
    }
}

/// A console dropped without [`Console::stop`] (its owner failed to start)
/// still ends its thread.
impl Drop for Console {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The console thread: a pass over the rings every [`POLL`] (at once
/// while a writer has more than a pass takes) until told to stop, then
/// passes until the rings are empty (or as many as empty the largest).
fn serve(
    mut reader: Reader,
    newcomers: Option<Receiver<Source>>,
    stop: &AtomicBool,
) -> Result<ConsoleReport, String> {
    let fail = |e: std::io::Error| format!("the console's output: {e}");
    let mut last_passes = 0;
    loop {
        // Read the flag first: lines committed, and writers handed over,
        // before it was raised are taken by this pass.
        let stopping = stop.load(Ordering::Acquire);
        for source in newcomers.iter().flat_map(Receiver::try_iter) {
            reader.add(source).map_err(fail)?;
        }
        let more = reader.pass().map_err(fail)?;
        last_passes += usize::from(stopping);
        if stopping && (!more || last_passes == reader::LAST_PASSES) {
            return Ok(reader.report());
        }
        if !more {
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

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

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn writer_report(name: &str, lines: u64, dropped: u64, end: WriterEnd) -> WriterReport {
        WriterReport {
            name: name.into(),
            pid: std::process::id() as i32,
            lines,
            dropped,
            end,
        }
    }

    #[test]
    fn lines_from_two_writers_reach_the_sink_whole_and_in_each_writers_order() {
        let mut builder = ConsoleBuilder::new(64);
        let mut a = builder.writer().unwrap();
        let mut b = builder.writer().unwrap();
        let sink = Shared::default();
        let console = builder.start(Box::new(sink.clone()), None).unwrap();
        for i in 0..20 {
            assert!(a.line(format_args!("a {i}")));
            assert!(b.line(format_args!("b {i} {:.1}", i as f64 / 2.0)));
        }
        assert!(a.line(format_args!("a two\nlines")));
        drop(a);
        let report = console.stop().unwrap();
        assert_eq!(
            report,
            ConsoleReport {
                lines: 41,
                dropped: 0,
                writers: vec![
                    writer_report("writer-0", 21, 0, WriterEnd::Closed),
                    writer_report("writer-1", 20, 0, WriterEnd::Open),
                ],
            }
        );
        let text = sink.text();
        let of = |p: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(p))
                .map(String::from)
                .collect()
        };
        let mut expected: Vec<String> = (0..20).map(|i| format!("a {i}")).collect();
        expected.push("a two lines".into());
        assert_eq!(of("a "), expected);
        assert_eq!(of("b ")[3], "b 3 1.5");
    }

    #[test]
    fn a_long_line_is_cut_and_a_full_ring_drops_and_counts_without_blocking() {
        let mut builder = ConsoleBuilder::new(2);
        let mut w = builder.writer().unwrap();
        let long = "x".repeat(500);
        let start = Instant::now();
        assert!(w.line(format_args!("{long}")));
        assert!(w.line(format_args!("second")));
        for _ in 0..1000 {
            assert!(!w.line(format_args!("dropped")), "the ring holds two lines");
        }
        assert!(start.elapsed() < Duration::from_secs(1), "never waits");
        assert_eq!(w.dropped(), 1000);
        let sink = Shared::default();
        let console = builder.start(Box::new(sink.clone()), None).unwrap();
        // Let go of: its last word tells the console of the trailing drops.
        drop(w);
        let report = console.stop().unwrap();
        assert_eq!(
            report,
            ConsoleReport {
                lines: 2,
                dropped: 1000,
                writers: vec![writer_report("writer-0", 2, 1000, WriterEnd::Closed)],
            }
        );
        assert_eq!(sink.text().lines().next().unwrap().len(), LINE_BYTES);
    }

    #[test]
    fn a_ring_longer_than_a_pass_is_emptied_before_the_console_stops() {
        let mut builder = ConsoleBuilder::new(3 * 4096);
        let mut w = builder.writer().unwrap();
        for i in 0..3 * 4096 {
            assert!(w.line(format_args!("{i}")));
        }
        let sink = Shared::default();
        let console = builder.start(Box::new(sink.clone()), None).unwrap();
        assert_eq!(console.stop().unwrap().lines, 3 * 4096);
        assert_eq!(sink.text().lines().last(), Some("12287"));
    }

    #[test]
    fn a_failing_setup_is_the_starts_error() {
        let mut builder = ConsoleBuilder::new(4);
        let mut w = builder.writer().unwrap();
        w.line(format_args!("never"));
        let hook: ThreadHook = Arc::new(|| Err("no cell".into()));
        let err = builder
            .start(Box::new(Shared::default()), Some(hook))
            .err()
            .expect("the setup fails");
        assert!(err.to_string().contains("no cell"), "{err}");
    }
}
