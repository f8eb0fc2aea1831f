//! The client library of the render service and of its baseline: connect
//! (by socket or by the name the broker knows), submit actions (a frame and
//! the requests that draw it), read back when each reached the screen, ask
//! for terms and accept them.
//!
//! With the render service a frame goes into a slot of the client's pool
//! (a memfd the service maps) and only a 32-byte request crosses the
//! request channel; with the baseline the frame follows its request on the
//! socket. [`Display::submit`] never blocks on the render service: with no
//! free slot the frame is refused at once ([`Submitted::NoSlot`]). A
//! service that dies is an error ([`DisplayError::Gone`]), never a hang.

use super::screen::Rect;
use super::wire::{Control, Done, Draw, First, Hello, Reply, ServerKind, Status, Welcome};
use crate::control::{self, WireError};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use tessera_channel::ChannelError;
use tessera_policy::sla::{Offer, Terms};
use tessera_sys::clock::monotonic_ns;
use tessera_sys::ipc::send_with_fd;
use tessera_sys::shm::{SharedMapping, SharedMemory};

/// How long the client waits for a control answer.
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DisplayError {
    #[error("the render service refused: {0}")]
    Refused(String),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error("the render service is gone ({0}); fix: restart it with `tessera serve render`")]
    Gone(String),
    #[error("the broker: {0}")]
    Broker(#[from] tessera_broker::BrokerError),
    #[error("{0}")]
    Kernel(#[from] tessera_sys::Error),
}

/// One action: a frame drawn by `bands` requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// Request kind, as in the client's terms.
    pub kind: u8,
    pub deadline_ns: u64,
    /// A probe: served on the probing share and measured for terms.
    pub probe: bool,
    /// Rendering work per request (the seed's expensive requests).
    pub spin_ns: u32,
    /// Requests the frame is split into (bands of rows), at least 1.
    pub bands: u16,
}

/// What became of a submitted frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Sent as this action.
    Sent(u32),
    /// Every slot was in flight: nothing sent.
    NoSlot,
}

enum Transport {
    Shared {
        pool: SharedMapping,
        requests: tessera_channel::Producer,
        done: tessera_channel::Consumer,
    },
    /// The baseline: frames after their requests on the socket, reports
    /// back on it (read without blocking, `partial` holds a record's start).
    Socket { partial: Vec<u8> },
}

/// A connection to the render service or the baseline.
pub struct Display {
    socket: UnixStream,
    server: ServerKind,
    client: u32,
    window: Rect,
    hello: Hello,
    transport: Transport,
    free: Vec<u16>,
    next_action: u32,
    record: [u8; Done::SIZE],
}

/// Connects to the server at `path`.
pub fn connect(path: &Path) -> Result<UnixStream, DisplayError> {
    let stream = UnixStream::connect(path).map_err(|e| {
        DisplayError::Refused(format!(
            "cannot reach the render service at {}: {e}; fix: start it with `tessera serve render`",
            path.display()
        ))
    })?;
    stream
        .set_read_timeout(Some(PATIENCE))
        .map_err(|e| DisplayError::Wire(e.into()))?;
    Ok(stream)
}

/// Connects to the server registered with the broker as `name` (the
/// broker checks this process against its policy first).
pub fn connect_by_name(name: &str) -> Result<UnixStream, DisplayError> {
    let stream = tessera_broker::Session::connect()?.open_service(name)?;
    stream
        .set_read_timeout(Some(PATIENCE))
        .map_err(|e| DisplayError::Wire(e.into()))?;
    Ok(stream)
}

/// The status of the server at the other end of a fresh `stream`.
pub fn status(stream: UnixStream) -> Result<Status, DisplayError> {
    control::send(&stream, &First::Control(Control::Status))?;
    match control::receive::<Reply>(&stream)? {
        Reply::Status(status) => Ok(status),
        other => Err(refusal(other)),
    }
}

/// The screen as a PNG, over a fresh `stream`.
pub fn snapshot(mut stream: UnixStream) -> Result<Vec<u8>, DisplayError> {
    control::send(&stream, &First::Control(Control::Snapshot))?;
    match control::receive::<Reply>(&stream)? {
        Reply::Snapshot { bytes } => {
            let mut png = vec![0; bytes];
            stream
                .read_exact(&mut png)
                .map_err(|e| DisplayError::Wire(e.into()))?;
            Ok(png)
        }
        other => Err(refusal(other)),
    }
}

