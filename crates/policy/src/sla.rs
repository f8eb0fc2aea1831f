//! Service level agreements of the render service (seed 003 §3.1–3.2,
//! GuiServ): terms established from probe requests, and the request gate
//! that enforces them.
//!
//! A client starts best-effort. It marks the requests it wants guaranteed as
//! probe requests; the service runs them and records their CPU cost per
//! request kind ([`ProbeLog`]). When the client asks for terms, a rate per
//! kind and a number of requests outstanding at once ([`Terms`]), the
//! service offers a CPU reservation for the client's rendering task, the
//! parameters of the gate in front of it and the service time it guarantees
//! per kind ([`offer`]), or refuses and says what to do ([`Refusal`]). The
//! front-end task then enforces the agreed maximum inter-arrival rate and
//! outstanding count with a [`RequestGate`].
//!
//! It owns that arithmetic. It must never read a clock (time comes in as
//! u64 nanoseconds of the caller's monotonic clock), sleep, do I/O, or
//! allocate in the per-request calls ([`ProbeLog::record`],
//! [`RequestGate::check`], [`RequestGate::admit`],
//! [`RequestGate::complete`]); [`ProbeLog::new`] allocates once, and
//! [`ProbeLog::quantile`] and [`offer`] allocate (they run when a client
//! negotiates, not on the real-time path).
//!
//! How an offer is made, for terms with rates r_k and at most m outstanding:
//!
//! - cost_k = the `quantile` of kind k's kept probe costs × `margin`, in
//!   whole nanoseconds rounded up: the estimate the reservation covers.
//! - Period P = 1 / max_k r_k, clamped to the kernel's range: the fastest
//!   stream sees about one request per period, so the budget is replenished
//!   as often as work arrives and a request never waits for a distant
//!   replenishment.
//! - Runtime Q = ⌈Σ_k cost_k × r_k × P⌉, the work that arrives per period
//!   on average, but at least max_k cost_k (a request must fit in one
//!   budget) and at least 1024 ns (the kernel's minimum).
//! - Q / P must be ≤ 1 (one rendering task is one thread) and ≤ what the
//!   service has left ([`Capacity::left`]).
//! - Service time of kind k: P × ⌈((m − 1) × max_k cost_k + cost_k) / Q⌉.
//!   The reservation is a constant bandwidth server (SCHED_DEADLINE): it
//!   receives Q of CPU in every period P, and it holds nothing but this
//!   client's rendering task, which serves the client's requests in FIFO
//!   order. The gate lets at most m requests be outstanding, so a request
//!   waits behind at most m − 1 others, each at most the costliest kind:
//!   the work W = (m − 1) × max cost + cost_k is done within ⌈W / Q⌉
//!   periods of the server.
//!
//! What the bound assumes, and so what the guarantee is (soft real-time, as
//! in the seed): costs at or below their estimate (the margin over the
//! quantile absorbs the rest most of the time); periods counted from a
//! fresh budget, which is what a request gets when it wakes an idle
//! rendering task whose previous deadline has passed (the CBS wake-up
//! rule) — a request that arrives while the task is still within a period
//! whose budget is partly spent may wait up to one period more; and budget
//! enforcement at the kernel's tick when HRTICK is off.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Kinds of request a client may probe and agree terms for (request kind is
/// a u8 < MAX_KINDS).
pub const MAX_KINDS: usize = 8;

/// The kernel's smallest SCHED_DEADLINE runtime, in nanoseconds.
const MIN_RUNTIME_NS: u64 = 1024;

const NS_PER_S: f64 = 1e9;

/// The rules the service applies when it offers terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlaRules {
    /// Probes of a kind needed before an offer.
    pub min_probes: u32,
    /// Cost quantile the reservation covers, in [0, 1].
    pub quantile: f64,
    /// Multiplier on that cost (> 0).
    pub margin: f64,
    /// Shortest reservation period (the kernel's SCHED_DEADLINE minimum).
    pub min_period_ns: u64,
    /// Longest reservation period.
    pub max_period_ns: u64,
}

impl Default for SlaRules {
    fn default() -> SlaRules {
        SlaRules {
            min_probes: 20,
            quantile: 0.99,
            margin: 1.2,
            min_period_ns: 100_000,
            max_period_ns: 1_000_000_000,
        }
    }
}

impl SlaRules {
    /// Why these rules cannot make an offer, if they cannot.
    fn problem(&self) -> Option<String> {
        if !(0.0..=1.0).contains(&self.quantile) {
            return Some(format!(
                "the service's SLA rules have quantile {}; fix the service's configuration \
                 (a quantile is between 0 and 1, e.g. 0.99)",
                self.quantile
            ));
        }
        if !(self.margin.is_finite() && self.margin > 0.0) {
            return Some(format!(
                "the service's SLA rules have margin {}; fix the service's configuration \
                 (a positive multiplier, e.g. 1.2)",
                self.margin
            ));
        }
        if self.min_period_ns == 0 || self.min_period_ns > self.max_period_ns {
            return Some(format!(
                "the service's SLA rules have periods from {} to {} ns; fix the service's \
                 configuration (0 < min_period_ns ≤ max_period_ns)",
                self.min_period_ns, self.max_period_ns
            ));
        }
        None
    }
}

/// Costs (CPU ns per request) of the probe requests of each kind, measured
/// by the service. Each kind keeps its newest `capacity` costs in a ring,
/// preallocated by [`ProbeLog::new`], and counts every probe ever recorded.
#[derive(Debug, Clone)]
pub struct ProbeLog {
    capacity: usize,
    /// Kind k's ring is `costs[k × capacity .. (k + 1) × capacity]`; the
    /// next cost goes to slot `counts[k] % capacity`.
    costs: Vec<u64>,
    counts: [u64; MAX_KINDS],
}

impl ProbeLog {
    /// A log keeping the newest `capacity_per_kind` costs of each kind (at
    /// least one). The only allocation of the log.
    pub fn new(capacity_per_kind: usize) -> ProbeLog {
        let capacity = capacity_per_kind.max(1);
        ProbeLog {
            capacity,
            costs: vec![0; capacity * MAX_KINDS],
            counts: [0; MAX_KINDS],
        }
    }

