//! The daemon's reading of its control socket: request lines read with
//! bounded memory, and each one judged (UTF-8, a JSON object, the envelope,
//! the operation's fields) into a request or an error that names the
//! problem and its fix.
//!
//! It must never touch the broker: a line refused here never reaches it, so
//! no malformed request can change the broker's state.

use crate::error::{BrokerError, ErrorCode};
use crate::protocol::{Envelope, RequestLine, PROTOCOL_VERSION};
use serde_json::error::Category;
use std::io::{self, BufRead, Read};
use std::str::Utf8Error;

/// The most bytes of one line held in memory, newline included. A longer
/// line is read on and dropped a piece at a time up to its newline, and
/// answered as malformed: no client can make the daemon buffer without bound.
pub const MAX_LINE: u64 = 64 * 1024;

/// How a request line is written, for the fixes.
const ONE_OBJECT_PER_LINE: &str =
    "send one JSON object per line, e.g. {\"v\":1,\"id\":1,\"op\":\"status\"} (docs/protocol.md)";

/// What the next read from a client brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// A line, now in the caller's buffer (with its newline, unless the
    /// stream ended without one).
    Line,
    /// A line with no newline in its first [`MAX_LINE`] bytes, now read and
    /// dropped through its newline.
    Overlong,
    /// The client closed the connection.
    Closed,
}

/// A line refused before it reached the broker: the error, and the id to
/// answer with (the line's own when its envelope could be read, else 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub id: u64,
    pub error: BrokerError,
}

impl Rejected {
    /// Refused before its id could be read.
    fn anonymous(error: BrokerError) -> Rejected {
        Rejected { id: 0, error }
    }
}

/// Reads the next line into `line`, never holding more than [`MAX_LINE`]
/// bytes of it.
pub fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<Incoming> {
    if read_bounded(reader, line)? == 0 {
        return Ok(Incoming::Closed);
    }
    if ends_line(line) {
        return Ok(Incoming::Line);
    }
    while read_bounded(reader, line)? > 0 && !ends_line(line) {}
    Ok(Incoming::Overlong)
}

