//! mClock for the network service's flows (Gulati, Merchant, Varman, "mClock:
//! Handling Throughput Variability for Hypervisor IO Scheduling", OSDI 2010):
//! each flow has a minimum throughput (reservation), a share of the excess
//! (weight) and a ceiling (limit); one unit of work is one packet.
//!
//! It owns the arithmetic: flow specs and their validation, admission
//! against the service's capacity ([`admit`]), the tags and the choice of the
//! next packet ([`MClock`]), and the pacing of the total ([`Pacer`]). It must
//! never read a clock (time comes in as u64 nanoseconds of the caller's
//! monotonic clock), sleep, do I/O, or allocate in the per-packet calls
//! ([`MClock::arrive`], [`MClock::next`], [`MClock::served`],
//! [`MClock::idle`], [`MClock::next_eligible_ns`], [`Pacer::take`]); only
//! [`MClock::with_capacity`] allocates, once.
//!
//! The invariants:
//!
//! - Admission: Σ real-time flows' effective limits + Σ bulk reservations ≤
//!   the usable capacity ([`Capacity::usable_bps`]).
//! - Tags are nanoseconds of real time, integer, exact: the remainder of each
//!   division is carried, so tags do not drift however many packets pass,
//!   and arithmetic saturates instead of wrapping.
//! - Limits are hard: a flow never has a packet picked before its L tag,
//!   in either phase, so from the moment it becomes backlogged it receives at
//!   most limit × t + one packet.
//! - Reservations: a backlogged flow's R tags advance by its own service in
//!   the constraint phase only, and the constraint phase goes first; with the
//!   admission rule above it receives its reservation at every moment, less
//!   one packet and what the reservation is worth over the time its due head
//!   may wait: one packet per flow and the one on the wire, at the rate the
//!   real-time flows leave (see [`CATCH_UP_NS`]).
//! - Weights: P tags of the active flows of a class are anchored so that the
//!   smallest is `now`; a flow that returns from idle starts there (or at its
//!   old tag while that is still ahead): no credit for its idle time, no
//!   debt for its distant past.
//!
//! Only the head packet of a flow carries tags: the service keeps each flow's
//! queue and tells the scheduler when a head appears ([`MClock::arrive`]),
//! asks which flow goes next ([`MClock::next`]), and reports what it sent
//! ([`MClock::served`]) or that the flow ran dry ([`MClock::idle`]).

use serde::{Deserialize, Serialize};
use std::fmt;

/// The share of the smaller of link and CPU that admission keeps free: if
/// the service ran its work at the full link rate the queue would build in
/// the NIC and the qdisc, where mClock has no say; 5 % below keeps the queue
/// where the scheduler is (and absorbs the error of the measured capacity).
pub const HEADROOM_PCT: u64 = 5;

/// What a weight of 1 is worth in the P-tag arithmetic. Only ratios of
/// weights matter; the unit sets how far P tags move per packet (12 ms for a
/// 1500-byte packet at weight 1), hence how fast they run from real time.
pub const WEIGHT_UNIT_BPS: u64 = 1_000_000;

/// How late a backlogged flow's R and L tags may fall behind `now` and still
/// be caught up. A head can wait behind one packet of every other flow and
/// the packet on the wire (N × 1500 bytes at the service's rate: 1 ms for 64
/// flows at 1 Gbit/s, 10 ms at 100 Mbit/s) without losing its reservation;
/// a flow that fell further behind (the service overloaded) loses the
/// excess instead of bursting it out later. [`MClock::with_catch_up_ns`]
/// changes it.
pub const CATCH_UP_NS: u64 = 20_000_000;

const NS_PER_S: u128 = 1_000_000_000;

/// Which of the service's threads serves a flow (seed 004 §3.4); the
/// network service's wire and the scenario language name it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlowClass {
    /// Served by the service's real-time thread before any bulk work.
    RealTime,
    /// Served when no real-time packet is eligible.
    Bulk,
}

impl FlowClass {
    pub fn name(self) -> &'static str {
        match self {
            FlowClass::RealTime => "real-time",
            FlowClass::Bulk => "bulk",
        }
    }
}

/// How a serving thread orders the heads it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    /// mClock tags per flow (reservation, weight, limit).
    MClock,
    /// The oldest head first, whatever its flow: a service without QoS.
    Fifo,
}

impl Discipline {
    pub fn name(self) -> &'static str {
        match self {
            Discipline::MClock => "mclock",
            Discipline::Fifo => "fifo",
        }
    }
}

/// A flow's quality of service, in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowSpec {
    pub class: FlowClass,
    /// Minimum throughput; 0 for none (the flow then only shares the excess).
    pub reservation_bps: u64,
    /// Share of the excess, relative to the other flows' weights.
    pub weight: u32,
    /// Maximum throughput; `None` for none (see [`FlowSpec::effective_limit_bps`]).
    pub limit_bps: Option<u64>,
}

/// Why a flow spec is malformed, and how to fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecError {
    ZeroWeight,
    ZeroLimit,
    LimitBelowReservation {
        limit_bps: u64,
        reservation_bps: u64,
    },
    RealTimeWithoutRate,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SpecError::ZeroWeight => write!(
                f,
                "weight: 0 gives the flow no share of the excess \
                 (fix: give a weight of at least 1; weights are relative, 1–10 is usual)"
            ),
            SpecError::ZeroLimit => write!(
                f,
                "limit: 0 bit/s would never let the flow send \
                 (fix: give a positive limit, or none for no limit)"
            ),
            SpecError::LimitBelowReservation {
                limit_bps,
                reservation_bps,
            } => write!(
                f,
                "limit: {} Mbit/s is below the reservation of {} Mbit/s, which could then \
                 never be met (fix: raise the limit to at least the reservation, or lower \
                 the reservation)",
                Mbit(limit_bps),
                Mbit(reservation_bps)
            ),
            SpecError::RealTimeWithoutRate => write!(
                f,
                "reservation: a real-time flow without a reservation or a limit would be \
                 limited to 0 bit/s (fix: give it a reservation, which is then also its \
                 limit, or an explicit limit)"
            ),
        }
    }
}

impl std::error::Error for SpecError {}

impl FlowSpec {
    /// A bulk flow with this reservation and weight and no limit.
    pub fn bulk(reservation_bps: u64, weight: u32) -> FlowSpec {
        FlowSpec {
            class: FlowClass::Bulk,
            reservation_bps,
            weight,
            limit_bps: None,
        }
    }

    /// A real-time flow limited to its reservation.
    pub fn real_time(reservation_bps: u64) -> FlowSpec {
        FlowSpec {
            class: FlowClass::RealTime,
            reservation_bps,
            weight: 1,
            limit_bps: None,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.weight == 0 {
            return Err(SpecError::ZeroWeight);
        }
        match self.limit_bps {
            Some(0) => return Err(SpecError::ZeroLimit),
            Some(limit_bps) if limit_bps < self.reservation_bps => {
                return Err(SpecError::LimitBelowReservation {
                    limit_bps,
                    reservation_bps: self.reservation_bps,
                })
            }
            _ => {}
        }
        if self.effective_limit_bps() == Some(0) {
            return Err(SpecError::RealTimeWithoutRate);
        }
        Ok(())
    }

    /// The limit the scheduler enforces. A real-time flow without a limit is
    /// limited to its reservation: real-time work runs ahead of every bulk
    /// flow, so unbounded it could starve the bulk reservations, and
    /// admission could not count it.
    pub fn effective_limit_bps(&self) -> Option<u64> {
        match self.class {
            FlowClass::RealTime => Some(self.limit_bps.unwrap_or(self.reservation_bps)),
            FlowClass::Bulk => self.limit_bps,
        }
    }

    /// What admission counts against the capacity: a real-time flow's
    /// effective limit (it can take that much ahead of everyone), a bulk
    /// flow's reservation (its excess is only served when there is some).
    pub fn committed_bps(&self) -> u64 {
        match self.class {
            FlowClass::RealTime => self
                .effective_limit_bps()
                .unwrap_or(0)
                .max(self.reservation_bps),
            FlowClass::Bulk => self.reservation_bps,
        }
    }
}

/// Which resource bounds the service's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resource {
    Link,
    Cpu,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Link => "the link",
            Resource::Cpu => "the CPU reservation",
        })
    }
}

