//! A workgroup's budgets from exact per-cycle samples: the members of a
//! workgroup (the threads of one audio cycle: a callback and its workers)
//! share one deadline per cycle, each member marks its cycle and reports
//! the CPU time it used in it, and this controller turns those samples into
//! the budget each member needs — the AQuoSA feedback of [`Adaptive`], one
//! controller per member, fed one sample per cycle instead of a mean over
//! an observation interval.
//!
//! It owns the per-member arithmetic and the counts: per member the cycles
//! seen, the overruns (a cycle that used more CPU than the member's budget
//! per cycle) and the misses (a cycle that finished after its deadline).
//! Each member holds a budget of its own (mainline SCHED_DEADLINE gives
//! each member its own reservation, and the broker a budget per
//! reservation): a host's callback, which wakes and waits for its workers,
//! uses more than a worker, and one budget for all, the largest member's,
//! reserved the difference in every worker. It must never measure, sleep
//! or call the broker: the caller (libtessera's control thread) feeds it
//! samples, asks it what to request and tells it what admission granted.
//!
//! Invariants (property-tested, with the guard's parameters and with
//! [`per_cycle_config`], libtessera's): every budget it asks for lies
//! within the members' bounds; a member's budget covers its predicted
//! cycle with the increment, up to the maximum; an overrun or a miss is
//! counted once per cycle that had it and never otherwise; a cycle period
//! that changes moves every member's reservation period with it. And
//! (unit-tested): a member admission capped is asked for again only when
//! it wants more than it was refused, or after the caller's retry.

use crate::adaptive::{Adaptive, AdaptiveConfig, PredictorConfig, PredictorKind};
use crate::cell::{Budget, RequestError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The parameters libtessera's control thread gives this controller:
/// AQuoSA's, starting at 20 % of the period, predicting from the 95th
/// percentile of the last 64 cycles. With a sample a cycle, the largest of
/// the last 16 (the guard's predictor, fed
/// means over 100 ms) follows every spike — a vCPU the host held counts as
/// the member's CPU time — and the cell's one budget, the largest
/// member's, sat at 1.2 × spikes of 1.5–1.9 × the cycle's work; the
/// percentile ignores three spikes a window and follows a step within
/// four cycles, sooner when the step makes a member miss (the bump).
/// A 10 % increment instead of 20 % gave reserved ÷ p99 demand 1.18
/// instead of 1.26 in `tessera bench workgroup`, and up to 3 missed
/// cycles a step instead of 1.
pub fn per_cycle_config() -> AdaptiveConfig {
    AdaptiveConfig {
        initial_budget_pct: 20,
        predictor: PredictorConfig {
            kind: PredictorKind::Percentile(95),
            window: 64,
        },
        ..AdaptiveConfig::default()
    }
}

/// A new workgroup's period until its members mark their cycles.
pub const OPENING_PERIOD_NS: u64 = 10_000_000;
/// What a new workgroup's members hold together until their cycles are
/// measured, at most, % of a CPU: ten JACK clients of 20 % each did not
/// fit on two cores beside their server.
const OPENING_TOTAL_PCT: u32 = 50;

/// Each member's opening budget in a workgroup for `capacity` members
/// (every place is admitted at its opening budget), % of
/// [`OPENING_PERIOD_NS`]: the per-cycle controller's initial budget, less
/// when `capacity` members would hold more than 50 % of a CPU together;
/// never below 1 %. A member with less than its work is throttled until
/// its controller has samples: a guard's workgroup opened at 2 % had a
/// 10 % JACK load miss 100 of its first 830 cycles, at 20 % none of 844.
pub fn opening_pct(capacity: usize) -> u32 {
    let share = OPENING_TOTAL_PCT / u32::try_from(capacity.max(1)).unwrap_or(u32::MAX);
    per_cycle_config().initial_budget_pct.min(share).max(1)
}

/// A member, as its caller names it (libtessera uses the thread id).
pub type MemberId = i32;

/// One member's cycle, measured exactly by the member itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleSample {
    /// The member's CPU time in the cycle (CLOCK_THREAD_CPUTIME_ID).
    pub cpu_ns: u64,
    /// The cycle's period: its deadline less its start.
    pub period_ns: u64,
    /// The member finished after the cycle's deadline.
    pub late: bool,
}