    /// Records one probe of `kind` that cost `cost_ns` of CPU, replacing the
    /// oldest kept cost when the kind's ring is full. Kinds ≥ [`MAX_KINDS`]
    /// are ignored. Never allocates.
    pub fn record(&mut self, kind: u8, cost_ns: u64) {
        let Some(count) = self.counts.get_mut(kind as usize) else {
            return;
        };
        let slot = (*count % self.capacity as u64) as usize;
        self.costs[kind as usize * self.capacity + slot] = cost_ns;
        *count = count.saturating_add(1);
    }

    /// All probes ever recorded of `kind` (0 for kinds ≥ [`MAX_KINDS`]).
    pub fn count(&self, kind: u8) -> u64 {
        self.counts.get(kind as usize).copied().unwrap_or(0)
    }

    /// The nearest-rank `q`-quantile of the kept costs of `kind`: the
    /// smallest kept cost that at least ⌈q × n⌉ of the n kept costs do not
    /// exceed (`q` clamped to [0, 1], NaN taken as 1; q = 0 gives the
    /// smallest). `None` when no probe of that kind was recorded. Allocates
    /// a sorted copy: not for the real-time path.
    pub fn quantile(&self, kind: u8, q: f64) -> Option<u64> {
        let kept = self.kept(kind)?;
        let mut sorted = kept.to_vec();
        sorted.sort_unstable();
        Some(sorted[nearest_rank(q, sorted.len()) - 1])
    }

    /// The kept costs of `kind`, in ring order; `None` when there are none.
    fn kept(&self, kind: u8) -> Option<&[u64]> {
        let count = self.count(kind);
        if count == 0 {
            return None;
        }
        let n = count.min(self.capacity as u64) as usize;
        let start = kind as usize * self.capacity;
        Some(&self.costs[start..start + n])
    }
}

/// The 1-based nearest rank of quantile `q` among `n` ≥ 1 values:
/// ⌈q × n⌉ within [1, n]. A product within 1e-9 above a whole number counts
/// as that number, so that 0.99 × 100 is rank 99 whatever the rounding of
/// the float.
fn nearest_rank(q: f64, n: usize) -> usize {
    let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
    let rank = (q * n as f64 - 1e-9).ceil();
    (rank.max(1.0) as usize).min(n)
}

/// What a client asks for: per kind, how many requests per second; and how
/// many may be outstanding at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Terms {
    pub rates: Vec<KindRate>,
    pub max_outstanding: u32,
}

/// The rate a client asks for one kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KindRate {
    pub kind: u8,
    pub per_second: f64,
}

impl Terms {
    /// Why these terms are malformed, if they are.
    fn problem(&self) -> Option<String> {
        if self.rates.is_empty() {
            return Some(
                "the terms name no request kind; give a rate for each kind of request \
                 to be guaranteed"
                    .to_string(),
            );
        }
        let mut seen = [false; MAX_KINDS];
        for rate in &self.rates {
            let Some(seen) = seen.get_mut(rate.kind as usize) else {
                return Some(format!(
                    "kind {} does not exist; request kinds are 0 to {}",
                    rate.kind,
                    MAX_KINDS - 1
                ));
            };
            if *seen {
                return Some(format!(
                    "kind {} is named twice; give one rate per kind (the sum, if both \
                     were meant)",
                    rate.kind
                ));
            }
            *seen = true;
            if !(rate.per_second.is_finite() && rate.per_second > 0.0) {
                return Some(format!(
                    "kind {}: a rate of {} requests/s; give a positive, finite rate \
                     (leave out kinds that need no guarantee)",
                    rate.kind, rate.per_second
                ));
            }
        }
        if self.max_outstanding == 0 {
            return Some(
                "max_outstanding is 0, which would admit no request; allow at least 1 \
                 outstanding request"
                    .to_string(),
            );
        }
        None
    }

    fn total_per_second(&self) -> f64 {
        self.rates.iter().map(|r| r.per_second).sum()
    }
}

/// What the service can still give: CPU in cores (e.g. 1.8 = 1.8 cores) and
/// what it already promised.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub cores: f64,
    pub committed: f64,
}

impl Capacity {
    /// Cores not yet promised; never negative (0 when the numbers are not).
    pub fn left(&self) -> f64 {
        (self.cores - self.committed).max(0.0)
    }
}

/// The terms the service offers: a reservation (runtime per period) for the
/// client's rendering task, the request gate's parameters, and the service
/// time it guarantees per kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub runtime_ns: u64,
    pub period_ns: u64,
    /// Total requests/s the gate lets through (the sum of the rates).
    pub max_per_second: f64,
    /// Requests the gate lets through at once: one more than may be
    /// outstanding. A bucket one request deep at exactly the client's rate
    /// would keep every delay of an admission for good (the next token is
    /// counted from the late admission), so a client releasing on time
    /// with a little jitter would fall further behind each period; the
    /// outstanding limit still caps what is in flight.
    pub burst: u32,
    pub max_outstanding: u32,
    /// One per kind in the terms, in the same order.
    pub service_time_ns: Vec<KindTime>,
}

/// The service time guaranteed for one kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KindTime {
    pub kind: u8,
    /// The cost estimate used (quantile × margin).
    pub cost_ns: u64,
    pub service_time_ns: u64,
}

impl Offer {
    /// The reservation's share of one core: runtime / period.
    pub fn utilisation(&self) -> f64 {
        utilisation(self.runtime_ns, self.period_ns)
    }
}

fn utilisation(runtime_ns: u64, period_ns: u64) -> f64 {
    match (runtime_ns, period_ns) {
        (0, _) => 0.0,
        (_, 0) => f64::INFINITY,
        (q, p) => q as f64 / p as f64,
    }
}