/// The service's measured capacity, in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// The link rate.
    pub link_bps: u64,
    /// What the service's CPU reservation can process.
    pub cpu_bps: u64,
}

impl Capacity {
    /// The smaller of link and CPU (the link on a tie), and its rate.
    pub fn bottleneck(&self) -> (Resource, u64) {
        if self.cpu_bps < self.link_bps {
            (Resource::Cpu, self.cpu_bps)
        } else {
            (Resource::Link, self.link_bps)
        }
    }

    /// The bottleneck less [`HEADROOM_PCT`].
    pub fn usable_bps(&self) -> u64 {
        let (_, bps) = self.bottleneck();
        (bps as u128 * (100 - HEADROOM_PCT) as u128 / 100) as u64
    }
}

/// Why a flow was not admitted, and what would fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRefusal {
    pub class: FlowClass,
    /// What the new flow would commit ([`FlowSpec::committed_bps`]).
    pub asked_bps: u64,
    /// What the admitted flows commit.
    pub committed_bps: u64,
    pub usable_bps: u64,
    pub bottleneck: Resource,
    pub bottleneck_bps: u64,
    /// The largest commitment of this class that fits now: a bulk flow's
    /// reservation, or a real-time flow's effective limit (its reservation
    /// when it has no limit).
    pub fits_bps: u64,
}

impl fmt::Display for FlowRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.class {
            FlowClass::Bulk => write!(f, "a reservation of {} Mbit/s", Mbit(self.asked_bps))?,
            FlowClass::RealTime => write!(
                f,
                "a real-time flow of {} Mbit/s (counted at its limit)",
                Mbit(self.asked_bps)
            )?,
        }
        write!(
            f,
            " does not fit: {} of {} Mbit/s usable ({}, {} Mbit/s less {} % headroom) \
             is committed; ",
            Mbit(self.committed_bps),
            Mbit(self.usable_bps),
            self.bottleneck,
            Mbit(self.bottleneck_bps),
            HEADROOM_PCT
        )?;
        if self.fits_bps == 0 {
            write!(f, "nothing more fits")
        } else {
            write!(f, "at most {} Mbit/s would fit", Mbit(self.fits_bps))
        }
    }
}

impl std::error::Error for FlowRefusal {}

/// Admits `new` beside `admitted` when Σ real-time effective limits + Σ bulk
/// reservations, the new flow's included, stays within the usable capacity.
/// It judges capacity only; [`MClock::add`] refuses malformed specs.
pub fn admit(
    admitted: &[FlowSpec],
    new: &FlowSpec,
    capacity: &Capacity,
) -> Result<(), FlowRefusal> {
    let committed = admitted
        .iter()
        .fold(0u64, |sum, f| sum.saturating_add(f.committed_bps()));
    let asked = new.committed_bps();
    let usable = capacity.usable_bps();
    if committed.saturating_add(asked) <= usable {
        return Ok(());
    }
    let (bottleneck, bottleneck_bps) = capacity.bottleneck();
    Err(FlowRefusal {
        class: new.class,
        asked_bps: asked,
        committed_bps: committed,
        usable_bps: usable,
        bottleneck,
        bottleneck_bps,
        fits_bps: usable.saturating_sub(committed),
    })
}

/// Formats bits per second as Mbit/s, with up to three decimals (truncated,
/// so a "would fit" never rounds up).
struct Mbit(u64);

impl fmt::Display for Mbit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / 1_000_000;
        let (mut decimals, mut width) = (self.0 % 1_000_000 / 1_000, 3);
        if decimals == 0 {
            return write!(f, "{whole}");
        }
        while decimals % 10 == 0 {
            (decimals, width) = (decimals / 10, width - 1);
        }
        write!(f, "{whole}.{decimals:0width$}")
    }
}

/// A point of virtual time: `ns` + `rem` / rate nanoseconds, the rate being
/// the one the tag advances at (fixed per tag of a flow). Keeping the
/// remainder makes a tag exact: n packets advance it by exactly their bits
/// over the rate, whatever their sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct VTime {
    ns: u64,
    rem: u64,
}

/// bits × 1e9: the numerator of a packet's duration at any rate.
fn bit_ns(size: u32) -> u128 {
    size as u128 * 8 * NS_PER_S
}

impl VTime {
    fn at(ns: u64) -> VTime {
        VTime { ns, rem: 0 }
    }

    /// The first whole nanosecond at or after this time.
    fn ceil_ns(self) -> u64 {
        self.ns.saturating_add((self.rem > 0) as u64)
    }

    /// Later by `bit_ns` / `rate`; a rate of 0 never comes.
    fn advanced(self, bit_ns: u128, rate: u64) -> VTime {
        if rate == 0 {
            return VTime::at(u64::MAX);
        }
        let total = self.rem as u128 + bit_ns;
        let ns = self.ns as u128 + total / rate as u128;
        if ns >= u64::MAX as u128 {
            return VTime::at(u64::MAX);
        }
        VTime {
            ns: ns as u64,
            rem: (total % rate as u128) as u64,
        }
    }

    /// Earlier by `bit_ns` / `rate`, exactly; not before 0.
    fn retreated(self, bit_ns: u128, rate: u64) -> VTime {
        if rate == 0 {
            return self;
        }
        let whole = bit_ns / rate as u128;
        let part = (bit_ns % rate as u128) as u64;
        let (borrow, rem) = match self.rem.checked_sub(part) {
            Some(rem) => (0, rem),
            None => (1, self.rem + (rate - part)),
        };
        match (self.ns as u128).checked_sub(whole + borrow) {
            Some(ns) => VTime { ns: ns as u64, rem },
            None => VTime::at(0),
        }
    }

    /// Not before `floor_ns`.
    fn at_least(self, floor_ns: u64) -> VTime {
        if self.ns < floor_ns {
            VTime::at(floor_ns)
        } else {
            self
        }
    }

    /// Moved by `shift` nanoseconds, saturating at both ends.
    fn shifted(self, shift: i128) -> VTime {
        let ns = (self.ns as i128 + shift).clamp(0, u64::MAX as i128) as u64;
        VTime { ns, ..self }
    }
}

/// A flow in an [`MClock`] table. The generation makes an id of a removed
/// flow stale even when its slot holds another flow (until the slot's
/// generation wraps, after 2³² reuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FlowId {
    index: u32,
    generation: u32,
}

impl FlowId {
    /// The slot in the table (stable while the flow exists).
    pub fn index(&self) -> usize {
        self.index as usize
    }
}

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flow {}.{}", self.index, self.generation)
    }
}

/// Which mClock phase picked a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// The constraint phase: the flow was behind its reservation.
    Reservation,
    /// The weight phase: the flow had the smallest P tag under its limit.
    Weight,
}

/// The flow whose head packet goes next, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    pub id: FlowId,
    pub phase: Phase,
}

/// What a flow received since it was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FlowStats {
    pub packets: u64,
    pub bytes: u64,
    /// Of `bytes`, those picked in the constraint phase.
    pub reservation_bytes: u64,
    /// When the last packet was served, if any was.
    pub last_served_ns: Option<u64>,
}

