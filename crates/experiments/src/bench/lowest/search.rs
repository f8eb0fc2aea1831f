//! The search for the smallest buffer that holds: a bisection over the
//! candidate sizes, in ascending order, one trial at a time.
//!
//! Its assumption, stated wherever its answer is shown: holding is
//! monotonic in the buffer size — a size that holds, every larger one
//! holds too. A longer period leaves every cycle more slack under the same
//! interference, so a failure above a success would be noise (a vCPU
//! preempted by the host), and the trials recorded show it when it
//! happens. Pure: it decides which size to try next and never runs one.

/// Bisection for the first index whose trial held, over `len` candidates.
/// Invariant: every index below `low` failed (or lies below one that did),
/// every index from `high` on held (or lies above one that did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bisection {
    low: usize,
    high: usize,
    len: usize,
}

impl Bisection {
    pub fn new(len: usize) -> Bisection {
        Bisection {
            low: 0,
            high: len,
            len,
        }
    }

    /// The index to try next; None once the answer is known.
    pub fn next(&self) -> Option<usize> {
        (self.low < self.high).then(|| self.low + (self.high - self.low) / 2)
    }

    /// What the trial at `index` (the one [`Bisection::next`] gave) showed.
    pub fn record(&mut self, index: usize, held: bool) {
        if held {
            self.high = self.high.min(index);
        } else {
            self.low = self.low.max(index + 1);
        }
    }

    /// The smallest index that held, once the search is over; None while
    /// it runs or when no candidate held.
    pub fn lowest(&self) -> Option<usize> {
        (self.next().is_none() && self.low < self.len).then_some(self.low)
    }

    /// Trials a search over `len` candidates takes at most.
    pub fn max_trials(len: usize) -> usize {
        (usize::BITS - len.leading_zeros()) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs the search against "holds from `first` on"; returns its answer
    /// and the indices it tried.
    fn search(len: usize, first: usize) -> (Option<usize>, Vec<usize>) {
        let mut bisection = Bisection::new(len);
        let mut tried = Vec::new();
        while let Some(i) = bisection.next() {
            tried.push(i);
            bisection.record(i, i >= first);
        }
        (bisection.lowest(), tried)
    }

    #[test]
    fn seven_sizes_take_three_trials() {
        // 16 … 1024 frames; plain holding from 512 (index 5).
        assert_eq!(search(7, 5), (Some(5), vec![3, 5, 4]));
        assert_eq!(search(7, 7), (None, vec![3, 5, 6]));
        assert_eq!(search(7, 0), (Some(0), vec![3, 1, 0]));
        assert_eq!(Bisection::max_trials(7), 3);
    }

    #[test]
    fn no_candidates_no_answer() {
        assert_eq!(search(0, 0), (None, vec![]));
    }

    proptest! {
        #[test]
        fn a_monotonic_outcome_is_found_within_the_bound(len in 1usize..40, first in 0usize..45) {
            let (lowest, tried) = search(len, first);
            prop_assert_eq!(lowest, (first < len).then_some(first));
            prop_assert!(tried.len() <= Bisection::max_trials(len));
            let mut distinct = tried.clone();
            distinct.sort_unstable();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), tried.len(), "a size tried twice");
        }

        #[test]
        fn the_answer_held_and_the_size_below_it_failed(len in 1usize..40, first in 0usize..40) {
            let (lowest, tried) = search(len, first);
            if let Some(i) = lowest {
                prop_assert!(tried.contains(&i));
                if i > 0 {
                    prop_assert!(tried.contains(&(i - 1)));
                }
            } else {
                prop_assert!(tried.contains(&(len - 1)));
            }
        }
    }
}