/// Why no terms were offered; its Display names the problem and the fix.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Malformed terms (empty rates, a rate ≤ 0 or not finite, a kind ≥
    /// [`MAX_KINDS`], a kind named twice, max_outstanding of 0), or
    /// malformed service rules; the text says which and what to do.
    Invalid(String),
    /// Too few probes of `kind` measured yet.
    NotEnoughProbes { kind: u8, have: u64, need: u32 },
    /// The service has `left` cores, the terms `need` more; the same mix
    /// scaled to `fits_per_second` requests/s in total would be offered
    /// (0 when no rate of this mix would).
    BeyondCapacity {
        need: f64,
        left: f64,
        fits_per_second: f64,
    },
    /// One rendering task is one thread: a utilisation above 1 cannot be
    /// served.
    BeyondOneCore { need: f64 },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Invalid(why) => write!(f, "invalid terms: {why}"),
            Refusal::NotEnoughProbes { kind, have, need } => write!(
                f,
                "kind {kind}: {have} of {need} probes measured; send {} more probe \
                 requests, then ask again",
                u64::from(*need).saturating_sub(*have)
            ),
            Refusal::BeyondCapacity {
                need,
                left,
                fits_per_second,
            } => {
                write!(
                    f,
                    "needs {} of a core, {} left; ",
                    Cores(*need, Round::Up),
                    Cores(*left, Round::Down)
                )?;
                if *fits_per_second > 0.0 {
                    write!(
                        f,
                        "ask for a lower rate (at most {fits_per_second} requests/s in \
                         total, in the same mix, would fit) or wait for another client \
                         to leave"
                    )
                } else {
                    write!(
                        f,
                        "no rate of these requests would fit; wait for another client \
                         to leave, or ask for cheaper requests"
                    )
                }
            }
            Refusal::BeyondOneCore { need } => write!(
                f,
                "needs {} cores, but a client's requests are served by one rendering \
                 task, which can use at most one core; ask for lower rates (at most {} % \
                 of these) or make the requests cheaper",
                Cores(*need, Round::Up),
                percent_that_fits(*need)
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// The whole percentage of the rates that one core could take, at most.
fn percent_that_fits(need: f64) -> u64 {
    if need.is_finite() && need > 0.0 {
        (100.0 / need).floor().min(100.0) as u64
    } else {
        0
    }
}

#[derive(Clone, Copy)]
enum Round {
    Up,
    Down,
}

/// Cores with up to three decimals, rounded the way that never flatters:
/// what is needed up, what is left down.
struct Cores(f64, Round);

impl fmt::Display for Cores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scaled = self.0 * 1000.0;
        // Within a millionth of a core is the rounding of P and Q to whole
        // nanoseconds, not worth a digit.
        let milli = match self.1 {
            Round::Up => (scaled - 1e-3).ceil(),
            Round::Down => (scaled + 1e-3).floor(),
        };
        let milli = milli.max(0.0) as u64;
        let (whole, mut decimals, mut width) = (milli / 1000, milli % 1000, 3);
        if decimals == 0 {
            return write!(f, "{whole}");
        }
        while decimals % 10 == 0 {
            (decimals, width) = (decimals / 10, width - 1);
        }
        write!(f, "{whole}.{decimals:0width$}")
    }
}

/// One kind of the terms with its cost estimate.
#[derive(Debug, Clone, Copy)]
struct Item {
    kind: u8,
    cost_ns: u64,
    per_second: f64,
}

/// A reservation: runtime per period.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    runtime_ns: u64,
    period_ns: u64,
}

impl Plan {
    fn utilisation(&self) -> f64 {
        utilisation(self.runtime_ns, self.period_ns)
    }
}

/// The estimate the reservation covers: `quantile_ns` × `margin`, rounded
/// up, at least 1 ns (a request is never free).
fn cost_estimate(quantile_ns: u64, margin: f64) -> u64 {
    ((quantile_ns as f64 * margin).ceil() as u64).max(1)
}

/// P = 1 / the fastest rate, whole nanoseconds (rounded down: no longer
/// than the fastest stream's inter-arrival time), within the rules' range.
fn period_ns(max_per_second: f64, rules: &SlaRules) -> u64 {
    let p = (NS_PER_S / max_per_second).floor();
    let p = p.clamp(rules.min_period_ns as f64, rules.max_period_ns as f64);
    p as u64
}

/// Q = ⌈Σ cost × rate × P⌉, at least the largest cost and 1024 ns.
fn runtime_ns(items: &[Item], period_ns: u64) -> u64 {
    let per_period: f64 = items
        .iter()
        .map(|i| i.cost_ns as f64 * i.per_second * period_ns as f64 / NS_PER_S)
        .sum();
    (per_period.ceil() as u64)
        .max(max_cost(items))
        .max(MIN_RUNTIME_NS)
}

fn max_cost(items: &[Item]) -> u64 {
    items.iter().map(|i| i.cost_ns).max().unwrap_or(0)
}

/// The reservation for `items`, their rates multiplied by `scale`.
fn plan(items: &[Item], scale: f64, rules: &SlaRules) -> Plan {
    let scaled: Vec<Item> = items
        .iter()
        .map(|i| Item {
            per_second: i.per_second * scale,
            ..*i
        })
        .collect();
    let fastest = scaled.iter().map(|i| i.per_second).fold(0.0, f64::max);
    let period_ns = period_ns(fastest, rules);
    Plan {
        runtime_ns: runtime_ns(&scaled, period_ns),
        period_ns,
    }
}

/// P × ⌈((m − 1) × max cost + cost) / Q⌉ (see the module documentation),
/// saturating.
fn service_time_ns(plan: Plan, max_cost_ns: u64, cost_ns: u64, max_outstanding: u32) -> u64 {
    let ahead = u128::from(max_outstanding.saturating_sub(1)) * u128::from(max_cost_ns);
    let work = ahead + u128::from(cost_ns);
    let periods = work.div_ceil(u128::from(plan.runtime_ns.max(1)));
    (periods * u128::from(plan.period_ns)).min(u128::from(u64::MAX)) as u64
}

