//! A serving thread of the network service: it owns the flows given to it
//! (their sockets and channel ends), keeps one head datagram per flow and
//! direction, and carries heads in the order its discipline picks — mClock
//! tags per flow, or first come first served — no faster than the
//! service's capacity ([`SharedPacer`]).
//!
//! Receiving is demultiplexed by the kernel (a socket per flow), and a
//! flow's socket is read only when its head has been carried: what the
//! scheduler has not picked waits in the flow's own socket buffer, so under
//! mClock a flood costs the flood's flow, not the others' queueing (lazy
//! receiver processing); under FIFO it is ahead of them, as in a stack
//! without QoS. Sockets are watched edge-triggered: every datagram that
//! arrives reports its socket once, so a socket whose datagrams wait
//! unread costs no wake-ups, and one read dry needs no re-arming.
//!
//! The loop must never allocate, lock or block except in its one epoll
//! wait (sockets, the doorbell of the clients' channels, the command bell):
//! flows arrive and leave as boxes through wait-free queues, and leave back
//! to the control thread to be dropped there.

use super::counters::FlowCounters;
use super::pacing::SharedPacer;
use super::rtp::SequenceTracker;
use super::wire::{Received, ToSend, HEADER};
use std::io::ErrorKind;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_channel::{ChannelError, Consumer, Producer, Readiness as RingReadiness};
use tessera_policy::mclock::{Discipline, FlowClass, FlowError, FlowId, FlowSpec, MClock, Phase};
use tessera_sys::clock::monotonic_ns;
use tessera_sys::event::{Epoll, EventFd, Readiness, TimerFd, Trigger};
use tessera_sys::net::receive_stamped;

/// Flows one serving thread holds at most: room for 64 AES67 streams each
/// way (a flow per stream and direction) beside a few others.
pub const MAX_FLOWS: usize = 160;
/// Longest wait before the stop flag is looked at.
const STOP_POLL_NS: u64 = 50_000_000;
/// Heads carried each way before the thread looks at its sockets, bells
/// and commands again.
const CARRY_BATCH: usize = 32;
const DOORBELL: u64 = 0;
const COMMANDS: u64 = 1;
const TIMER: u64 = 2;
const FIRST_SOCKET: u64 = 3;

/// A flow as a serving thread holds it.
pub struct ServedFlow {
    pub id: u32,
    pub spec: FlowSpec,
    pub socket: UdpSocket,
    pub to_client: Producer,
    pub from_client: Consumer,
    pub peer: Option<SocketAddr>,
    pub counters: Arc<FlowCounters>,
    /// An RTP flow's sequence, for its counters.
    rtp: Option<SequenceTracker>,
    /// A slot's worth each way: the header, then the datagram.
    rx_slot: Box<[u8]>,
    tx_slot: Box<[u8]>,
    rx_head: Option<RxHead>,
    tx_head: Option<TxHead>,
    /// The socket may hold datagrams (epoll said so, or we have not looked
    /// since the last one): its one-shot registration is spent.
    readable: bool,
    client_gone: bool,
    ids: Option<(FlowId, FlowId)>,
}

#[derive(Clone, Copy)]
struct RxHead {
    len: usize,
    arrival_ns: u64,
    from: SocketAddrV4,
}

#[derive(Clone, Copy)]
struct TxHead {
    len: usize,
    meta: ToSend,
}

impl ServedFlow {
    pub fn new(
        id: u32,
        spec: FlowSpec,
        socket: UdpSocket,
        to_client: Producer,
        from_client: Consumer,
        peer: Option<SocketAddr>,
        counters: Arc<FlowCounters>,
    ) -> ServedFlow {
        let rx_slot = vec![0u8; to_client.link().slot_size()].into_boxed_slice();
        let tx_slot = vec![0u8; from_client.link().slot_size()].into_boxed_slice();
        ServedFlow {
            rx_slot,
            tx_slot,
            id,
            spec,
            socket,
            to_client,
            from_client,
            peer,
            counters,
            rtp: None,
            rx_head: None,
            tx_head: None,
            readable: true,
            client_gone: false,
            ids: None,
        }
    }

    /// Counts the flow's arrivals as RTP at `clock_rate` (its counters must
    /// have room for them: [`FlowCounters::with_rtp`]).
    pub fn with_rtp(self, clock_rate: u32) -> ServedFlow {
        ServedFlow {
            rtp: Some(SequenceTracker::new(clock_rate)),
            ..self
        }
    }
}

