//! A channel's two ends, each in its own process: creating a channel,
//! handing one end over a Unix socket, and the waits, which watch the peer
//! process through a pidfd so that a dead peer is an error, never a hang.
//!
//! It owns the ends' lifetimes (dropping an end closes it) and the waiting
//! policy: sleeps of at most [`PEER_CHECK`], the peer's life checked between
//! them. It must never wait without a timeout, and the non-waiting calls
//! (`try_push`, `try_pop`, `write_bytes`, `read_bytes`) must never allocate,
//! lock or make a system call other than waking a sleeping peer.

use crate::error::ChannelError;
use crate::handover::{self, End};
use crate::mapped::{MappedRing, Shape};
use crate::protocol::{ConsumerRing, ProducerRing, Readiness, RingEnd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use tessera_sys::event::EventFd;
use tessera_sys::ipc;
use tessera_sys::pidfd::PidFd;
use tessera_sys::shm::SharedMemory;

/// The longest a waiting side sleeps before it checks that its peer still
/// lives: the bound on noticing a dead peer.
pub const PEER_CHECK: Duration = Duration::from_millis(10);

/// A channel created by this process, before one of its ends is handed over.
pub struct Channel {
    name: String,
    memory: SharedMemory,
    ring: MappedRing,
}

impl Channel {
    /// A channel named `name` (for the peer and in /proc/PID/fd) of `slots`
    /// slots (a power of two) of `slot_size` bytes, in a new sealed memfd.
    pub fn create(name: &str, slot_size: usize, slots: usize) -> Result<Channel, ChannelError> {
        Channel::new(name, slot_size, slots, None)
    }

    /// A channel whose consumer waits on `doorbell` (an eventfd it watches
    /// with others in one epoll, see [`Consumer::arm`]) instead of a futex;
    /// the producer signals it whenever it finds the consumer asleep. One
    /// doorbell may serve many channels of one consuming thread.
    pub fn with_doorbell(
        name: &str,
        slot_size: usize,
        slots: usize,
        doorbell: &EventFd,
    ) -> Result<Channel, ChannelError> {
        Channel::new(name, slot_size, slots, Some(doorbell.try_clone()?))
    }

    fn new(
        name: &str,
        slot_size: usize,
        slots: usize,
        doorbell: Option<EventFd>,
    ) -> Result<Channel, ChannelError> {
        handover::check_name(name)?;
        let shape = Shape::new(slot_size, slots)?;
        let memory = SharedMemory::create(&format!("tessera-channel:{name}"), shape.mapping_len())?;
        let ring = MappedRing::create(&memory, shape, doorbell)?;
        Ok(Channel {
            name: name.to_string(),
            memory,
            ring,
        })
    }

    /// Hands the consumer's end to the process on the other end of `socket`
    /// (which calls [`Consumer::open_from`]) and keeps the producer's.
    pub fn hand_over_consumer(self, socket: &UnixStream) -> Result<Producer, ChannelError> {
        let (ring, link) = self.hand_over(socket, End::Consumer)?;
        Ok(Producer::new(ring, link))
    }

    /// Hands the producer's end over (the peer calls
    /// [`Producer::open_from`]) and keeps the consumer's.
    pub fn hand_over_producer(self, socket: &UnixStream) -> Result<Consumer, ChannelError> {
        let (ring, link) = self.hand_over(socket, End::Producer)?;
        Ok(Consumer::new(ring, link))
    }

    /// Sends `end` and returns the ring and link of the other end, which
    /// this process keeps.
    fn hand_over(self, socket: &UnixStream, end: End) -> Result<(MappedRing, Link), ChannelError> {
        let peer = ipc::peer_pidfd(socket)?;
        handover::send_end(socket, end, &self.name, &self.memory)?;
        if let Some(doorbell) = self.ring.doorbell() {
            handover::send_doorbell(socket, doorbell)?;
        }
        let link = Link::new(self.name, &self.ring, peer);
        Ok((self.ring, link))
    }
}

/// Receives `end` over `socket`: its ring, and its link to the process that
/// handed it over.
fn open_end(socket: &UnixStream, end: End) -> Result<(MappedRing, Link), ChannelError> {
    let (name, memory) = handover::receive_end(socket, end)?;
    let mut ring = MappedRing::open(&memory)?;
    if ring.expects_doorbell() {
        ring.attach_doorbell(handover::receive_doorbell(socket)?);
    }
    let link = Link::new(name, &ring, ipc::peer_pidfd(socket)?);
    Ok((ring, link))
}

/// What an end knows of its channel and of the process at the other end.
#[derive(Debug)]
pub struct Link {
    name: String,
    slot_size: usize,
    peer: PidFd,
}

impl Link {
    fn new(name: String, ring: &MappedRing, peer: PidFd) -> Link {
        Link {
            name,
            slot_size: ring.shape().slot_size(),
            peer,
        }
    }

    /// The channel's name, as its creator gave it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most bytes a message may have (and a pop needs room for).
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// The process at the other end, as the kernel vouched at hand-over.
    pub fn peer_pid(&self) -> i32 {
        self.peer.pid()
    }
}

/// The sending end of a channel. Dropping it closes the channel: the
/// consumer gets `Closed` once it has taken what was sent.
pub struct Producer {
    ring: ProducerRing<MappedRing>,
    link: Link,
}

impl Producer {
    fn new(ring: MappedRing, link: Link) -> Producer {
        let ring = ProducerRing::new(ring);
        Producer { ring, link }
    }

    /// Takes the producer's end the process on the other end of `socket`
    /// hands over ([`Channel::hand_over_producer`]).
    pub fn open_from(socket: &UnixStream) -> Result<Producer, ChannelError> {
        let (ring, link) = open_end(socket, End::Producer)?;
        Ok(Producer::new(ring, link))
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// How many times a push had to wake the sleeping consumer (a system
    /// call each); the other pushes made none.
    pub fn wake_ups(&self) -> u64 {
        self.ring.wake_ups()
    }

    /// Sends one message of at most a slot, or says `Full`. Real-time safe.
    pub fn try_push(&mut self, message: &[u8]) -> Result<(), ChannelError> {
        self.ring.try_push(message)
    }

    /// Sends as much of `bytes` as there is room for, a slot's worth per
    /// slot; returns how many bytes went (0 when full). Real-time safe.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<usize, ChannelError> {
        self.ring.write_bytes(bytes)
    }

    /// Sends one message, waiting at most `timeout` for room.
    pub fn push_wait(&mut self, message: &[u8], timeout: Duration) -> Result<(), ChannelError> {
        let deadline = Instant::now().checked_add(timeout);
        retry_until(&mut self.ring, &self.link.peer, deadline, |ring| {
            ring.try_push(message)
        })
    }

    /// Sends all of `bytes`, waiting at most `timeout` in all for room.
    pub fn write_all_bytes(&mut self, bytes: &[u8], timeout: Duration) -> Result<(), ChannelError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut rest = bytes;
        while !rest.is_empty() {
            let sent = retry_until(&mut self.ring, &self.link.peer, deadline, |ring| match ring
                .write_bytes(rest)?
            {
                0 => Err(ChannelError::Full),
                sent => Ok(sent),
            })?;
            rest = &rest[sent..];
        }
        Ok(())
    }

    /// Waits at most `timeout` until there is room for a message.
    pub fn wait_writable(&mut self, timeout: Duration) -> Result<(), ChannelError> {
        wait_ready(
            &mut self.ring,
            &self.link.peer,
            Instant::now().checked_add(timeout),
        )
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.ring.close();
    }
}

