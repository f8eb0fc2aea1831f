//! The console's reading side: every writer's channel, polled; each line
//! written out whole, in its writer's order; each writer's lines and drops
//! counted; a writer that closes, dies or breaks the format noticed and its
//! channel closed.
//!
//! It owns the consuming ends and the counts. It must never sleep on a
//! channel (its caller sleeps between passes): a consumer asleep on the
//! channel's futex would make the writers' pushes wake it, a system call
//! on their real-time path. It must never let a line become two: line
//! breaks inside a line are written as spaces.

use super::service::MAX_WRITER_LINES;
use super::writer::{Message, SLOT};
use serde::Serialize;
use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_channel::{ChannelError, Consumer};

/// The most lines a pass takes from one writer: a writer that floods its
/// ring cannot starve the others (what it left waits for the next pass).
const BATCH: usize = 4096;
/// Passes that empty the largest ring: a stopping console makes no more,
/// so a writer still flooding cannot keep it from stopping.
pub(super) const LAST_PASSES: usize = MAX_WRITER_LINES.div_ceil(BATCH);

/// How each line is written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// As the writer wrote it (a console of one application: its own log).
    Bare,
    /// After `name[pid]: `, with a line of the console's own when a writer
    /// comes or goes (the console service: many processes' lines).
    Named,
}

/// How a writer's channel ended, if it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriterEnd {
    /// Still writing when the console stopped.
    Open,
    /// The writer let go of its end.
    Closed,
    /// The writer's process died with its end.
    Died,
    /// The writer broke the message format: the console closed its channel.
    Broken,
}

impl WriterEnd {
    pub fn name(self) -> &'static str {
        match self {
            WriterEnd::Open => "open",
            WriterEnd::Closed => "closed",
            WriterEnd::Died => "died",
            WriterEnd::Broken => "broke the format",
        }
    }
}

/// One writer, as the console saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriterReport {
    pub name: String,
    /// The writer's process, as the kernel vouched at hand-over.
    pub pid: i32,
    /// Lines written out.
    pub lines: u64,
    /// Lines the writer dropped because the console was behind, as far as
    /// it told (with a later line, or its last word).
    pub dropped: u64,
    pub end: WriterEnd,
}

/// What the console wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ConsoleReport {
    /// Lines written out, all writers together.
    pub lines: u64,
    /// Lines writers dropped, all together.
    pub dropped: u64,
    /// Every writer, in the order they came.
    pub writers: Vec<WriterReport>,
}

/// A writer's channel (until it ends) and counts.
pub(super) struct Source {
    channel: Option<Consumer>,
    report: WriterReport,
}

impl Source {
    pub(super) fn new(channel: Consumer, name: String) -> Source {
        let pid = channel.link().peer_pid();
        Source {
            channel: Some(channel),
            report: WriterReport {
                name,
                pid,
                lines: 0,
                dropped: 0,
                end: WriterEnd::Open,
            },
        }
    }
}

/// Every writer that came, and where their lines go.
pub(super) struct Reader {
    /// In the order they came; an ended writer keeps its counts, not its
    /// channel.
    sources: Vec<Source>,
    /// How many writers' channels ended, for whoever admits more.
    ended: Arc<AtomicUsize>,
    sink: io::BufWriter<Box<dyn Write + Send>>,
    style: Style,
    message: [u8; SLOT],
}

impl Reader {
    /// A reader of `sources` (and of those [`Self::add`] brings later).
    pub(super) fn new(sink: Box<dyn Write + Send>, style: Style, sources: Vec<Source>) -> Reader {
        Reader {
            sources,
            ended: Arc::new(AtomicUsize::new(0)),
            sink: io::BufWriter::new(sink),
            style,
            message: [0; SLOT],
        }
    }

