//! Controlled input: what the pads do over time, for renders, benchmarks and
//! the SLABS emulator (which reads the same files).
//!
//! A gesture file is text, one event per line: `time pad x y pressure`
//! (seconds from the start, pad 0..32, then x, y, pressure in [0, 1]),
//! separated by commas and/or whitespace. Blank lines and lines starting
//! with `#` are ignored. Example:
//!
//! ```text
//! # time, pad, x, y, pressure
//! 0.0, 3, 0.5, 0.10, 0.8
//! 2.5, 3, 0.9, 0.80, 0.8
//! 4.0, 3, 0.9, 0.80, 0.0
//! ```
//!
//! A pad holds the values of its latest event until its next one (steps:
//! the synth's smoothing makes them click-free); before its first event a pad
//! is released. Events at equal times apply in file order.
//!
//! This module owns the format and the playback cursor; playback
//! ([`GesturePlayer::advance`]) never allocates.

use crate::synth::PadInput;
use crate::PADS;

/// One change of one pad.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GestureEvent {
    pub time: f64,
    pub pad: usize,
    pub input: PadInput,
}

/// A time-ordered list of pad events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gesture {
    events: Vec<GestureEvent>,
}

/// A line of a gesture file that could not be read.
#[derive(Clone, Debug, PartialEq)]
pub struct GestureError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for GestureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gesture line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for GestureError {}

impl Gesture {
    /// The seed's controlled input: `pads` held at (x, y, pressure) throughout.
    pub fn fixed(pads: impl IntoIterator<Item = usize>, input: PadInput) -> Gesture {
        let events = pads
            .into_iter()
            .filter(|&pad| pad < PADS)
            .map(|pad| GestureEvent {
                time: 0.0,
                pad,
                input,
            })
            .collect();
        Gesture { events }
    }

    /// A gesture from events in any order (sorted stably by time).
    pub fn from_events(mut events: Vec<GestureEvent>) -> Gesture {
        events.sort_by(|a, b| a.time.total_cmp(&b.time));
        Gesture { events }
    }

    /// The events, in time order.
    pub fn events(&self) -> &[GestureEvent] {
        &self.events
    }

    /// Reads the text format.
    pub fn parse(text: &str) -> Result<Gesture, GestureError> {
        let mut events = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            events.push(parse_line(line).map_err(|message| GestureError {
                line: number + 1,
                message,
            })?);
        }
        Ok(Gesture::from_events(events))
    }

    /// Writes the text format.
    pub fn to_text(&self) -> String {
        let mut text = String::from("# time, pad, x, y, pressure\n");
        for e in &self.events {
            text.push_str(&format!(
                "{}, {}, {}, {}, {}\n",
                e.time, e.pad, e.input.x, e.input.y, e.input.pressure
            ));
        }
        text
    }
}

fn parse_line(line: &str) -> Result<GestureEvent, String> {
    let mut fields = line
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|f| !f.is_empty());
    let mut next = |name: &str| -> Result<f64, String> {
        let field = fields.next().ok_or(format!("missing {name}"))?;
        field
            .parse::<f64>()
            .map_err(|_| format!("{name} {field:?} is not a number"))
    };
    let time = next("time")?;
    let pad = next("pad")?;
    let (x, y, pressure) = (next("x")?, next("y")?, next("pressure")?);
    if fields.next().is_some() {
        return Err("more than 5 fields".into());
    }
    if !(time.is_finite() && time >= 0.0) {
        return Err(format!("time {time} must be >= 0"));
    }
    if pad.fract() != 0.0 || !(0.0..PADS as f64).contains(&pad) {
        return Err(format!("pad {pad} is not one of 0..{PADS}"));
    }
    for (name, v) in [("x", x), ("y", y), ("pressure", pressure)] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{name} {v} is outside [0, 1]"));
        }
    }
    Ok(GestureEvent {
        time,
        pad: pad as usize,
        input: PadInput {
            x: x as f32,
            y: y as f32,
            pressure: pressure as f32,
        },
    })
}

/// Plays a gesture: the pads' state at increasing times.
#[derive(Clone, Debug)]
pub struct GesturePlayer {
    gesture: Gesture,
    next: usize,
    pads: [PadInput; PADS],
}

impl GesturePlayer {
    pub fn new(gesture: Gesture) -> GesturePlayer {
        GesturePlayer {
            gesture,
            next: 0,
            pads: [PadInput::default(); PADS],
        }
    }

    /// The pads after every event up to and including `time` (seconds).
    /// Times must not go backwards.
    pub fn advance(&mut self, time: f64) -> &[PadInput; PADS] {
        while let Some(event) = self.gesture.events.get(self.next) {
            if event.time > time {
                break;
            }
            self.pads[event.pad] = event.input;
            self.next += 1;
        }
        &self.pads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_plays_as_steps() {
        let text = "# comment\n0.0, 3, 0.5, 0.1, 0.8\n\n2.5 3 0.9 0.8 0.8\n1.0,4,0,0,1\n";
        let gesture = Gesture::parse(text).unwrap();
        assert_eq!(Gesture::parse(&gesture.to_text()).unwrap(), gesture);
        let mut player = GesturePlayer::new(gesture);
        assert_eq!(player.advance(0.5)[3].pressure, 0.8);
        assert_eq!(player.advance(0.5)[4].pressure, 0.0);
        assert_eq!(player.advance(1.0)[4].pressure, 1.0);
        assert_eq!(player.advance(3.0)[3].y, 0.8);
    }

    #[test]
    fn bad_lines_name_their_line() {
        let err = Gesture::parse("0 1 0 0 0\n0 40 0 0 0\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(Gesture::parse("0 1 0 0 2").is_err());
        assert!(Gesture::parse("0 1 0 0").is_err());
        assert!(Gesture::parse("-1 1 0 0 0").is_err());
    }
}

/// Pads from a list of pads and ranges ("0-31", "0,3,8-11"), each below
/// [`PADS`], at least one.
pub fn parse_pads(list: &str) -> Result<Vec<usize>, String> {
    let bad = || {
        format!(
            "{list:?} is not a list of pads 0–{} (e.g. 0-31 or 0,3,8-11)",
            PADS - 1
        )
    };
    let mut pads = Vec::new();
    for part in list.split(',').map(str::trim) {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let first: usize = first.trim().parse().map_err(|_| bad())?;
        let last: usize = last.trim().parse().map_err(|_| bad())?;
        if first > last || last >= PADS {
            return Err(bad());
        }
        pads.extend(first..=last);
    }
    pads.sort_unstable();
    pads.dedup();
    Ok(pads)
}

#[cfg(test)]
mod pad_list_tests {
    use super::parse_pads;

    #[test]
    fn lists_and_ranges_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_pads("0-3,8, 2").unwrap(), [0, 1, 2, 3, 8]);
        assert_eq!(parse_pads("0-31").unwrap().len(), 32);
        for bad in ["", "32", "3-1", "a", "0-32", "1,,2"] {
            assert!(parse_pads(bad).is_err(), "{bad:?}");
        }
    }
}