/// One member's counts and budget, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    pub member: MemberId,
    pub cycles: u64,
    pub overruns: u64,
    pub misses: u64,
    /// The last cycle's CPU time.
    pub last_cpu_ns: Option<u64>,
    /// What this member's load needs, per reservation period.
    pub wanted: Budget,
    /// What admission granted it, once it did.
    pub budget: Option<Budget>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    adaptive: Adaptive,
    cycles: u64,
    overruns: u64,
    misses: u64,
    last_cpu_ns: Option<u64>,
    granted: Option<Budget>,
    /// What it wanted when admission last capped it: asking again for no
    /// more than this changes nothing until the room changes.
    capped_at: Option<Budget>,
}

impl Member {
    /// Its granted runtime per cycle (a reservation period spans
    /// `fragments` cycles of `period_ns`).
    fn budget_per_cycle(&self, period_ns: u64) -> Option<u64> {
        let g = self.granted?;
        let fragments = g.period_ns / period_ns.max(1);
        Some(g.runtime_ns / fragments.max(1))
    }

    /// Whether the budget it holds must change: none yet, another period,
    /// short of its [`Adaptive::needed`] (its predicted cycle with half
    /// the increment, or a bump), or over what it wants by more than the
    /// hysteresis.
    fn must_change(&self, hysteresis_pct: u32) -> bool {
        let target = self.adaptive.wanted();
        let Some(held) = self.granted.filter(|h| h.period_ns == target.period_ns) else {
            return true;
        };
        let band = held.runtime_ns * u64::from(hysteresis_pct) / 100;
        (held.runtime_ns < self.adaptive.needed() && !self.refused_already(target))
            || held.runtime_ns > target.runtime_ns.saturating_add(band)
    }

    /// Whether admission capped this member when it wanted `target` or
    /// more, at the same period.
    fn refused_already(&self, target: Budget) -> bool {
        self.capped_at
            .is_some_and(|c| c.period_ns == target.period_ns && c.runtime_ns >= target.runtime_ns)
    }
}

/// The per-cycle controller of one workgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkgroupControl {
    config: AdaptiveConfig,
    period_ns: u64,
    members: BTreeMap<MemberId, Member>,
}

impl WorkgroupControl {
    /// A controller for cycles of `period_ns`, before any member joined.
    pub fn new(config: AdaptiveConfig, period_ns: u64) -> Result<WorkgroupControl, RequestError> {
        // Validates the config and the period once, as a member would.
        Adaptive::new(config, period_ns)?;
        Ok(WorkgroupControl {
            config,
            period_ns,
            members: BTreeMap::new(),
        })
    }

    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// A member joined: its controller starts at the initial budget, and
    /// the others' are bumped (AQuoSA's bump on a new client: the cycle's
    /// load is unknown until their windows refill).
    pub fn join(&mut self, member: MemberId) {
        if self.members.contains_key(&member) {
            return;
        }
        for m in self.members.values_mut() {
            m.adaptive.on_join();
        }
        let adaptive = Adaptive::new(self.config, self.period_ns)
            .expect("the config and period were validated by new or set_period");
        self.members.insert(
            member,
            Member {
                adaptive,
                cycles: 0,
                overruns: 0,
                misses: 0,
                last_cpu_ns: None,
                granted: None,
                capped_at: None,
            },
        );
    }

    /// A member left; its counts go with it (take a report first).
    pub fn leave(&mut self, member: MemberId) {
        self.members.remove(&member);
    }

    /// The cycle's period changed (a new buffer size, or a deadline that
    /// moved): every member's reservation period follows.
    pub fn set_period(&mut self, period_ns: u64) -> Result<(), RequestError> {
        for m in self.members.values_mut() {
            m.adaptive.set_audio_period(period_ns)?;
        }
        self.period_ns = period_ns;
        Ok(())
    }