/// Reads into `line` (emptied first) through the next newline, at most
/// [`MAX_LINE`] bytes, or to the end of the stream.
fn read_bounded(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<usize> {
    line.clear();
    reader.by_ref().take(MAX_LINE).read_until(b'\n', line)
}

/// Whether a bounded read reached the end of its line: a newline, or the
/// end of the stream before the bound.
fn ends_line(piece: &[u8]) -> bool {
    piece.ends_with(b"\n") || (piece.len() as u64) < MAX_LINE
}

/// What an overlong line is answered with.
pub fn overlong() -> BrokerError {
    BrokerError::new(
        ErrorCode::Malformed,
        format!(
            "request line has no newline in its first {MAX_LINE} bytes; \
             the rest of it, up to its newline, was discarded"
        ),
        format!(
            "keep each request under {} KiB and end it with a newline",
            MAX_LINE / 1024
        ),
    )
}

/// Judges one line: its request, or why it is refused. None for a blank
/// line, which gets no reply (a person at `socat` pressing Enter).
pub fn judge(line: &[u8]) -> Option<Result<RequestLine, Rejected>> {
    let text = match std::str::from_utf8(line) {
        Ok(text) => text.trim(),
        Err(e) => return Some(Err(Rejected::anonymous(not_utf8(line, &e)))),
    };
    (!text.is_empty()).then(|| parse(text))
}

/// The request in a non-blank line of text. The envelope is read first, so
/// that a refusal of the operation's fields carries the line's id.
fn parse(text: &str) -> Result<RequestLine, Rejected> {
    // A JSON value is an object exactly when it starts with a brace; saying
    // so names the problem better than a type error would.
    if !text.starts_with('{') {
        return Err(Rejected::anonymous(not_an_object(text)));
    }
    let envelope: Envelope =
        serde_json::from_str(text).map_err(|e| Rejected::anonymous(not_a_request(&e)))?;
    let id = envelope.id;
    if envelope.v != PROTOCOL_VERSION {
        return Err(Rejected {
            id,
            error: other_version(envelope.v),
        });
    }
    serde_json::from_str(text).map_err(|e| Rejected {
        id,
        error: bad_operation(&envelope.op, &e),
    })
}

fn not_utf8(line: &[u8], e: &Utf8Error) -> BrokerError {
    let at = e.valid_up_to();
    let message = match e.error_len() {
        Some(len) => format!(
            "request line is not UTF-8: invalid byte sequence {} at byte offset {at}",
            hex(&line[at..at + len])
        ),
        None => format!(
            "request line is not UTF-8: it ends inside a multi-byte sequence begun at byte offset {at}"
        ),
    };
    BrokerError::new(
        ErrorCode::Malformed,
        message,
        "encode the line as UTF-8 (JSON strings may escape any character as \\uXXXX)",
    )
}

fn hex(bytes: &[u8]) -> String {
    let each: Vec<String> = bytes.iter().map(|b| format!("0x{b:02x}")).collect();
    each.join(" ")
}

fn not_an_object(text: &str) -> BrokerError {
    let start: String = text.chars().take(16).collect();
    BrokerError::new(
        ErrorCode::Malformed,
        format!("a request is a JSON object {{...}}, but this line starts with {start:?}"),
        ONE_OBJECT_PER_LINE,
    )
}

/// A line whose envelope (`v`, `id`, `op`) cannot be read.
fn not_a_request(e: &serde_json::Error) -> BrokerError {
    let problem = match e.classify() {
        Category::Eof => "the line ends inside its JSON (truncated?)",
        Category::Data => "not a tessera request",
        // Including nesting deeper than serde_json's limit of 128 levels.
        Category::Syntax | Category::Io => "cannot parse the line as JSON",
    };
    BrokerError::new(
        ErrorCode::Malformed,
        format!("{problem}: {e}"),
        ONE_OBJECT_PER_LINE,
    )
}

fn other_version(v: u32) -> BrokerError {
    BrokerError::new(
        ErrorCode::Version,
        format!("protocol version {v} is not spoken here (this broker speaks {PROTOCOL_VERSION})"),
        "upgrade the client or the daemon so they match",
    )
}

/// A line with a readable envelope whose operation is unknown or whose
/// fields are missing, mistyped or out of range.
fn bad_operation(op: &str, e: &serde_json::Error) -> BrokerError {
    BrokerError::new(
        ErrorCode::Malformed,
        format!("bad {op:?} request: {e}"),
        "docs/protocol.md lists the operations, their fields and their types",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Request;

    fn refusal(line: &str) -> Rejected {
        refusal_of_bytes(line.as_bytes())
    }

    fn refusal_of_bytes(line: &[u8]) -> Rejected {
        match judge(line) {
            Some(Err(rejected)) => rejected,
            other => panic!("{line:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn a_request_line_is_read_with_or_without_blanks_around_it() {
        let line = judge(b"  {\"v\":1,\"id\":3,\"op\":\"status\"}\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((line.id, line.request), (3, Request::Status));
        assert!(judge(b" \t\r\n").is_none(), "a blank line gets no reply");
    }

    #[test]
    fn invalid_utf8_is_refused_with_its_offset() {
        let r = refusal_of_bytes(b"{\"v\":1,\"op\":\"st\xc3\x28tus\"}\n");
        assert_eq!((r.id, r.error.code), (0, ErrorCode::Malformed));
        assert!(
            r.error.message.contains("0xc3 at byte offset 15"),
            "{}",
            r.error.message
        );
        let cut = refusal_of_bytes(b"{\"v\":1,\"op\":\"\xe2\x82");
        assert!(
            cut.error
                .message
                .contains("ends inside a multi-byte sequence begun at byte offset 13"),
            "{}",
            cut.error.message
        );
    }

    #[test]
    fn each_malformation_is_named() {
        let deep = format!(
            "{{\"v\":1,\"op\":\"status\",\"x\":{}{}}}",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        for (line, named) in [
            ("this is not json {", "starts with \"this is not json\""),
            ("[1,1,\"status\"]", "a request is a JSON object"),
            (
                "{\"v\":1,\"op\":\"status\"",
                "the line ends inside its JSON",
            ),
            ("{\"v\":1,\"op\":\"sta\u{0}tus\"}", "control character"),
            (
                "{\"v\":1,\u{0}\"op\":\"status\"}",
                "cannot parse the line as JSON",
            ),
            (&deep, "recursion limit exceeded"),
            ("{\"op\":\"status\"}", "missing field `v`"),
            (
                "{\"v\":\"1\",\"op\":\"status\"}",
                "invalid type: string \"1\"",
            ),
            (
                "{\"v\":1,\"op\":\"status\",\"op\":\"reset\"}",
                "duplicate field `op`",
            ),
            ("{\"v\":1,\"id\":-1,\"op\":\"status\"}", "expected u64"),
        ] {
            let r = refusal(line);
            assert_eq!((r.id, r.error.code), (0, ErrorCode::Malformed), "{line}");
            assert!(
                r.error.message.contains(named),
                "{line}: {}",
                r.error.message
            );
            assert!(!r.error.fix.is_empty(), "{line}");
        }
    }

    #[test]
    fn a_bad_operation_is_refused_with_the_lines_id() {
        for (line, named) in [
            (
                "{\"v\":1,\"id\":4,\"op\":\"launch\"}",
                "bad \"launch\" request: unknown variant",
            ),
            (
                "{\"v\":1,\"id\":4,\"op\":\"destroy-cell\"}",
                "missing field `name`",
            ),
            (
                "{\"v\":1,\"id\":4,\"op\":\"attach\",\"cell\":\"a\",\"pid\":1099511627776}",
                "integer `1099511627776`, expected i32",
            ),
        ] {
            let r = refusal(line);
            assert_eq!((r.id, r.error.code), (4, ErrorCode::Malformed), "{line}");
            assert!(
                r.error.message.contains(named),
                "{line}: {}",
                r.error.message
            );
        }
        let v2 = refusal("{\"v\":2,\"id\":4,\"op\":\"teleport\"}");
        assert_eq!((v2.id, v2.error.code), (4, ErrorCode::Version));
    }

    #[test]
    fn an_integer_op_is_not_taken_for_a_variant_index() {
        let r = refusal("{\"v\":1,\"op\":9}");
        assert!(
            r.error
                .message
                .contains("invalid type: integer `9`, expected a string"),
            "{}",
            r.error.message
        );
    }

    #[test]
    fn an_overlong_line_is_dropped_through_its_newline_and_the_next_one_read() {
        let limit = MAX_LINE as usize;
        let mut input = vec![b'x'; 3 * limit + 17];
        input.extend_from_slice(b"\n{\"v\":1}\n");
        input.extend_from_slice(&vec![b'y'; limit - 1]);
        input.extend_from_slice(b"\n");
        input.extend_from_slice(&vec![b'z'; limit]);
        let mut reader = std::io::BufReader::new(&input[..]);
        let mut line = Vec::new();
        let mut next = || {
            let incoming = read_line(&mut reader, &mut line).unwrap();
            assert!(line.capacity() <= 2 * limit, "bounded memory");
            (incoming, line.len())
        };
        assert_eq!(next().0, Incoming::Overlong);
        assert_eq!(next(), (Incoming::Line, 8));
        assert_eq!(next(), (Incoming::Line, limit), "the longest line accepted");
        assert_eq!(next().0, Incoming::Overlong, "no newline within the limit");
        assert_eq!(next().0, Incoming::Closed);
    }
}
