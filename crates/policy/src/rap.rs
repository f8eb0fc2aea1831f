//! The first-level adaptation policy of the RAP service (seed 000 §2.3):
//! at a coarse time scale (every [`RapConfig::interval_ms`]) the broker shows
//! it every bandwidth cell as it saw it over the last interval
//! ([`CellView`]: budget, use, misses) and the bandwidth they share; it
//! answers with the budgets to change ([`plan`]), each with its reason
//! ([`Change`]), so that every application keeps meeting its requirements
//! while no cell holds much more than it uses.
//!
//! It owns that decision. It must never measure, read a clock, sleep, call
//! the broker or admission, or touch what the performer pinned: the broker
//! gathers the views, runs [`plan`], and applies the changes one by one
//! through admission (shrinks first, so every prefix of the plan fits).
//!
//! The method, per cell (runtime per reservation; period and deadline
//! never change):
//!
//! - **Never changed**: a pinned cell (the broker passes as pinned also the
//!   cells whose owner adapts them, e.g. the guard's), and a cell with no
//!   measured thread (`used_ns` is `None`).
//! - **Grow**: it had demand, i.e. used at least [`DEMAND_PCT`] % of its
//!   runtime — whether it missed already ([`Reason::Missed`]) or not yet
//!   ([`Reason::Pressed`]: a step up in demand is met before it costs
//!   misses): it wants max(runtime × (100 + `grow_pct`) / 100, used × (100 +
//!   `headroom_pct`) / 100). A cell that missed without using its budget
//!   missed for another reason than CPU, and more runtime would not help: it
//!   is left as it is.
//! - **Shrink**: no miss, `calm` ≥ `patience` intervals since its last change
//!   or miss, and used < `shrink_below_pct` % of its runtime: it wants
//!   max(used × (100 + `headroom_pct`) / 100, `floor_ns`, [`MIN_RUNTIME_NS`]).
//! - **Bounds**: a grown runtime is at most `max_share_pct` % of the period
//!   and at most the deadline (runtime ≤ deadline stays true); a shrunk one
//!   is at least max(`floor_ns`, [`MIN_RUNTIME_NS`]). A grow never lowers a
//!   runtime and a shrink never raises one (a cell already above the cap
//!   is not cut for being there, one below its floor not raised for it).
//!
//! **Capacity** is a [`Bandwidth`] (fixed point, the kernel's arithmetic),
//! not f64 cores: the sum over cells of runtime / period × reservations is
//! compared exactly as admission compares it, with no float drift, and a
//! bandwidth turned back into a runtime is truncated, so the plan's total
//! never rounds above what it was computed to be. When the cells' wanted
//! bandwidth exceeds the capacity, the split decides ([`Reason::Contested`]):
//!
//! - pinned and unmeasured cells keep theirs;
//! - every other cell keeps its floor: max(`floor_ns`, [`MIN_RUNTIME_NS`]),
//!   or what it wants or holds if that is less (a cell already below its
//!   floor is guaranteed what it holds, not raised to its floor);
//! - the rest is water-filled by weight: there is one level λ and a cell
//!   gets its weight × λ of bandwidth, but not less than its floor and not
//!   more than it wants; λ is the largest level at which the total fits. A
//!   cell that wants less than its weighted share gets what it wants, and
//!   what it leaves is shared by the others by weight. A cell of weight 0
//!   gets only its floor under contention.
//!
//! If the pinned and unmeasured cells and the floors alone exceed the
//! capacity (the capacity shrank under the obligations admitted), no plan
//! fits: then every other cell goes to that floor — nothing grows, nothing
//! that can give back keeps more than its floor — and the total ends up as
//! close to the capacity as the obligations allow, but above it.
//!
//! **No oscillation.** With a constant load every cell reaches a fixed
//! point: a shrink target depends on the use only, so a shrunk cell is not
//! shrunk again, and [`RapConfig::validate`] refuses the configurations in
//! which a shrunk cell would look as if it had demand (used / target ≥
//! [`DEMAND_PCT`] %: the next miss would grow it back) or would be underused
//! again at once (used / target < `shrink_below_pct` %).
//!
//! A time-triggered window has its deadline equal to its runtime; since the
//! deadline never changes here, such a cell cannot be resized by this policy
//! and the broker passes it pinned (or leaves it out).
//!
//! `enabled` and `interval_ms` are the broker's: [`plan`] does not read them.

use crate::bandwidth::Bandwidth;
use crate::cell::{fmt_us, Budget, MIN_RUNTIME_NS};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A cell that missed "had demand" when it used at least this % of its
/// runtime in one period: it was short of CPU, and growing it helps.
pub const DEMAND_PCT: u32 = 90;

/// How the policy adapts; lives in the daemon's config file
/// (`[adaptation]` table), so every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RapConfig {
    /// Whether the broker runs the policy at all (off by default).
    pub enabled: bool,
    /// How often the broker runs the policy, in milliseconds.
    pub interval_ms: u64,
    /// Target runtime = used × (100 + headroom) / 100.
    pub headroom_pct: u32,
    /// A missing cell grows by at least this % of its runtime per step.
    pub grow_pct: u32,
    /// A cell whose use stays below this % of its runtime for `patience`
    /// intervals shrinks.
    pub shrink_below_pct: u32,
    /// Intervals of calm (no change, no miss) before shrinking.
    pub patience: u32,
    /// No reservation above this % of its period.
    pub max_share_pct: u32,
}

