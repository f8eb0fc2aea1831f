//! OSC 1.0 control of the synthesizer, as music software takes it: UDP
//! datagrams holding a message or a bundle of messages.
//!
//! Address space (every pad and table index is 0-based; a numeric argument
//! may be sent as `i` or `f`, an integer one as an integral `f`, since many
//! senders, Pd and Max among them, send floats only):
//!
//! | address | arguments | meaning |
//! |---|---|---|
//! | `/migrator/gain` | `f` gain | master gain, 0 ..= 4 (smoothed) |
//! | `/migrator/table` | `i` pad, `i` table, `f`×n weights | replaces table 0..4 of pad 0..32 with n (1..=128) equal steps per octave |
//! | `/migrator/range` | `i` pad, `i` table, `f` base Hz, `i` octaves | moves a table: lowest step 10 ..= 10000 Hz, 1 ..= 8 octaves |
//! | `/migrator/migration` | `f` seconds | mean time between two migrations of an oscillator, 0.05 ..= 600 |
//! | `/migrator/width` | `f` cents | gaussian standard deviation at x = 1, 0 ..= 2400 |
//!
//! Bundles are unpacked (nested up to 8 deep) and their messages applied in
//! order at once: the time tag is ignored, since a control reaches the synth
//! within one block anyway.
//!
//! The parser is strict: only type tags `i` and `f`, every string NUL-padded
//! to 4 bytes, no trailing bytes, every value in range. On garbage it returns
//! an [`OscError`], never panics and never allocates. This module owns the
//! wire format only; [`crate::Synth::apply`] acts on a [`Control`].

use crate::table::{PitchTable, MAX_BINS, MAX_OCTAVES, TABLES_PER_PAD};
use crate::PADS;

const BUNDLE_TAG: &[u8; 8] = b"#bundle\0";
const MAX_BUNDLE_DEPTH: usize = 8;

/// A parameter change the synthesizer understands. Fixed-size (a table's
/// weights inline), so a network thread can pass it to the audio thread
/// through a preallocated queue without touching the heap.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    /// Master gain.
    Gain(f32),
    /// New weights for a pad's table: `weights[..bins]`.
    Table {
        pad: u8,
        table: u8,
        weights: [f32; MAX_BINS],
        bins: u8,
    },
    /// New pitch range for a pad's table.
    Range {
        pad: u8,
        table: u8,
        base_hz: f32,
        octaves: u8,
    },
    /// Mean seconds between migrations.
    Migration { seconds: f32 },
    /// Gaussian width at x = 1, in cents.
    Width { max_cents: f32 },
}

/// Why a datagram was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OscError {
    /// The datagram ends inside a field.
    Truncated,
    /// A string lacks its NUL, its padding, or is not ASCII.
    BadString,
    /// Not a message (no leading '/') and not a bundle.
    NotOsc,
    /// The message has no type tag string.
    MissingTypeTags,
    /// A type tag other than `i` and `f`.
    UnsupportedType(u8),
    /// An address outside the synth's address space.
    UnknownAddress,
    /// Too few, too many, or mistyped arguments for the address.
    WrongArguments,
    /// An argument outside its range.
    OutOfRange,
    /// Bytes left after the last argument.
    TrailingBytes,
    /// A bundle element with a bad size, or bundles nested too deep.
    BadBundle,
    /// The buffer given to [`Control::encode`] is too small.
    BufferTooSmall,
}

impl std::fmt::Display for OscError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OSC: {self:?}")
    }
}

impl std::error::Error for OscError {}

/// Parses one UDP datagram and hands every control in it to `apply`, in
/// order. Controls before an error in a bundle have been handed over.
pub fn parse_packet(datagram: &[u8], apply: &mut impl FnMut(Control)) -> Result<(), OscError> {
    parse_element(datagram, apply, 0)
}

fn parse_element(
    bytes: &[u8],
    apply: &mut impl FnMut(Control),
    depth: usize,
) -> Result<(), OscError> {
    if bytes.starts_with(BUNDLE_TAG) {
        return parse_bundle(bytes, apply, depth);
    }
    apply(parse_message(bytes)?);
    Ok(())
}