/// The receiving end of a channel. Dropping it closes the channel: a
/// producer waiting for room gets `Closed`.
pub struct Consumer {
    ring: ConsumerRing<MappedRing>,
    link: Link,
}

impl Consumer {
    fn new(ring: MappedRing, link: Link) -> Consumer {
        let ring = ConsumerRing::new(ring);
        Consumer { ring, link }
    }

    /// Takes the consumer's end the process on the other end of `socket`
    /// hands over ([`Channel::hand_over_consumer`]).
    pub fn open_from(socket: &UnixStream) -> Result<Consumer, ChannelError> {
        let (ring, link) = open_end(socket, End::Consumer)?;
        Ok(Consumer::new(ring, link))
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// Takes the next message into `out` (a slot's size always fits) and
    /// returns its length, or says `Empty`. Real-time safe.
    pub fn try_pop(&mut self, out: &mut [u8]) -> Result<usize, ChannelError> {
        self.ring.try_pop(out)
    }

    /// Takes as many sent bytes as `out` holds; returns how many (0 when
    /// empty). Real-time safe.
    pub fn read_bytes(&mut self, out: &mut [u8]) -> Result<usize, ChannelError> {
        self.ring.read_bytes(out)
    }

    /// Takes the next message, waiting at most `timeout` for one.
    pub fn pop_wait(&mut self, out: &mut [u8], timeout: Duration) -> Result<usize, ChannelError> {
        let deadline = Instant::now().checked_add(timeout);
        retry_until(&mut self.ring, &self.link.peer, deadline, |ring| {
            ring.try_pop(out)
        })
    }

    /// Takes at least one byte into `out` (unless it is empty), waiting at
    /// most `timeout` for some.
    pub fn read_bytes_wait(
        &mut self,
        out: &mut [u8],
        timeout: Duration,
    ) -> Result<usize, ChannelError> {
        let deadline = Instant::now().checked_add(timeout);
        retry_until(
            &mut self.ring,
            &self.link.peer,
            deadline,
            |ring| match ring.read_bytes(out)? {
                0 if !out.is_empty() => Err(ChannelError::Empty),
                taken => Ok(taken),
            },
        )
    }

    /// Before a wait on this channel's doorbell together with other
    /// descriptors: says whether a message (or the close) is already there,
    /// in which case the caller must not sleep. After the wait, or instead
    /// of it, [`Self::disarm`]. Only for a channel made
    /// [`Channel::with_doorbell`]; real-time safe.
    pub fn arm(&mut self) -> Result<Readiness, ChannelError> {
        self.ring.arm()
    }

    pub fn disarm(&self) {
        self.ring.disarm()
    }

    /// `PeerGone` if the process at the other end has died: a caller that
    /// waits for this channel elsewhere (its doorbell) asks between waits,
    /// as `pop_wait` does. One poll of a pidfd.
    pub fn check_peer(&self) -> Result<(), ChannelError> {
        match self.link.peer.has_exited() {
            true => Err(ChannelError::PeerGone {
                pid: self.link.peer.pid(),
            }),
            false => Ok(()),
        }
    }

    /// The doorbell producers ring when they find this consumer armed, to
    /// watch (with epoll) beside other descriptors; `None` for a channel
    /// without one.
    pub fn doorbell(&self) -> Option<&EventFd> {
        self.ring.memory().doorbell()
    }

    /// Waits at most `timeout` until a message is there.
    pub fn wait_readable(&mut self, timeout: Duration) -> Result<(), ChannelError> {
        wait_ready(
            &mut self.ring,
            &self.link.peer,
            Instant::now().checked_add(timeout),
        )
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.ring.close();
    }
}

/// Runs `attempt` until it does not report `Full` or `Empty`, waiting for
/// `end` in between (at most until `deadline`; none: forever, in checked
/// sleeps).
fn retry_until<E: RingEnd, T>(
    end: &mut E,
    peer: &PidFd,
    deadline: Option<Instant>,
    mut attempt: impl FnMut(&mut E) -> Result<T, ChannelError>,
) -> Result<T, ChannelError> {
    loop {
        match attempt(end) {
            Err(ChannelError::Full | ChannelError::Empty) => wait_ready(end, peer, deadline)?,
            done => return done,
        }
    }
}

/// Waits until `end` can go ahead, in sleeps of at most [`PEER_CHECK`],
/// checking between them that the peer lives.
fn wait_ready<E: RingEnd>(
    end: &mut E,
    peer: &PidFd,
    deadline: Option<Instant>,
) -> Result<(), ChannelError> {
    loop {
        match end.readiness()? {
            Readiness::Ready => return Ok(()),
            Readiness::PeerClosed => return Err(ChannelError::Closed),
            Readiness::NotYet => {}
        }
        if peer.has_exited() {
            // What the peer published before it died is whole: look once
            // more before calling it gone.
            return match end.readiness()? {
                Readiness::Ready => Ok(()),
                _ => Err(ChannelError::PeerGone { pid: peer.pid() }),
            };
        }
        let left = deadline.map_or(PEER_CHECK, |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Err(ChannelError::TimedOut);
        }
        end.sleep(left.min(PEER_CHECK));
    }
}
