//! Raw per-cycle time series (period length, driver end, budget set and
//! used): `(t_seconds, value)` points in a buffer sized up front.
//!
//! Owns the fixed-capacity rule. [`Series::push`] must never reallocate: a
//! full series drops the point and counts it in `overflow`.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    /// Unit of the values ("us", "%", ...); time is always in seconds.
    pub unit: String,
    /// `(t_seconds, value)`, in the order pushed.
    pub points: Vec<(f64, f64)>,
    /// Points dropped because the series was full.
    #[serde(default)]
    pub overflow: u64,
}

impl Series {
    /// An empty series with room for `capacity` points, allocated now.
    pub fn with_capacity(
        name: impl Into<String>,
        unit: impl Into<String>,
        capacity: usize,
    ) -> Self {
        Series {
            name: name.into(),
            unit: unit.into(),
            points: Vec::with_capacity(capacity),
            overflow: 0,
        }
    }

    /// Appends a point if there is room, otherwise counts it in `overflow`.
    /// Never allocates; returns whether the point was kept.
    pub fn push(&mut self, t_seconds: f64, value: f64) -> bool {
        if self.points.len() < self.points.capacity() {
            self.points.push((t_seconds, value));
            true
        } else {
            self.overflow += 1;
            false
        }
    }

    /// The values without their times, e.g. for [`crate::Summary::from_samples`].
    pub fn values(&self) -> Vec<f64> {
        self.points.iter().map(|&(_, v)| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_stops_at_capacity_and_counts_overflow() {
        let mut s = Series::with_capacity("period", "us", 3);
        let capacity = s.points.capacity();
        let kept = (0..capacity + 2)
            .filter(|&i| s.push(i as f64 * 0.001, 1333.0))
            .count();
        assert_eq!(kept, capacity);
        assert_eq!(s.points.len(), capacity);
        assert_eq!(s.points.capacity(), capacity, "never reallocated");
        assert_eq!(s.overflow, 2);
    }

    #[test]
    fn json_round_trip_and_missing_overflow_defaults_to_zero() {
        let mut s = Series::with_capacity("driver end", "us", 2);
        s.push(0.0, 10.5);
        let back: Series = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let old: Series =
            serde_json::from_str(r#"{"name":"a","unit":"us","points":[[1.0,2.0]]}"#).unwrap();
        assert_eq!((old.points, old.overflow), (vec![(1.0, 2.0)], 0));
        assert_eq!(back.values(), vec![10.5]);
    }
}