/// What the control thread asks of a serving thread.
pub enum Command {
    Add(Box<ServedFlow>),
    Remove(u32),
}

/// The ends of a serving thread's queues the control thread keeps.
pub struct ThreadLink {
    pub commands: rtrb::Producer<Command>,
    pub bell: EventFd,
    pub retired: rtrb::Consumer<Box<ServedFlow>>,
    /// The doorbell the channels from this thread's clients ring.
    pub doorbell: EventFd,
}

impl ThreadLink {
    /// Hands `command` over and wakes the thread; gives it back if the
    /// queue is full.
    pub fn send(&mut self, command: Command) -> Result<(), Command> {
        self.commands
            .push(command)
            .map_err(|rtrb::PushError::Full(c)| c)?;
        self.bell.signal();
        Ok(())
    }
}

/// Which direction a head goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Out,
}

/// One serving thread.
pub struct Server {
    class: FlowClass,
    discipline: Discipline,
    flows: Vec<Option<Box<ServedFlow>>>,
    inbound: MClock,
    outbound: MClock,
    receive_capacity: Arc<SharedPacer>,
    send_capacity: Arc<SharedPacer>,
    epoll: Epoll,
    ready: Vec<Readiness>,
    /// Wakes the thread when paced or limited work may go (epoll's own
    /// timeout counts milliseconds; a gigabit datagram takes 12 µs).
    timer: TimerFd,
    /// When the timer is set to expire, until it does.
    timer_at: Option<u64>,
    doorbell: EventFd,
    commands: rtrb::Consumer<Command>,
    bell: EventFd,
    retired: rtrb::Producer<Box<ServedFlow>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// A thread serving `class` (all classes under FIFO) and the link the
    /// control thread keeps to it.
    pub fn new(
        class: FlowClass,
        discipline: Discipline,
        receive_capacity: Arc<SharedPacer>,
        send_capacity: Arc<SharedPacer>,
        stop: Arc<AtomicBool>,
    ) -> tessera_sys::Result<(Server, ThreadLink)> {
        let (command_in, command_out) = rtrb::RingBuffer::new(MAX_FLOWS * 2);
        let (retired_in, retired_out) = rtrb::RingBuffer::new(MAX_FLOWS * 2);
        let epoll = Epoll::new()?;
        let doorbell = EventFd::new()?;
        let bell = EventFd::new()?;
        let timer = TimerFd::new()?;
        epoll.add(doorbell.as_fd(), DOORBELL, Trigger::Level)?;
        epoll.add(bell.as_fd(), COMMANDS, Trigger::Level)?;
        epoll.add(timer.as_fd(), TIMER, Trigger::Level)?;
        let link = ThreadLink {
            commands: command_in,
            bell: bell.try_clone()?,
            retired: retired_out,
            doorbell: doorbell.try_clone()?,
        };
        let server = Server {
            class,
            discipline,
            flows: Vec::with_capacity(MAX_FLOWS),
            inbound: MClock::with_capacity(MAX_FLOWS),
            outbound: MClock::with_capacity(MAX_FLOWS),
            receive_capacity,
            send_capacity,
            epoll,
            ready: vec![Readiness::EMPTY; MAX_FLOWS + 3],
            timer,
            timer_at: None,
            doorbell,
            commands: command_out,
            bell,
            retired: retired_in,
            stop,
        };
        Ok((server, link))
    }

    /// Serves until the stop flag is set.
    pub fn run(mut self) {
        let _real_time = tessera_rtguard::RtGuard::enter();
        while !self.stop.load(Ordering::Relaxed) {
            self.take_commands();
            self.fill_heads();
            let next = self.carry();
            self.wait(next);
        }
        for index in 0..self.flows.len() {
            self.retire(index);
        }
    }

    fn take_commands(&mut self) {
        while let Ok(command) = self.commands.pop() {
            match command {
                Command::Add(flow) => self.add(flow),
                Command::Remove(id) => {
                    if let Some(index) = self.index_of(id) {
                        self.retire(index);
                    }
                }
            }
        }
    }