    /// How many writers' channels have ended, counted by [`Self::pass`].
    pub(super) fn ended_writers(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.ended)
    }

    pub(super) fn add(&mut self, source: Source) -> io::Result<()> {
        if self.style == Style::Named {
            let r = &source.report;
            writeln!(self.sink, "console: {}[{}] connected", r.name, r.pid)?;
        }
        self.sources.push(source);
        Ok(())
    }

    /// Writes out the lines the writers' channels hold (up to [`BATCH`]
    /// each), closes the channels that ended, and flushes. Returns whether
    /// a writer has more lines waiting.
    pub(super) fn pass(&mut self) -> io::Result<bool> {
        let mut more = false;
        for index in 0..self.sources.len() {
            let end = match self.drain(index)? {
                Drained::Empty => continue,
                Drained::More => {
                    more = true;
                    continue;
                }
                Drained::Ended(end) => end,
            };
            let source = &mut self.sources[index];
            // Dropping the consuming end closes the channel.
            source.channel = None;
            source.report.end = end;
            self.ended.fetch_add(1, Ordering::Relaxed);
            if self.style == Style::Named {
                let r = &source.report;
                writeln!(
                    self.sink,
                    "console: {}[{}] {}: {} lines, {} dropped",
                    r.name,
                    r.pid,
                    end.name(),
                    r.lines,
                    r.dropped
                )?;
            }
        }
        self.sink.flush()?;
        Ok(more)
    }

    /// Takes the lines of source `index`.
    fn drain(&mut self, index: usize) -> io::Result<Drained> {
        let Source { channel, report } = &mut self.sources[index];
        let Some(channel) = channel else {
            return Ok(Drained::Empty);
        };
        for taken in 0.. {
            if taken == BATCH {
                return Ok(Drained::More);
            }
            let len = match channel.try_pop(&mut self.message) {
                Ok(len) => len,
                Err(ChannelError::Empty) => break,
                Err(_) => return Ok(Drained::Ended(WriterEnd::Broken)),
            };
            match Message::decode(&self.message[..len]) {
                Ok(Message::Line { dropped, text }) => {
                    report.dropped = report.dropped.max(dropped);
                    report.lines += 1;
                    write_line(&mut self.sink, self.style, report, text)?;
                }
                Ok(Message::Dropped(dropped)) => report.dropped = report.dropped.max(dropped),
                Err(_) => return Ok(Drained::Ended(WriterEnd::Broken)),
            }
        }
        // Empty now: has the writer let go, or died? A zero timeout only
        // looks (and polls the writer's pidfd); it never sleeps.
        Ok(match channel.wait_readable(Duration::ZERO) {
            // Lines that came meanwhile wait for the next pass.
            Ok(()) | Err(ChannelError::TimedOut) => Drained::Empty,
            Err(ChannelError::Closed) => Drained::Ended(WriterEnd::Closed),
            Err(ChannelError::PeerGone { .. }) => Drained::Ended(WriterEnd::Died),
            Err(_) => Drained::Ended(WriterEnd::Broken),
        })
    }

    /// Every writer's counts, in the order they came.
    pub(super) fn report(self) -> ConsoleReport {
        let writers: Vec<WriterReport> = self.sources.into_iter().map(|s| s.report).collect();
        ConsoleReport {
            lines: writers.iter().map(|w| w.lines).sum(),
            dropped: writers.iter().map(|w| w.dropped).sum(),
            writers,
        }
    }
}

/// What a pass left of a writer's channel.
enum Drained {
    Empty,
    /// Lines it had no time for.
    More,
    Ended(WriterEnd),
}

/// One line, whole: line breaks inside it become spaces.
fn write_line(
    sink: &mut impl Write,
    style: Style,
    writer: &WriterReport,
    text: &[u8],
) -> io::Result<()> {
    if style == Style::Named {
        write!(sink, "{}[{}]: ", writer.name, writer.pid)?;
    }
    for (i, part) in text.split(|b| matches!(b, b'\n' | b'\r')).enumerate() {
        if i > 0 {
            sink.write_all(b" ")?;
        }
        sink.write_all(part)?;
    }
    sink.write_all(b"\n")
}