fn refusal(reply: Reply) -> DisplayError {
    match reply {
        Reply::Refused { reason } => DisplayError::Refused(reason),
        other => DisplayError::Refused(format!("an unexpected answer: {other:?}")),
    }
}

impl Display {
    /// Says hello on `socket`; with the render service, hands over the
    /// frame pool and takes the two channels.
    pub fn open(socket: UnixStream, hello: Hello) -> Result<Display, DisplayError> {
        hello.check().map_err(DisplayError::Refused)?;
        control::send(&socket, &First::Hello(hello.clone()))?;
        let (server, client, window) = match control::receive::<Welcome>(&socket)? {
            Welcome::Welcome {
                server,
                client,
                window,
            } => (server, client, window),
            Welcome::Refused { reason } => return Err(DisplayError::Refused(reason)),
        };
        let transport = match server {
            ServerKind::Render => {
                let memory = SharedMemory::create(
                    &format!("tessera-render-pool:{}", hello.name),
                    hello.frame_bytes() * hello.slots,
                )?;
                send_with_fd(&socket, &[0], memory.as_fd())?;
                let pool = memory.map()?;
                let requests = tessera_channel::Producer::open_from(&socket)?;
                let done = tessera_channel::Consumer::open_from(&socket)?;
                Transport::Shared {
                    pool,
                    requests,
                    done,
                }
            }
            ServerKind::Baseline => Transport::Socket {
                partial: Vec::with_capacity(Done::SIZE),
            },
        };
        Ok(Display {
            free: (0..hello.slots as u16).rev().collect(),
            socket,
            server,
            client,
            window,
            hello,
            transport,
            next_action: 0,
            record: [0; Done::SIZE],
        })
    }

    pub fn server(&self) -> ServerKind {
        self.server
    }

    pub fn client(&self) -> u32 {
        self.client
    }

    pub fn window(&self) -> Rect {
        self.window
    }

    /// Actions sent whose report has not come back.
    pub fn in_flight(&self) -> usize {
        self.hello.slots - self.free.len()
    }

    /// Sends `frame` (width × height × 3 bytes, RGB rows) as one action,
    /// stamped t_req now.
    pub fn submit(&mut self, action: &Action, frame: &[u8]) -> Result<Submitted, DisplayError> {
        assert_eq!(frame.len(), self.hello.frame_bytes(), "a whole frame");
        let Some(slot) = self.free.pop() else {
            return Ok(Submitted::NoSlot);
        };
        let id = self.next_action;
        self.next_action = self.next_action.wrapping_add(1);
        let sent_ns = monotonic_ns();
        let frame_bytes = self.hello.frame_bytes();
        let stride = self.hello.width * super::BYTES_PER_PIXEL;
        let bands = bands(self.hello.height, action.bands);
        let mut record = [0u8; Draw::SIZE];
        for (i, (first_row, rows)) in bands.iter().enumerate() {
            let draw = Draw {
                action: id,
                slot,
                kind: action.kind,
                flags: (if i + 1 == bands.len() { Draw::END } else { 0 })
                    | if action.probe { Draw::PROBE } else { 0 },
                first_row: *first_row as u16,
                rows: *rows as u16,
                spin_ns: action.spin_ns,
                sent_ns,
                deadline_ns: action.deadline_ns,
            };
            draw.encode(&mut record);
            let pixels = &frame[first_row * stride..(first_row + rows) * stride];
            match &mut self.transport {
                Transport::Shared { pool, requests, .. } => {
                    pool.copy_in(usize::from(slot) * frame_bytes + first_row * stride, pixels);
                    requests
                        .push_wait(&record, PATIENCE)
                        .map_err(|e| self.gone_or(e))?;
                }
                Transport::Socket { .. } => {
                    (&self.socket)
                        .write_all(&record)
                        .and_then(|()| (&self.socket).write_all(pixels))
                        .map_err(|e| DisplayError::Gone(e.to_string()))?;
                }
            }
        }
        Ok(Submitted::Sent(id))
    }

    fn gone_or(&self, e: ChannelError) -> DisplayError {
        match e {
            ChannelError::PeerGone { .. } | ChannelError::Closed => {
                DisplayError::Gone(e.to_string())
            }
            other => DisplayError::Channel(other),
        }
    }

