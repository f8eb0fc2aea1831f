//! The client library of the network service: open a flow (a connection
//! to the service, a QoS spec, the two channels it hands over), take the
//! datagrams the service hands over and give it datagrams to send, ask for
//! its status, have it announce a stream, and list the streams it heard.
//!
//! Receiving and sending never allocate and never block unless asked to
//! wait (with a timeout), so a real-time thread may call them; a service
//! that dies is an error on the next call ([`ChannelError::PeerGone`]),
//! never a hang. It owns nothing of the service's: the flow's socket and
//! counters are the service's.

use super::service::NetError;
use super::wire::{
    self, AnnounceReply, FlowRequest, Grant, Received, Request, Status, StatusReply, StreamsReply,
    ToSend, HEADER,
};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
use tessera_aes67::HeardSession;
use tessera_broker::Session;
use tessera_channel::{ChannelError, Consumer, Producer, Readiness};

/// How long a client waits for the service to answer a control request.
const PATIENCE: Duration = Duration::from_secs(5);

/// A granted flow.
pub struct Flow {
    /// Held open: closing it retires the flow.
    socket: UnixStream,
    id: u32,
    local: SocketAddr,
    inbound: Consumer,
    outbound: Producer,
    /// A slot's worth, for the message being taken or given.
    scratch: Box<[u8]>,
}

/// Connects to the service listening at `path`.
pub fn connect(path: &Path) -> Result<UnixStream, NetError> {
    let stream = UnixStream::connect(path).map_err(|e| {
        NetError::Refused(format!(
            "cannot reach the network service at {}: {e}; fix: start it with `tessera serve net`",
            path.display()
        ))
    })?;
    stream
        .set_read_timeout(Some(PATIENCE))
        .map_err(|e| NetError::Wire(e.into()))?;
    Ok(stream)
}

/// Connects to the service registered with the broker as `name`: the
/// broker checks this process against the service's policy first (and the
/// service checks it again when it accepts).
pub fn connect_by_name(name: &str) -> Result<UnixStream, NetError> {
    let stream = Session::connect()?.open_service(name)?;
    stream
        .set_read_timeout(Some(PATIENCE))
        .map_err(|e| NetError::Wire(e.into()))?;
    Ok(stream)
}

/// The service's status, over a fresh connection.
pub fn status(path: &Path) -> Result<Status, NetError> {
    ask_status(&connect(path)?)
}

/// The status of the service at the other end of `stream`.
pub fn ask_status(stream: &UnixStream) -> Result<Status, NetError> {
    wire::send(stream, &Request::Status)?;
    match wire::receive::<StatusReply>(stream)? {
        StatusReply::Status(status) => Ok(status),
        StatusReply::Refused { reason } => Err(NetError::Refused(reason)),
    }
}

/// A stream description the service announces (SAP) for as long as this
/// lives: dropping it closes the connection, and the service sends the
/// deletion.
pub struct Announcement {
    _socket: UnixStream,
    pub id: u64,
}

/// Asks the service on `socket` to announce `sdp` (the service checks it
/// first).
pub fn announce(socket: UnixStream, sdp: &str) -> Result<Announcement, NetError> {
    let request = Request::Announce { sdp: sdp.into() };
    wire::send(&socket, &request)?;
    match wire::receive::<AnnounceReply>(&socket)? {
        AnnounceReply::Announced { id } => Ok(Announcement {
            _socket: socket,
            id,
        }),
        AnnounceReply::Refused { reason } => Err(NetError::Refused(reason)),
    }
}

/// The streams the service has heard announced on the network, and how
/// many datagrams on the SAP port it could not read as announcements.
pub fn streams(stream: &UnixStream) -> Result<(Vec<HeardSession>, u64), NetError> {
    wire::send(stream, &Request::Streams)?;
    match wire::receive::<StreamsReply>(stream)? {
        StreamsReply::Streams {
            sessions,
            unreadable,
        } => Ok((sessions, unreadable)),
        StreamsReply::Refused { reason } => Err(NetError::Refused(reason)),
    }
}