impl Default for RapConfig {
    fn default() -> RapConfig {
        RapConfig {
            enabled: false,
            interval_ms: 2000,
            headroom_pct: 25,
            grow_pct: 25,
            shrink_below_pct: 50,
            patience: 3,
            max_share_pct: 90,
        }
    }
}

/// The shortest interval worth adapting at: the RAP service works at a
/// coarse time scale, over many periods of every cell.
const MIN_INTERVAL_MS: u64 = 100;

impl RapConfig {
    /// Checks the ranges and refuses the configurations that would make a
    /// constant load oscillate; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval_ms < MIN_INTERVAL_MS {
            return Err(format!(
                "interval_ms: {} ms is too short for the RAP service to see a cell's use; \
                 give at least {MIN_INTERVAL_MS} (2000 is usual)",
                self.interval_ms
            ));
        }
        if !(1..=1000).contains(&self.grow_pct) {
            return Err(format!(
                "grow_pct: {} is outside 1–1000: a missing cell must grow by some % of its \
                 runtime; give 1 to 1000 (25 is usual)",
                self.grow_pct
            ));
        }
        if self.headroom_pct > 1000 {
            return Err(format!(
                "headroom_pct: {} is over 1000; give a % of the use (25 is usual)",
                self.headroom_pct
            ));
        }
        // A cell shrunk to used × (100 + h) / 100 uses 100 / (100 + h) of it:
        // that must stay below the demand threshold.
        if DEMAND_PCT as u64 * (100 + self.headroom_pct as u64) <= 10_000 {
            return Err(format!(
                "headroom_pct: {} % leaves a shrunk cell using {} % or more of its runtime, \
                 which counts as demand: its next miss grows it back and it oscillates; give \
                 at least {} (25 is usual)",
                self.headroom_pct,
                DEMAND_PCT,
                min_headroom_pct()
            ));
        }
        // ... and at or above the shrink threshold.
        if self.shrink_below_pct as u64 * (100 + self.headroom_pct as u64) > 10_000 {
            return Err(format!(
                "shrink_below_pct: {} % with headroom_pct {} % makes a shrunk cell underused \
                 at once; give at most {} (or raise headroom_pct no further than {})",
                self.shrink_below_pct,
                self.headroom_pct,
                10_000 / (100 + self.headroom_pct as u64),
                max_headroom_pct(self.shrink_below_pct),
            ));
        }
        if self.patience == 0 {
            return Err(
                "patience: 0 shrinks a cell the interval after it grew, before its \
                 use is known; give at least 1 (3 is usual)"
                    .into(),
            );
        }
        if !(1..=100).contains(&self.max_share_pct) {
            return Err(format!(
                "max_share_pct: {} is outside 1–100: a reservation holds at most its period; \
                 give 1 to 100 (90 is usual)",
                self.max_share_pct
            ));
        }
        Ok(())
    }
}

/// The smallest headroom with DEMAND_PCT × (100 + h) > 10000.
fn min_headroom_pct() -> u64 {
    10_000 / DEMAND_PCT as u64 + 1 - 100
}

/// The largest headroom with shrink × (100 + h) ≤ 10000 (for shrink > 0).
fn max_headroom_pct(shrink_below_pct: u32) -> String {
    match (10_000 / shrink_below_pct.max(1) as u64).checked_sub(100) {
        Some(h) => h.to_string(),
        None => "0 – lower shrink_below_pct".into(),
    }
}

/// One bandwidth cell as the broker sees it over the last interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellView {
    pub name: String,
    /// Per reservation (per thread slot).
    pub budget: Budget,
    /// How many reservations (threads) carry this budget; the cell's
    /// bandwidth is runtime / period × reservations.
    pub reservations: u32,
    /// Never changed (pinned by the performer, time-triggered, or adapted
    /// by its owner).
    pub pinned: bool,
    /// Share of contested capacity (100 by default).
    pub weight: u32,
    /// Runtime never taken below this (an admitted obligation; 0: none
    /// beyond [`MIN_RUNTIME_NS`]).
    pub floor_ns: u64,
    /// The largest CPU time one of its reservations used in one period
    /// during the interval; `None`: no thread measured (never changed).
    pub used_ns: Option<u64>,
    /// Deadline misses / xruns reported for the cell during the interval.
    pub misses: u64,
    /// Intervals since its last change or miss.
    pub calm: u32,
}

/// A budget to change, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub cell: String,
    pub from: Budget,
    pub to: Budget,
    pub reason: Reason,
}