/// A caller's mistake in using the table; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowError {
    /// Every slot holds a flow.
    TableFull {
        max_flows: usize,
    },
    /// The flow was removed (or the id is from another table).
    Stale(FlowId),
    /// `arrive` while the flow's head is still waiting to be served.
    HeadPending(FlowId),
    /// `served` for a flow that has no head.
    NoHead(FlowId),
    Spec(SpecError),
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowError::TableFull { max_flows } => write!(
                f,
                "the flow table is full ({max_flows} flows; fix: remove a flow, or create \
                 the scheduler with a larger table)"
            ),
            FlowError::Stale(id) => write!(f, "{id} was removed (its id is stale)"),
            FlowError::HeadPending(id) => write!(
                f,
                "{id} already has a head packet: call arrive once per head, after served"
            ),
            FlowError::NoHead(id) => {
                write!(f, "{id} has no head packet: call arrive before served")
            }
            FlowError::Spec(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FlowError {}

impl From<SpecError> for FlowError {
    fn from(e: SpecError) -> FlowError {
        FlowError::Spec(e)
    }
}

/// Where a flow's queue stands, as far as the scheduler knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing queued.
    Idle,
    /// A tagged head packet of `size` bytes waits.
    Head { size: u32 },
    /// The head went out; `arrive` (another waits) or `idle` comes next.
    Served,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Flow {
    spec: FlowSpec,
    /// The rates the R, L and P tags advance at (`None`: no such tag).
    r_rate: Option<u64>,
    l_rate: Option<u64>,
    p_rate: u64,
    r: VTime,
    l: VTime,
    p: VTime,
    state: State,
    /// Never tagged yet: its first head starts at `now`.
    fresh: bool,
    stats: FlowStats,
}

impl Flow {
    fn new(spec: FlowSpec) -> Flow {
        Flow {
            spec,
            r_rate: Some(spec.reservation_bps).filter(|&r| r > 0),
            l_rate: spec.effective_limit_bps(),
            p_rate: (spec.weight as u64).saturating_mul(WEIGHT_UNIT_BPS),
            r: VTime::default(),
            l: VTime::default(),
            p: VTime::default(),
            state: State::Idle,
            fresh: true,
            stats: FlowStats::default(),
        }
    }

    /// Backlogged as far as the P tags go: a head waits, or one just went out.
    fn active(&self) -> bool {
        self.state != State::Idle
    }

    fn head(&self) -> Option<u32> {
        match self.state {
            State::Head { size } => Some(size),
            _ => None,
        }
    }

    /// Under its limit at `now` (the L tag is due).
    fn l_due(&self, now_ns: u64) -> bool {
        self.l_rate.is_none() || self.l.ceil_ns() <= now_ns
    }

    /// Behind its reservation at `now` (the R tag is due).
    fn r_due(&self, now_ns: u64) -> bool {
        self.r_rate.is_some() && self.r.ceil_ns() <= now_ns
    }

    /// Tags a new head of `size` bytes. R and L advance from the previous
    /// head, not before `rl_floor`; P from the previous head, not before
    /// `now` (the anchored minimum of the active P tags).
    fn tag(&mut self, size: u32, now_ns: u64, rl_floor: u64) {
        let bits = bit_ns(size);
        if self.fresh {
            (self.r, self.l, self.p) = (VTime::at(now_ns), VTime::at(now_ns), VTime::at(now_ns));
            self.fresh = false;
        } else {
            if let Some(rate) = self.r_rate {
                self.r = self.r.advanced(bits, rate).at_least(rl_floor);
            }
            if let Some(rate) = self.l_rate {
                self.l = self.l.advanced(bits, rate).at_least(rl_floor);
            }
            self.p = self.p.advanced(bits, self.p_rate).at_least(now_ns);
        }
        self.state = State::Head { size };
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    generation: u32,
    flow: Option<Flow>,
}

/// The mClock scheduler over a fixed table of flows.
///
/// Tagging (per head packet of `size` bytes, δX = size × 8 × 1e9 / rate ns):
///
/// - When a flow becomes backlogged (from idle): R = max(R' + δR, now),
///   L = max(L' + δL, now), P = max(P' + δP, now), with R', L', P' the
///   previous head's tags, after the P tags of the class's active flows were
///   shifted so the smallest is `now` (the paper's idle adjustment). A
///   flow's first head ever is tagged `now`.
/// - When the next head of a backlogged flow is promoted (after `served`):
///   the same, but R and L are floored at now − [`CATCH_UP_NS`] instead of
///   now. The packet was queued behind the previous one; tagging it from
///   the moment it became head would forfeit the time the flow spent
///   waiting behind other flows' packets, and a flow with small packets and
///   a large reservation would lose most of it behind bulk 1500-byte ones.
///
/// Picking (`next`) among heads of one class: a head is eligible only if its
/// L tag is due. First the constraint phase: the smallest due R tag; else
/// the weight phase: the smallest P tag. The paper does not check L in the
/// constraint phase; checking it makes the limit hard, and costs the
/// reservation nothing (a flow whose L tag is not due has received more than
/// its limit, hence its reservation). After a weight-phase pick the flow's R
/// tag goes back by δR, so that service does not count against the
/// reservation. Ties go to the lower slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MClock {
    slots: Vec<Slot>,
    /// One past the highest slot ever filled: picking looks no further (a
    /// service sizes its table for the most flows it may hold, and a pick
    /// per packet over every slot would cost more than the packet's tags).
    in_use: usize,
    catch_up_ns: u64,
}

impl MClock {
    /// A table of `max_flows` slots: the only allocation.
    pub fn with_capacity(max_flows: usize) -> MClock {
        let empty = || Slot {
            generation: 0,
            flow: None,
        };
        MClock {
            slots: std::iter::repeat_with(empty).take(max_flows).collect(),
            in_use: 0,
            catch_up_ns: CATCH_UP_NS,
        }
    }

    /// Sets how far a backlogged flow's tags may lag `now` and still be
    /// caught up (see [`CATCH_UP_NS`]).
    pub fn with_catch_up_ns(mut self, catch_up_ns: u64) -> MClock {
        self.catch_up_ns = catch_up_ns;
        self
    }

    pub fn max_flows(&self) -> usize {
        self.slots.len()
    }

    /// How many flows the table holds.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.flow.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds an idle flow in a free slot. Does not allocate.
    pub fn add(&mut self, spec: FlowSpec) -> Result<FlowId, FlowError> {
        spec.validate()?;
        let max_flows = self.slots.len();
        let (index, slot) = self
            .slots
            .iter_mut()
            .enumerate()
            .find(|(_, s)| s.flow.is_none())
            .ok_or(FlowError::TableFull { max_flows })?;
        slot.flow = Some(Flow::new(spec));
        let id = FlowId {
            index: index as u32,
            generation: slot.generation,
        };
        self.in_use = self.in_use.max(index + 1);
        Ok(id)
    }

    /// Removes a flow (its head, if any, is forgotten); its id becomes stale.
    pub fn remove(&mut self, id: FlowId) -> Result<FlowSpec, FlowError> {
        let spec = self.flow(id)?.spec;
        let slot = &mut self.slots[id.index()];
        slot.generation = slot.generation.wrapping_add(1);
        slot.flow = None;
        Ok(spec)
    }

    pub fn spec(&self, id: FlowId) -> Result<FlowSpec, FlowError> {
        Ok(self.flow(id)?.spec)
    }

    pub fn stats(&self, id: FlowId) -> Result<FlowStats, FlowError> {
        Ok(self.flow(id)?.stats)
    }

    /// The flow has a new head packet of `size` bytes: it went from idle to
    /// backlogged, or its previous head was served and another waits.
    pub fn arrive(&mut self, id: FlowId, now_ns: u64, size: u32) -> Result<(), FlowError> {
        let flow = self.flow(id)?;
        let (class, state) = (flow.spec.class, flow.state);
        let rl_floor = match state {
            State::Head { .. } => return Err(FlowError::HeadPending(id)),
            State::Idle => now_ns,
            State::Served => now_ns.saturating_sub(self.catch_up_ns),
        };
        self.anchor_weight_tags(class, now_ns);
        self.flow_mut(id)?.tag(size, now_ns, rl_floor);
        Ok(())
    }

    /// Shifts the P tags of the active flows of `class` (a flow that just
    /// returned from idle is not yet active) so that the smallest is `now`:
    /// the paper's idle adjustment. A returning flow is then tagged
    /// max(P' + δP, now) against them: idle long, it starts level with the
    /// flow furthest behind, with no credit for its idle time and no debt
    /// for service it had long ago; idle briefly after having more than its
    /// share, it keeps what remains of that lead and gets no second helping.
    /// The paper adjusts only when a flow returns; doing it on every arrival
    /// changes no order among active flows (the shift is common) and keeps
    /// their P tags from drifting away from real time, for one pass over
    /// the table, as `next` makes.
    fn anchor_weight_tags(&mut self, class: FlowClass, now_ns: u64) {
        let racing = |f: &Flow| f.spec.class == class && f.active();
        let flows = self.slots.iter().filter_map(|s| s.flow.as_ref());
        let Some(min_active) = flows.filter(|f| racing(f)).map(|f| f.p.ns).min() else {
            return;
        };
        let shift = now_ns as i128 - min_active as i128;
        for flow in self.slots.iter_mut().filter_map(|s| s.flow.as_mut()) {
            if racing(flow) {
                flow.p = flow.p.shifted(shift);
            }
        }
    }

    /// The flow of `class` whose head goes next at `now`, if any head is
    /// eligible. Changes nothing: call [`MClock::served`] once it is sent.
    pub fn next(&self, now_ns: u64, class: FlowClass) -> Option<Pick> {
        let heads = self.heads(class).filter(|(_, f)| f.l_due(now_ns));
        let mut by_reservation: Option<(FlowId, u64)> = None;
        let mut by_weight: Option<(FlowId, u64)> = None;
        for (id, flow) in heads {
            if flow.r_due(now_ns) && by_reservation.is_none_or(|(_, r)| flow.r.ns < r) {
                by_reservation = Some((id, flow.r.ns));
            }
            if by_weight.is_none_or(|(_, p)| flow.p.ns < p) {
                by_weight = Some((id, flow.p.ns));
            }
        }
        let pick = |(id, _), phase| Pick { id, phase };
        by_reservation
            .map(|r| pick(r, Phase::Reservation))
            .or_else(|| by_weight.map(|w| pick(w, Phase::Weight)))
    }

    /// The earliest time ≥ `now` at which [`MClock::next`] picks a flow of
    /// `class`, if any of its flows has a head: `now` when one is eligible,
    /// else the earliest L tag (heads wait only for their limits), until
    /// which the serving thread may sleep unless a new head arrives.
    pub fn next_eligible_ns(&self, now_ns: u64, class: FlowClass) -> Option<u64> {
        self.heads(class)
            .map(|(_, f)| match f.l_rate {
                Some(_) => f.l.ceil_ns().max(now_ns),
                None => now_ns,
            })
            .min()
    }

    /// The head picked by `next` in `phase` went out at `now`. Next comes
    /// [`MClock::arrive`] if another packet waits, else [`MClock::idle`].
    pub fn served(&mut self, id: FlowId, phase: Phase, now_ns: u64) -> Result<(), FlowError> {
        let flow = self.flow_mut(id)?;
        let size = flow.head().ok_or(FlowError::NoHead(id))?;
        if let (Phase::Weight, Some(rate)) = (phase, flow.r_rate) {
            flow.r = flow.r.retreated(bit_ns(size), rate);
        }
        let stats = &mut flow.stats;
        stats.packets += 1;
        stats.bytes += size as u64;
        if phase == Phase::Reservation {
            stats.reservation_bytes += size as u64;
        }
        stats.last_served_ns = Some(now_ns);
        flow.state = State::Served;
        Ok(())
    }

    /// The flow has nothing more queued (a head not yet served is dropped).
    pub fn idle(&mut self, id: FlowId) -> Result<(), FlowError> {
        self.flow_mut(id)?.state = State::Idle;
        Ok(())
    }

    fn heads(&self, class: FlowClass) -> impl Iterator<Item = (FlowId, &Flow)> {
        self.slots[..self.in_use]
            .iter()
            .enumerate()
            .filter_map(move |(i, s)| {
                let flow = s.flow.as_ref()?;
                let id = FlowId {
                    index: i as u32,
                    generation: s.generation,
                };
                (flow.spec.class == class && flow.head().is_some()).then_some((id, flow))
            })
    }

    fn flow(&self, id: FlowId) -> Result<&Flow, FlowError> {
        self.slots
            .get(id.index())
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.flow.as_ref())
            .ok_or(FlowError::Stale(id))
    }

    fn flow_mut(&mut self, id: FlowId) -> Result<&mut Flow, FlowError> {
        self.slots
            .get_mut(id.index())
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.flow.as_mut())
            .ok_or(FlowError::Stale(id))
    }
}