fn parse_bundle(
    bytes: &[u8],
    apply: &mut impl FnMut(Control),
    depth: usize,
) -> Result<(), OscError> {
    if depth >= MAX_BUNDLE_DEPTH {
        return Err(OscError::BadBundle);
    }
    let mut reader = Reader {
        bytes,
        at: BUNDLE_TAG.len(),
    };
    reader.take(8)?; // time tag: applied at once, see the module docs
    while !reader.done() {
        let size = reader.i32()?;
        if size <= 0 || size % 4 != 0 {
            return Err(OscError::BadBundle);
        }
        let element = reader
            .take(size as usize)
            .map_err(|_| OscError::BadBundle)?;
        parse_element(element, apply, depth + 1)?;
    }
    Ok(())
}

/// Parses one OSC message into a control.
pub fn parse_message(bytes: &[u8]) -> Result<Control, OscError> {
    let mut reader = Reader { bytes, at: 0 };
    let address = reader.string()?;
    if !address.starts_with('/') {
        return Err(OscError::NotOsc);
    }
    if reader.done() {
        return Err(OscError::MissingTypeTags);
    }
    let tags = reader.string()?;
    let tags = tags
        .strip_prefix(',')
        .ok_or(OscError::MissingTypeTags)?
        .as_bytes();
    if let Some(&bad) = tags.iter().find(|&&t| t != b'i' && t != b'f') {
        return Err(OscError::UnsupportedType(bad));
    }
    let mut args = Args {
        tags,
        next: 0,
        reader,
    };
    let control = match address {
        "/migrator/gain" => Control::Gain(args.float(0.0, 4.0)?),
        "/migrator/table" => table(&mut args)?,
        "/migrator/range" => Control::Range {
            pad: args.index(PADS)?,
            table: args.index(TABLES_PER_PAD)?,
            base_hz: args.float(10.0, 10_000.0)?,
            octaves: args.int(1, i64::from(MAX_OCTAVES))? as u8,
        },
        "/migrator/migration" => Control::Migration {
            seconds: args.float(0.05, 600.0)?,
        },
        "/migrator/width" => Control::Width {
            max_cents: args.float(0.0, 2400.0)?,
        },
        _ => return Err(OscError::UnknownAddress),
    };
    args.finish()?;
    Ok(control)
}

fn table(args: &mut Args) -> Result<Control, OscError> {
    let pad = args.index(PADS)?;
    let table = args.index(TABLES_PER_PAD)?;
    let bins = args.remaining();
    if bins == 0 || bins > MAX_BINS {
        return Err(OscError::WrongArguments);
    }
    let mut weights = [0.0; MAX_BINS];
    for w in &mut weights[..bins] {
        *w = args.float(0.0, f32::MAX)?;
    }
    // Refuse here what the table would refuse (all zeros), so a parsed
    // control always applies.
    PitchTable::new(100.0, 1, &weights[..bins]).map_err(|_| OscError::OutOfRange)?;
    Ok(Control::Table {
        pad,
        table,
        weights,
        bins: bins as u8,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], OscError> {
        let end = self.at.checked_add(n).ok_or(OscError::Truncated)?;
        let field = self.bytes.get(self.at..end).ok_or(OscError::Truncated)?;
        self.at = end;
        Ok(field)
    }

    fn i32(&mut self) -> Result<i32, OscError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An OSC-string: ASCII, NUL-terminated, NUL-padded to a multiple of 4.
    fn string(&mut self) -> Result<&'a str, OscError> {
        let rest = self.bytes.get(self.at..).ok_or(OscError::Truncated)?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(OscError::BadString)?;
        let padded = (len + 4) & !3;
        let field = self.take(padded).map_err(|_| OscError::BadString)?;
        if field[len..].iter().any(|&b| b != 0) || !field[..len].is_ascii() {
            return Err(OscError::BadString);
        }
        std::str::from_utf8(&field[..len]).map_err(|_| OscError::BadString)
    }
}

struct Args<'a> {
    tags: &'a [u8],
    next: usize,
    reader: Reader<'a>,
}

