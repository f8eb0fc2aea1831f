//! A writer's end of the console: a line formatted in place into a
//! fixed-size slot and pushed into the writer's channel, or dropped and
//! counted when the channel is full. The same writer serves a console
//! thread of this process and the console service of another.
//!
//! A message is one slot: the writer's dropped count so far (u64, little
//! endian), a kind byte, then the line's bytes. The count rides on every
//! line, so the console learns of drops with the next line that gets
//! through; a writer dropped with drops the console has not heard of sends
//! them in a last message ([`LAST_WORD`]).
//!
//! It owns the message format and the writer's counters. [`ConsoleWriter::line`]
//! must never allocate, lock, block or make a system call: it pushes
//! without waiting, and the console never sleeps on the channel's futex
//! (it polls), so the push never has a sleeping reader to wake.

use std::fmt::{self, Write as _};
use std::time::Duration;
use tessera_channel::Producer;

/// Longest line kept; longer ones are cut (at a character boundary).
pub const LINE_BYTES: usize = 120;
/// Bytes before a line in its slot: the dropped count and the kind.
pub(super) const HEADER: usize = 9;
/// A channel slot: the header and a line.
pub(super) const SLOT: usize = HEADER + LINE_BYTES;
/// How long dropping a writer waits for room to tell the console of drops
/// it has not heard of. Only then does dropping a writer wait: drop it off
/// the real-time path.
pub const LAST_WORD: Duration = Duration::from_millis(500);

const LINE: u8 = 0;
const DROPPED: u8 = 1;

/// What a writer sent.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Message<'a> {
    /// A line, and the lines dropped before it.
    Line { dropped: u64, text: &'a [u8] },
    /// The writer's last word: its final dropped count.
    Dropped(u64),
}

impl Message<'_> {
    /// A message as the writer sent it; an error for bytes no writer sends.
    pub(super) fn decode(message: &[u8]) -> Result<Message<'_>, &'static str> {
        if message.len() < HEADER {
            return Err("a message shorter than its header");
        }
        let dropped = u64::from_le_bytes(message[..8].try_into().expect("8 bytes"));
        match message[8] {
            LINE => Ok(Message::Line {
                dropped,
                text: &message[HEADER..],
            }),
            DROPPED if message.len() == HEADER => Ok(Message::Dropped(dropped)),
            _ => Err("a message of an unknown kind"),
        }
    }
}

/// A real-time thread's way to the console.
pub struct ConsoleWriter {
    channel: Producer,
    slot: [u8; SLOT],
    dropped: u64,
    /// The dropped count the last message that got through carried.
    told: u64,
}

impl ConsoleWriter {
    pub(super) fn new(channel: Producer) -> ConsoleWriter {
        ConsoleWriter {
            channel,
            slot: [0; SLOT],
            dropped: 0,
            told: 0,
        }
    }

    /// Logs one line (`format_args!`), cut at [`LINE_BYTES`]. Returns false,
    /// and counts it, when the console is a ring's length behind (or gone).
    /// Never allocates, blocks or makes a system call.
    pub fn line(&mut self, args: fmt::Arguments<'_>) -> bool {
        let mut text = Cut {
            bytes: &mut self.slot[HEADER..],
            len: 0,
        };
        // Cut's writer cuts instead of failing, so this cannot error.
        let _ = text.write_fmt(args);
        let len = text.len;
        self.send(LINE, len)
    }

    /// Lines dropped so far: the console was behind, or gone.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The console's process, as the kernel vouched when the channel was
    /// handed over.
    pub fn console_pid(&self) -> i32 {
        self.channel.link().peer_pid()
    }

    /// Pushes the slot's header of `kind` and `len` bytes of line.
    fn send(&mut self, kind: u8, len: usize) -> bool {
        self.slot[..8].copy_from_slice(&self.dropped.to_le_bytes());
        self.slot[8] = kind;
        match self.channel.try_push(&self.slot[..HEADER + len]) {
            Ok(()) => {
                self.told = self.dropped;
                true
            }
            // Full, or a console that broke the ring: either way the line
            // is lost, and counted.
            Err(_) => {
                self.dropped += 1;
                false
            }
        }
    }
}

/// A writer let go of tells the console of the drops it has not heard of,
/// waiting at most [`LAST_WORD`] for room (none when the console is gone).
impl Drop for ConsoleWriter {
    fn drop(&mut self) {
        if self.dropped == self.told {
            return;
        }
        self.slot[..8].copy_from_slice(&self.dropped.to_le_bytes());
        self.slot[8] = DROPPED;
        let _ = self.channel.push_wait(&self.slot[..HEADER], LAST_WORD);
    }
}

/// A line being formatted into a slot: what does not fit is cut, at a
/// character boundary.
struct Cut<'a> {
    bytes: &'a mut [u8],
    len: usize,
}

impl fmt::Write for Cut<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut n = s.len().min(self.bytes.len() - self.len);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use tessera_channel::{Channel, Consumer};

    fn pair(slots: usize) -> (ConsoleWriter, Consumer) {
        let (here, there) = UnixStream::pair().unwrap();
        let consumer = Channel::create("console.test", SLOT, slots)
            .unwrap()
            .hand_over_producer(&here)
            .unwrap();
        let writer = ConsoleWriter::new(tessera_channel::Producer::open_from(&there).unwrap());
        (writer, consumer)
    }

    #[test]
    fn lines_carry_the_drops_before_them_and_wake_no_one() {
        let (mut writer, mut console) = pair(2);
        assert!(writer.line(format_args!("one {}", 1)));
        assert!(writer.line(format_args!("two")));
        assert!(!writer.line(format_args!("three")), "two slots");
        assert_eq!(writer.dropped(), 1);
        let take = |console: &mut Consumer| {
            let mut out = [0u8; SLOT];
            let len = console.try_pop(&mut out).unwrap();
            out[..len].to_vec()
        };
        let first = take(&mut console);
        assert_eq!(
            Message::decode(&first),
            Ok(Message::Line {
                dropped: 0,
                text: b"one 1"
            })
        );
        take(&mut console);
        assert!(writer.line(format_args!("four")));
        let fourth = take(&mut console);
        assert_eq!(
            Message::decode(&fourth),
            Ok(Message::Line {
                dropped: 1,
                text: b"four"
            })
        );
        assert_eq!(
            writer.channel.wake_ups(),
            0,
            "a polling console is never woken"
        );
        assert_eq!(writer.console_pid(), std::process::id() as i32);
    }

    #[test]
    fn a_writer_let_go_of_tells_its_last_drops() {
        let (mut writer, mut console) = pair(1);
        writer.line(format_args!("kept"));
        writer.line(format_args!("dropped"));
        let reader = std::thread::spawn(move || {
            let mut out = [0u8; SLOT];
            let mut last = Vec::new();
            while let Ok(len) = console.pop_wait(&mut out, Duration::from_secs(5)) {
                last = out[..len].to_vec();
            }
            last
        });
        drop(writer);
        let last = reader.join().unwrap();
        assert_eq!(Message::decode(&last), Ok(Message::Dropped(1)));
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary() {
        let mut bytes = [0u8; 5];
        let mut cut = Cut {
            bytes: &mut bytes,
            len: 0,
        };
        let _ = write!(cut, "abcd€");
        let len = cut.len;
        assert_eq!(&bytes[..len], b"abcd");
        assert!(Message::decode(&[0; 4]).is_err());
        assert!(Message::decode(&[0, 0, 0, 0, 0, 0, 0, 0, 7]).is_err());
    }
}