/// Paces the service's total to its capacity by virtual finish times: a
/// packet may go at max(now, the previous packet's finish) less the burst
/// allowance, and finishes its size at the rate later (GCRA, the virtual
/// scheduling form of a token bucket). Pure arithmetic: the caller waits
/// until [`Pacer::ready_at`] and reports what it sent with [`Pacer::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacer {
    rate_bps: u64,
    burst_ns: u64,
    finish: VTime,
}

impl Pacer {
    /// A pacer at `capacity_bps` with no burst.
    pub fn new(capacity_bps: u64) -> Pacer {
        Pacer {
            rate_bps: capacity_bps,
            burst_ns: 0,
            finish: VTime::default(),
        }
    }

    /// Lets up to `burst_bytes` more than the rate go back to back (after a
    /// pause, or to absorb the serving thread's wake-up latency).
    pub fn with_burst(mut self, burst_bytes: u32) -> Pacer {
        self.burst_ns = match self.rate_bps {
            0 => 0,
            rate => (bit_ns(burst_bytes) / rate as u128).min(u64::MAX as u128) as u64,
        };
        self
    }

    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// When the next packet may go.
    pub fn ready_at(&self) -> u64 {
        self.finish.ceil_ns().saturating_sub(self.burst_ns)
    }

    /// Accounts a packet of `size` bytes sent at `now`; returns the new
    /// [`Pacer::ready_at`]. A packet sent early is accounted all the same.
    pub fn take(&mut self, now_ns: u64, size: u32) -> u64 {
        self.finish = self
            .finish
            .at_least(now_ns)
            .advanced(bit_ns(size), self.rate_bps);
        self.ready_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MBIT: u64 = 1_000_000;
    const MS: u64 = 1_000_000;
    const SECOND: u64 = 1_000_000_000;
    /// The largest packet, in bits: the unit of every tolerance below.
    const MAX_PACKET_BITS: u64 = 1500 * 8;

    fn limited(mut spec: FlowSpec, limit_bps: u64) -> FlowSpec {
        spec.limit_bps = Some(limit_bps);
        spec
    }

    // ---- exact numbers ------------------------------------------------

    #[test]
    fn a_1500_byte_packet_at_240_mbit_is_50_us_of_reservation() {
        let mut mc = MClock::with_capacity(1);
        let id = mc.add(FlowSpec::bulk(240 * MBIT, 1)).unwrap();
        mc.arrive(id, 0, 1500).unwrap();
        // A flow's first head is tagged now: due at once.
        assert_eq!(
            mc.next(0, FlowClass::Bulk).unwrap().phase,
            Phase::Reservation
        );
        mc.served(id, Phase::Reservation, 0).unwrap();
        mc.arrive(id, 0, 1500).unwrap();
        // δR = 1500 × 8 × 1e9 / 240e6 = 50 000 ns.
        assert_eq!(mc.flow(id).unwrap().r, VTime::at(50_000));
        // Before then only the weight phase can pick it (no limit)...
        assert_eq!(
            mc.next(49_999, FlowClass::Bulk).unwrap().phase,
            Phase::Weight
        );
        // ...and at 50 µs it is behind its reservation again.
        assert_eq!(
            mc.next(50_000, FlowClass::Bulk).unwrap().phase,
            Phase::Reservation
        );
        // δP at weight 1: 1500 × 8 × 1e9 / 1e6 = 12 ms.
        assert_eq!(mc.flow(id).unwrap().p, VTime::at(12 * MS));
    }

    #[test]
    fn weight_phase_service_is_not_counted_against_the_reservation() {
        let mut mc = MClock::with_capacity(1);
        let id = mc.add(FlowSpec::bulk(240 * MBIT, 1)).unwrap();
        mc.arrive(id, 0, 1500).unwrap();
        mc.served(id, Phase::Reservation, 0).unwrap();
        mc.arrive(id, 0, 1500).unwrap(); // R = 50 µs
        let pick = mc.next(10_000, FlowClass::Bulk).unwrap();
        assert_eq!(pick.phase, Phase::Weight);
        mc.served(id, pick.phase, 10_000).unwrap();
        mc.arrive(id, 10_000, 1500).unwrap();
        // R went back to 0 and forward again: still 50 µs, not 100 µs.
        assert_eq!(mc.flow(id).unwrap().r, VTime::at(50_000));
        let stats = mc.stats(id).unwrap();
        assert_eq!(
            (stats.packets, stats.bytes, stats.reservation_bytes),
            (2, 3000, 1500)
        );
        assert_eq!(stats.last_served_ns, Some(10_000));
    }

    #[test]
    fn tags_stay_exact_over_many_packets() {
        // 1 byte at 3 Mbit/s is 2666.67 ns: three of them are exactly 8 µs.
        let t = (0..3).fold(VTime::at(0), |t, _| t.advanced(bit_ns(1), 3 * MBIT));
        assert_eq!(t, VTime::at(8_000));
        let back = t.retreated(bit_ns(1), 3 * MBIT);
        assert_eq!(back.ceil_ns(), 5_334);
        assert_eq!(back.advanced(bit_ns(1), 3 * MBIT), VTime::at(8_000));
        assert_eq!(VTime::at(5).retreated(bit_ns(1500), MBIT), VTime::at(0));
    }

    #[test]
    fn usable_capacity_is_the_bottleneck_less_5_percent() {
        let link_bound = Capacity {
            link_bps: 1000 * MBIT,
            cpu_bps: 2000 * MBIT,
        };
        assert_eq!(link_bound.usable_bps(), 950 * MBIT);
        assert_eq!(link_bound.bottleneck(), (Resource::Link, 1000 * MBIT));
        let cpu_bound = Capacity {
            link_bps: 1000 * MBIT,
            cpu_bps: 400 * MBIT,
        };
        assert_eq!(cpu_bound.usable_bps(), 380 * MBIT);
        assert_eq!(cpu_bound.bottleneck(), (Resource::Cpu, 400 * MBIT));
    }

    #[test]
    fn refusal_says_what_is_committed_and_what_fits() {
        let capacity = Capacity {
            link_bps: 1000 * MBIT,
            cpu_bps: 2000 * MBIT,
        };
        let admitted = [
            FlowSpec::bulk(600 * MBIT, 1),
            FlowSpec::real_time(300 * MBIT),
        ];
        let refusal = admit(&admitted, &FlowSpec::bulk(300 * MBIT, 1), &capacity).unwrap_err();
        assert_eq!(refusal.fits_bps, 50 * MBIT);
        assert_eq!(
            refusal.to_string(),
            "a reservation of 300 Mbit/s does not fit: 900 of 950 Mbit/s usable (the link, \
             1000 Mbit/s less 5 % headroom) is committed; at most 50 Mbit/s would fit"
        );
        let cpu = Capacity {
            link_bps: 1000 * MBIT,
            cpu_bps: 100 * MBIT,
        };
        let refusal = admit(&[], &FlowSpec::real_time(96 * MBIT), &cpu).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "a real-time flow of 96 Mbit/s (counted at its limit) does not fit: 0 of 95 \
             Mbit/s usable (the CPU reservation, 100 Mbit/s less 5 % headroom) is \
             committed; at most 95 Mbit/s would fit"
        );
        assert!(admit(&[], &FlowSpec::real_time(95 * MBIT), &cpu).is_ok());
    }