    /// One member's cycle. Unknown members are ignored (a sample that
    /// arrives after its member left). A sample of another period moves
    /// the workgroup to that period first. A miss in which the member
    /// overran its budget (or before any was granted) bumps the member's
    /// budget as an xrun does; a member late with budget to spare was held
    /// up elsewhere — a cycle that started late, a member before it, a
    /// thread outside the workgroup — and more budget would not have made
    /// it on time, only taken admission room from the threads that might
    /// (in a chain near a full core, bumping every late member raised each
    /// budget 20 % a miss until the guard's own threads were degraded).
    pub fn observe(&mut self, member: MemberId, sample: CycleSample) -> Result<(), RequestError> {
        if sample.period_ns != self.period_ns && self.members.contains_key(&member) {
            self.set_period(sample.period_ns)?;
        }
        let period_ns = self.period_ns;
        let Some(m) = self.members.get_mut(&member) else {
            return Ok(());
        };
        let per_cycle = m.budget_per_cycle(period_ns);
        m.cycles += 1;
        m.last_cpu_ns = Some(sample.cpu_ns);
        let overran = per_cycle.is_some_and(|b| sample.cpu_ns > b);
        if overran {
            m.overruns += 1;
        }
        m.adaptive.observe(sample.cpu_ns, 1);
        if sample.late {
            m.misses += 1;
            if overran || per_cycle.is_none() {
                m.adaptive.on_xrun();
            }
        }
        Ok(())
    }

    /// What member `member`'s load needs.
    pub fn wanted(&self, member: MemberId) -> Option<Budget> {
        Some(self.members.get(&member)?.adaptive.wanted())
    }

    /// Every member's budget to ask admission for, if one must change
    /// (none yet, short, or well over: [`Member::must_change`]): those
    /// that must, what they want; the others, what they hold. Between
    /// short and well over a budget stays: fed a sample a cycle, a
    /// member's prediction moves up and down every few cycles, and
    /// following each move had the broker retune the members several times
    /// a second (§4.5's chain, near a full period, lost cycles to the
    /// hand-offs those retunes delayed).
    pub fn update(&self) -> Option<Vec<(MemberId, Budget)>> {
        let hysteresis = self.config.hysteresis_pct;
        if !self.members.values().any(|m| m.must_change(hysteresis)) {
            return None;
        }
        let budget = |m: &Member| match m.granted {
            Some(held) if !m.must_change(hysteresis) => held,
            _ => m.adaptive.wanted(),
        };
        Some(
            self.members
                .iter()
                .map(|(&id, m)| (id, budget(m)))
                .collect(),
        )
    }

    /// Records what admission gave each member named (the others keep
    /// theirs; one no longer a member is ignored). A member admission
    /// gave less than it needs is not asked for again until it wants more
    /// than it did, or [`WorkgroupControl::retry_capped`]: on a full core
    /// every cycle that overran asked again, and the broker capped each ask
    /// alike (§4.5's ten members on one core: 380 asks a second).
    pub fn granted(&mut self, budgets: &[(MemberId, Budget)], degraded: bool) {
        for &(id, budget) in budgets {
            if let Some(m) = self.members.get_mut(&id) {
                let short = budget.runtime_ns < m.adaptive.needed();
                m.capped_at = (degraded && short).then(|| m.adaptive.wanted());
                m.granted = Some(budget);
                m.adaptive.granted(budget, degraded);
            }
        }
    }

    /// Whether admission capped any member at its last ask.
    pub fn any_capped(&self) -> bool {
        self.members.values().any(|m| m.capped_at.is_some())
    }

    /// Forgets every cap: the room may have grown (another cell shrank or
    /// left), so capped members ask again at the next update.
    pub fn retry_capped(&mut self) {
        for m in self.members.values_mut() {
            m.capped_at = None;
        }
    }

    /// What admission gave member `member`.
    pub fn granted_budget(&self, member: MemberId) -> Option<Budget> {
        self.members.get(&member)?.granted
    }