/// The largest total rate, at three significant digits, for which the mix
/// of `items` scaled to it fits in `left` cores, and still does with the
/// rates 1e-9 higher (so a client that scales its rates with other float
/// rounding is offered terms too); 0 when none does.
fn fits_per_second(items: &[Item], total: f64, left: f64, rules: &SlaRules) -> f64 {
    let fits = |scale: f64| {
        let u = plan(items, scale, rules).utilisation();
        u <= left && u <= 1.0
    };
    let fits_total = |per_second: f64| {
        let scale = per_second / total;
        fits(scale) && fits(scale * (1.0 + 1e-9))
    };
    // The utilisation grows with the scale (up to the rounding of P and Q
    // to whole nanoseconds): bisect for the largest scale that fits.
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..64 {
        let mid = (lo + hi) / 2.0;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // Then round down to a number a person can type, and step down past
    // any rounding bump.
    let mut candidate = floor_significant(total * lo, 3);
    for _ in 0..1000 {
        if candidate <= 0.0 || fits_total(candidate) {
            return candidate.max(0.0);
        }
        candidate = floor_significant(candidate - significant_unit(candidate, 3), 3);
    }
    0.0
}

/// The place value of the last of `digits` significant digits of `x` > 0.
fn significant_unit(x: f64, digits: i32) -> f64 {
    10f64.powi(x.log10().floor() as i32 - (digits - 1))
}

/// `x` rounded down to `digits` significant digits; 0 for x ≤ 0 or not
/// finite. Divides or multiplies by an exact power of ten, so the result
/// is the float nearest the decimal and prints as it.
fn floor_significant(x: f64, digits: i32) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 0.0;
    }
    let exponent = x.log10().floor() as i32 - (digits - 1);
    if exponent >= 0 {
        let unit = 10f64.powi(exponent);
        (x / unit).floor() * unit
    } else {
        let scale = 10f64.powi(-exponent);
        (x * scale).floor() / scale
    }
}

/// The terms the service can offer for `terms`, given the probes measured,
/// what it has left and its rules (see the module documentation for the
/// arithmetic); or why not, and what to do. Checks, in order: the rules and
/// the terms are well formed, every kind has `min_probes` probes (the first
/// kind short of them, in the terms' order, is named), the reservation fits
/// in one core, and it fits in what is left.
pub fn offer(
    terms: &Terms,
    log: &ProbeLog,
    capacity: Capacity,
    rules: &SlaRules,
) -> Result<Offer, Refusal> {
    if let Some(why) = rules.problem().or_else(|| terms.problem()) {
        return Err(Refusal::Invalid(why));
    }
    let items = terms
        .rates
        .iter()
        .map(|rate| {
            let have = log.count(rate.kind);
            let need = rules.min_probes.max(1);
            let quantile = log
                .quantile(rate.kind, rules.quantile)
                .filter(|_| have >= u64::from(need));
            match quantile {
                Some(q) => Ok(Item {
                    kind: rate.kind,
                    cost_ns: cost_estimate(q, rules.margin),
                    per_second: rate.per_second,
                }),
                None => Err(Refusal::NotEnoughProbes {
                    kind: rate.kind,
                    have,
                    need,
                }),
            }
        })
        .collect::<Result<Vec<Item>, Refusal>>()?;

    let plan = plan(&items, 1.0, rules);
    let need = plan.utilisation();
    if need > 1.0 {
        return Err(Refusal::BeyondOneCore { need });
    }
    let left = capacity.left();
    if need > left {
        let total = terms.total_per_second();
        return Err(Refusal::BeyondCapacity {
            need,
            left,
            fits_per_second: fits_per_second(&items, total, left, rules),
        });
    }

    let max_cost_ns = max_cost(&items);
    Ok(Offer {
        runtime_ns: plan.runtime_ns,
        period_ns: plan.period_ns,
        max_per_second: terms.total_per_second(),
        burst: terms.max_outstanding.saturating_add(1),
        max_outstanding: terms.max_outstanding,
        service_time_ns: items
            .iter()
            .map(|i| KindTime {
                kind: i.kind,
                cost_ns: i.cost_ns,
                service_time_ns: service_time_ns(
                    plan,
                    max_cost_ns,
                    i.cost_ns,
                    terms.max_outstanding,
                ),
            })
            .collect(),
    })
}

/// The fixed-point unit of rates: a rate is held in millionths of a
/// request per second, rounded down (the gate never lets more through than
/// it was given).
const RATE_SCALE: f64 = 1e6;

/// One token in the bucket's units (ns × rate in millionths per second):
/// a rate of R millionths per second adds R units per nanosecond, and one
/// request is worth 1e9 ns × 1e6.
const TOKEN: u128 = 1_000_000_000 * 1_000_000;

/// The front-end task's gate for one client: a token bucket for the rate
/// (starting full, `burst` deep) and a count of outstanding requests. Pure:
/// time is passed in; integer arithmetic, so it is exact and does not drift
/// however long it runs. [`RequestGate::check`], [`RequestGate::admit`] and
/// [`RequestGate::complete`] never allocate.
///
/// Time comes in whole nanoseconds, so a client sending at exactly its rate
/// arrives up to a fraction of a nanosecond after each token is complete;
/// the bucket keeps that fraction (it holds up to `burst` tokens plus less
/// than one nanosecond's worth) so that such a client is never held back,
/// however long it runs. Hence: from the start, at most burst + rate × t
/// requests pass in the first t ns; in any window [s, t], at most
/// burst + rate × (t − s + 1 ns).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestGate {
    /// None for a best-effort client ([`RequestGate::unlimited`]).
    limits: Option<Limits>,
    outstanding: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Limits {
    /// Tokens added per nanosecond, in units of [`TOKEN`] (millionths of a
    /// request per second).
    rate: u64,
    /// The bucket's depth: burst × [`TOKEN`], plus less than one
    /// nanosecond's worth (`rate` − 1) for the arrival's rounding.
    depth: u128,
    max_outstanding: u32,
    /// Tokens at `at_ns`.
    tokens: u128,
    at_ns: u64,
}

/// What the gate says of the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// It may go now.
    Admit,
    /// The rate does not allow it before this time (ns); `u64::MAX` for
    /// never (a gate of rate 0 whose burst is spent).
    WaitUntil(u64),
    /// As many requests as allowed are outstanding: wait for a completion.
    Outstanding,
}