impl Args<'_> {
    fn remaining(&self) -> usize {
        self.tags.len() - self.next
    }

    /// The next argument as a number, whichever of `i` and `f` it is.
    fn number(&mut self) -> Result<f64, OscError> {
        let tag = *self.tags.get(self.next).ok_or(OscError::WrongArguments)?;
        self.next += 1;
        let bits = self.reader.i32()?;
        Ok(match tag {
            b'i' => f64::from(bits),
            _ => f64::from(f32::from_bits(bits as u32)),
        })
    }

    fn float(&mut self, min: f32, max: f32) -> Result<f32, OscError> {
        let x = self.number()?;
        if !(f64::from(min)..=f64::from(max)).contains(&x) {
            return Err(OscError::OutOfRange);
        }
        Ok(x as f32)
    }

    fn int(&mut self, min: i64, max: i64) -> Result<i64, OscError> {
        let x = self.number()?;
        if x.fract() != 0.0 {
            return Err(OscError::WrongArguments);
        }
        if !(min as f64..=max as f64).contains(&x) {
            return Err(OscError::OutOfRange);
        }
        Ok(x as i64)
    }

    fn index(&mut self, count: usize) -> Result<u8, OscError> {
        Ok(self.int(0, count as i64 - 1)? as u8)
    }

    fn finish(self) -> Result<(), OscError> {
        if self.remaining() != 0 {
            return Err(OscError::WrongArguments);
        }
        if !self.reader.done() {
            return Err(OscError::TrailingBytes);
        }
        Ok(())
    }
}

impl Control {
    /// Writes this control as an OSC message into `buf`; returns its length.
    /// Integers go as `i`, the rest as `f`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, OscError> {
        let mut w = Writer { buf, at: 0 };
        match self {
            Control::Gain(gain) => {
                w.string("/migrator/gain")?;
                w.string(",f")?;
                w.f32(*gain)?;
            }
            Control::Table {
                pad,
                table,
                weights,
                bins,
            } => {
                w.string("/migrator/table")?;
                w.tags("ii", usize::from(*bins))?;
                w.i32(i32::from(*pad))?;
                w.i32(i32::from(*table))?;
                for &x in &weights[..usize::from(*bins)] {
                    w.f32(x)?;
                }
            }
            Control::Range {
                pad,
                table,
                base_hz,
                octaves,
            } => {
                w.string("/migrator/range")?;
                w.string(",iifi")?;
                w.i32(i32::from(*pad))?;
                w.i32(i32::from(*table))?;
                w.f32(*base_hz)?;
                w.i32(i32::from(*octaves))?;
            }
            Control::Migration { seconds } => {
                w.string("/migrator/migration")?;
                w.string(",f")?;
                w.f32(*seconds)?;
            }
            Control::Width { max_cents } => {
                w.string("/migrator/width")?;
                w.string(",f")?;
                w.f32(*max_cents)?;
            }
        }
        Ok(w.at)
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) -> Result<(), OscError> {
        let end = self.at + bytes.len();
        self.buf
            .get_mut(self.at..end)
            .ok_or(OscError::BufferTooSmall)?
            .copy_from_slice(bytes);
        self.at = end;
        Ok(())
    }

    fn string(&mut self, s: &str) -> Result<(), OscError> {
        self.bytes(s.as_bytes())?;
        self.padding(s.len())
    }

    fn padding(&mut self, len: usize) -> Result<(), OscError> {
        let pad = ((len + 4) & !3) - len;
        self.bytes(&[0; 4][..pad])
    }

    /// A type tag string: ',' then `fixed`, then `floats` times 'f'.
    fn tags(&mut self, fixed: &str, floats: usize) -> Result<(), OscError> {
        self.bytes(b",")?;
        self.bytes(fixed.as_bytes())?;
        for _ in 0..floats {
            self.bytes(b"f")?;
        }
        self.padding(1 + fixed.len() + floats)
    }

    fn i32(&mut self, x: i32) -> Result<(), OscError> {
        self.bytes(&x.to_be_bytes())
    }

    fn f32(&mut self, x: f32) -> Result<(), OscError> {
        self.bytes(&x.to_be_bytes())
    }
}