    fn index_of(&self, id: u32) -> Option<usize> {
        self.flows
            .iter()
            .position(|f| f.as_ref().is_some_and(|f| f.id == id))
    }

    fn add(&mut self, mut flow: Box<ServedFlow>) {
        let index = match self.flows.iter().position(Option::is_none) {
            Some(free) => free,
            // Within the capacity reserved at the start: no allocation.
            None if self.flows.len() < MAX_FLOWS => {
                self.flows.push(None);
                self.flows.len() - 1
            }
            None => {
                // The control thread admits at most MAX_FLOWS per thread.
                let _ = self.retired.push(flow);
                return;
            }
        };
        let ids = (self.inbound.add(flow.spec), self.outbound.add(flow.spec));
        match ids {
            (Ok(i), Ok(o)) => flow.ids = Some((i, o)),
            _ => {
                let _ = self.retired.push(flow);
                return;
            }
        }
        let token = FIRST_SOCKET + index as u64;
        if self
            .epoll
            .add(flow.socket.as_fd(), token, Trigger::Edge)
            .is_err()
        {
            flow.client_gone = true;
        }
        self.flows[index] = Some(flow);
    }

    /// Gives a flow back to the control thread, which drops it (closing its
    /// socket and unmapping its channels is no work for this thread).
    fn retire(&mut self, index: usize) {
        let Some(flow) = self.flows[index].take() else {
            return;
        };
        if let Some((i, o)) = flow.ids {
            let _ = self.inbound.remove(i);
            let _ = self.outbound.remove(o);
        }
        // The control thread drains this queue; it holds every flow there
        // is, so it cannot be full.
        let _ = self.retired.push(flow);
    }

    /// Takes a head for every flow and direction that has none and has one
    /// waiting.
    fn fill_heads(&mut self) {
        for index in 0..self.flows.len() {
            self.fill_inbound(index);
            self.fill_outbound(index);
            if self.flows[index].as_ref().is_some_and(|f| f.client_gone) {
                self.retire(index);
            }
        }
    }

