//! Handing a channel's end over a connected Unix socket, and admitting the
//! process on the other end.
//!
//! A hand-over is one fixed-size record (what is offered and the channel's
//! name, or a refusal and its reason) with the channel's memfd attached
//! (SCM_RIGHTS). Admission asks the kernel who connected (SO_PEERCRED) and
//! lets the caller's policy decide.
//!
//! It owns the record's format. It must never take identity from a record:
//! who the peer is comes from the kernel only.

use crate::error::ChannelError;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};
use tessera_sys::event::EventFd;
use tessera_sys::ipc::{self, PeerCredentials};
use tessera_sys::shm::SharedMemory;

const RECORD_LEN: usize = 512;
const MAGIC: &[u8; 4] = b"TSCH";
const VERSION: u8 = 1;
/// Magic, version, kind, and the text's length (u16) before the text.
const TEXT_AT: usize = 8;
/// The longest text a record carries; a longer refusal is cut.
const MAX_TEXT: usize = RECORD_LEN - TEXT_AT;
/// The longest channel name.
pub const MAX_NAME: usize = 128;

/// Which end of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Producer,
    Consumer,
}

impl End {
    fn kind(self) -> u8 {
        match self {
            End::Producer => 1,
            End::Consumer => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            End::Producer => "producer",
            End::Consumer => "consumer",
        }
    }
}

/// The kind of a record that refuses instead of handing over.
const REFUSAL: u8 = 3;
/// The kind of the record that follows an end whose consumer waits on a
/// doorbell: the eventfd comes with it.
const DOORBELL: u8 = 4;

/// Checks a channel's name: 1 to [`MAX_NAME`] bytes without NUL.
pub fn check_name(name: &str) -> Result<(), ChannelError> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(ChannelError::Setup(format!(
            "channel name {name:?}: it must be 1 to {MAX_NAME} bytes without NUL"
        )));
    }
    Ok(())
}

fn encode(kind: u8, text: &str) -> [u8; RECORD_LEN] {
    let mut cut = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut record = [0u8; RECORD_LEN];
    record[..4].copy_from_slice(MAGIC);
    record[4] = VERSION;
    record[5] = kind;
    record[6..8].copy_from_slice(&(cut as u16).to_le_bytes());
    record[TEXT_AT..TEXT_AT + cut].copy_from_slice(&text.as_bytes()[..cut]);
    record
}

/// The kind and the text of a record.
fn decode(record: &[u8; RECORD_LEN]) -> Result<(u8, String), ChannelError> {
    let malformed = |why: &str| ChannelError::Setup(format!("a malformed hand-over: {why}"));
    if &record[..4] != MAGIC {
        return Err(malformed("the peer does not speak the channel hand-over"));
    }
    if record[4] != VERSION {
        return Err(malformed(&format!(
            "version {} (this is version {VERSION})",
            record[4]
        )));
    }
    let len = u16::from_le_bytes([record[6], record[7]]) as usize;
    let text = record
        .get(TEXT_AT..TEXT_AT + len)
        .ok_or_else(|| malformed("its text is longer than the record"))?;
    let text = String::from_utf8(text.to_vec()).map_err(|_| malformed("its text is not UTF-8"))?;
    Ok((record[5], text))
}

/// Sends `end` of channel `name`, whose memory is `memory`.
pub fn send_end(
    socket: &UnixStream,
    end: End,
    name: &str,
    memory: &SharedMemory,
) -> Result<(), ChannelError> {
    let record = encode(end.kind(), name);
    let sent = ipc::send_with_fd(socket, &record, memory.as_fd())?;
    (&*socket).write_all(&record[sent..])?;
    Ok(())
}

/// Sends the consumer's doorbell, after the end of a channel whose header
/// announces one.
pub fn send_doorbell(socket: &UnixStream, doorbell: &EventFd) -> Result<(), ChannelError> {
    let record = encode(DOORBELL, "doorbell");
    let sent = ipc::send_with_fd(socket, &record, doorbell.as_fd())?;
    (&*socket).write_all(&record[sent..])?;
    Ok(())
}

