//! The front-end task (seed 003 §3.2): one thread, under EDF in its own
//! reservation, that inspects every client's request channel, holds back
//! the requests of a client beyond its SLA (its request rate or its
//! outstanding actions, [`RequestGate`]), and hands the rest to rendering
//! tasks earliest deadline first: an SLA client's to its own task, a probe
//! request to the probing share, any other to the best-effort share.
//!
//! A client's requests go to one task at a time: a request waits while an
//! action of the same client is in flight on another task, so a client's
//! canvas is only ever wanted by one task ([`super::tasks`]). It sleeps in
//! epoll on the channels' doorbell, its bell (commands from the control
//! thread, actions done by the tasks) and a timer for the next request a
//! gate lets through. It never allocates (clients arrive boxed and leave
//! through the retired ring), never blocks but in that wait, and never
//! drops a well-formed request.

use super::tasks::{Job, Lane, TaskLink};
use super::wire::Draw;
use rtrb::{Consumer, Producer};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_channel::Readiness as RingReadiness;
use tessera_policy::sla::{Gate, RequestGate};
use tessera_sys::clock::monotonic_ns;
use tessera_sys::event::{Epoll, EventFd, Readiness, TimerFd, Trigger};

/// Clients the service serves at once.
pub const MAX_CLIENTS: usize = 64;
/// Longest wait between two looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// A best-effort client's request rate: not a limit, only one action in
/// flight is.
const BEST_EFFORT_RATE: f64 = 1e6;
const DOORBELL: u64 = 0;
const BELL: u64 = 1;
const TIMER: u64 = 2;

/// Which task serves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    BestEffort,
    Probing,
    Own,
}

/// Which of the shared tasks `target` is, if it is one.
fn shared_index(target: Target) -> Option<usize> {
    match target {
        Target::BestEffort => Some(0),
        Target::Probing => Some(1),
        Target::Own => None,
    }
}

/// A client as the front-end holds it.
pub struct Entry {
    lane: Arc<Lane>,
    requests: tessera_channel::Consumer,
    gate: RequestGate,
    /// Its own task, once it has an SLA.
    own: Option<TaskLink>,
    /// The next request, taken from the channel but not yet handed over.
    head: Option<Draw>,
    /// The head was already counted as held back.
    head_throttled: bool,
    /// Requests of an action already handed over: the rest follow it
    /// without passing the gate again.
    mid_action: bool,
    in_flight: u32,
    in_task: Target,
    /// Its client left: it takes no more requests, and goes once its
    /// actions in flight are done (a shared task's count needs them).
    leaving: bool,
    record: [u8; Draw::SIZE],
}

impl Entry {
    /// A best-effort client: one action in flight at a time, so the shared
    /// task goes round its clients as a traditional server would.
    pub fn best_effort(lane: Arc<Lane>, requests: tessera_channel::Consumer) -> Entry {
        Entry {
            lane,
            requests,
            gate: RequestGate::new(BEST_EFFORT_RATE, 1, 1),
            own: None,
            head: None,
            head_throttled: false,
            mid_action: false,
            in_flight: 0,
            in_task: Target::BestEffort,
            leaving: false,
            record: [0; Draw::SIZE],
        }
    }

    pub fn client(&self) -> u32 {
        self.lane.client
    }

    /// Its lane, for the control thread to keep until no task holds it.
    pub fn into_lane(self) -> Arc<Lane> {
        self.lane
    }

    fn target(&self, draw: &Draw) -> Target {
        match (draw.is_probe(), self.own.is_some()) {
            (true, _) => Target::Probing,
            (false, true) => Target::Own,
            (false, false) => Target::BestEffort,
        }
    }