/// Why a budget changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Reason {
    /// It missed and had demand: grown.
    Missed { misses: u64, used_ns: u64 },
    /// It did not miss yet but used nearly all it holds: grown before it
    /// does (a step up in demand is met within an interval).
    Pressed { used_ns: u64 },
    /// It used far less than it held for `calm` intervals: shrunk to use +
    /// headroom.
    Underused { used_ns: u64, calm: u32 },
    /// Demand exceeded capacity: its share by weight (it wanted
    /// `wanted_ns`).
    Contested { wanted_ns: u64, weight: u32 },
}

impl Change {
    /// Whether it gives bandwidth back (applied before the grows).
    pub fn is_shrink(&self) -> bool {
        self.to.runtime_ns < self.from.runtime_ns
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Missed { misses, used_ns } => {
                write!(f, "missed {misses}, used {}", fmt_us(*used_ns))
            }
            Reason::Pressed { used_ns } => {
                write!(f, "used {}: nearly all it held", fmt_us(*used_ns))
            }
            Reason::Underused { used_ns, calm } => {
                write!(f, "used {} for {calm} calm intervals", fmt_us(*used_ns))
            }
            Reason::Contested { wanted_ns, weight } => {
                write!(
                    f,
                    "contested: wanted {}, weight {weight}",
                    fmt_us(*wanted_ns)
                )
            }
        }
    }
}

impl fmt::Display for Change {
    /// One line a log can print: "cell synth: 300 µs → 400 µs every
    /// 1000 µs (missed 3, used 310 µs)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cell {}: {} → {} every {}",
            self.cell,
            fmt_us(self.from.runtime_ns),
            fmt_us(self.to.runtime_ns),
            fmt_us(self.to.period_ns)
        )?;
        if self.to.deadline_ns != self.to.period_ns {
            write!(f, ", deadline {}", fmt_us(self.to.deadline_ns))?;
        }
        write!(f, " ({})", self.reason)
    }
}

/// `value` × `pct` / 100, rounded down, without overflow.
fn pct_of(value: u64, pct: u32) -> u64 {
    (value as u128 * pct as u128 / 100).min(u64::MAX as u128) as u64
}

/// `value` × (100 + `pct`) / 100, rounded up, without overflow.
fn plus_pct(value: u64, pct: u32) -> u64 {
    (value as u128 * (100 + pct as u128))
        .div_ceil(100)
        .min(u64::MAX as u128) as u64
}

/// The cell's bandwidth at `runtime_ns` per reservation.
fn bandwidth(runtime_ns: u64, period_ns: u64, reservations: u32) -> Bandwidth {
    Bandwidth::of(runtime_ns, period_ns).times(reservations as u64)
}

/// Whether the policy may change this cell at all.
fn adjustable(cell: &CellView) -> bool {
    !cell.pinned && cell.used_ns.is_some()
}

/// The lowest runtime the policy gives: the floor, and the kernel's minimum.
fn lowest(cell: &CellView) -> u64 {
    cell.floor_ns.max(MIN_RUNTIME_NS)
}

/// The highest runtime a grow reaches: the share cap, the deadline, the period.
fn highest(cell: &CellView, config: &RapConfig) -> u64 {
    let b = &cell.budget;
    pct_of(b.period_ns, config.max_share_pct)
        .min(b.deadline_ns)
        .min(b.period_ns)
}

/// What one cell wants on its own, and the reason when it differs from what
/// it holds.
fn want(cell: &CellView, config: &RapConfig) -> (u64, Option<Reason>) {
    let current = cell.budget.runtime_ns;
    let Some(used) = cell.used_ns.filter(|_| !cell.pinned) else {
        return (current, None);
    };
    let had_demand = used as u128 * 100 >= current as u128 * DEMAND_PCT as u128;
    let underused = (used as u128 * 100) < current as u128 * config.shrink_below_pct as u128;
    let target = if cell.misses > 0 || had_demand {
        if !had_demand {
            return (current, None);
        }
        let grown = plus_pct(current, config.grow_pct).max(plus_pct(used, config.headroom_pct));
        grown.min(highest(cell, config)).max(current)
    } else if cell.calm >= config.patience && underused {
        let shrunk = plus_pct(used, config.headroom_pct).max(lowest(cell));
        shrunk.min(current)
    } else {
        current
    };
    let reason = match target.cmp(&current) {
        std::cmp::Ordering::Equal => None,
        std::cmp::Ordering::Greater if cell.misses > 0 => Some(Reason::Missed {
            misses: cell.misses,
            used_ns: used,
        }),
        std::cmp::Ordering::Greater => Some(Reason::Pressed { used_ns: used }),
        std::cmp::Ordering::Less => Some(Reason::Underused {
            used_ns: used,
            calm: cell.calm,
        }),
    };
    (target, reason)
}

/// One adjustable cell in the contested split.
struct Claim {
    want: u64,
    /// Never given less than this: min(floor, want, current).
    floor: u64,
    period: u64,
    reservations: u32,
    weight: u32,
}

/// Fractional bits of the water level: a weight of 1 at level 1 is worth
/// 2^-24 of a bandwidth unit, fine enough for weights up to 2^32, and the
/// level times a weight stays far below 2^128.
const LEVEL_SHIFT: u32 = 24;