/// Receives the doorbell [`send_doorbell`] sent, checked to be an eventfd.
pub fn receive_doorbell(socket: &UnixStream) -> Result<EventFd, ChannelError> {
    let (kind, _, fd) = receive_record(socket)?;
    match (kind, fd) {
        (DOORBELL, Some(fd)) => Ok(EventFd::from_received(fd)?),
        _ => Err(ChannelError::Setup(
            "the channel's header announced a doorbell, but none came".into(),
        )),
    }
}

/// One record and the descriptor that came with it.
fn receive_record(socket: &UnixStream) -> Result<(u8, String, Option<OwnedFd>), ChannelError> {
    let mut record = [0u8; RECORD_LEN];
    let (received, fd) = ipc::receive_with_fd(socket, &mut record)?;
    if received == 0 {
        return Err(ChannelError::Setup(
            "the peer closed the socket before handing a channel over".into(),
        ));
    }
    (&*socket).read_exact(&mut record[received..])?;
    let (kind, text) = decode(&record)?;
    Ok((kind, text, fd))
}

/// Receives `end` of a channel: its name and its memory, or the service's
/// refusal.
pub fn receive_end(socket: &UnixStream, end: End) -> Result<(String, SharedMemory), ChannelError> {
    let (kind, text, fd) = receive_record(socket)?;
    if kind == REFUSAL {
        return Err(ChannelError::Refused { reason: text });
    }
    if kind != end.kind() {
        return Err(ChannelError::Setup(format!(
            "the peer handed over another end of channel {text:?} than the {} end asked for",
            end.name()
        )));
    }
    let fd = fd.ok_or_else(|| {
        ChannelError::Setup(format!(
            "the hand-over of channel {text:?} came without its memory"
        ))
    })?;
    Ok((text, SharedMemory::from_fd(fd)?))
}

/// The service's side of admission: who connected (SO_PEERCRED), and
/// whether `allow` (the service's policy) lets them in. A refused caller is
/// told the reason over the socket (its `open_from` fails with `Refused`),
/// and this returns `Refused` too.
pub fn admit(
    socket: &UnixStream,
    allow: impl FnOnce(&PeerCredentials) -> Result<(), String>,
) -> Result<PeerCredentials, ChannelError> {
    let caller = ipc::peer_credentials(socket)?;
    if let Err(reason) = allow(&caller) {
        (&*socket).write_all(&encode(REFUSAL, &reason))?;
        return Err(ChannelError::Refused { reason });
    }
    Ok(caller)
}

/// Accepts one connection on `listener`, waiting at most `patience`.
pub fn accept_within(
    listener: &UnixListener,
    patience: Duration,
) -> Result<UnixStream, ChannelError> {
    let deadline = Instant::now() + patience;
    listener.set_nonblocking(true)?;
    let accepted = loop {
        match listener.accept() {
            Ok((socket, _)) => break socket,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(ChannelError::TimedOut);
            }
            Err(e) => return Err(e.into()),
        }
    };
    listener.set_nonblocking(false)?;
    accepted.set_nonblocking(false)?;
    Ok(accepted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips() {
        let (kind, text) = decode(&encode(End::Consumer.kind(), "net.rx")).unwrap();
        assert_eq!((kind, text.as_str()), (End::Consumer.kind(), "net.rx"));
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character() {
        let reason = "é".repeat(RECORD_LEN);
        let (_, text) = decode(&encode(REFUSAL, &reason)).unwrap();
        assert!(text.len() <= MAX_TEXT && reason.starts_with(&text));
    }

    #[test]
    fn foreign_bytes_are_not_a_record() {
        assert!(decode(&[7u8; RECORD_LEN]).is_err());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("net.rx").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a\0b").is_err());
        assert!(check_name(&"n".repeat(MAX_NAME + 1)).is_err());
    }
}
