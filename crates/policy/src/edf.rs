//! Uniprocessor EDF schedulability of constrained-deadline reservations
//! (runtime ≤ deadline ≤ period), by processor demand: for every interval
//! length t up to the busy-period bound, the runtime due within t must not
//! exceed t (Baruah, Rosier, Howell). With deadline = period this is the
//! utilization test; with a short deadline (a time-triggered window) it
//! admits what a density test would refuse.
//!
//! Pure integer arithmetic in nanoseconds; it must never round in favour of
//! admission.

use crate::bandwidth::Bandwidth;
use crate::cell::Budget;

/// Why a set of reservations does not fit one core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overload {
    /// Σ runtime/period exceeds the core's capacity.
    Utilization { total: Bandwidth },
    /// In the first `interval_ns` after a synchronous release, `demand_ns` of
    /// runtime is due.
    Demand { interval_ns: u64, demand_ns: u64 },
}

/// More check points than this and the test falls back to the (safe,
/// pessimistic) density test.
const MAX_CHECK_POINTS: usize = 100_000;

/// Whether `budgets` fit one core whose deadline capacity is `capacity`.
pub fn feasible(budgets: &[Budget], capacity: Bandwidth) -> Result<(), Overload> {
    let total: Bandwidth = budgets.iter().map(Budget::bandwidth).sum();
    if total > capacity {
        return Err(Overload::Utilization { total });
    }
    if budgets.iter().all(|b| b.deadline_ns >= b.period_ns) {
        return Ok(());
    }
    let bound = busy_bound(budgets, total);
    let points = check_points(budgets, bound);
    if points.len() > MAX_CHECK_POINTS {
        let density: Bandwidth = budgets.iter().map(Budget::density).sum();
        return if density <= Bandwidth::ONE {
            Ok(())
        } else {
            Err(Overload::Utilization { total: density })
        };
    }
    for t in points {
        let demand = demand(budgets, t);
        if demand > t {
            return Err(Overload::Demand {
                interval_ns: t,
                demand_ns: demand,
            });
        }
    }
    Ok(())
}

/// Runtime with deadlines inside [0, t] after a synchronous release.
fn demand(budgets: &[Budget], t: u64) -> u64 {
    budgets
        .iter()
        .filter(|b| b.deadline_ns <= t)
        .map(|b| ((t - b.deadline_ns) / b.period_ns + 1) * b.runtime_ns)
        .sum()
}

/// L = max(max D, Σ (P − D)·U / (1 − U)): beyond it the demand test
/// cannot fail first.
fn busy_bound(budgets: &[Budget], total: Bandwidth) -> u64 {
    let max_d = budgets.iter().map(|b| b.deadline_ns).max().unwrap_or(0);
    let u = total.as_fraction();
    if u >= 1.0 {
        return u64::MAX;
    }
    let slack: f64 = budgets
        .iter()
        .map(|b| (b.period_ns - b.deadline_ns) as f64 * b.runtime_ns as f64 / b.period_ns as f64)
        .sum();
    max_d.max((slack / (1.0 - u)).ceil() as u64)
}

fn check_points(budgets: &[Budget], bound: u64) -> Vec<u64> {
    let mut points = Vec::new();
    for b in budgets {
        let mut d = b.deadline_ns;
        while d <= bound && points.len() <= MAX_CHECK_POINTS {
            points.push(d);
            d = d.saturating_add(b.period_ns);
        }
    }
    points.sort_unstable();
    points.dedup();
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(runtime_us: u64, deadline_us: u64, period_us: u64) -> Budget {
        Budget {
            runtime_ns: runtime_us * 1000,
            deadline_ns: deadline_us * 1000,
            period_ns: period_us * 1000,
        }
    }

    const CAP: Bandwidth = Bandwidth(943_718); // 0.90

    #[test]
    fn a_window_alone_fits() {
        assert_eq!(feasible(&[b(2000, 2000, 10_000)], CAP), Ok(()));
    }

    #[test]
    fn a_window_beside_a_reservation_fits_when_demand_allows() {
        // 2 ms window every 10 ms plus 400 µs every 1333 µs: demand at
        // 1333 µs is 400 µs, at 2 ms is 2.4 ms > 2 ms: infeasible.
        let err = feasible(&[b(2000, 2000, 10_000), b(400, 1333, 1333)], CAP).unwrap_err();
        assert_eq!(
            err,
            Overload::Demand {
                interval_ns: 2_000_000,
                demand_ns: 2_400_000
            }
        );
        // A 900 µs window beside it fits: 1.3 ms due by 1333 µs.
        assert!(feasible(&[b(900, 900, 10_000), b(400, 1333, 1333)], CAP).is_ok());
    }

    #[test]
    fn utilization_over_capacity_is_refused() {
        assert!(matches!(
            feasible(&[b(500, 1000, 1000), b(500, 1000, 1000)], CAP),
            Err(Overload::Utilization { .. })
        ));
    }
}
