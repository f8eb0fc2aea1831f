//! What every service process shares with its clients and its threads: the
//! control frames on a client's Unix socket (a little-endian u32 length and
//! that much JSON), the listening socket, the policy of who may connect,
//! and starting a serving thread only once its setup (joining a cell) is
//! done.
//!
//! A control frame is read exactly, never through a buffer that could
//! swallow the channel hand-over records that follow it on the same socket.
//! This module never trusts a length a peer sent, and never decides where a
//! thread runs (its setup hook does).

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_sys::event::{Epoll, Readiness, Trigger};
use tessera_sys::ipc::PeerCredentials;

/// The longest control frame either side accepts.
const MAX_FRAME: usize = 1 << 20;

/// A serving thread's start hook (join the service's cell, …).
pub type ThreadHook = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;
/// A service's policy: who may connect.
pub type Policy = Arc<dyn Fn(&PeerCredentials) -> Result<(), String> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the service's socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("a control frame of {0} bytes (at most {MAX_FRAME})")]
    TooLong(usize),
    #[error("a malformed control frame: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Writes one control frame.
pub fn send<T: Serialize>(mut socket: impl Write, message: &T) -> Result<(), WireError> {
    let body = serde_json::to_vec(message)?;
    if body.len() > MAX_FRAME {
        return Err(WireError::TooLong(body.len()));
    }
    socket.write_all(&(body.len() as u32).to_le_bytes())?;
    socket.write_all(&body)?;
    Ok(())
}

/// Reads exactly one control frame.
pub fn receive<T: for<'de> Deserialize<'de>>(mut socket: impl Read) -> Result<T, WireError> {
    let mut len = [0u8; 4];
    socket.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(WireError::TooLong(len));
    }
    let mut body = vec![0u8; len];
    socket.read_exact(&mut body)?;
    Ok(serde_json::from_slice(&body)?)
}

/// A non-blocking listener at `path`; a socket file no process listens on
/// is a crashed service's, and is replaced.
pub fn listen(path: &Path) -> std::io::Result<UnixListener> {
    if path.exists() && UnixStream::connect(path).is_err() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The epoll token of the listener in [`run_control`].
const LISTENER: u64 = u64::MAX;

/// A service's control thread as [`run_control`] drives it: the listener,
/// its connections by index, and what it does between wake-ups.
pub trait ControlLoop {
    fn listener(&self) -> &UnixListener;
    fn stopping(&self) -> bool;
    /// The listener is readable: accept (and add to `epoll` under their
    /// index) whoever connected.
    fn accept(&mut self, epoll: &Epoll);
    /// Connection `index` is readable (or hung up).
    fn serve(&mut self, index: usize);
    /// After every wake-up, at least every 100 ms.
    fn after_wake(&mut self) {}
}

/// Runs a control thread until it says it is stopping: waits in epoll on
/// the listener and the connections (at most 100 ms, so a stop is seen).
pub fn run_control(control: &mut impl ControlLoop) {
    let Ok(epoll) = Epoll::new() else {
        return;
    };
    if epoll
        .add(control.listener().as_fd(), LISTENER, Trigger::Level)
        .is_err()
    {
        return;
    }
    let mut ready = vec![Readiness::EMPTY; 64];
    while !control.stopping() {
        let woken = epoll
            .wait(&mut ready, Duration::from_millis(100))
            .unwrap_or(0);
        for report in &ready[..woken] {
            match report.token() {
                LISTENER => control.accept(&epoll),
                index => control.serve(index as usize),
            }
        }
        control.after_wake();
    }
}

/// The index of a free place in `slots`, made at the end if none is.
pub fn free_slot<T>(slots: &mut Vec<Option<T>>) -> usize {
    match slots.iter().position(Option::is_none) {
        Some(free) => free,
        None => {
            slots.push(None);
            slots.len() - 1
        }
    }
}

/// Starts thread `name`: it runs `setup` (if any), then `body`. Returns once
/// the setup is done, with the setup's error if it failed (then `body`
/// never runs).
pub fn spawn_after_setup<T: Send + 'static>(
    name: &str,
    setup: Option<ThreadHook>,
    body: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<Option<T>>, String> {
    let (started_in, started_out) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || {
            let ready = setup.map_or(Ok(()), |hook| hook());
            let failed = ready.is_err();
            let _ = started_in.send(ready);
            (!failed).then(body)
        })
        .map_err(|e| format!("{name}: {e}"))?;
    match started_out.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(why)) => Err(format!("{name}: {why}")),
        Err(_) => Err(format!("{name} ended before serving")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_garbage_is_an_error() {
        let mut bytes = Vec::new();
        send(&mut bytes, &vec![1u32, 2]).unwrap();
        assert_eq!(receive::<Vec<u32>>(&bytes[..]).unwrap(), vec![1, 2]);
        let mut garbage = 5u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(b"hello");
        assert!(matches!(
            receive::<Vec<u32>>(&garbage[..]),
            Err(WireError::Malformed(_))
        ));
        let huge = u32::MAX.to_le_bytes();
        assert!(matches!(
            receive::<Vec<u32>>(&huge[..]),
            Err(WireError::TooLong(_))
        ));
    }

    #[test]
    fn a_failed_setup_stops_the_thread_before_its_body() {
        let hook: ThreadHook = Arc::new(|| Err("no cell".into()));
        let error = spawn_after_setup("t", Some(hook), || unreachable!()).unwrap_err();
        assert_eq!(error, "t: no cell");
        let thread = spawn_after_setup("t", None, || 7).unwrap();
        assert_eq!(thread.join().unwrap(), Some(7));
    }
}