    /// Takes the next request from the channel into `head`; a malformed
    /// one is counted and skipped.
    fn fill_head(&mut self) {
        while self.head.is_none() && !self.leaving {
            let Ok(_) = self.requests.try_pop(&mut self.record) else {
                return;
            };
            match Draw::decode(&self.record) {
                Some(draw) if draw.fits(&self.lane.hello) => self.head = Some(draw),
                _ => {
                    self.lane.counters.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether the head may go now; when a gate holds it, when it may.
    fn ready(&mut self, now: u64) -> Result<Target, Option<u64>> {
        let draw = self.head.ok_or(None)?;
        let target = self.target(&draw);
        if self.in_flight > 0 && self.in_task != target {
            return Err(None);
        }
        if self.mid_action {
            return Ok(target);
        }
        match self.gate.check(now) {
            Gate::Admit => Ok(target),
            held => {
                if !self.head_throttled {
                    self.head_throttled = true;
                    self.lane.counters.throttled.fetch_add(1, Ordering::Relaxed);
                }
                match held {
                    Gate::WaitUntil(at) => Err(Some(at)),
                    _ => Err(None),
                }
            }
        }
    }

    /// Counts the actions its tasks finished since the last look; returns
    /// how many, and on which task.
    fn collect(&mut self) -> (u32, Target) {
        let done = self.lane.completed.swap(0, Ordering::Acquire);
        for _ in 0..done {
            self.gate.complete();
        }
        self.in_flight = self.in_flight.saturating_sub(done);
        (done, self.in_task)
    }
}

/// What the control thread tells the front-end.
pub enum Command {
    Add(Box<Entry>),
    /// The client's SLA holds: its requests go to this task, through this
    /// gate, from now on.
    Agree {
        client: u32,
        link: TaskLink,
        gate: RequestGate,
    },
    Remove(u32),
}

/// The control thread's end of the front-end.
pub struct FrontLink {
    commands: Producer<Command>,
    bell: Arc<EventFd>,
    /// Clients the front-end let go, to be freed off the real-time path.
    pub retired: Consumer<Box<Entry>>,
}

impl FrontLink {
    /// Sends a command, waiting (briefly) while the front-end catches up.
    pub fn send(&mut self, mut command: Command) {
        loop {
            match self.commands.push(command) {
                Ok(()) => break,
                Err(rtrb::PushError::Full(back)) => {
                    command = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        self.bell.signal();
    }
}

/// The front-end before it runs.
pub struct FrontEnd {
    /// Boxed: a client arrives in the box the control thread made and
    /// leaves in it through the retired ring, so this thread never frees.
    #[allow(clippy::vec_box)]
    entries: Vec<Box<Entry>>,
    commands: Consumer<Command>,
    retired: Producer<Box<Entry>>,
    best_effort: TaskLink,
    probing: TaskLink,
    /// Whole actions on each shared task: it gets the next only when it is
    /// free, so that the earliest deadline among its clients goes first.
    shared_busy: [u32; 2],
    epoll: Epoll,
    doorbell: Arc<EventFd>,
    bell: Arc<EventFd>,
    timer: TimerFd,
    ready: Vec<Readiness>,
    stop: Arc<AtomicBool>,
}

impl FrontEnd {
    /// A front-end handing requests to the two shared tasks; `doorbell` is
    /// the one every request channel rings, `bell` the one the control
    /// thread and the tasks ring.
    pub fn new(
        best_effort: TaskLink,
        probing: TaskLink,
        doorbell: Arc<EventFd>,
        bell: Arc<EventFd>,
        stop: Arc<AtomicBool>,
    ) -> Result<(FrontEnd, FrontLink), tessera_sys::Error> {
        let epoll = Epoll::new()?;
        let timer = TimerFd::new()?;
        epoll.add(doorbell.as_fd(), DOORBELL, Trigger::Level)?;
        epoll.add(bell.as_fd(), BELL, Trigger::Level)?;
        epoll.add(timer.as_fd(), TIMER, Trigger::Level)?;
        let (commands_in, commands) = rtrb::RingBuffer::new(MAX_CLIENTS * 2);
        let (retired, retired_out) = rtrb::RingBuffer::new(MAX_CLIENTS * 2);
        let front = FrontEnd {
            // Room for as many clients again on their way out: a client
            // that left stays until its last action is reported.
            entries: Vec::with_capacity(MAX_CLIENTS * 2),
            commands,
            retired,
            best_effort,
            probing,
            shared_busy: [0; 2],
            epoll,
            doorbell,
            bell: bell.clone(),
            timer,
            ready: vec![Readiness::EMPTY; 8],
            stop,
        };
        let link = FrontLink {
            commands: commands_in,
            bell,
            retired: retired_out,
        };
        Ok((front, link))
    }

    /// Serves until stopped.
    pub fn run(mut self) {
        let _real_time = tessera_rtguard::RtGuard::enter();
        while !self.stop.load(Ordering::Relaxed) {
            self.apply_commands();
            for entry in &mut self.entries {
                let (done, task) = entry.collect();
                if let Some(busy) = shared_index(task).map(|i| &mut self.shared_busy[i]) {
                    *busy = busy.saturating_sub(done);
                }
            }
            self.retire();
            let next = self.dispatch();
            self.wait(next);
        }
    }

    fn apply_commands(&mut self) {
        while let Ok(command) = self.commands.pop() {
            match command {
                Command::Add(entry) => {
                    // The control thread admits at most MAX_CLIENTS at once,
                    // and leaving ones go within a task's action.
                    if self.entries.len() < self.entries.capacity() {
                        self.entries.push(entry);
                    }
                }
                Command::Agree { client, link, gate } => {
                    if let Some(entry) = self.entries.iter_mut().find(|e| e.client() == client) {
                        entry.own = Some(link);
                        entry.gate = gate;
                    }
                }
                Command::Remove(client) => {
                    if let Some(entry) = self.entries.iter_mut().find(|e| e.client() == client) {
                        entry.leaving = true;
                        entry.head = None;
                        // An action it left half sent never ends: it is
                        // over now.
                        if std::mem::take(&mut entry.mid_action) {
                            entry.in_flight = entry.in_flight.saturating_sub(1);
                        }
                        // Its own task stops with it: what it had queued
                        // there will never be reported.
                        if entry.in_task == Target::Own {
                            entry.in_flight = 0;
                        }
                    }
                }
            }
        }
    }

    /// Lets go of clients that left once nothing of theirs is in flight.
    fn retire(&mut self) {
        while let Some(i) = self
            .entries
            .iter()
            .position(|e| e.leaving && e.in_flight == 0)
        {
            let entry = self.entries.swap_remove(i);
            // Sized for every client: never full.
            let _ = self.retired.push(entry);
        }
    }

    /// Hands over every request that may go, earliest deadline first;
    /// returns when the next held request may go.
    fn dispatch(&mut self) -> Option<u64> {
        loop {
            let now = monotonic_ns();
            let mut next: Option<u64> = None;
            let mut best: Option<(u64, usize, Target)> = None;
            for (i, entry) in self.entries.iter_mut().enumerate() {
                entry.fill_head();
                match entry.ready(now) {
                    Ok(target)
                        if !entry.mid_action
                            && shared_index(target).is_some_and(|t| self.shared_busy[t] > 0) => {}
                    Ok(target) => {
                        let deadline = entry.head.map_or(u64::MAX, |d| d.deadline_ns);
                        if best.is_none_or(|(d, _, _)| deadline < d) {
                            best = Some((deadline, i, target));
                        }
                    }
                    Err(Some(at)) => next = Some(next.map_or(at, |n| n.min(at))),
                    Err(None) => {}
                }
            }
            let Some((_, i, target)) = best else {
                return next;
            };
            if !self.hand_over(i, target, now) {
                return next;
            }
        }
    }

    /// Gives entry `i`'s head to its task; false if the task's queue is
    /// full (it drains as the task works).
    fn hand_over(&mut self, i: usize, target: Target, now: u64) -> bool {
        let entry = &mut self.entries[i];
        let draw = entry.head.expect("a ready entry has a head");
        let link = match target {
            Target::BestEffort => &mut self.best_effort,
            Target::Probing => &mut self.probing,
            Target::Own => entry.own.as_mut().expect("an SLA client has its task"),
        };
        let job = Job {
            lane: entry.lane.clone(),
            draw,
        };
        if link.send(job).is_err() {
            return false;
        }
        if !entry.mid_action {
            let _ = entry.gate.admit(now);
            entry.in_flight += 1;
            entry.in_task = target;
        }
        // A shared task counts as busy once a whole action is handed over:
        // a client that never finishes sending one keeps only itself
        // waiting.
        if let Some(t) = shared_index(target).filter(|_| draw.ends_action()) {
            self.shared_busy[t] += 1;
        }
        entry.mid_action = !draw.ends_action();
        entry.head = None;
        entry.head_throttled = false;
        true
    }

    /// Sleeps until a channel, the bell or the timer (the next held
    /// request, `next`) needs the front-end.
    fn wait(&mut self, next: Option<u64>) {
        let quiet = self.arm_channels();
        if quiet {
            if let Some(at) = next {
                let _ = self.timer.arm_periodic(at.max(1), 0);
            }
            let _ = self.epoll.wait(&mut self.ready, POLL);
        }
        for entry in &mut self.entries {
            entry.requests.disarm();
        }
        self.doorbell.drain();
        self.bell.drain();
        self.timer.expirations();
    }

    /// Arms the channels of clients with nothing taken yet; false if one
    /// already has a request: no sleeping then. A client that died stays
    /// quiet until the control thread, which sees its socket hang up,
    /// removes it.
    fn arm_channels(&mut self) -> bool {
        let mut quiet = true;
        for entry in &mut self.entries {
            if entry.head.is_none() && matches!(entry.requests.arm(), Ok(RingReadiness::Ready)) {
                quiet = false;
            }
        }
        quiet
    }
}