    fn fill_inbound(&mut self, index: usize) {
        let Some(flow) = self.flows[index].as_deref_mut() else {
            return;
        };
        if flow.rx_head.is_some() || !flow.readable {
            return;
        }
        match receive_stamped(&flow.socket, &mut flow.rx_slot[HEADER..]) {
            Ok(datagram) => {
                let now = monotonic_ns();
                let from = match datagram.from {
                    SocketAddr::V4(v4) => v4,
                    SocketAddr::V6(_) => SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
                };
                if let Some(total) = datagram.dropped_before {
                    flow.counters.received.overflowed(total);
                }
                let arrival_ns = datagram.arrival_ns.unwrap_or(now);
                if let (Some(tracker), Some(counts)) = (&mut flow.rtp, &flow.counters.rtp) {
                    let bytes = &flow.rx_slot[HEADER..HEADER + datagram.len];
                    tracker.observe(bytes, arrival_ns, counts);
                }
                flow.rx_head = Some(RxHead {
                    len: datagram.len,
                    arrival_ns,
                    from,
                });
                if let (Some((i, _)), Discipline::MClock) = (flow.ids, self.discipline) {
                    let _ = self.inbound.arrive(i, now, datagram.len as u32);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => flow.readable = false,
            // An error of an earlier send (an ICMP report) comes out of the
            // socket once; the next read goes on.
            Err(_) => {}
        }
    }

    fn fill_outbound(&mut self, index: usize) {
        let Some(flow) = self.flows[index].as_deref_mut() else {
            return;
        };
        if flow.tx_head.is_some() {
            return;
        }
        match flow.from_client.try_pop(&mut flow.tx_slot) {
            Ok(len) => match ToSend::decode(&flow.tx_slot[..len]) {
                Some(meta) => {
                    flow.tx_head = Some(TxHead {
                        len: len - HEADER,
                        meta,
                    });
                    if let (Some((_, o)), Discipline::MClock) = (flow.ids, self.discipline) {
                        let _ = self
                            .outbound
                            .arrive(o, monotonic_ns(), (len - HEADER) as u32);
                    }
                }
                None => flow.counters.sent.dropped(),
            },
            Err(ChannelError::Empty) => {}
            Err(_) => flow.client_gone = true,
        }
    }

    /// Carries heads while the discipline and the capacity allow, at most
    /// a batch; returns when work may go next (`None`: nothing is waiting;
    /// 0: at once, after a look at the sockets).
    fn carry(&mut self) -> Option<u64> {
        for _ in 0..CARRY_BATCH {
            let inbound = self.carry_one(Direction::In);
            let outbound = self.carry_one(Direction::Out);
            if let (Err(a), Err(b)) = (inbound, outbound) {
                return earliest(a, b);
            }
        }
        Some(0)
    }

    /// Carries one head in `direction`, or says when to try again.
    fn carry_one(&mut self, direction: Direction) -> Result<(), Option<u64>> {
        let now = monotonic_ns();
        let (index, phase) = self.pick(direction, now)?;
        let size = self.head_len(index, direction).ok_or(None)?;
        let capacity = match direction {
            Direction::In => &self.receive_capacity,
            Direction::Out => &self.send_capacity,
        };
        capacity.take(now, size).map_err(Some)?;
        match direction {
            Direction::In => self.hand_over(index, now),
            Direction::Out => self.send(index),
        }
        if let Some(phase) = phase {
            self.tags(direction, index, |scheduler, id| {
                scheduler.served(id, phase, now)
            });
        }
        match direction {
            Direction::In => self.fill_inbound(index),
            Direction::Out => self.fill_outbound(index),
        }
        if phase.is_some() && self.head_len(index, direction).is_none() {
            self.tags(direction, index, MClock::idle);
        }
        Ok(())
    }

    /// Applies `update` to the flow's mClock tags in `direction`. A flow
    /// this thread added is always known to its schedulers, so their
    /// "unknown flow" cannot happen here.
    fn tags(
        &mut self,
        direction: Direction,
        index: usize,
        update: impl FnOnce(&mut MClock, FlowId) -> Result<(), FlowError>,
    ) {
        let Some((i, o)) = self.flows[index].as_deref().and_then(|f| f.ids) else {
            return;
        };
        let _ = match direction {
            Direction::In => update(&mut self.inbound, i),
            Direction::Out => update(&mut self.outbound, o),
        };
    }

    /// The length of the flow's head in `direction`, if it has one.
    fn head_len(&self, index: usize, direction: Direction) -> Option<usize> {
        let flow = self.flows[index].as_deref()?;
        match direction {
            Direction::In => flow.rx_head.map(|h| h.len),
            Direction::Out => flow.tx_head.map(|h| h.len),
        }
    }

    /// The flow whose head goes next in `direction`.
    fn pick(&self, direction: Direction, now: u64) -> Result<(usize, Option<Phase>), Option<u64>> {
        match self.discipline {
            Discipline::Fifo => self.oldest(direction).map(|i| (i, None)).ok_or(None),
            Discipline::MClock => {
                let scheduler = match direction {
                    Direction::In => &self.inbound,
                    Direction::Out => &self.outbound,
                };
                match scheduler.next(now, self.class) {
                    Some(pick) => {
                        let index = self.index_of_tag(direction, pick.id).ok_or(None)?;
                        Ok((index, Some(pick.phase)))
                    }
                    None => Err(scheduler.next_eligible_ns(now, self.class)),
                }
            }
        }
    }

    fn index_of_tag(&self, direction: Direction, id: FlowId) -> Option<usize> {
        self.flows.iter().position(|f| {
            f.as_ref()
                .and_then(|f| f.ids)
                .is_some_and(|(i, o)| match direction {
                    Direction::In => i == id,
                    Direction::Out => o == id,
                })
        })
    }

    /// The flow with the oldest head: arrival at the kernel in, the
    /// client's enqueue out.
    fn oldest(&self, direction: Direction) -> Option<usize> {
        let stamp = |f: &ServedFlow| match direction {
            Direction::In => f.rx_head.map(|h| h.arrival_ns),
            Direction::Out => f.tx_head.map(|h| h.meta.queued_ns),
        };
        (0..self.flows.len())
            .filter_map(|i| Some((stamp(self.flows[i].as_deref()?)?, i)))
            .min()
            .map(|(_, i)| i)
    }

    /// Pushes the inbound head into the client's channel (or counts it
    /// dropped: the client has no room).
    fn hand_over(&mut self, index: usize, now: u64) {
        let flow = self.flows[index].as_deref_mut().expect("a picked flow");
        let head = flow.rx_head.take().expect("a picked head");
        Received {
            arrival_ns: head.arrival_ns,
            handed_ns: now,
            from: head.from,
        }
        .encode(&mut flow.rx_slot);
        match flow.to_client.try_push(&flow.rx_slot[..HEADER + head.len]) {
            Ok(()) => flow
                .counters
                .received
                .carried(head.len, now.saturating_sub(head.arrival_ns)),
            Err(ChannelError::Full) => flow.counters.received.dropped(),
            Err(_) => flow.client_gone = true,
        }
    }

    /// Writes the outbound head to the socket. A send the kernel refuses (a
    /// full send buffer too: waiting for it would hold every other flow's
    /// datagrams behind this one) drops the datagram and counts it.
    fn send(&mut self, index: usize) {
        let flow = self.flows[index].as_deref_mut().expect("a picked flow");
        let head = flow.tx_head.expect("a picked head");
        let to = head.meta.to.map(SocketAddr::V4).or(flow.peer);
        let payload = &flow.tx_slot[HEADER..HEADER + head.len];
        let result = match to {
            Some(to) => flow.socket.send_to(payload, to),
            None => Err(ErrorKind::NotConnected.into()),
        };
        match result {
            Ok(_) => {
                let sent = monotonic_ns();
                flow.counters
                    .sent
                    .carried(head.len, sent.saturating_sub(head.meta.queued_ns));
                if head.meta.origin_ns != 0 {
                    flow.counters
                        .responded(sent.saturating_sub(head.meta.origin_ns));
                }
            }
            Err(_) => flow.counters.sent.dropped(),
        }
        flow.tx_head = None;
    }

    /// Sleeps until `next` (or [`STOP_POLL_NS`]) unless a socket, a
    /// client's channel or a command needs this thread first; with work
    /// due now, only looks at what became ready (sockets that filled while
    /// the thread was busy must not wait for it to idle).
    fn wait(&mut self, next: Option<u64>) {
        let now = monotonic_ns();
        if next.is_some_and(|at| at <= now) || !self.arm_channels() || !self.arm_timer(next, now) {
            self.disarm_channels();
            self.gather(Duration::ZERO);
            return;
        }
        self.gather(Duration::from_nanos(STOP_POLL_NS));
        self.disarm_channels();
    }

    /// Sets the timer to wake the thread at `next`, if work waits until
    /// then (epoll's own timeout looks at the stop flag); false if it could
    /// not. A timer already set for then is left alone: setting it is a
    /// system call, and most waits wait for the same instant or none.
    fn arm_timer(&mut self, next: Option<u64>, now: u64) -> bool {
        let Some(at) = next.map(|at| at.min(now + STOP_POLL_NS)) else {
            return true;
        };
        if self.timer_at == Some(at) {
            return true;
        }
        let armed = self.timer.arm_periodic(at, 0).is_ok();
        self.timer_at = armed.then_some(at);
        armed
    }

    /// Takes what epoll reports within `timeout`: sockets that may hold
    /// datagrams; the bells and the timer, drained.
    fn gather(&mut self, timeout: Duration) {
        let woken = self.epoll.wait(&mut self.ready, timeout).unwrap_or(0);
        for k in 0..woken {
            match self.ready[k].token() {
                DOORBELL => {
                    self.doorbell.drain();
                }
                COMMANDS => {
                    self.bell.drain();
                }
                TIMER => {
                    self.timer.expirations();
                    self.timer_at = None;
                }
                token => {
                    let index = (token - FIRST_SOCKET) as usize;
                    if let Some(flow) = self.flows.get_mut(index).and_then(|f| f.as_deref_mut()) {
                        flow.readable = true;
                    }
                }
            }
        }
    }

    /// Arms every client channel this thread waits on; false if one
    /// already has a message (or its client left): no sleeping then.
    fn arm_channels(&mut self) -> bool {
        let mut quiet = true;
        for flow in self.flows.iter_mut().flatten() {
            if flow.tx_head.is_some() {
                continue;
            }
            match flow.from_client.arm() {
                Ok(RingReadiness::NotYet) => {}
                _ => quiet = false,
            }
        }
        quiet
    }

    fn disarm_channels(&mut self) {
        for flow in self.flows.iter_mut().flatten() {
            flow.from_client.disarm();
        }
    }
}

fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
