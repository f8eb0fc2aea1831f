//! A chain's cycles judged together: threads that run one after another in
//! each period of a driver — an audio server's driver thread and its
//! clients' process threads — whose deadline is the chain's, not each
//! thread's. A client's cycle begins when the one before it signals, so its
//! own response says nothing of the period; the chain's does.
//!
//! - The driver's release opens a window at its expected release (its
//!   timer's grid, as [`crate::attribute::expected_release`] says); a
//!   member's cycle belongs to the window of the chain's cycle that woke
//!   it (a late period's tail, woken after the next release, is the late
//!   period's), or, woken from outside the chain, to the window it was
//!   woken in. A client woken a period after the last release seen opens
//!   its window on the grid (the driver's release was not seen).
//! - A driver that wakes on its own timer (JACK2's dummy driver,
//!   PipeWire's timerfd) is released by that timer alone: its other
//!   wake-ups in the period are the graph's work coming back to it
//!   (PipeWire's driver wakes as each client finishes), members of the
//!   window like any. A driver without timers (a sound card's interrupt)
//!   is released by a wake-up half a period or more after the last
//!   release.
//! - The window is late when a cycle in it ended after release + deadline.
//!   It is judged once no cycle of it can still end: [`GRACE_PERIODS`]
//!   periods (at least [`GRACE_NS`]) after its deadline, or at the end.
//! - The late window's parts are its cycles' parts, each from its own
//!   wake-up (the driver's from the release): waits for a CPU, throttling,
//!   interrupts, stolen time, blocking, own work. A wait while another of
//!   the chain's threads held the CPU is own work too: the chain's (its
//!   other threads' in the period, or an earlier period's still running)
//!   — the chain needed more than its CPU, nobody took it. Cycles that ran
//!   at once add up beyond the response; what no cycle covers (between
//!   one member's end and the next one's wake-up) is unknown.
//! - The cause is the longest part, own work counting only beyond the
//!   deadline (the chain's work fits its period, or the interference is
//!   to blame); the miss is named after the cycle that ended last.
//!
//! Pure: cycles in, misses out; no clock, no I/O.

use crate::attribute::{self, TaskClock};
use crate::causes::{micros, Cause, Holder, Miss, Parts};
use crate::timeline::Cycle;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// A window is judged this many periods after its deadline…
pub const GRACE_PERIODS: u64 = 8;
/// …and never sooner than this after it (a stalled member's cycle may end
/// tens of ms late).
pub const GRACE_NS: u64 = 50_000_000;

/// A thread's place in a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChainLink {
    /// Which chain (a run may trace several: two hosts' servers).
    pub chain: u32,
    /// The thread whose cycles open the chain's periods.
    pub driver: bool,
}

/// One cycle of a window, as much of it as a miss reports.
#[derive(Debug, Clone)]
struct Member {
    driver: bool,
    tid: i32,
    comm: String,
    cpu: u32,
    start_ns: u64,
    end_ns: u64,
    parts: Parts,
    holders: Vec<Holder>,
    throttled: bool,
    faults: u32,
    records_lost: bool,
}

/// One period of the chain: its release and the cycles woken in it.
#[derive(Debug, Clone)]
struct Window {
    release_ns: u64,
    members: Vec<Member>,
    /// Opened on the grid for a member: the driver's release was not seen.
    implied: bool,
}

/// When a thread's cycle ran, and the window it went to.
#[derive(Debug, Clone, Copy)]
struct Placed {
    woken_ns: u64,
    end_ns: u64,
    release_ns: u64,
}

/// A chain's open windows and its driver's grid.
#[derive(Debug, Clone)]
pub struct Chain {
    /// Its threads, driver and members.
    threads: BTreeSet<i32>,
    deadline_ns: u64,
    period_ns: Option<u64>,
    clock: TaskClock,
    previous_release: Option<u64>,
    /// The driver has been seen to wake on its own timer.
    timed: bool,
    /// Each thread's last cycle placed in a window.
    placed: HashMap<i32, Placed>,
    windows: VecDeque<Window>,
}

