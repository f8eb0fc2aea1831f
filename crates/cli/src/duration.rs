//! Durations as people write them for audio: "400us", "1.333ms", "2s",
//! "1333" (plain numbers are microseconds).

/// Parses a duration into nanoseconds.
pub fn parse_ns(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (write e.g. 400us, 1.333ms, 2s)"))?;
    let scale = match unit.trim() {
        "" | "us" | "µs" => 1e3,
        "ns" => 1.0,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ns, us, ms or s)"
            ))
        }
    };
    Ok((value * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_ns;

    #[test]
    fn audio_durations() {
        assert_eq!(parse_ns("400us"), Ok(400_000));
        assert_eq!(parse_ns("1.333ms"), Ok(1_333_000));
        assert_eq!(parse_ns("1333"), Ok(1_333_000));
        assert_eq!(parse_ns("2s"), Ok(2_000_000_000));
        assert!(parse_ns("fast").is_err());
        assert!(parse_ns("3 parsecs").unwrap_err().contains("unknown unit"));
    }
}