impl Claim {
    /// The runtime this cell gets at water level `level`: its weighted
    /// share, between its floor and its want.
    fn runtime_at(&self, level: u128) -> u64 {
        if self.reservations == 0 {
            // Holds no bandwidth: it costs nothing to give what it wants.
            return self.want;
        }
        let share = level.saturating_mul(self.weight as u128) >> LEVEL_SHIFT;
        let per = (share / self.reservations as u128).min(u64::MAX as u128) as u64;
        let per = Bandwidth(per);
        let runtime = if per >= Bandwidth::of(self.want, self.period) {
            self.want
        } else {
            per.runtime_in(self.period)
        };
        runtime.clamp(self.floor, self.want)
    }

    fn bandwidth_at(&self, level: u128) -> Bandwidth {
        bandwidth(self.runtime_at(level), self.period, self.reservations)
    }
}

/// The runtimes of the contested split of `room` among `claims`: the
/// highest water level at which the total fits (the caller made sure the
/// floors fit).
fn water_fill(claims: &[Claim], room: Bandwidth) -> Vec<u64> {
    let total = |level: u128| -> Bandwidth { claims.iter().map(|c| c.bandwidth_at(level)).sum() };
    let wanted: Bandwidth = claims
        .iter()
        .map(|c| bandwidth(c.want, c.period, c.reservations))
        .sum();
    // At this level every cell of weight ≥ 1 gets its whole want.
    let (mut lo, mut hi) = (0u128, ((wanted.0 as u128) + 1) << LEVEL_SHIFT);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if total(mid) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    claims.iter().map(|c| c.runtime_at(lo)).collect()
}

/// The changes that adapt `cells` to their use within `capacity`, the
/// bandwidth available to all bandwidth cells together (pinned ones
/// included): shrinks first, then grows, each group in the order of
/// `cells`. See the module documentation for the rules.
pub fn plan(cells: &[CellView], capacity: Bandwidth, config: &RapConfig) -> Vec<Change> {
    let wants: Vec<(u64, Option<Reason>)> = cells.iter().map(|c| want(c, config)).collect();
    let fixed: Bandwidth = cells
        .iter()
        .filter(|c| !adjustable(c))
        .map(|c| bandwidth(c.budget.runtime_ns, c.budget.period_ns, c.reservations))
        .sum();
    let wanted: Bandwidth = cells
        .iter()
        .zip(&wants)
        .filter(|(c, _)| adjustable(c))
        .map(|(c, (w, _))| bandwidth(*w, c.budget.period_ns, c.reservations))
        .sum();
    let runtimes: Vec<u64> = if fixed + wanted <= capacity {
        wants.iter().map(|(w, _)| *w).collect()
    } else {
        contested(
            cells,
            &wants,
            capacity.saturating_sub(fixed),
            fixed <= capacity,
        )
    };
    let mut changes: Vec<Change> = cells
        .iter()
        .zip(wants)
        .zip(runtimes)
        .filter(|((c, _), runtime)| *runtime != c.budget.runtime_ns)
        .map(|((c, (wanted_ns, reason)), runtime)| Change {
            cell: c.name.clone(),
            from: c.budget,
            to: Budget {
                runtime_ns: runtime,
                ..c.budget
            },
            reason: match reason {
                Some(r) if runtime == wanted_ns => r,
                _ => Reason::Contested {
                    wanted_ns,
                    weight: c.weight,
                },
            },
        })
        .collect();
    // Stable: shrinks keep their order, then grows keep theirs.
    changes.sort_by_key(|c| !c.is_shrink());
    changes
}