impl Flow {
    /// Asks the service on `socket` for a flow; its refusal (admission,
    /// policy, a bad address) comes back as [`NetError::Refused`] with the
    /// service's reason.
    pub fn open(socket: UnixStream, request: &FlowRequest) -> Result<Flow, NetError> {
        // A caller the policy refuses is told why and hung up on, maybe
        // before the request is written: the answer is read either way.
        let sent = wire::send(&socket, &Request::Open(request.clone()));
        let (id, local) = match (wire::receive::<Grant>(&socket), sent) {
            (Ok(Grant::Granted { id, local }), Ok(())) => (id, local),
            (Ok(Grant::Refused { reason }), _) => return Err(NetError::Refused(reason)),
            (_, Err(e)) | (Err(e), _) => return Err(e.into()),
        };
        let inbound = Consumer::open_from(&socket)?;
        let outbound = Producer::open_from(&socket)?;
        let scratch = vec![0u8; HEADER + request.max_datagram].into_boxed_slice();
        Ok(Flow {
            socket,
            id,
            local,
            inbound,
            outbound,
            scratch,
        })
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// The address the service bound for this flow.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Before waiting for this flow beside other descriptors (its
    /// [`Self::doorbell`] in the same epoll): whether a datagram is already
    /// there (then do not sleep). [`Self::disarm`] after the wait, which
    /// must have a timeout: a dying service rings no doorbell, so after a
    /// wait that timed out ask [`Self::check_service`]. Real-time safe.
    pub fn arm(&mut self) -> Result<Readiness, ChannelError> {
        self.inbound.arm()
    }

    /// Ends an [`Self::arm`]. Real-time safe.
    pub fn disarm(&self) {
        self.inbound.disarm();
    }

    /// Takes the doorbell's count after a wait it ended, so that a
    /// level-triggered wait on it sleeps again (one read).
    pub fn clear_doorbell(&self) {
        if let Some(bell) = self.inbound.doorbell() {
            bell.drain();
        }
    }

    /// `PeerGone` if the service has died (one poll of its pidfd).
    pub fn check_service(&self) -> Result<(), ChannelError> {
        self.inbound.check_peer()
    }

    /// What becomes readable when the service hands a datagram to this
    /// flow while it is armed (`None` from a service that gave the flow no
    /// doorbell: wait with [`Self::receive`] then).
    pub fn doorbell(&self) -> Option<BorrowedFd<'_>> {
        self.inbound.doorbell().map(|bell| bell.as_fd())
    }

    /// The next datagram the service handed over, if any: its header and
    /// its bytes. Real-time safe.
    pub fn try_receive(&mut self) -> Result<Option<(Received, &[u8])>, ChannelError> {
        match self.inbound.try_pop(&mut self.scratch) {
            Ok(len) => Ok(self.received(len)),
            Err(ChannelError::Empty) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The next datagram, waiting at most `timeout`.
    pub fn receive(&mut self, timeout: Duration) -> Result<(Received, &[u8]), ChannelError> {
        let len = self.inbound.pop_wait(&mut self.scratch, timeout)?;
        self.received(len)
            .ok_or(ChannelError::Corrupt("a message shorter than its header"))
    }

    fn received(&self, len: usize) -> Option<(Received, &[u8])> {
        let header = Received::decode(&self.scratch[..len])?;
        Some((header, &self.scratch[HEADER..len]))
    }

    /// Gives the service `payload` to send; `Full` when the channel has no
    /// room (the service is behind this flow's share). Real-time safe.
    pub fn try_send(&mut self, payload: &[u8], meta: ToSend) -> Result<(), ChannelError> {
        let len = self.fill(payload, meta)?;
        self.outbound.try_push(&self.scratch[..len])
    }

    /// As [`Self::try_send`], waiting at most `timeout` for room.
    pub fn send(
        &mut self,
        payload: &[u8],
        meta: ToSend,
        timeout: Duration,
    ) -> Result<(), ChannelError> {
        let len = self.fill(payload, meta)?;
        self.outbound.push_wait(&self.scratch[..len], timeout)
    }

    /// Puts the message (header and payload) in the scratch slot; its
    /// length.
    fn fill(&mut self, payload: &[u8], meta: ToSend) -> Result<usize, ChannelError> {
        let len = HEADER + payload.len();
        if len > self.scratch.len() {
            return Err(ChannelError::TooLarge {
                len,
                slot_size: self.scratch.len(),
            });
        }
        meta.encode(&mut self.scratch);
        self.scratch[HEADER..len].copy_from_slice(payload);
        Ok(len)
    }

    /// The service's status, asked on this flow's connection.
    pub fn status(&self) -> Result<Status, NetError> {
        ask_status(&self.socket)
    }
}
