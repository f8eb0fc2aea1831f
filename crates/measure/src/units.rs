//! How values and units are shown to people, shared by plots and reports.
//!
//! Owns display formatting only. It must never change a value's meaning:
//! results files keep their units as written ("us"), this module only spells
//! them ("µs").

/// The unit as printed: "us" becomes "µs", anything else is unchanged.
pub fn display_unit(unit: &str) -> &str {
    match unit {
        "us" => "µs",
        other => other,
    }
}

/// A value in `unit` ("ns", "us", "ms" or "s") converted to microseconds;
/// `None` for units that are not times.
pub fn to_us(value: f64, unit: &str) -> Option<f64> {
    let us_per_unit = match unit {
        "ns" => 1e-3,
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        _ => return None,
    };
    Some(value * us_per_unit)
}

/// A statistic with about four significant digits for typical latencies:
/// 1 decimal from 100 up, 2 from 1 up, 3 below.
pub fn format_value(x: f64) -> String {
    match x.abs() {
        a if a >= 100.0 => format!("{x:.1}"),
        a if a >= 1.0 => format!("{x:.2}"),
        _ => format!("{x:.3}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(display_unit("us"), "µs");
        assert_eq!(display_unit("%"), "%");
        assert_eq!(format_value(997.54), "997.5");
        assert_eq!(format_value(35.114), "35.11");
        assert_eq!(format_value(0.0), "0.000");
        assert!((to_us(1.4059, "ms").unwrap() - 1405.9).abs() < 1e-9);
        assert_eq!(to_us(1500.0, "ns"), Some(1.5));
        assert_eq!(to_us(3.0, "%"), None);
    }
}