    #[test]
    fn rates_print_in_mbit() {
        let show = |bps| Mbit(bps).to_string();
        assert_eq!(show(240 * MBIT), "240");
        assert_eq!(show(1_500_000), "1.5");
        assert_eq!(show(64_000), "0.064");
        assert_eq!(show(49_999_999), "49.999");
        assert_eq!(show(999), "0");
    }

    #[test]
    fn a_real_time_flow_without_a_limit_is_limited_to_its_reservation() {
        let rt = FlowSpec::real_time(12 * MBIT);
        assert_eq!(rt.effective_limit_bps(), Some(12 * MBIT));
        assert_eq!(
            limited(rt, 20 * MBIT).effective_limit_bps(),
            Some(20 * MBIT)
        );
        assert_eq!(FlowSpec::bulk(12 * MBIT, 1).effective_limit_bps(), None);

        let mut mc = MClock::with_capacity(1);
        let id = mc.add(rt).unwrap();
        mc.arrive(id, 0, 1500).unwrap();
        mc.served(id, Phase::Reservation, 0).unwrap();
        mc.arrive(id, 0, 1500).unwrap();
        // 1500 bytes at 12 Mbit/s: 1 ms; nothing to do until then.
        assert_eq!(mc.next(999_999, FlowClass::RealTime), None);
        assert_eq!(mc.next_eligible_ns(0, FlowClass::RealTime), Some(MS));
        assert_eq!(mc.next_eligible_ns(0, FlowClass::Bulk), None);
        assert!(mc.next(MS, FlowClass::RealTime).is_some());
    }

    #[test]
    fn spec_errors_say_what_to_fix() {
        let zero_weight = FlowSpec::bulk(0, 0).validate().unwrap_err();
        assert_eq!(zero_weight, SpecError::ZeroWeight);
        assert!(zero_weight.to_string().contains("at least 1"));
        let zero_limit = limited(FlowSpec::bulk(0, 1), 0).validate().unwrap_err();
        assert!(zero_limit.to_string().contains("positive limit"));
        let below = limited(FlowSpec::bulk(10 * MBIT, 1), 5 * MBIT)
            .validate()
            .unwrap_err();
        assert_eq!(
            below.to_string(),
            "limit: 5 Mbit/s is below the reservation of 10 Mbit/s, which could then never \
             be met (fix: raise the limit to at least the reservation, or lower the \
             reservation)"
        );
        let unbounded = FlowSpec::real_time(0).validate().unwrap_err();
        assert_eq!(unbounded, SpecError::RealTimeWithoutRate);
        assert!(limited(FlowSpec::real_time(0), MBIT).validate().is_ok());
        let mut mc = MClock::with_capacity(1);
        assert_eq!(
            mc.add(FlowSpec::bulk(0, 0)),
            Err(FlowError::Spec(SpecError::ZeroWeight))
        );
        assert!(mc.is_empty());
    }

    #[test]
    fn a_stale_id_is_refused_and_the_slot_reused() {
        let mut mc = MClock::with_capacity(1);
        let old = mc.add(FlowSpec::bulk(0, 1)).unwrap();
        assert_eq!(
            mc.add(FlowSpec::bulk(0, 1)),
            Err(FlowError::TableFull { max_flows: 1 })
        );
        mc.remove(old).unwrap();
        let new = mc.add(FlowSpec::bulk(0, 2)).unwrap();
        assert_eq!(new.index(), old.index());
        assert_eq!(mc.arrive(old, 0, 64), Err(FlowError::Stale(old)));
        assert_eq!(mc.remove(old), Err(FlowError::Stale(old)));
        assert_eq!(mc.spec(new).unwrap().weight, 2);
        assert_eq!(
            mc.served(new, Phase::Weight, 0),
            Err(FlowError::NoHead(new))
        );
        mc.arrive(new, 0, 64).unwrap();
        assert_eq!(mc.arrive(new, 0, 64), Err(FlowError::HeadPending(new)));
    }