/// The runtimes when the adjustable cells' wants exceed `room`, the
/// bandwidth the fixed ones leave (`room_is_real` false: they alone exceed
/// the capacity).
fn contested(
    cells: &[CellView],
    wants: &[(u64, Option<Reason>)],
    room: Bandwidth,
    room_is_real: bool,
) -> Vec<u64> {
    let mut index = Vec::new();
    let mut claims = Vec::new();
    for (i, (c, (w, _))) in cells.iter().zip(wants).enumerate() {
        if adjustable(c) {
            index.push(i);
            claims.push(Claim {
                want: *w,
                // A cell below its floor (or growing towards it) is
                // guaranteed what it holds, not more.
                floor: lowest(c).min(*w).min(c.budget.runtime_ns),
                period: c.budget.period_ns,
                reservations: c.reservations,
                weight: c.weight,
            });
        }
    }
    let floors: Bandwidth = claims.iter().map(|c| c.bandwidth_at(0)).sum();
    let split: Vec<u64> = if room_is_real && floors <= room {
        water_fill(&claims, room)
    } else {
        // Not even the obligations fit: nothing grows, everything that can
        // give back goes to its floor.
        claims.iter().map(|c| c.floor).collect()
    };
    let mut runtimes: Vec<u64> = cells.iter().map(|c| c.budget.runtime_ns).collect();
    for (i, r) in index.into_iter().zip(split) {
        runtimes[i] = r;
    }
    runtimes
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: u64 = 1000;

    fn cell(name: &str, runtime_us: u64, period_us: u64, used_us: u64) -> CellView {
        CellView {
            name: name.into(),
            budget: Budget::new(runtime_us * US, period_us * US),
            reservations: 1,
            pinned: false,
            weight: 100,
            floor_ns: 0,
            used_ns: Some(used_us * US),
            misses: 0,
            calm: 0,
        }
    }

    fn config() -> RapConfig {
        RapConfig {
            enabled: true,
            ..RapConfig::default()
        }
    }

    fn total(cells: &[CellView]) -> Bandwidth {
        cells
            .iter()
            .map(|c| bandwidth(c.budget.runtime_ns, c.budget.period_ns, c.reservations))
            .sum()
    }

    /// Applies a plan as the broker would: new budgets, calm reset on a
    /// change and counted up otherwise.
    fn apply(cells: &mut [CellView], changes: &[Change]) {
        for c in cells.iter_mut() {
            match changes.iter().find(|ch| ch.cell == c.name) {
                Some(ch) => {
                    c.budget = ch.to;
                    c.calm = 0;
                }
                None => c.calm = c.calm.saturating_add(1),
            }
        }
    }

    // ---- config -------------------------------------------------------

    #[test]
    fn the_default_is_valid_and_off() {
        let c = RapConfig::default();
        c.validate().unwrap();
        assert!(!c.enabled);
        assert_eq!((c.interval_ms, c.headroom_pct, c.grow_pct), (2000, 25, 25));
        assert_eq!(
            (c.shrink_below_pct, c.patience, c.max_share_pct),
            (50, 3, 90)
        );
    }

    #[test]
    fn validate_refuses_oscillating_configs_and_names_the_field() {
        let err = |c: RapConfig| c.validate().unwrap_err();
        // used / (used × 1.10) = 91 % ≥ 90 %: a shrunk cell has "demand".
        let e = err(RapConfig {
            headroom_pct: 10,
            ..config()
        });
        assert!(
            e.starts_with("headroom_pct") && e.contains("at least 12"),
            "{e}"
        );
        RapConfig {
            headroom_pct: 12,
            ..config()
        }
        .validate()
        .unwrap();
        // used / (used × 1.25) = 80 % < 85 %: underused again at once.
        let e = err(RapConfig {
            shrink_below_pct: 85,
            ..config()
        });
        assert!(
            e.starts_with("shrink_below_pct") && e.contains("at most 80"),
            "{e}"
        );
        RapConfig {
            shrink_below_pct: 80,
            ..config()
        }
        .validate()
        .unwrap();
        for (c, field) in [
            (
                RapConfig {
                    interval_ms: 0,
                    ..config()
                },
                "interval_ms",
            ),
            (
                RapConfig {
                    grow_pct: 0,
                    ..config()
                },
                "grow_pct",
            ),
            (
                RapConfig {
                    patience: 0,
                    ..config()
                },
                "patience",
            ),
            (
                RapConfig {
                    max_share_pct: 101,
                    ..config()
                },
                "max_share_pct",
            ),
            (
                RapConfig {
                    headroom_pct: 5000,
                    ..config()
                },
                "headroom_pct",
            ),
        ] {
            let e = err(c);
            assert!(e.starts_with(field), "{e}");
            assert!(e.contains("give"), "{e}");
        }
    }

    // ---- one cell -----------------------------------------------------

    #[test]
    fn a_missing_cell_with_demand_grows() {
        let mut c = cell("synth", 300, 1000, 290);
        c.misses = 3;
        let changes = plan(&[c.clone()], Bandwidth::ONE, &config());
        // max(300 × 1.25, 290 × 1.25) = 375 µs.
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].to, Budget::new(375 * US, 1000 * US));
        assert_eq!(
            changes[0].reason,
            Reason::Missed {
                misses: 3,
                used_ns: 290 * US
            }
        );
        // Use above the runtime (reclaiming) sets the target.
        c.used_ns = Some(400 * US);
        let changes = plan(&[c.clone()], Bandwidth::ONE, &config());
        assert_eq!(changes[0].to.runtime_ns, 500 * US);
        // Capped at max_share_pct of the period, and at the deadline.
        c.used_ns = Some(800 * US);
        c.budget.runtime_ns = 800 * US;
        let changes = plan(&[c.clone()], Bandwidth::ONE, &config());
        assert_eq!(changes[0].to.runtime_ns, 900 * US);
        c.budget.deadline_ns = 850 * US;
        let changes = plan(&[c.clone()], Bandwidth::ONE, &config());
        assert_eq!(changes[0].to.runtime_ns, 850 * US);
        assert_eq!(changes[0].to.deadline_ns, 850 * US);
        // At the cap it stays.
        c.budget.runtime_ns = 850 * US;
        assert!(plan(&[c], Bandwidth::ONE, &config()).is_empty());
    }

    #[test]
    fn a_cell_using_nearly_all_it_holds_grows_before_it_misses() {
        let c = cell("video", 1000, 10_000, 950);
        let changes = plan(std::slice::from_ref(&c), Bandwidth::ONE, &config());
        assert_eq!(changes[0].to.runtime_ns, 1250 * US);
        assert_eq!(changes[0].reason, Reason::Pressed { used_ns: 950 * US });
        assert!(changes[0]
            .to_string()
            .ends_with("(used 950 µs: nearly all it held)"));
        // At 80 % of what it holds it stays.
        let c = cell("video", 1250, 10_000, 1000);
        assert!(plan(&[c], Bandwidth::ONE, &config()).is_empty());
    }

    #[test]
    fn a_miss_without_demand_changes_nothing() {
        let mut c = cell("synth", 300, 1000, 200);
        c.misses = 5;
        c.calm = 10;
        assert!(plan(&[c], Bandwidth::ONE, &config()).is_empty());
    }

    #[test]
    fn pinned_and_unmeasured_cells_never_change() {
        let mut a = cell("a", 300, 1000, 299);
        a.misses = 4;
        a.pinned = true;
        let mut b = cell("b", 300, 1000, 10);
        b.calm = 100;
        b.pinned = true;
        let mut c = cell("c", 300, 1000, 0);
        c.used_ns = None;
        c.calm = 100;
        assert!(plan(&[a, b, c], Bandwidth::ZERO, &config()).is_empty());
    }

    #[test]
    fn an_idle_cell_shrinks_after_patience_and_not_before() {
        let mut c = cell("idle", 400, 1000, 100);
        for calm in 0..3 {
            c.calm = calm;
            assert!(plan(&[c.clone()], Bandwidth::ONE, &config()).is_empty());
        }
        c.calm = 3;
        let changes = plan(&[c.clone()], Bandwidth::ONE, &config());
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].to.runtime_ns, 125 * US);
        assert_eq!(
            changes[0].reason,
            Reason::Underused {
                used_ns: 100 * US,
                calm: 3
            }
        );
        // Not below its floor, nor below the kernel's minimum.
        c.floor_ns = 200 * US;
        assert_eq!(
            plan(&[c.clone()], Bandwidth::ONE, &config())[0]
                .to
                .runtime_ns,
            200 * US
        );
        c.floor_ns = 0;
        c.used_ns = Some(0);
        assert_eq!(
            plan(&[c.clone()], Bandwidth::ONE, &config())[0]
                .to
                .runtime_ns,
            MIN_RUNTIME_NS
        );
        // Using half or more of it is not idle.
        c.used_ns = Some(200 * US);
        c.calm = 50;
        assert!(plan(&[c], Bandwidth::ONE, &config()).is_empty());
    }

    // ---- contention ---------------------------------------------------

    #[test]
    fn contested_capacity_is_split_by_weight() {
        let mut pinned = cell("pinned", 200, 1000, 200);
        pinned.pinned = true;
        let mut light = cell("light", 100, 1000, 100);
        light.weight = 1;
        light.misses = 1;
        let mut heavy = cell("heavy", 100, 1000, 100);
        heavy.weight = 3;
        heavy.misses = 1;
        let config = RapConfig {
            grow_pct: 1000,
            max_share_pct: 100,
            ..config()
        };
        // Both want the whole period; 0.8 of a core is left after the pinned.
        let cells = [pinned, light, heavy];
        let changes = plan(&cells, Bandwidth::ONE, &config);
        assert_eq!(changes.len(), 2);
        let (l, h) = (&changes[0], &changes[1]);
        assert_eq!((l.cell.as_str(), h.cell.as_str()), ("light", "heavy"));
        assert!(l.to.runtime_ns.abs_diff(200 * US) <= 2, "{l}");
        assert!(h.to.runtime_ns.abs_diff(600 * US) <= 2, "{h}");
        for (ch, weight) in [(l, 1), (h, 3)] {
            assert_eq!(
                ch.reason,
                Reason::Contested {
                    wanted_ns: 1000 * US,
                    weight
                }
            );
        }
        let mut after = cells.to_vec();
        apply(&mut after, &changes);
        assert!(total(&after) <= Bandwidth::ONE);
    }

    #[test]
    fn a_cell_that_wants_less_than_its_share_gets_it_and_leaves_the_rest() {
        let mut small = cell("small", 100, 1000, 100);
        small.misses = 1; // wants 125 µs; its equal share would be 333
        let mut a = cell("a", 100, 1000, 100);
        a.misses = 1;
        let mut b = cell("b", 100, 1000, 100);
        b.misses = 1;
        let config = RapConfig {
            grow_pct: 1000,
            max_share_pct: 100,
            ..config()
        };
        small.budget.deadline_ns = 125 * US; // caps its want at 125 µs
        let changes = plan(&[small, a, b], Bandwidth::ONE, &config);
        let by = |n: &str| changes.iter().find(|c| c.cell == n).unwrap().clone();
        assert_eq!(by("small").to.runtime_ns, 125 * US);
        assert!(matches!(by("small").reason, Reason::Missed { .. }));
        for n in ["a", "b"] {
            assert!(by(n).to.runtime_ns.abs_diff(437_500) <= 2, "{}", by(n));
            assert!(matches!(by(n).reason, Reason::Contested { .. }));
        }
    }

    #[test]
    fn floors_hold_under_contention() {
        let mut a = cell("a", 500, 1000, 500);
        a.misses = 1;
        a.floor_ns = 400 * US;
        a.weight = 1;
        let mut b = cell("b", 500, 1000, 500);
        b.misses = 1;
        b.weight = 1000;
        let changes = plan(&[a, b], Bandwidth::ONE, &config());
        let a = changes.iter().find(|c| c.cell == "a").unwrap();
        let b = changes.iter().find(|c| c.cell == "b").unwrap();
        assert_eq!(a.to.runtime_ns, 400 * US, "{a}");
        assert!(b.to.runtime_ns.abs_diff(600 * US) <= 2, "{b}");
        // Shrinks go first.
        assert_eq!(changes[0].cell, "a");
    }

    #[test]
    fn when_obligations_exceed_capacity_nothing_grows() {
        let mut pinned = cell("pinned", 900, 1000, 900);
        pinned.pinned = true;
        let mut a = cell("a", 300, 1000, 300);
        a.misses = 2;
        a.floor_ns = 200 * US;
        let changes = plan(&[pinned, a], Bandwidth::ONE, &config());
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].to.runtime_ns, 200 * US);
        assert!(matches!(changes[0].reason, Reason::Contested { .. }));
    }

    // ---- display ------------------------------------------------------

    #[test]
    fn display_lines() {
        let change = |to_us: u64, reason: Reason| Change {
            cell: "synth".into(),
            from: Budget::new(300 * US, 1000 * US),
            to: Budget::new(to_us * US, 1000 * US),
            reason,
        };
        assert_eq!(
            change(
                400,
                Reason::Missed {
                    misses: 3,
                    used_ns: 310 * US
                }
            )
            .to_string(),
            "cell synth: 300 µs → 400 µs every 1000 µs (missed 3, used 310 µs)"
        );
        assert_eq!(
            change(
                125,
                Reason::Underused {
                    used_ns: 100 * US,
                    calm: 3
                }
            )
            .to_string(),
            "cell synth: 300 µs → 125 µs every 1000 µs (used 100 µs for 3 calm intervals)"
        );
        let mut c = change(
            250,
            Reason::Contested {
                wanted_ns: 375 * US,
                weight: 100,
            },
        );
        c.to.deadline_ns = 800 * US;
        assert_eq!(
            c.to_string(),
            "cell synth: 300 µs → 250 µs every 1000 µs, deadline 800 µs \
             (contested: wanted 375 µs, weight 100)"
        );
    }

    // ---- properties ---------------------------------------------------

    fn arb_cell(i: usize) -> impl Strategy<Value = CellView> {
        (100u64..10_000, 0u64..=1000, 0u64..=1000, 0u64..=100)
            .prop_flat_map(move |(period_us, rt_permille, dl_permille, floor_pct)| {
                let period = period_us * US;
                let runtime = (period * rt_permille / 1000).max(MIN_RUNTIME_NS);
                let deadline = runtime + (period - runtime) * dl_permille / 1000;
                let budget = Budget {
                    runtime_ns: runtime,
                    deadline_ns: if dl_permille > 500 { period } else { deadline },
                    period_ns: period,
                };
                (
                    Just(budget),
                    0u32..4,
                    proptest::bool::weighted(0.2),
                    prop_oneof![1 => Just(0u32), 9 => 1u32..1000],
                    Just(pct_of(period, floor_pct.saturating_sub(50) as u32)),
                    proptest::option::weighted(0.9, 0u64..=period * 6 / 5),
                    prop_oneof![Just(0u64), 1u64..5],
                    0u32..6,
                )
            })
            .prop_map(
                move |(budget, reservations, pinned, weight, floor_ns, used_ns, misses, calm)| {
                    CellView {
                        name: format!("c{i}"),
                        budget,
                        reservations,
                        pinned,
                        weight,
                        floor_ns,
                        used_ns,
                        misses,
                        calm,
                    }
                },
            )
    }

    fn arb_cells() -> impl Strategy<Value = Vec<CellView>> {
        (1usize..8).prop_flat_map(|n| (0..n).map(arb_cell).collect::<Vec<_>>())
    }

    fn arb_config() -> impl Strategy<Value = RapConfig> {
        (12u32..200, 1u32..200, 0u32..90, 1u32..6, 10u32..=100).prop_map(
            |(headroom, grow, shrink, patience, share)| RapConfig {
                enabled: true,
                interval_ms: 2000,
                headroom_pct: headroom,
                grow_pct: grow,
                shrink_below_pct: shrink.min(10_000 / (100 + headroom)),
                patience,
                max_share_pct: share,
            },
        )
    }

    fn arb_capacity() -> impl Strategy<Value = Bandwidth> {
        (0u64..4 << 20).prop_map(Bandwidth)
    }

    /// The pinned and unmeasured cells, and every other one at its floor
    /// (or at what it holds, if less): what no plan can go below.
    fn obligations(cells: &[CellView], config: &RapConfig) -> Bandwidth {
        cells
            .iter()
            .map(|c| {
                let runtime = if adjustable(c) {
                    lowest(c).min(want(c, config).0).min(c.budget.runtime_ns)
                } else {
                    c.budget.runtime_ns
                };
                bandwidth(runtime, c.budget.period_ns, c.reservations)
            })
            .sum()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever the cells: the plan fits the capacity (or, when the
        /// obligations alone do not, grows nothing), leaves pinned and
        /// unmeasured cells, periods and deadlines alone, keeps floors and
        /// the caps, gives reasons that match, and orders shrinks first.
        #[test]
        fn plans_are_safe(
            cells in arb_cells(),
            capacity in arb_capacity(),
            config in arb_config(),
        ) {
            prop_assert!(config.validate().is_ok(), "{:?}", config);
            let changes = plan(&cells, capacity, &config);
            let mut after = cells.clone();
            apply(&mut after, &changes);
            let fixed: Bandwidth = cells
                .iter()
                .filter(|c| !adjustable(c))
                .map(|c| bandwidth(c.budget.runtime_ns, c.budget.period_ns, c.reservations))
                .sum();
            if fixed <= capacity && obligations(&cells, &config) <= capacity {
                prop_assert!(total(&after) <= capacity, "{} > {}", total(&after), capacity);
            } else {
                prop_assert!(changes.iter().all(Change::is_shrink));
            }
            let mut seen_grow = false;
            for ch in &changes {
                let c = cells.iter().find(|c| c.name == ch.cell).unwrap();
                prop_assert!(adjustable(c), "{} changed", ch);
                prop_assert_eq!(ch.from, c.budget);
                prop_assert_eq!(ch.to.period_ns, c.budget.period_ns);
                prop_assert_eq!(ch.to.deadline_ns, c.budget.deadline_ns);
                prop_assert_ne!(ch.to.runtime_ns, ch.from.runtime_ns);
                prop_assert!(ch.to.runtime_ns >= lowest(c).min(c.budget.runtime_ns), "{}", ch);
                if !ch.is_shrink() {
                    prop_assert!(ch.to.runtime_ns <= highest(c, &config), "{}", ch);
                    // Grown: it had demand (it missed, or was pressed).
                    let used = c.used_ns.unwrap_or(0) as u128;
                    prop_assert!(
                        used * 100 >= c.budget.runtime_ns as u128 * DEMAND_PCT as u128
                            || matches!(ch.reason, Reason::Contested { .. }),
                        "{}",
                        ch
                    );
                }
                prop_assert!(ch.to.runtime_ns <= ch.to.deadline_ns.max(ch.from.runtime_ns));
                match ch.reason {
                    Reason::Missed { .. } | Reason::Pressed { .. } => prop_assert!(!ch.is_shrink()),
                    Reason::Underused { .. } => prop_assert!(ch.is_shrink()),
                    Reason::Contested { wanted_ns, weight } => {
                        prop_assert!(ch.to.runtime_ns < wanted_ns);
                        prop_assert_eq!(weight, c.weight);
                    }
                }
                prop_assert!(!(seen_grow && ch.is_shrink()), "a shrink after a grow");
                seen_grow |= !ch.is_shrink();
            }
        }

        /// With a constant use and no misses, feeding the plan back
        /// reaches a fixed point within 2 × (patience + 3) steps: a cell a
        /// contest squeezed below its use grows back by at least grow_pct
        /// (past its need when capacity frees meanwhile) and then waits
        /// `patience` calm rounds before it shrinks to its use.
        #[test]
        fn a_constant_load_reaches_a_fixed_point(
            cells in arb_cells(),
            capacity in arb_capacity(),
            config in arb_config(),
        ) {
            let mut cells = cells;
            for c in cells.iter_mut() {
                c.misses = 0;
            }
            let settle = 2 * (config.patience as usize + 3);
            for _ in 0..settle {
                let changes = plan(&cells, capacity, &config);
                apply(&mut cells, &changes);
            }
            for step in 0..settle {
                let changes = plan(&cells, capacity, &config);
                prop_assert!(changes.is_empty(), "step {}: {:?}", settle + step, changes);
                apply(&mut cells, &changes);
            }
        }

        /// A cell that keeps missing with demand grows every step until
        /// the cap or the capacity stops it, and never oscillates.
        #[test]
        fn a_missing_cell_grows_monotonically(
            runtime_us in 10u64..500,
            config in arb_config(),
        ) {
            let mut c = cell("synth", runtime_us, 1000, runtime_us);
            c.misses = 1;
            let first = c.budget.runtime_ns;
            let mut last = first;
            for _ in 0..200 {
                c.used_ns = Some(c.budget.runtime_ns);
                let changes = plan(&[c.clone()], Bandwidth::ONE, &config);
                if changes.is_empty() {
                    break;
                }
                prop_assert!(changes[0].to.runtime_ns > last);
                last = changes[0].to.runtime_ns;
                apply(std::slice::from_mut(&mut c), &changes);
            }
            prop_assert_eq!(last, highest(&c, &config).max(first));
        }
    }
}
