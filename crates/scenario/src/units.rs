//! Durations and rates as a scenario file and the cli's options write them:
//! "400us", "1.333ms", "15s", "2min"; "240mbit", "1gbit", bits/s. Pure: it
//! must never read anything but its argument.

use std::time::Duration;

/// Parses "400us", "1.333ms", "15s", "2min", "500ns".
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (write e.g. 400us, 1.333ms, 15s)"))?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "min" => 60.0,
        "" => return Err(format!("{text:?} needs a unit (ns, us, ms, s or min)")),
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ns, us, ms, s or min)"
            ))
        }
    };
    Ok(Duration::from_secs_f64(value * scale))
}

/// A rate as `tc` and people write it: bits/s, or with kbit, mbit or gbit
/// ("240mbit", "1gbit", "2.5gbit").
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (number, scale) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)]
        .iter()
        .find_map(|(unit, scale)| lower.strip_suffix(unit).map(|n| (n.trim(), *scale)))
        .unwrap_or((lower.as_str(), 1.0));
    match number.parse::<f64>() {
        Ok(value) if value > 0.0 && (value * scale).is_finite() => Ok((value * scale) as u64),
        _ => Err(format!(
            "{text:?} is not a rate (write e.g. \"240mbit\", \"1gbit\" or bits/s)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1333us").unwrap().as_micros(), 1333);
        assert_eq!(parse_duration("1.5s").unwrap().as_millis(), 1500);
        assert_eq!(parse_duration("2min").unwrap().as_secs(), 120);
        assert!(parse_duration("15").unwrap_err().contains("needs a unit"));
    }

    #[test]
    fn rates_are_read_as_tc_writes_them() {
        assert_eq!(super::parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(super::parse_rate("240mbit"), Ok(240_000_000));
        assert_eq!(super::parse_rate("2.5Gbit"), Ok(2_500_000_000));
        assert_eq!(super::parse_rate("64000"), Ok(64_000));
        assert!(super::parse_rate("1gbps").is_err());
        assert!(super::parse_rate("-3mbit").is_err());
    }
}