    /// The next action report, if one is there; never blocks.
    pub fn try_done(&mut self) -> Result<Option<Done>, DisplayError> {
        let done = match &mut self.transport {
            Transport::Shared { done, .. } => match done.try_pop(&mut self.record) {
                Ok(_) => Done::decode(&self.record),
                Err(ChannelError::Empty) => None,
                Err(e) => return Err(self.gone_or(e)),
            },
            Transport::Socket { partial } => read_record(&self.socket, partial)?,
        };
        if let Some(done) = done {
            self.free.push(done.slot);
        }
        Ok(done)
    }

    /// Waits up to `timeout` for the next action report.
    pub fn wait_done(&mut self, timeout: Duration) -> Result<Option<Done>, DisplayError> {
        let give_up = monotonic_ns() + timeout.as_nanos() as u64;
        loop {
            if let Some(done) = self.try_done()? {
                return Ok(Some(done));
            }
            let now = monotonic_ns();
            if now >= give_up {
                return Ok(None);
            }
            let left = Duration::from_nanos(give_up - now);
            match &mut self.transport {
                Transport::Shared { done, .. } => match done.wait_readable(left.min(PATIENCE)) {
                    Ok(()) | Err(ChannelError::TimedOut) => {}
                    Err(e) => return Err(self.gone_or(e)),
                },
                Transport::Socket { .. } => {
                    std::thread::sleep(left.min(Duration::from_micros(200)))
                }
            }
        }
    }

    /// What the service would guarantee for `terms`, from this client's
    /// probes; its refusal says why and what to do.
    pub fn terms(&self, terms: &Terms) -> Result<Offer, DisplayError> {
        match self.ask(&Control::Terms(terms.clone()))? {
            Reply::Offer(offer) => Ok(offer),
            other => Err(refusal(other)),
        }
    }

    /// Accepts the last offer: it becomes this client's reservation; the
    /// answer says how its rendering task runs.
    pub fn accept(&self) -> Result<String, DisplayError> {
        match self.ask(&Control::Accept)? {
            Reply::Agreed { reservation } => Ok(reservation),
            other => Err(refusal(other)),
        }
    }

    /// The server's status, on this connection.
    pub fn status(&self) -> Result<Status, DisplayError> {
        match self.ask(&Control::Status)? {
            Reply::Status(status) => Ok(status),
            other => Err(refusal(other)),
        }
    }

    fn ask(&self, request: &Control) -> Result<Reply, DisplayError> {
        if self.server == ServerKind::Baseline {
            return Err(DisplayError::Refused(
                "the baseline server makes no agreements: every client is served in arrival \
                 order (fix: connect to `tessera serve render`; ask its status on a fresh \
                 connection)"
                    .into(),
            ));
        }
        control::send(&self.socket, request)?;
        Ok(control::receive::<Reply>(&self.socket)?)
    }
}

/// `count` bands of rows covering `height` rows (at least one row each).
fn bands(height: usize, count: u16) -> Vec<(usize, usize)> {
    let count = usize::from(count.max(1)).min(height);
    (0..count)
        .map(|i| {
            let first = i * height / count;
            (first, (i + 1) * height / count - first)
        })
        .collect()
}

/// A [`Done`] record from the socket, read without blocking.
fn read_record(socket: &UnixStream, partial: &mut Vec<u8>) -> Result<Option<Done>, DisplayError> {
    socket
        .set_nonblocking(true)
        .map_err(|e| DisplayError::Gone(e.to_string()))?;
    let mut buf = [0u8; Done::SIZE];
    let want = Done::SIZE - partial.len();
    let read = (&*socket).read(&mut buf[..want]);
    socket
        .set_nonblocking(false)
        .map_err(|e| DisplayError::Gone(e.to_string()))?;
    match read {
        Ok(0) => Err(DisplayError::Gone(
            "the baseline closed the connection".into(),
        )),
        Ok(n) => {
            partial.extend_from_slice(&buf[..n]);
            if partial.len() < Done::SIZE {
                return Ok(None);
            }
            let done = Done::decode(partial);
            partial.clear();
            Ok(done)
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(DisplayError::Gone(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bands_cover_the_frame() {
        assert_eq!(super::bands(288, 1), vec![(0, 288)]);
        assert_eq!(super::bands(10, 3), vec![(0, 3), (3, 3), (6, 4)]);
        assert_eq!(super::bands(2, 5), vec![(0, 1), (1, 1)]);
    }
}