    pub fn report(&self) -> Vec<MemberReport> {
        self.members
            .iter()
            .map(|(&member, m)| MemberReport {
                member,
                cycles: m.cycles,
                overruns: m.overruns,
                misses: m.misses,
                last_cpu_ns: m.last_cpu_ns,
                wanted: m.adaptive.wanted(),
                budget: m.granted,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PERIOD: u64 = 2_666_666;

    #[test]
    fn many_members_open_with_a_share_that_fits_together() {
        assert_eq!(opening_pct(1), 20);
        assert_eq!(opening_pct(4), 12);
        assert_eq!(opening_pct(10), 5);
        assert_eq!(opening_pct(64), 1);
        assert!((1..=50).all(|n| opening_pct(n) as usize * n <= 50));
    }

    fn sample(cpu_ns: u64, late: bool) -> CycleSample {
        CycleSample {
            cpu_ns,
            period_ns: PERIOD,
            late,
        }
    }

    fn control() -> WorkgroupControl {
        WorkgroupControl::new(AdaptiveConfig::default(), PERIOD).unwrap()
    }

    /// The controller as libtessera runs it.
    fn shipped() -> WorkgroupControl {
        WorkgroupControl::new(per_cycle_config(), PERIOD).unwrap()
    }

    /// Asks for what `update` says and is granted all of it.
    fn settle(wg: &mut WorkgroupControl) {
        if let Some(next) = wg.update() {
            wg.granted(&next, false);
        }
    }

    #[test]
    fn each_member_gets_the_budget_of_its_own_work_and_follows_its_step() {
        let mut wg = control();
        wg.join(1);
        wg.join(2);
        for _ in 0..20 {
            wg.observe(1, sample(800_000, false)).unwrap();
            wg.observe(2, sample(300_000, false)).unwrap();
        }
        settle(&mut wg);
        // Max predictor, 20 % increment, one fragment.
        assert_eq!(wg.granted_budget(1), Some(Budget::new(960_000, PERIOD)));
        assert_eq!(wg.granted_budget(2), Some(Budget::new(360_000, PERIOD)));
        for _ in 0..16 {
            wg.observe(1, sample(1_600_000, false)).unwrap();
        }
        let next = wg.update().unwrap();
        assert_eq!(
            next,
            [
                (1, Budget::new(1_920_000, PERIOD)),
                (2, Budget::new(360_000, PERIOD))
            ],
            "the member that stepped grows; the other keeps what it holds"
        );
    }

    #[test]
    fn overruns_and_misses_are_counted_per_member() {
        let mut wg = control();
        wg.join(7);
        wg.join(8);
        let budget = Budget::new(1_000_000, PERIOD);
        wg.granted(&[(7, budget), (8, budget)], false);
        wg.observe(7, sample(1_200_000, true)).unwrap();
        wg.observe(7, sample(900_000, false)).unwrap();
        wg.observe(8, sample(500_000, true)).unwrap();
        let r = wg.report();
        assert_eq!(
            (r[0].member, r[0].overruns, r[0].misses, r[0].cycles),
            (7, 1, 1, 2)
        );
        assert_eq!(
            (r[1].member, r[1].overruns, r[1].misses, r[1].cycles),
            (8, 0, 1, 1)
        );
    }

    #[test]
    fn only_a_miss_that_overran_its_budget_bumps_it() {
        let mut wg = control();
        wg.join(1);
        for _ in 0..16 {
            wg.observe(1, sample(500_000, false)).unwrap();
        }
        let steady = wg.wanted(1).unwrap();
        wg.granted(&[(1, steady)], false);
        // Late with budget to spare: held up elsewhere, nothing to bump.
        wg.observe(1, sample(500_000, true)).unwrap();
        assert_eq!(wg.wanted(1), Some(steady));
        // Late after using more than its budget: bumped 20 % over what
        // that cycle alone asks.
        let over = steady.runtime_ns + 1;
        wg.observe(1, sample(over, true)).unwrap();
        assert_eq!(
            wg.wanted(1).unwrap().runtime_ns,
            over * 120 / 100 * 120 / 100
        );
        assert_eq!(wg.report()[0].misses, 2);
    }

    #[test]
    fn a_capped_member_asks_again_only_for_more_or_after_a_retry() {
        let mut wg = control();
        wg.join(1);
        for _ in 0..16 {
            wg.observe(1, sample(500_000, false)).unwrap();
        }
        let wanted = wg.wanted(1).unwrap();
        let cap = Budget::new(400_000, PERIOD);
        wg.granted(&[(1, cap)], true);
        assert!(wg.any_capped());
        assert_eq!(wg.update(), None, "the same ask would be capped alike");
        wg.observe(1, sample(500_000, false)).unwrap();
        assert_eq!(wg.update(), None, "nor after a cycle like the others");
        wg.retry_capped();
        assert_eq!(
            wg.update(),
            Some(vec![(1, wanted)]),
            "the room may have grown"
        );
        wg.granted(&[(1, cap)], true);
        // Late after overrunning the cap: the bump wants more than was refused.
        wg.observe(1, sample(450_000, true)).unwrap();
        let bumped = wg.update().unwrap()[0].1;
        assert!(bumped.runtime_ns > wanted.runtime_ns, "{bumped:?}");
        wg.granted(&[(1, bumped)], false);
        assert!(!wg.any_capped(), "granted in full");
    }

    #[test]
    fn a_new_period_moves_every_reservation() {
        let mut wg = control();
        wg.join(1);
        let short = CycleSample {
            cpu_ns: 100_000,
            period_ns: 666_666,
            late: false,
        };
        wg.observe(1, short).unwrap();
        assert_eq!(wg.period_ns(), 666_666);
        // Two cycles per enforceable reservation period.
        assert_eq!(wg.wanted(1).unwrap().period_ns, 1_333_332);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn budgets_stay_in_bounds_and_cover_the_prediction(
            cycles in proptest::collection::vec((1u8..4, 0u64..3_000_000, any::<bool>()), 1..80),
        ) {
            let mut wg = control();
            let bounds = Adaptive::new(AdaptiveConfig::default(), PERIOD).unwrap().bounds();
            for (member, cpu, late) in cycles {
                let member = member as MemberId;
                wg.join(member);
                wg.observe(member, sample(cpu, late)).unwrap();
                let b = wg.wanted(member).unwrap();
                prop_assert!(b.runtime_ns >= bounds.0 && b.runtime_ns <= bounds.1, "{b:?} outside {bounds:?}");
                prop_assert!(b.runtime_ns >= (cpu * 120 / 100).min(bounds.1), "{b:?} below cycle {cpu}");
                settle(&mut wg);
                for r in wg.report() {
                    let held = r.budget.unwrap();
                    prop_assert!(held.runtime_ns >= bounds.0 && held.runtime_ns <= bounds.1, "member {}: {held:?}", r.member);
                }
            }
        }

        #[test]
        fn each_overrun_and_miss_is_counted_once(
            budget in 50_000u64..2_000_000,
            cycles in proptest::collection::vec((0u64..3_000_000, any::<bool>()), 0..60),
        ) {
            let mut wg = control();
            wg.join(1);
            wg.granted(&[(1, Budget::new(budget, PERIOD))], false);
            for &(cpu, late) in &cycles {
                wg.observe(1, sample(cpu, late)).unwrap();
            }
            let r = wg.report()[0];
            prop_assert_eq!(r.cycles, cycles.len() as u64);
            prop_assert_eq!(r.overruns, cycles.iter().filter(|(c, _)| *c > budget).count() as u64);
            prop_assert_eq!(r.misses, cycles.iter().filter(|(_, l)| *l).count() as u64);
        }

        #[test]
        fn a_steady_load_converges_within_the_window(cpu in 100_000u64..2_000_000) {
            let mut wg = control();
            wg.join(1);
            let window = AdaptiveConfig::default().predictor.window;
            for _ in 0..window {
                wg.observe(1, sample(cpu, false)).unwrap();
                settle(&mut wg);
            }
            let bounds = Adaptive::new(AdaptiveConfig::default(), PERIOD).unwrap().bounds();
            let expected = (cpu * 120 / 100).clamp(bounds.0, bounds.1);
            // Within the hysteresis band of what the load needs, and settled.
            let held = wg.granted_budget(1).unwrap().runtime_ns;
            prop_assert!(held.abs_diff(expected) <= held * 5 / 100, "{held} vs {expected}");
            prop_assert_eq!(wg.update(), None);
        }

        #[test]
        fn the_shipped_config_stays_in_bounds_and_counts_each_overrun_and_miss_once(
            cycles in proptest::collection::vec((1u8..4, 0u64..3_000_000, any::<bool>()), 1..160),
        ) {
            let mut wg = shipped();
            let bounds = Adaptive::new(per_cycle_config(), PERIOD).unwrap().bounds();
            let mut seen: BTreeMap<MemberId, (u64, u64)> = BTreeMap::new();
            for (member, cpu, late) in cycles {
                let member = member as MemberId;
                wg.join(member);
                wg.observe(member, sample(cpu, late)).unwrap();
                let count = seen.entry(member).or_default();
                count.0 += 1;
                count.1 += u64::from(late);
                let b = wg.wanted(member).unwrap();
                prop_assert!(b.runtime_ns >= bounds.0 && b.runtime_ns <= bounds.1, "{b:?} outside {bounds:?}");
                settle(&mut wg);
            }
            for r in wg.report() {
                prop_assert_eq!((r.cycles, r.misses), seen[&r.member]);
            }
        }

        #[test]
        fn the_shipped_config_converges_on_a_steady_load_within_its_window(
            cpu in 100_000u64..2_000_000,
        ) {
            let mut wg = shipped();
            wg.join(1);
            for _ in 0..per_cycle_config().predictor.window {
                wg.observe(1, sample(cpu, false)).unwrap();
                settle(&mut wg);
            }
            let bounds = Adaptive::new(per_cycle_config(), PERIOD).unwrap().bounds();
            let expected = (cpu * 120 / 100).clamp(bounds.0, bounds.1);
            let held = wg.granted_budget(1).unwrap().runtime_ns;
            prop_assert!(held.abs_diff(expected) <= held * 5 / 100, "{held} vs {expected}");
            prop_assert_eq!(wg.update(), None);
        }

        #[test]
        fn a_members_budget_moves_only_with_its_own_cycles(
            steady in 100_000u64..1_000_000,
            cpus in proptest::collection::vec((0u64..2_500_000, any::<bool>()), 1..80),
        ) {
            let mut wg = control();
            wg.join(1);
            wg.join(2);
            for _ in 0..64 {
                wg.observe(2, sample(steady, false)).unwrap();
            }
            settle(&mut wg);
            let held = wg.granted_budget(2);
            for (cpu, late) in cpus {
                wg.observe(1, sample(cpu, late)).unwrap();
                if let Some(next) = wg.update() {
                    prop_assert_eq!(Some(next[1]), held.map(|b| (2, b)));
                    wg.granted(&next, false);
                }
            }
        }

        #[test]
        fn a_held_budget_changes_only_when_short_or_well_over(
            cpus in proptest::collection::vec(100_000u64..1_000_000, 16),
            held in 50_000u64..2_000_000,
        ) {
            let mut wg = control();
            wg.join(1);
            for &cpu in &cpus {
                wg.observe(1, sample(cpu, false)).unwrap();
            }
            wg.granted(&[(1, Budget::new(held, PERIOD))], false);
            let bounds = Adaptive::new(AdaptiveConfig::default(), PERIOD).unwrap().bounds();
            let largest = *cpus.iter().max().unwrap();
            let needed = (largest * 110 / 100).clamp(bounds.0, bounds.1);
            let wanted = (largest * 120 / 100).clamp(bounds.0, bounds.1);
            let update = wg.update().map(|next| next[0].1);
            if held < needed {
                prop_assert_eq!(update.map(|b| b.runtime_ns), Some(wanted), "short: grows to what is wanted");
            } else if held > wanted + held * 5 / 100 {
                prop_assert_eq!(update.map(|b| b.runtime_ns), Some(wanted), "well over: shrinks");
            } else {
                prop_assert_eq!(update, None, "held {} within [{}, {}]", held, needed, wanted);
            }
        }
    }
}