impl Chain {
    /// A chain whose driver is watched with `deadline_ns` and `period_ns`.
    pub fn new(deadline_ns: u64, period_ns: Option<u64>, clock: TaskClock) -> Chain {
        Chain {
            threads: BTreeSet::new(),
            deadline_ns,
            period_ns,
            clock,
            previous_release: None,
            timed: false,
            placed: HashMap::new(),
            windows: VecDeque::new(),
        }
    }

    /// Counts `tid` among the chain's threads (a wait behind it is the
    /// chain's own).
    pub fn join(&mut self, tid: i32) {
        self.threads.insert(tid);
    }

    /// Takes a cycle of one of the chain's threads (`driver`: it opens a
    /// window); returns the windows it leaves judged that were late.
    pub fn push(&mut self, cycle: &Cycle, driver: bool, cells: &HashMap<i32, String>) -> Vec<Miss> {
        if driver && self.releases(cycle) {
            self.open(cycle, cells);
            return self.judge_before(cycle.end_ns);
        }
        if let Some(w) = self.window_of(cycle, driver) {
            let m = Member {
                driver,
                ..self.member(cycle, cycle.woken_ns, cells)
            };
            self.placed(cycle, self.windows[w].release_ns);
            self.windows[w].members.push(m);
        }
        self.judge_before(cycle.end_ns)
    }

    /// The window a cycle that opens none belongs to: its waker's, when
    /// the chain's thread that woke it was placed with the cycle it woke
    /// it in (the tail of a late period, woken after the next release, is
    /// the late period's); else the one it was woken in.
    fn window_of(&mut self, cycle: &Cycle, driver: bool) -> Option<usize> {
        let waker = cycle
            .woken_by
            .and_then(|tid| self.placed.get(&tid))
            .filter(|p| (p.woken_ns..=p.end_ns).contains(&cycle.woken_ns))
            .map(|p| p.release_ns);
        if let Some(w) = waker.and_then(|r| self.windows.iter().position(|w| w.release_ns == r)) {
            return Some(w);
        }
        if !driver {
            self.imply_release(cycle.woken_ns);
        }
        self.windows
            .iter()
            .rposition(|w| w.release_ns <= cycle.woken_ns)
    }

    /// Remembers that `cycle` went to the window released at `release_ns`.
    fn placed(&mut self, cycle: &Cycle, release_ns: u64) {
        self.placed.insert(
            cycle.tid,
            Placed {
                woken_ns: cycle.woken_ns,
                end_ns: cycle.end_ns,
                release_ns,
            },
        );
    }

    /// Judges every window still open (the trace ended).
    pub fn finish(&mut self) -> Vec<Miss> {
        self.judge_before(u64::MAX)
    }

    /// Whether the driver's `cycle` begins a period (see the module doc).
    fn releases(&mut self, cycle: &Cycle) -> bool {
        if cycle.timer_ns.is_some_and(|t| t <= cycle.woken_ns) {
            self.timed = true;
            return true;
        }
        if self.timed {
            return false;
        }
        match (self.windows.back(), self.period_ns) {
            (Some(last), Some(period)) => cycle.woken_ns >= last.release_ns + period / 2,
            _ => true,
        }
    }

    fn open(&mut self, cycle: &Cycle, cells: &HashMap<i32, String>) {
        let release = attribute::expected_release(
            cycle.woken_ns,
            cycle.timer_ns,
            self.previous_release,
            self.period_ns,
        );
        if let Some(timer) = cycle.timer_ns {
            self.previous_release = Some(timer);
        }
        let driver = Member {
            driver: true,
            ..self.member(cycle, release, cells)
        };
        self.placed(cycle, release);
        let half_period = self.period_ns.map_or(0, |p| p / 2);
        match self.windows.back_mut() {
            Some(w) if w.implied && w.release_ns.abs_diff(release) < half_period => {
                w.release_ns = release;
                w.implied = false;
                w.members.push(driver);
            }
            _ => self.windows.push_back(Window {
                release_ns: release,
                members: vec![driver],
                implied: false,
            }),
        }
    }