impl Limits {
    /// The time the bucket is read at (time that goes backwards counts as
    /// none passed) and the tokens in it then.
    fn tokens_at(&self, now_ns: u64) -> (u64, u128) {
        let now = now_ns.max(self.at_ns);
        let added = u128::from(now - self.at_ns) * u128::from(self.rate);
        (now, self.tokens.saturating_add(added).min(self.depth))
    }

    fn check(&self, now_ns: u64, outstanding: u32) -> Gate {
        if outstanding >= self.max_outstanding {
            return Gate::Outstanding;
        }
        let (now, tokens) = self.tokens_at(now_ns);
        if tokens >= TOKEN {
            return Gate::Admit;
        }
        if self.rate == 0 {
            return Gate::WaitUntil(u64::MAX);
        }
        let wait = (TOKEN - tokens).div_ceil(u128::from(self.rate));
        let at = u128::from(now) + wait;
        Gate::WaitUntil(at.min(u128::from(u64::MAX)) as u64)
    }

    fn take(&mut self, now_ns: u64) {
        let (now, tokens) = self.tokens_at(now_ns);
        self.tokens = tokens - TOKEN;
        self.at_ns = now;
    }
}

impl RequestGate {
    /// A gate letting `max_per_second` requests through on average (held
    /// in millionths of a request per second, rounded down; a rate ≤ 0 or
    /// NaN lets only the first burst through), up to `burst` at once (at
    /// least 1), with at most `max_outstanding` outstanding (0 admits
    /// nothing). It starts with a full bucket.
    pub fn new(max_per_second: f64, burst: u32, max_outstanding: u32) -> RequestGate {
        let full = u128::from(burst.max(1)) * TOKEN;
        let rate = (max_per_second * RATE_SCALE).floor() as u64;
        RequestGate {
            limits: Some(Limits {
                rate,
                depth: full + u128::from(rate.saturating_sub(1)),
                max_outstanding,
                tokens: full,
                at_ns: 0,
            }),
            outstanding: 0,
        }
    }

    /// A gate for best-effort clients: never throttled by rate or
    /// outstanding requests (it still counts them).
    pub fn unlimited() -> RequestGate {
        RequestGate {
            limits: None,
            outstanding: 0,
        }
    }

    /// Would the next request pass at `now_ns`? [`Gate::Outstanding`] is
    /// said before [`Gate::WaitUntil`], so at a `WaitUntil` time the request
    /// passes unless more requests were admitted meanwhile.
    pub fn check(&self, now_ns: u64) -> Gate {
        match &self.limits {
            None => Gate::Admit,
            Some(limits) => limits.check(now_ns, self.outstanding),
        }
    }

    /// As [`RequestGate::check`]; when it says [`Gate::Admit`], takes a
    /// token and counts one request outstanding.
    pub fn admit(&mut self, now_ns: u64) -> Gate {
        let gate = self.check(now_ns);
        if gate == Gate::Admit {
            if let Some(limits) = &mut self.limits {
                limits.take(now_ns);
            }
            self.outstanding = self.outstanding.saturating_add(1);
        }
        gate
    }