    #[test]
    fn a_returning_flow_starts_at_the_smallest_active_weight_tag() {
        let mut mc = MClock::with_capacity(2);
        let a = mc.add(FlowSpec::bulk(0, 1)).unwrap();
        let b = mc.add(FlowSpec::bulk(0, 1)).unwrap();
        let start = SECOND;
        mc.arrive(a, start, 1500).unwrap();
        mc.served(a, Phase::Weight, start).unwrap();
        mc.idle(a).unwrap();
        mc.arrive(b, start, 1500).unwrap();
        // B alone for 100 packets over 20 ms: its P tags run 12 ms per
        // packet, far ahead of real time (1.2 s of tags).
        for k in 0..100 {
            let now = start + k * 200_000;
            assert_eq!(mc.next(now, FlowClass::Bulk).unwrap().id, b);
            mc.served(b, Phase::Weight, now).unwrap();
            mc.arrive(b, now, 1500).unwrap();
        }
        // Back after 20 ms, longer than its one packet's δP of 12 ms: A
        // starts level with B (anchored at now), with no credit for the
        // 1.2 s of tags B ran while A was idle.
        let now = start + 20 * MS;
        mc.arrive(a, now, 1500).unwrap();
        assert_eq!(mc.flow(b).unwrap().p.ns, now);
        assert_eq!(mc.flow(a).unwrap().p.ns, now);
        // Back sooner, it would still be ahead by what remains of its packet.
        mc.served(a, Phase::Weight, now).unwrap();
        mc.idle(a).unwrap();
        mc.arrive(a, now + MS, 1500).unwrap();
        assert_eq!(mc.flow(a).unwrap().p.ns, now + 12 * MS);
    }

    #[test]
    fn pacer_spaces_packets_at_the_rate_and_lets_the_burst_through() {
        // 1500 bytes at 1 Gbit/s: 12 µs.
        let mut pacer = Pacer::new(1000 * MBIT);
        assert_eq!(pacer.ready_at(), 0);
        assert_eq!(pacer.take(0, 1500), 12_000);
        assert_eq!(pacer.take(12_000, 1500), 24_000);
        // After a pause the next packet goes at once, with no credit.
        assert_eq!(pacer.take(100_000, 1500), 112_000);

        // A burst of 3000 bytes: three packets back to back, then the rate.
        let mut burst = Pacer::new(1000 * MBIT).with_burst(3000);
        assert_eq!(burst.take(0, 1500), 0);
        assert_eq!(burst.take(0, 1500), 0);
        assert_eq!(burst.take(0, 1500), 12_000);
        assert_eq!(burst.take(12_000, 1500), 24_000);
        assert_eq!(Pacer::new(0).take(0, 64), u64::MAX);
    }

    // ---- the simulated service ----------------------------------------

    /// A flow of the simulated service: its spec, the sizes of its packets
    /// (cycled), and when it has packets queued: `[start, end)` intervals.
    #[derive(Debug, Clone)]
    struct SimFlow {
        spec: FlowSpec,
        sizes: Vec<u32>,
        busy: Vec<(u64, u64)>,
    }

    impl SimFlow {
        fn always(spec: FlowSpec, sizes: Vec<u32>) -> SimFlow {
            SimFlow {
                spec,
                sizes,
                busy: vec![(0, u64::MAX)],
            }
        }

        fn busy_at(&self, t: u64) -> bool {
            self.busy.iter().any(|&(a, b)| a <= t && t < b)
        }

        fn next_start_after(&self, t: u64) -> Option<u64> {
            self.busy.iter().map(|&(a, _)| a).filter(|&a| a > t).min()
        }
    }

    /// One packet sent by the simulated service.
    #[derive(Debug, Clone, Copy)]
    struct Sent {
        t: u64,
        flow: usize,
        bits: u64,
        /// The class the serving thread asked for.
        asked: FlowClass,
        /// When the packet became the flow's head, and when its L tag was due.
        head_since: u64,
        l_due: u64,
    }

    /// The network service, served one packet at a time at `capacity_bps`
    /// by the pacer: at each moment the pacer allows, the real-time thread
    /// asks for a real-time packet first, then bulk; with nothing eligible it
    /// sleeps until `next_eligible_ns` or a flow's next packets arrive.
    fn simulate(
        capacity_bps: u64,
        flows: &[SimFlow],
        horizon_ns: u64,
        mut record: impl FnMut(Sent),
    ) {
        let mut mc = MClock::with_capacity(flows.len());
        let ids: Vec<FlowId> = flows.iter().map(|f| mc.add(f.spec).unwrap()).collect();
        let mut pacer = Pacer::new(capacity_bps);
        let mut sent = vec![0usize; flows.len()];
        let mut head_since = vec![None; flows.len()];
        let size = |i: usize, sent: &[usize]| flows[i].sizes[sent[i] % flows[i].sizes.len()];
        let mut now = 0;
        loop {
            for (i, flow) in flows.iter().enumerate() {
                if head_since[i].is_none() && flow.busy_at(now) {
                    mc.arrive(ids[i], now, size(i, &sent)).unwrap();
                    head_since[i] = Some(now);
                }
            }
            let t = now.max(pacer.ready_at());
            if t >= horizon_ns {
                return;
            }
            let next_start = (0..flows.len())
                .filter(|&i| head_since[i].is_none())
                .filter_map(|i| flows[i].next_start_after(now))
                .min();
            if next_start.is_some_and(|s| s <= t) {
                now = next_start.unwrap();
                continue;
            }
            let classes = [FlowClass::RealTime, FlowClass::Bulk];
            let pick = classes
                .iter()
                .find_map(|&class| Some((class, mc.next(t, class)?)));
            let Some((asked, pick)) = pick else {
                let wake = classes
                    .iter()
                    .filter_map(|&class| mc.next_eligible_ns(t, class))
                    .chain(next_start)
                    .min();
                match wake {
                    Some(w) => {
                        assert!(w > t, "next_eligible_ns said {w} at {t} but next said none");
                        now = w;
                        continue;
                    }
                    None => return,
                }
            };
            let i = pick.id.index();
            let bytes = size(i, &sent);
            record(Sent {
                t,
                flow: i,
                bits: bytes as u64 * 8,
                asked,
                head_since: head_since[i].unwrap(),
                l_due: mc.flow(pick.id).unwrap().l.ceil_ns(),
            });
            mc.served(pick.id, pick.phase, t).unwrap();
            pacer.take(t, bytes);
            sent[i] += 1;
            if flows[i].busy_at(t) {
                mc.arrive(pick.id, t, size(i, &sent)).unwrap();
                head_since[i] = Some(t);
            } else {
                mc.idle(pick.id).unwrap();
                head_since[i] = None;
            }
            now = t;
        }
    }

    /// Bits each flow received over the whole run.
    fn totals(capacity_bps: u64, flows: &[SimFlow], horizon_ns: u64) -> Vec<u64> {
        let mut bits = vec![0; flows.len()];
        simulate(capacity_bps, flows, horizon_ns, |s| bits[s.flow] += s.bits);
        bits
    }

    /// rate × time in bits.
    fn bits_at(rate_bps: u64, ns: u64) -> u64 {
        (rate_bps as u128 * ns as u128 / NS_PER_S) as u64
    }

    // ---- generators ---------------------------------------------------

    fn arb_sizes() -> impl Strategy<Value = Vec<u32>> {
        proptest::collection::vec(64u32..=1500, 1..6)
    }

    fn arb_capacity() -> impl Strategy<Value = u64> {
        (20u64..=300).prop_map(|m| m * MBIT)
    }

    /// A flow committing `share` of what `shares` total to `commit_bps`:
    /// bulk flows reserve it (and may be limited above it), real-time flows
    /// are limited to it (and may reserve less).
    #[derive(Debug, Clone)]
    struct Shape {
        real_time: bool,
        share: u64,
        weight: u32,
        /// Bulk: limit above the reservation (% more), if any; real-time:
        /// reservation below the limit (% of it).
        pct: Option<u64>,
        sizes: Vec<u32>,
    }