    /// Opens the period a member woken at `woken` belongs to when the
    /// driver's release for it was not seen (records lost, a wake-up the
    /// kernel did not report): on the grid, a whole number of periods
    /// after the last release. Without it the last window took every
    /// later cycle, a "late" period 9 periods long.
    fn imply_release(&mut self, woken: u64) {
        let (Some(last), Some(period)) = (self.windows.back(), self.period_ns) else {
            return;
        };
        if period == 0 || woken < last.release_ns.saturating_add(period) {
            return;
        }
        let release = last.release_ns + (woken - last.release_ns) / period * period;
        self.windows.push_back(Window {
            release_ns: release,
            members: vec![],
            implied: true,
        });
    }

    /// `cycle` from `start_ns` as a window's member: its waits behind the
    /// chain's own threads are own work, and none of its holders.
    fn member(&self, cycle: &Cycle, start_ns: u64, cells: &HashMap<i32, String>) -> Member {
        let (own, others): (Vec<_>, Vec<_>) = cycle
            .waits
            .iter()
            .cloned()
            .partition(|w| self.threads.contains(&w.holder.pid));
        let outside = Cycle {
            waits: others,
            ..cycle.clone()
        };
        let mut parts = attribute::parts(&outside, start_ns, self.clock);
        let behind_own: u64 = own.iter().map(|w| w.ns).sum();
        let unknown = parts.get(Cause::Unknown);
        parts.set(Cause::Unknown, unknown.saturating_sub(behind_own));
        parts.set(
            Cause::OwnWork,
            parts.get(Cause::OwnWork) + behind_own.min(unknown),
        );
        Member {
            driver: false,
            tid: cycle.tid,
            comm: cycle.comm.clone(),
            cpu: cycle.cpu,
            start_ns,
            end_ns: cycle.end_ns,
            parts,
            holders: attribute::holders(&outside, cells),
            throttled: cycle.throttles > 0,
            faults: cycle.faults,
            records_lost: cycle.records_lost,
        }
    }

    /// How long after its deadline a window is judged.
    fn grace(&self) -> u64 {
        self.period_ns
            .unwrap_or(self.deadline_ns)
            .saturating_mul(GRACE_PERIODS)
            .max(GRACE_NS)
    }

    /// Judges the windows whose cycles have all ended by `now_ns`.
    fn judge_before(&mut self, now_ns: u64) -> Vec<Miss> {
        let grace = self.grace();
        let mut misses = vec![];
        while let Some(w) = self.windows.front() {
            let closes = w
                .release_ns
                .saturating_add(self.deadline_ns)
                .saturating_add(grace);
            if closes > now_ns {
                break;
            }
            let w = self.windows.pop_front().expect("a front window");
            misses.extend(judge(&w, self.deadline_ns));
        }
        misses
    }
}

/// The miss a window was, if it ended after its deadline.
fn judge(w: &Window, deadline_ns: u64) -> Option<Miss> {
    let last = w.members.iter().max_by_key(|m| m.end_ns)?;
    let response = last.end_ns.saturating_sub(w.release_ns);
    if response <= deadline_ns {
        return None;
    }
    let records_lost = w.members.iter().any(|m| m.records_lost);
    let due = w.release_ns.saturating_add(deadline_ns);
    let late_threads = w
        .members
        .iter()
        .filter(|m| !m.driver && m.end_ns > due)
        .count() as u32;
    let mut parts = Parts::default();
    if records_lost {
        parts.set(Cause::Unknown, response);
    } else {
        for m in &w.members {
            for c in Cause::ALL {
                parts.set(c, parts.get(c) + m.parts.get(c));
            }
        }
        let spans: Vec<(u64, u64)> = w.members.iter().map(|m| (m.start_ns, m.end_ns)).collect();
        let covered = covered(&spans, w.release_ns, last.end_ns);
        parts.set(
            Cause::Unknown,
            parts.get(Cause::Unknown) + response.saturating_sub(covered),
        );
    }
    let faults = w.members.iter().map(|m| m.faults).sum();
    Some(Miss {
        release_ns: w.release_ns,
        tid: last.tid,
        comm: last.comm.clone(),
        cpu: last.cpu,
        cause: attribute::cause(&parts, deadline_ns, faults),
        response_us: micros(response),
        deadline_us: micros(deadline_ns),
        parts_us: parts.micros(),
        holders: merged_holders(w.members.iter().flat_map(|m| &m.holders)),
        throttled: w.members.iter().any(|m| m.throttled),
        faults,
        records_lost,
        late_threads,
    })
}