    /// One outstanding request done (no effect when none is outstanding).
    pub fn complete(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const SECOND: u64 = 1_000_000_000;

    fn log_with(kind: u8, costs: impl IntoIterator<Item = u64>) -> ProbeLog {
        let mut log = ProbeLog::new(64);
        for cost in costs {
            log.record(kind, cost);
        }
        log
    }

    /// `n` probe costs of `cost_ns` each.
    fn probes(cost_ns: u64, n: usize) -> Vec<u64> {
        vec![cost_ns; n]
    }

    fn terms(rates: &[(u8, f64)], max_outstanding: u32) -> Terms {
        Terms {
            rates: rates
                .iter()
                .map(|&(kind, per_second)| KindRate { kind, per_second })
                .collect(),
            max_outstanding,
        }
    }

    fn cores(cores: f64, committed: f64) -> Capacity {
        Capacity { cores, committed }
    }

    /// The terms with every rate scaled so that they total `total`, as a
    /// client would ask again after a [`Refusal::BeyondCapacity`].
    fn scaled_to(terms: &Terms, total: f64) -> Terms {
        let asked: f64 = terms.rates.iter().map(|r| r.per_second).sum();
        Terms {
            rates: terms
                .rates
                .iter()
                .map(|r| KindRate {
                    kind: r.kind,
                    per_second: r.per_second * total / asked,
                })
                .collect(),
            max_outstanding: terms.max_outstanding,
        }
    }

    // ---- probe log ----------------------------------------------------

    #[test]
    fn quantile_is_nearest_rank() {
        // 1..=100 recorded in a scrambled order.
        let mut log = ProbeLog::new(100);
        for cost in (0..100u64).map(|i| (i * 37) % 100 + 1) {
            log.record(2, cost);
        }
        assert_eq!(log.count(2), 100);
        assert_eq!(log.quantile(2, 0.99), Some(99));
        assert_eq!(log.quantile(2, 0.5), Some(50));
        assert_eq!(log.quantile(2, 0.505), Some(51));
        assert_eq!(log.quantile(2, 1.0), Some(100));
        assert_eq!(log.quantile(2, 0.0), Some(1));
        assert_eq!(log.quantile(2, 2.0), Some(100));
        assert_eq!(log.quantile(2, f64::NAN), Some(100));
        assert_eq!(log.quantile(1, 0.5), None);
        // Five values: the 0.7 quantile is rank ⌈3.5⌉ = 4, the 0.6 one
        // rank 3, the 0.61 one rank ⌈3.05⌉ = 4.
        let small = log_with(0, [50, 10, 40, 20, 30]);
        assert_eq!(small.quantile(0, 0.7), Some(40));
        assert_eq!(small.quantile(0, 0.6), Some(30));
        assert_eq!(small.quantile(0, 0.61), Some(40));
    }

    #[test]
    fn the_ring_keeps_the_newest_costs_and_counts_all() {
        let mut log = ProbeLog::new(4);
        for cost in 1..=10 {
            log.record(3, cost);
        }
        assert_eq!(log.count(3), 10);
        assert_eq!(log.quantile(3, 0.0), Some(7));
        assert_eq!(log.quantile(3, 1.0), Some(10));
        let mut kept = log.kept(3).unwrap().to_vec();
        kept.sort_unstable();
        assert_eq!(kept, [7, 8, 9, 10]);
        // Kinds are separate, and kinds beyond MAX_KINDS are ignored.
        assert_eq!(log.count(2), 0);
        log.record(MAX_KINDS as u8, 5);
        log.record(u8::MAX, 5);
        assert_eq!(log.count(MAX_KINDS as u8), 0);
        assert_eq!(log.quantile(MAX_KINDS as u8, 0.5), None);
        assert_eq!(log.costs.len(), 4 * MAX_KINDS);
    }

    // ---- offers -------------------------------------------------------

    #[test]
    fn enough_probes_give_an_offer() {
        // 20 probes of 1 ms, asked at 30/s with 2 outstanding.
        let log = log_with(0, probes(MS, 20));
        let t = terms(&[(0, 30.0)], 2);
        let o = offer(&t, &log, cores(1.0, 0.5), &SlaRules::default()).unwrap();
        // cost 1.2 ms; P = 1/30 s; Q = ⌈1.2 ms × 30 × P⌉ = 1.2 ms.
        assert_eq!(o.period_ns, 33_333_333);
        assert_eq!(o.runtime_ns, 1_200_000);
        assert_eq!((o.burst, o.max_outstanding), (3, 2));
        assert_eq!(o.max_per_second, 30.0);
        // One request ahead of it: 2.4 ms of work, two periods.
        assert_eq!(
            o.service_time_ns,
            [KindTime {
                kind: 0,
                cost_ns: 1_200_000,
                service_time_ns: 66_666_666
            }]
        );
        assert!((o.utilisation() - 0.036).abs() < 1e-6);
    }

    #[test]
    fn a_mix_reserves_its_average_and_waits_behind_the_costliest() {
        let mut log = ProbeLog::new(32);
        for _ in 0..20 {
            log.record(0, 100 * US); // cheap: 120 µs estimated
            log.record(1, 5 * MS); // expensive: 6 ms estimated
        }
        let t = terms(&[(0, 100.0), (1, 10.0)], 3);
        let o = offer(&t, &log, cores(2.0, 0.0), &SlaRules::default()).unwrap();
        // P = 10 ms; work per period 120 µs × 1 + 6 ms × 0.1 = 720 µs, but
        // an expensive request must fit in one budget: Q = 6 ms.
        assert_eq!((o.period_ns, o.runtime_ns), (10 * MS, 6 * MS));
        assert_eq!(o.max_per_second, 110.0);
        // Cheap: 2 × 6 ms + 120 µs ahead and own → 3 budgets; expensive:
        // 18 ms → 3 budgets.
        let times: Vec<_> = o
            .service_time_ns
            .iter()
            .map(|k| k.service_time_ns)
            .collect();
        assert_eq!(times, [30 * MS, 30 * MS]);
        assert_eq!(o.service_time_ns[0].cost_ns, 120 * US);
        assert_eq!(o.service_time_ns[1].kind, 1);
    }

    #[test]
    fn too_few_probes_say_how_many_more() {
        let log = log_with(0, probes(MS, 7));
        let refusal = offer(
            &terms(&[(0, 30.0)], 1),
            &log,
            cores(1.0, 0.0),
            &SlaRules::default(),
        )
        .unwrap_err();
        assert_eq!(
            refusal,
            Refusal::NotEnoughProbes {
                kind: 0,
                have: 7,
                need: 20
            }
        );
        assert_eq!(
            refusal.to_string(),
            "kind 0: 7 of 20 probes measured; send 13 more probe requests, then ask again"
        );
        // A kind never probed, named second, is the one named.
        let log = log_with(0, probes(MS, 20));
        let refusal = offer(
            &terms(&[(0, 30.0), (5, 1.0)], 1),
            &log,
            cores(1.0, 0.0),
            &SlaRules::default(),
        )
        .unwrap_err();
        assert_eq!(
            refusal,
            Refusal::NotEnoughProbes {
                kind: 5,
                have: 0,
                need: 20
            }
        );
    }

    #[test]
    fn beyond_capacity_says_what_rate_fits_and_it_does() {
        // 10 ms requests (12 ms estimated) at 35/s: 0.42 of a core.
        let log = log_with(1, probes(10 * MS, 20));
        let t = terms(&[(1, 35.0)], 1);
        let rules = SlaRules::default();
        let capacity = cores(1.0, 0.75);
        let refusal = offer(&t, &log, capacity, &rules).unwrap_err();
        let Refusal::BeyondCapacity {
            need,
            left,
            fits_per_second,
        } = refusal
        else {
            panic!("{refusal:?}");
        };
        assert!((need - 0.42).abs() < 1e-6, "{need}");
        assert_eq!(left, 0.25);
        assert_eq!(fits_per_second, 20.8);
        assert_eq!(
            refusal.to_string(),
            "needs 0.42 of a core, 0.25 left; ask for a lower rate (at most 20.8 \
             requests/s in total, in the same mix, would fit) or wait for another \
             client to leave"
        );
        let o = offer(&scaled_to(&t, fits_per_second), &log, capacity, &rules).unwrap();
        assert!(o.utilisation() <= 0.25);
        // Nothing fits when a single request is more than what is left
        // over the longest period.
        let huge = log_with(0, probes(400 * MS, 20));
        let refusal = offer(&terms(&[(0, 1.0)], 1), &huge, capacity, &rules).unwrap_err();
        assert!(matches!(
            refusal,
            Refusal::BeyondCapacity {
                fits_per_second: 0.0,
                ..
            }
        ));
        assert!(refusal
            .to_string()
            .contains("no rate of these requests would fit"));
    }

    #[test]
    fn beyond_one_core_is_refused_whatever_is_left() {
        let log = log_with(0, probes(10 * MS, 20));
        let refusal = offer(
            &terms(&[(0, 100.0)], 1),
            &log,
            cores(8.0, 0.0),
            &SlaRules::default(),
        )
        .unwrap_err();
        assert!(matches!(refusal, Refusal::BeyondOneCore { need } if (need - 1.2).abs() < 1e-6));
        assert_eq!(
            refusal.to_string(),
            "needs 1.2 cores, but a client's requests are served by one rendering task, \
             which can use at most one core; ask for lower rates (at most 83 % of these) \
             or make the requests cheaper"
        );
    }

    #[test]
    fn malformed_terms_are_invalid_and_say_why() {
        let log = log_with(0, probes(MS, 20));
        let ask = |t: Terms| offer(&t, &log, cores(1.0, 0.0), &SlaRules::default());
        let invalid = |t: Terms| match ask(t) {
            Err(Refusal::Invalid(why)) => why,
            other => panic!("{other:?}"),
        };
        assert!(invalid(terms(&[], 1)).contains("no request kind"));
        assert!(invalid(terms(&[(0, 0.0)], 1)).contains("positive, finite rate"));
        assert!(invalid(terms(&[(0, -1.0)], 1)).contains("positive"));
        assert!(invalid(terms(&[(0, f64::NAN)], 1)).contains("positive"));
        assert!(invalid(terms(&[(0, f64::INFINITY)], 1)).contains("finite"));
        assert!(invalid(terms(&[(8, 1.0)], 1)).contains("kinds are 0 to 7"));
        assert!(invalid(terms(&[(0, 1.0), (0, 2.0)], 1)).contains("named twice"));
        assert!(invalid(terms(&[(0, 1.0)], 0)).contains("at least 1 outstanding"));
        let rules = SlaRules {
            quantile: 1.5,
            ..SlaRules::default()
        };
        let refusal = offer(&terms(&[(0, 1.0)], 1), &log, cores(1.0, 0.0), &rules);
        assert!(matches!(refusal, Err(Refusal::Invalid(why)) if why.contains("quantile 1.5")));
        assert!(Refusal::Invalid("x".into())
            .to_string()
            .starts_with("invalid terms: "));
    }

    #[test]
    fn periods_stay_in_the_kernels_range() {
        let log = log_with(0, probes(10 * US, 20));
        let rules = SlaRules::default();
        let slow = offer(&terms(&[(0, 0.1)], 1), &log, cores(1.0, 0.0), &rules).unwrap();
        assert_eq!(slow.period_ns, SECOND);
        let fast = offer(&terms(&[(0, 50_000.0)], 1), &log, cores(1.0, 0.0), &rules).unwrap();
        assert_eq!(fast.period_ns, 100 * US);
        // 12 µs × 5 per period = 60 µs.
        assert_eq!(fast.runtime_ns, 60 * US);
        let tiny = offer(
            &terms(&[(0, 1.0)], 1),
            &log_with(0, [1; 20]),
            cores(1.0, 0.0),
            &rules,
        )
        .unwrap();
        assert_eq!(tiny.runtime_ns, MIN_RUNTIME_NS);
    }

    #[test]
    fn cores_print_without_flattering() {
        assert_eq!(Cores(0.420_000_002, Round::Up).to_string(), "0.42");
        assert_eq!(Cores(0.420_01, Round::Up).to_string(), "0.421");
        assert_eq!(Cores(0.25, Round::Down).to_string(), "0.25");
        assert_eq!(Cores(0.2509, Round::Down).to_string(), "0.25");
        assert_eq!(Cores(2.0, Round::Up).to_string(), "2");
        assert_eq!(floor_significant(20.899, 3), 20.8);
        assert_eq!(floor_significant(12_345.0, 3), 12_300.0);
        assert_eq!(floor_significant(0.001_239, 3), 0.001_23);
    }

    // ---- gate ---------------------------------------------------------

    #[test]
    fn the_gate_lets_the_burst_through_then_paces_at_the_rate() {
        let mut gate = RequestGate::new(30.0, 2, 10);
        assert_eq!(gate.admit(0), Gate::Admit);
        assert_eq!(gate.admit(0), Gate::Admit);
        // The next token after 1/30 s, to the nanosecond (rounded up).
        assert_eq!(gate.admit(0), Gate::WaitUntil(33_333_334));
        assert_eq!(gate.check(33_333_333), Gate::WaitUntil(33_333_334));
        assert_eq!(gate.admit(33_333_334), Gate::Admit);
        assert_eq!(gate.outstanding(), 3);
        // No drift: a client sending at exactly 30/s (each request at the
        // first whole nanosecond) is never held back, and after an hour the
        // next token is due exactly when it should be.
        let mut gate = RequestGate::new(30.0, 1, 1);
        let at = |i: u64| (i * SECOND).div_ceil(30);
        let hour = 30 * 3600;
        for i in 0..hour {
            assert_eq!(gate.admit(at(i)), Gate::Admit, "request {i}");
            gate.complete();
            assert_eq!(gate.check(at(i)), Gate::WaitUntil(at(i + 1)));
        }
    }

    #[test]
    fn outstanding_requests_hold_the_gate_until_completed() {
        let mut gate = RequestGate::new(1000.0, 5, 2);
        assert_eq!(gate.admit(0), Gate::Admit);
        assert_eq!(gate.admit(0), Gate::Admit);
        assert_eq!(gate.admit(0), Gate::Outstanding);
        gate.complete();
        assert_eq!(gate.admit(0), Gate::Admit);
        gate.complete();
        gate.complete();
        gate.complete();
        assert_eq!(gate.outstanding(), 0);
        // A rate of 0 lets the burst through and then never.
        let mut stingy = RequestGate::new(0.0, 1, 5);
        assert_eq!(stingy.admit(0), Gate::Admit);
        assert_eq!(stingy.admit(SECOND), Gate::WaitUntil(u64::MAX));
    }

    #[test]
    fn time_going_backwards_counts_as_none_passed() {
        let mut gate = RequestGate::new(1.0, 1, 5);
        assert_eq!(gate.admit(10 * SECOND), Gate::Admit);
        assert_eq!(gate.check(5 * SECOND), Gate::WaitUntil(11 * SECOND));
        assert_eq!(gate.admit(11 * SECOND), Gate::Admit);
    }

    #[derive(Debug, Clone, Copy)]
    enum Op {
        Arrive(u64),
        Complete,
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..50 * MS).prop_map(Op::Arrive),
            1 => Just(Op::Complete),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the arrivals and completions: the gate admits at most
        /// burst + rate × t by t, and burst + rate × (t − s + 1 ns) in any
        /// window [s, t] (see [`RequestGate`]), never more than
        /// max_outstanding are outstanding, a WaitUntil time is the first
        /// at which the request passes, and Outstanding only when that many
        /// are.
        #[test]
        fn the_gate_keeps_rate_burst_and_outstanding(
            per_second in 0.1f64..5_000.0,
            burst in 1u32..8,
            max_outstanding in 1u32..8,
            ops in proptest::collection::vec(arb_op(), 1..300),
        ) {
            let mut gate = RequestGate::new(per_second, burst, max_outstanding);
            let mut now = 0u64;
            let mut admitted: Vec<u64> = Vec::new();
            for op in ops {
                match op {
                    Op::Complete => gate.complete(),
                    Op::Arrive(dt) => {
                        now += dt;
                        let checked = gate.check(now);
                        let outstanding = gate.outstanding();
                        let gated = gate.admit(now);
                        prop_assert_eq!(checked, gated);
                        match gated {
                            Gate::Admit => {
                                admitted.push(now);
                                prop_assert_eq!(gate.outstanding(), outstanding + 1);
                            }
                            Gate::Outstanding => {
                                prop_assert_eq!(outstanding, max_outstanding);
                            }
                            Gate::WaitUntil(at) => {
                                prop_assert!(at > now);
                                prop_assert!(outstanding < max_outstanding);
                                prop_assert_eq!(gate.check(at - 1), Gate::WaitUntil(at));
                                prop_assert_eq!(gate.check(at), Gate::Admit);
                            }
                        }
                        prop_assert!(gate.outstanding() <= max_outstanding);
                    }
                }
            }
            // From the start, [0, t]: burst + rate × t.
            for (j, &t) in admitted.iter().enumerate() {
                let allowed = burst as f64 + per_second * t as f64 / 1e9;
                prop_assert!(
                    (j + 1) as f64 <= allowed + 1e-9,
                    "{} admitted by {} ns, {} allowed", j + 1, t, allowed
                );
            }
            // Any window [s, t]: burst + rate × (t − s + 1 ns).
            for (i, &s) in admitted.iter().enumerate() {
                for (j, &t) in admitted.iter().enumerate().skip(i) {
                    let count = (j - i + 1) as f64;
                    let allowed = burst as f64 + per_second * (t - s + 1) as f64 / 1e9;
                    prop_assert!(
                        count <= allowed + 1e-9,
                        "{} admitted in [{}, {}], {} allowed", count, s, t, allowed
                    );
                }
            }
        }

        #[test]
        fn unlimited_never_refuses(ops in proptest::collection::vec(arb_op(), 1..300)) {
            let mut gate = RequestGate::unlimited();
            let (mut now, mut outstanding) = (0u64, 0u32);
            for op in ops {
                match op {
                    Op::Complete => {
                        gate.complete();
                        outstanding = outstanding.saturating_sub(1);
                    }
                    Op::Arrive(dt) => {
                        now += dt / 1000;
                        prop_assert_eq!(gate.admit(now), Gate::Admit);
                        outstanding += 1;
                    }
                }
                prop_assert_eq!(gate.outstanding(), outstanding);
            }
        }

        /// Any terms, probes and capacity: an offer stays within what is
        /// left and one core, its budget holds the costliest request, each
        /// service time covers the kind's cost; a refusal for capacity names
        /// a total rate that is offered when asked for in the same mix.
        #[test]
        fn offers_fit_and_refusals_name_what_fits(
            kinds in proptest::collection::btree_map(
                0u8..MAX_KINDS as u8,
                (
                    1u64..3 * MS,
                    proptest::collection::vec(0u64..50, 20..40),
                    0.5f64..200.0,
                ),
                1..4,
            ),
            max_outstanding in 1u32..6,
            cores_total in 0.0f64..2.0,
            committed_pct in 0u32..=100,
        ) {
            let mut log = ProbeLog::new(32);
            let mut rates = Vec::new();
            for (&kind, (base, jitter_pct, per_second)) in &kinds {
                for &pct in jitter_pct {
                    log.record(kind, base + base * pct / 100);
                }
                rates.push(KindRate { kind, per_second: *per_second });
            }
            let t = Terms { rates, max_outstanding };
            let capacity = cores(cores_total, cores_total * f64::from(committed_pct) / 100.0);
            let rules = SlaRules::default();
            match offer(&t, &log, capacity, &rules) {
                Ok(o) => check_offer(&t, &o, capacity)?,
                Err(Refusal::BeyondCapacity { need, left, fits_per_second }) => {
                    prop_assert!(need > left && need <= 1.0);
                    prop_assert!(fits_per_second < t.total_per_second());
                    if fits_per_second > 0.0 {
                        let again = scaled_to(&t, fits_per_second);
                        match offer(&again, &log, capacity, &rules) {
                            Ok(o) => check_offer(&again, &o, capacity)?,
                            Err(e) => prop_assert!(false, "{} then {:?}", fits_per_second, e),
                        }
                    }
                }
                Err(Refusal::BeyondOneCore { need }) => prop_assert!(need > 1.0),
                Err(other) => prop_assert!(false, "{:?}", other),
            }
        }
    }

    fn check_offer(t: &Terms, o: &Offer, capacity: Capacity) -> Result<(), TestCaseError> {
        prop_assert!(o.utilisation() <= capacity.left());
        prop_assert!(o.runtime_ns <= o.period_ns);
        prop_assert!((100 * US..=SECOND).contains(&o.period_ns));
        prop_assert!(o.runtime_ns >= MIN_RUNTIME_NS);
        prop_assert_eq!(o.service_time_ns.len(), t.rates.len());
        for (rate, time) in t.rates.iter().zip(&o.service_time_ns) {
            prop_assert_eq!(rate.kind, time.kind);
            prop_assert!(o.runtime_ns >= time.cost_ns);
            prop_assert!(time.service_time_ns >= time.cost_ns);
            prop_assert!(time.service_time_ns >= o.period_ns);
        }
        prop_assert_eq!(o.burst, t.max_outstanding + 1);
        Ok(())
    }
}