    fn arb_shape() -> impl Strategy<Value = Shape> {
        (
            prop::bool::weighted(0.25),
            0u64..=100,
            1u32..=10,
            prop::option::weighted(0.4, 1u64..=100),
            arb_sizes(),
        )
            .prop_map(|(real_time, share, weight, pct, sizes)| Shape {
                real_time,
                share,
                weight,
                pct,
                sizes,
            })
    }

    fn flows_committing(shapes: &[Shape], commit_bps: u64) -> Vec<SimFlow> {
        let total: u64 = shapes.iter().map(|s| s.share).sum::<u64>().max(1);
        shapes
            .iter()
            .map(|s| {
                let commit = commit_bps * s.share / total;
                let spec = match (s.real_time && commit > 0, s.pct) {
                    (true, None) => FlowSpec::real_time(commit),
                    (true, Some(pct)) => limited(FlowSpec::real_time(commit * pct / 100), commit),
                    (false, None) => FlowSpec::bulk(commit, s.weight),
                    (false, Some(pct)) => limited(
                        FlowSpec::bulk(commit, s.weight),
                        (commit + commit * pct / 100).max(MBIT),
                    ),
                };
                SimFlow::always(
                    FlowSpec {
                        weight: s.weight,
                        ..spec
                    },
                    s.sizes.clone(),
                )
            })
            .collect()
    }

    fn admitted(flows: &[SimFlow], capacity: &Capacity) -> bool {
        let specs: Vec<FlowSpec> = flows.iter().map(|f| f.spec).collect();
        (0..specs.len()).all(|k| admit(&specs[..k], &specs[k], capacity).is_ok())
    }