/// How much of `from..to` the spans cover (each counted once).
fn covered(spans: &[(u64, u64)], from: u64, to: u64) -> u64 {
    let mut clipped: Vec<(u64, u64)> = spans
        .iter()
        .map(|&(s, e)| (s.max(from), e.min(to)))
        .filter(|(s, e)| s < e)
        .collect();
    clipped.sort_unstable();
    let (mut total, mut reach) = (0, from);
    for (s, e) in clipped {
        let s = s.max(reach);
        if e > s {
            total += e - s;
            reach = e;
        }
    }
    total
}

/// The holders of several cycles, each task once with its time summed,
/// longest first.
fn merged_holders<'a>(all: impl Iterator<Item = &'a Holder>) -> Vec<Holder> {
    let mut merged: Vec<Holder> = vec![];
    for h in all {
        match merged.iter_mut().find(|m| m.pid == h.pid) {
            Some(m) => {
                m.us = micros(((m.us + h.us) * 1000.0).round() as u64);
                m.by_fair_server |= h.by_fair_server;
            }
            None => merged.push(h.clone()),
        }
    }
    merged.sort_by(|a, b| b.us.total_cmp(&a.us));
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Task;
    use crate::timeline::Wait;
    use proptest::prelude::*;

    const CLOCK: TaskClock = TaskClock {
        counts_interrupts: true,
    };
    const PERIOD: u64 = 1_000_000;

    /// A cycle of `tid` woken at `woken` that ran `running` after waiting
    /// `waited` behind a hog.
    fn cycle(tid: i32, woken: u64, waited: u64, running: u64, timer: Option<u64>) -> Cycle {
        Cycle {
            tid,
            comm: format!("t{tid}"),
            woken_ns: woken,
            timer_ns: timer,
            end_ns: woken + waited + running,
            waits: match waited {
                0 => vec![],
                ns => vec![Wait {
                    holder: Task {
                        pid: 99,
                        comm: "hog".into(),
                        prio: 5,
                    },
                    ns,
                }],
            },
            running_ns: running,
            runtime_ns: running,
            ..Cycle::default()
        }
    }

    /// A period at `release`: the driver for 100 µs, then two clients
    /// one after another, the second waiting `waited` first.
    fn period(chain: &mut Chain, release: u64, waited: u64) -> Vec<Miss> {
        let cells = HashMap::new();
        let mut misses = chain.push(&cycle(1, release, 0, 100_000, Some(release)), true, &cells);
        misses.extend(chain.push(
            &cycle(2, release + 110_000, 0, 300_000, None),
            false,
            &cells,
        ));
        misses.extend(chain.push(
            &cycle(3, release + 420_000, waited, 300_000, None),
            false,
            &cells,
        ));
        misses
    }

    #[test]
    fn a_chain_is_late_when_its_last_member_ends_past_the_deadline() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        let mut misses = vec![];
        for k in 0..100 {
            let waited = if k == 10 { 600_000 } else { 0 };
            misses.extend(period(&mut chain, k * PERIOD, waited));
        }
        misses.extend(chain.finish());
        assert_eq!(misses.len(), 1, "{misses:?}");
        let m = &misses[0];
        assert_eq!(
            (m.release_ns, m.tid, m.cause),
            (10 * PERIOD, 3, Cause::WaitedForCpu)
        );
        assert_eq!(m.response_us, 1320.0);
        assert_eq!(m.parts_us[&Cause::WaitedForCpu], 600.0);
        assert_eq!(m.parts_us[&Cause::OwnWork], 700.0);
        // The gaps between one member's end and the next one's wake-up.
        assert_eq!(m.parts_us[&Cause::Unknown], 20.0);
        assert_eq!(m.holders[0].comm, "hog");
        assert_eq!(m.late_threads, 1, "the second client only");
    }

    #[test]
    fn a_wait_behind_the_chains_own_thread_is_its_own_work() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        let cells = HashMap::new();
        (1..=3).for_each(|t| chain.join(t));
        chain.push(&cycle(1, 0, 0, 100_000, Some(0)), true, &cells);
        // Two clients woken together: the second waits 700 µs while the
        // first runs, then runs 600 µs itself.
        chain.push(&cycle(2, 110_000, 0, 700_000, None), false, &cells);
        let mut second = cycle(3, 110_000, 700_000, 600_000, None);
        second.waits[0].holder.pid = 2;
        chain.push(&second, false, &cells);
        let misses = chain.finish();
        assert_eq!(misses.len(), 1);
        let m = &misses[0];
        assert_eq!(m.cause, Cause::OwnWork);
        assert!(!m.parts_us.contains_key(&Cause::WaitedForCpu), "{m:?}");
        assert_eq!(m.parts_us[&Cause::OwnWork], 100.0 + 700.0 + 700.0 + 600.0);
        assert!(m.holders.is_empty());
    }

    #[test]
    fn windows_are_judged_only_after_their_grace() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        assert!(period(&mut chain, 0, 900_000).is_empty());
        assert_eq!(chain.windows.len(), 1);
        let grace = (GRACE_PERIODS * PERIOD).max(GRACE_NS);
        let mut misses = vec![];
        let mut k = 1;
        while misses.is_empty() {
            misses = period(&mut chain, k * PERIOD, 0);
            k += 1;
        }
        assert!(k * PERIOD >= PERIOD + grace, "judged at {k} periods");
        assert_eq!(misses[0].release_ns, 0);
    }

    /// A period whose driver is woken back after its client (PipeWire's
    /// driver, as each client finishes): the client waits `waited` first.
    fn period_with_return(chain: &mut Chain, release: u64, timer: bool, waited: u64) -> Vec<Miss> {
        let cells = HashMap::new();
        let timer = timer.then_some(release);
        let mut misses = chain.push(&cycle(1, release, 0, 100_000, timer), true, &cells);
        let client = cycle(2, release + 110_000, waited, 300_000, None);
        let back = client.end_ns + 10_000;
        misses.extend(chain.push(&client, false, &cells));
        misses.extend(chain.push(&cycle(1, back, 0, 50_000, None), true, &cells));
        misses
    }

    #[test]
    fn a_driver_woken_back_by_its_graph_opens_no_period() {
        // Due 800 µs into a 1 ms period: the return comes after half of it.
        let mut chain = Chain::new(800_000, Some(PERIOD), CLOCK);
        let mut misses = vec![];
        for k in 0..50 {
            let waited = if k == 7 { 500_000 } else { 0 };
            misses.extend(period_with_return(&mut chain, k * PERIOD, true, waited));
        }
        misses.extend(chain.finish());
        assert_eq!(misses.len(), 1, "{misses:?}");
        let m = &misses[0];
        assert_eq!((m.release_ns, m.cause), (7 * PERIOD, Cause::WaitedForCpu));
        assert_eq!(m.response_us, 970.0, "the driver's return ended it");
        assert_eq!(m.late_threads, 1, "the client, not the driver's return");
    }

    #[test]
    fn a_driver_without_timers_is_released_half_a_period_after_the_last() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        for k in 0..10 {
            period_with_return(&mut chain, k * PERIOD, false, 0);
        }
        let releases: Vec<u64> = chain.windows.iter().map(|w| w.release_ns).collect();
        assert_eq!(releases, (0..10).map(|k| k * PERIOD).collect::<Vec<_>>());
    }

    #[test]
    fn a_release_not_seen_is_implied_on_the_grid() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        let cells = HashMap::new();
        let mut misses = vec![];
        for k in 0..20 {
            let release = k * PERIOD;
            // The driver's cycles of periods 5 and 6 were lost; in 6 it
            // came late, after its client.
            if k != 5 && k != 6 {
                misses.extend(chain.push(
                    &cycle(1, release, 0, 100_000, Some(release)),
                    true,
                    &cells,
                ));
            }
            misses.extend(chain.push(
                &cycle(2, release + 110_000, 0, 300_000, None),
                false,
                &cells,
            ));
            if k == 6 {
                misses.extend(chain.push(
                    &cycle(1, release, 500_000, 100_000, Some(release)),
                    true,
                    &cells,
                ));
            }
        }
        misses.extend(chain.finish());
        assert!(misses.is_empty(), "{misses:?}");
    }

    #[test]
    fn a_late_periods_tail_woken_after_the_next_release_is_its_own() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        (1..=3).for_each(|t| chain.join(t));
        let cells = HashMap::new();
        let by = |mut c: Cycle, waker: i32| {
            c.woken_by = Some(waker);
            c
        };
        let mut misses = vec![];
        for k in 0..20 {
            let release = k * PERIOD;
            // In period 3 the first client waits 800 µs: the second is woken
            // (by it) after period 4's release, and ends in period 4.
            let waited = if k == 3 { 800_000 } else { 0 };
            let first = by(cycle(2, release + 110_000, waited, 300_000, None), 1);
            let second = by(cycle(3, first.end_ns, 0, 300_000, None), 2);
            let driver = |r: u64| cycle(1, r, 0, 200_000, Some(r));
            if k != 4 {
                misses.extend(chain.push(&driver(release), true, &cells));
            }
            misses.extend(chain.push(&first, false, &cells));
            if k == 3 {
                // Period 4's driver runs before the tail.
                misses.extend(chain.push(&driver(release + PERIOD), true, &cells));
            }
            misses.extend(chain.push(&second, false, &cells));
        }
        misses.extend(chain.finish());
        assert_eq!(misses.len(), 1, "{misses:?}");
        let m = &misses[0];
        assert_eq!((m.release_ns, m.tid), (3 * PERIOD, 3));
        assert_eq!(m.response_us, 1510.0);
        assert_eq!(m.late_threads, 2, "both clients ended past 1 ms");
    }

    #[test]
    fn a_member_before_the_first_driver_cycle_is_left_out() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        let cells = HashMap::new();
        assert!(chain
            .push(&cycle(2, 0, 0, 5 * PERIOD, None), false, &cells)
            .is_empty());
        assert!(chain.finish().is_empty());
    }

    #[test]
    fn lost_records_make_the_whole_response_unknown() {
        let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
        let cells = HashMap::new();
        chain.push(&cycle(1, 0, 0, 100_000, Some(0)), true, &cells);
        let mut lost = cycle(2, 200_000, 0, 2_000_000, None);
        lost.records_lost = true;
        chain.push(&lost, false, &cells);
        let misses = chain.finish();
        assert_eq!(misses.len(), 1);
        assert!(misses[0].records_lost);
        assert_eq!(
            misses[0].parts_us.keys().collect::<Vec<_>>(),
            [&Cause::Unknown]
        );
    }

    proptest! {
        /// The coverage of spans never exceeds the window nor their sum,
        /// and is the window when one span covers it.
        #[test]
        fn coverage_counts_each_instant_once(
            spans in proptest::collection::vec((0u64..10_000, 0u64..5_000), 0..8),
            from in 0u64..5_000,
            len in 0u64..10_000,
        ) {
            let spans: Vec<(u64, u64)> = spans.into_iter().map(|(s, l)| (s, s + l)).collect();
            let to = from + len;
            let c = covered(&spans, from, to);
            prop_assert!(c <= len);
            prop_assert!(c <= spans.iter().map(|(s, e)| e - s).sum::<u64>());
            let mut whole = spans.clone();
            whole.push((from, to));
            prop_assert_eq!(covered(&whole, from, to), len);
        }

        /// A window is late exactly when a cycle in it ended past the
        /// deadline, and judged once.
        #[test]
        fn each_late_period_is_one_miss(waits in proptest::collection::vec(0u64..900_000, 1..60)) {
            let mut chain = Chain::new(PERIOD, Some(PERIOD), CLOCK);
            let mut misses = vec![];
            for (k, &w) in waits.iter().enumerate() {
                misses.extend(period(&mut chain, k as u64 * 2 * PERIOD, w));
            }
            misses.extend(chain.finish());
            let late = waits.iter().filter(|&&w| 420_000 + w + 300_000 > PERIOD).count();
            prop_assert_eq!(misses.len(), late);
        }
    }
}