    fn link(capacity_bps: u64) -> Capacity {
        Capacity {
            link_bps: capacity_bps,
            cpu_bps: capacity_bps,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u32),
        Remove(usize),
        Arrive(usize, u32),
        Serve(usize),
        Idle(usize),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (1u32..=10).prop_map(Op::Add),
            1 => (0usize..64).prop_map(Op::Remove),
            2 => (0usize..64, 64u32..=1500).prop_map(|(k, s)| Op::Arrive(k, s)),
            2 => (0usize..64).prop_map(Op::Serve),
            1 => (0usize..64).prop_map(Op::Idle),
        ]
    }

    // ---- properties ---------------------------------------------------

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Every flow is always backlogged, so the service is overloaded
        /// whatever the reservations; each still has its reservation at every
        /// moment t of 2 s, less D × r + one packet. D is how long a head
        /// can wait once its R tag is due: real-time work goes first (at most
        /// its limits, which admission counts), and otherwise the head waits
        /// for the packet on the wire and for heads due before it; those come
        /// at the rates admission allowed, plus one packet per flow, so
        /// D ≤ (N + 1) packets / (C − real-time limits). The reservation of
        /// a flow small beside the link is then met within one packet.
        #[test]
        fn reservations_are_met_under_overload(
            capacity in arb_capacity(),
            shapes in proptest::collection::vec(arb_shape(), 1..8),
            fill_pct in 0u64..=100,
        ) {
            let usable = link(capacity).usable_bps();
            let flows = flows_committing(&shapes, usable * fill_pct / 100);
            prop_assert!(admitted(&flows, &link(capacity)));
            let real_time: u64 = flows
                .iter()
                .filter(|f| f.spec.class == FlowClass::RealTime)
                .map(|f| f.spec.committed_bps())
                .sum();
            let wait_bits = MAX_PACKET_BITS as u128 * (flows.len() as u128 + 1);
            let slack: Vec<u64> = flows
                .iter()
                .map(|f| {
                    let r = f.spec.reservation_bps as u128;
                    MAX_PACKET_BITS + (r * wait_bits / (capacity - real_time) as u128) as u64
                })
                .collect();
            let mut bits = vec![0u64; flows.len()];
            let mut short: Option<String> = None;
            let mut check = |t: u64, bits: &[u64]| {
                for (i, flow) in flows.iter().enumerate() {
                    let owed = bits_at(flow.spec.reservation_bps, t);
                    if bits[i] + slack[i] < owed && short.is_none() {
                        short = Some(format!("{:?} had {} bits by {} ns", flow.spec, bits[i], t));
                    }
                }
            };
            let horizon = 2 * SECOND;
            simulate(capacity, &flows, horizon, |s| {
                check(s.t, &bits);
                bits[s.flow] += s.bits;
            });
            check(horizon, &bits);
            prop_assert!(short.is_none(), "{}", short.unwrap());
        }

        /// Flows with neither reservation nor limit share what the others
        /// leave in proportion to their weights. The weight phase always
        /// serves the smallest P tag, so those flows' P tags stay within one
        /// packet's δP of each other; a flow's tag counts its service but
        /// its head and not its first packet. Hence for flows i and j:
        /// |bitsᵢ/wᵢ − bitsⱼ/wⱼ| ≤ 2 × 1500 bytes × (1/wᵢ + 1/wⱼ).
        #[test]
        fn weights_share_the_excess_in_proportion(
            capacity in arb_capacity(),
            weights in proptest::collection::vec((1u32..=10, arb_sizes()), 2..6),
            reserved in proptest::collection::vec(arb_shape(), 0..3),
            fill_pct in 0u64..=60,
        ) {
            let usable = link(capacity).usable_bps();
            let mut flows = flows_committing(&reserved, usable * fill_pct / 100);
            let first_pure = flows.len();
            flows.extend(weights.iter().map(|(w, sizes)| {
                SimFlow::always(FlowSpec::bulk(0, *w), sizes.clone())
            }));
            let bits = totals(capacity, &flows, 2 * SECOND);
            for i in first_pure..flows.len() {
                for j in i + 1..flows.len() {
                    let (wi, wj) = (flows[i].spec.weight as u64, flows[j].spec.weight as u64);
                    let skew = (bits[i] * wj).abs_diff(bits[j] * wi);
                    prop_assert!(
                        skew <= 2 * MAX_PACKET_BITS * (wi + wj),
                        "weights {} and {} got {} and {} bits", wi, wj, bits[i], bits[j]
                    );
                }
            }
        }

        /// A limited flow never has received more than limit × t + one
        /// packet by any time t (the L tag of its k-th head counts its
        /// packets 2..k at the limit and must be due).
        #[test]
        fn limits_hold_at_every_packet(
            capacity in arb_capacity(),
            shapes in proptest::collection::vec(arb_shape(), 1..6),
            fill_pct in 0u64..=100,
            hogs in proptest::collection::vec((1u32..=10, arb_sizes()), 0..3),
        ) {
            let usable = link(capacity).usable_bps();
            let mut flows = flows_committing(&shapes, usable * fill_pct / 100);
            flows.extend(hogs.iter().map(|(w, s)| SimFlow::always(FlowSpec::bulk(0, *w), s.clone())));
            let mut bits = vec![0u64; flows.len()];
            let mut worst: Option<String> = None;
            simulate(capacity, &flows, 2 * SECOND, |s| {
                bits[s.flow] += s.bits;
                if let Some(limit) = flows[s.flow].spec.effective_limit_bps() {
                    if bits[s.flow] > bits_at(limit, s.t) + MAX_PACKET_BITS && worst.is_none() {
                        worst = Some(format!(
                            "{:?}: {} bits by {} ns", flows[s.flow].spec, bits[s.flow], s.t
                        ));
                    }
                }
            });
            prop_assert!(worst.is_none(), "{}", worst.unwrap());
        }

        /// The real-time thread asks for real-time work first: a real-time
        /// packet waits at most for the packet on the wire once it is due,
        /// however heavy the bulk load, and each class only ever gets its own
        /// flows.
        #[test]
        fn real_time_packets_go_first(
            capacity in arb_capacity(),
            rt_pct in 1u64..=50,
            rt_sizes in arb_sizes(),
            bulk in proptest::collection::vec(arb_shape(), 1..5),
        ) {
            let usable = link(capacity).usable_bps();
            let rt = usable * rt_pct / 100;
            let bulk: Vec<Shape> = bulk.into_iter().map(|s| Shape { real_time: false, ..s }).collect();
            let mut flows = vec![SimFlow::always(FlowSpec::real_time(rt), rt_sizes)];
            flows.extend(flows_committing(&bulk, usable - rt));
            prop_assert!(admitted(&flows, &link(capacity)));
            let on_the_wire = (MAX_PACKET_BITS as u128 * NS_PER_S).div_ceil(capacity as u128) as u64;
            let mut failure: Option<String> = None;
            simulate(capacity, &flows, SECOND, |s| {
                if flows[s.flow].spec.class != s.asked {
                    failure.get_or_insert(format!("asked {:?}, got {:?}", s.asked, flows[s.flow].spec));
                }
                let due = s.head_since.max(s.l_due);
                if s.flow == 0 && s.t > due + on_the_wire {
                    failure.get_or_insert(format!("real-time head due at {} went at {}", due, s.t));
                }
            });
            prop_assert!(failure.is_none(), "{}", failure.unwrap());
        }

        /// A flow idle for a long time and then backlogged gets its weight
        /// share over the next window: no more (no credit piled up while
        /// idle) and no less (no penalty for the service it had before).
        /// P tags run ahead of real time here (weights sum to ≤ 60 Mbit/s of
        /// tag rate, less than the link), so without the idle adjustment the
        /// returning flow would take everything for a long while. Against
        /// each other flow j over the window, as for the weights, with one
        /// more packet's δP at each end of the window for each flow:
        /// |bitsₐ/wₐ − bitsⱼ/wⱼ| ≤ 4 × 1500 bytes × (1/wₐ + 1/wⱼ).
        #[test]
        fn a_returning_flow_gets_its_weight_share_and_no_more(
            capacity in (100u64..=300).prop_map(|m| m * MBIT),
            returning in (1u32..=10, arb_sizes()),
            others in proptest::collection::vec((1u32..=10, arb_sizes()), 1..5),
            active_ms in 10u64..=300,
            idle_ms in 500u64..=1000,
        ) {
            let away = active_ms * MS;
            let back = away + idle_ms * MS;
            let window = 200 * MS;
            let mut flows = vec![SimFlow {
                spec: FlowSpec::bulk(0, returning.0),
                sizes: returning.1.clone(),
                busy: vec![(0, away), (back, u64::MAX)],
            }];
            flows.extend(others.iter().map(|(w, s)| SimFlow::always(FlowSpec::bulk(0, *w), s.clone())));
            let mut bits = vec![0u64; flows.len()];
            simulate(capacity, &flows, back + window, |s| {
                if s.t >= back {
                    bits[s.flow] += s.bits;
                }
            });
            let wa = returning.0 as u64;
            for (j, flow) in flows.iter().enumerate().skip(1) {
                let wj = flow.spec.weight as u64;
                let skew = (bits[0] * wj).abs_diff(bits[j] * wa);
                prop_assert!(
                    skew <= 4 * MAX_PACKET_BITS * (wa + wj),
                    "returning weight {} got {} bits, weight {} got {}", wa, bits[0], wj, bits[j]
                );
            }
        }

        /// Admission never commits more than the usable capacity, admits
        /// whatever fits, and a refusal's `fits_bps` fits exactly: a flow of
        /// the same class committing `fits_bps` is admitted, one bit/s more
        /// is not.
        #[test]
        fn admission_commits_at_most_the_usable_capacity(
            link_mbit in 1u64..=2000,
            cpu_mbit in 1u64..=2000,
            asks in proptest::collection::vec(
                (any::<bool>(), 0u64..=800_000_000, prop::option::of(0u64..=800_000_000)),
                1..30,
            ),
        ) {
            let capacity = Capacity { link_bps: link_mbit * MBIT, cpu_bps: cpu_mbit * MBIT };
            let usable = capacity.usable_bps();
            let mut admitted: Vec<FlowSpec> = Vec::new();
            for (real_time, reservation, limit) in asks {
                let class = if real_time { FlowClass::RealTime } else { FlowClass::Bulk };
                let limit = limit.map(|l| l.max(reservation).max(1));
                let new = FlowSpec { class, reservation_bps: reservation, weight: 1, limit_bps: limit };
                let committed: u64 = admitted.iter().map(FlowSpec::committed_bps).sum();
                match admit(&admitted, &new, &capacity) {
                    Ok(()) => {
                        prop_assert!(committed + new.committed_bps() <= usable);
                        admitted.push(new);
                    }
                    Err(refusal) => {
                        prop_assert!(committed + new.committed_bps() > usable);
                        prop_assert_eq!(refusal.fits_bps, usable - committed);
                        prop_assert_eq!(refusal.committed_bps, committed);
                        let at = |bps| FlowSpec { class, reservation_bps: bps, weight: 1, limit_bps: None };
                        prop_assert!(admit(&admitted, &at(refusal.fits_bps), &capacity).is_ok());
                        prop_assert!(admit(&admitted, &at(refusal.fits_bps + 1), &capacity).is_err());
                    }
                }
            }
            let committed: u64 = admitted.iter().map(FlowSpec::committed_bps).sum();
            prop_assert!(committed <= usable);
        }

        /// Adding and removing flows in any order stays in the table made by
        /// `with_capacity` (no slot is ever allocated after it), reuses
        /// slots, and refuses every id of a removed flow.
        #[test]
        fn churn_stays_in_the_table_and_refuses_stale_ids(
            max_flows in 1usize..8,
            ops in proptest::collection::vec(arb_op(), 0..200),
        ) {
            let mut mc = MClock::with_capacity(max_flows);
            let table = (mc.slots.as_ptr(), mc.slots.capacity());
            let mut live: Vec<FlowId> = Vec::new();
            let mut stale: Vec<FlowId> = Vec::new();
            let mut now = 0;
            for op in ops {
                now += 1_000;
                match op {
                    Op::Add(w) => match mc.add(FlowSpec::bulk(0, w)) {
                        Ok(id) => {
                            prop_assert!(live.len() < max_flows);
                            prop_assert!(!live.iter().any(|l| l.index() == id.index()));
                            live.push(id);
                        }
                        Err(e) => {
                            prop_assert_eq!(live.len(), max_flows);
                            prop_assert_eq!(e, FlowError::TableFull { max_flows });
                        }
                    },
                    Op::Remove(k) if !live.is_empty() => {
                        let id = live.swap_remove(k % live.len());
                        prop_assert_eq!(mc.remove(id).map(|s| s.weight).is_ok(), true);
                        stale.push(id);
                    }
                    Op::Arrive(k, size) if !live.is_empty() => {
                        let id = live[k % live.len()];
                        let had_head = mc.flow(id).unwrap().head().is_some();
                        prop_assert_eq!(mc.arrive(id, now, size).is_err(), had_head);
                    }
                    Op::Serve(k) if !live.is_empty() => {
                        let id = live[k % live.len()];
                        if let Some(pick) = mc.next(now, FlowClass::Bulk) {
                            mc.served(pick.id, pick.phase, now).unwrap();
                        }
                        let _ = mc.idle(id);
                    }
                    Op::Idle(k) if !live.is_empty() => {
                        mc.idle(live[k % live.len()]).unwrap();
                    }
                    _ => {}
                }
                prop_assert_eq!(mc.len(), live.len());
                prop_assert_eq!((mc.slots.as_ptr(), mc.slots.capacity()), table);
                for &id in &stale {
                    prop_assert_eq!(mc.arrive(id, now, 64), Err(FlowError::Stale(id)));
                    prop_assert_eq!(mc.served(id, Phase::Weight, now), Err(FlowError::Stale(id)));
                    prop_assert_eq!(mc.idle(id), Err(FlowError::Stale(id)));
                    prop_assert_eq!(mc.stats(id), Err(FlowError::Stale(id)));
                    prop_assert_eq!(mc.remove(id), Err(FlowError::Stale(id)));
                }
                if let Some(pick) = mc.next(now, FlowClass::Bulk) {
                    prop_assert!(live.contains(&pick.id));
                }
            }
        }
    }
}
