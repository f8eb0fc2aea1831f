//! How a media clock follows a grandmaster through a ptp4l that adjusts no
//! clock (`free_running 1`): from ptp4l's successive measurements of this
//! host's offset from the grandmaster (TIME_STATUS_NP's `master_offset`,
//! stamped with the sync's `ingress_time` on `CLOCK_REALTIME`) it fits a
//! line — the offset now and its rate, by least squares over the last
//! [`WINDOW`] measurements — and the media clock adds the line's negation
//! to `CLOCK_REALTIME`. When the measurements stop (ptp4l gone, its port
//! not SLAVE, no grandmaster, a sync older than [`STALE_NS`]) PTP is lost:
//! the line stays as it was, so the media clock keeps its last offset and
//! goes on at its last rate, and the loss is counted with when and why.
//!
//! Pure: no clock is read here, every instant is given. It must never
//! judge a measurement it is not given, nor forget a loss.

use std::collections::VecDeque;

/// Measurements the line is fitted over: at the follower's 4 polls a
/// second, 16 s — long enough that the syncs' own noise (µs in software)
/// leaves the rate within a few ppb, which is what a lost host plays on
/// (over 5 s, the rate came out 600 ppb off on this machine's one clock),
/// short enough to follow a rate that wanders with temperature (minutes).
pub const WINDOW: usize = 64;
/// A sync older than this (CLOCK_REALTIME, by its ingress stamp) means
/// the grandmaster is no longer heard: 16 of AES67's 8-a-second syncs.
pub const STALE_NS: u64 = 2_000_000_000;

/// One measurement of ptp4l: at `at_ns` (the sync's ingress, on this
/// host's `CLOCK_REALTIME`) this host's clock was `offset_ns` ahead of the
/// grandmaster's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measurement {
    pub at_ns: u64,
    pub offset_ns: i64,
}

/// What ptp4l answered, as far as following it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A measurement from a SLAVE port with a grandmaster present.
    Measured(Measurement),
    /// No usable measurement: why, in words.
    Unusable(String),
}

/// The offset fitted to the measurements: `offset_ns` at `at_ns`, changing
/// by `rate_ppb` ns per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub at_ns: u64,
    pub offset_ns: f64,
    pub rate_ppb: f64,
}

impl Line {
    /// The fitted offset at `t_ns` (CLOCK_REALTIME), ns.
    pub fn offset_at(&self, t_ns: u64) -> i64 {
        let dt_s = (t_ns as i128 - self.at_ns as i128) as f64 / 1e9;
        (self.offset_ns + self.rate_ppb * dt_s).round() as i64
    }
}

/// A loss of PTP: when it was noticed and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Loss {
    /// CLOCK_REALTIME, ns.
    pub at_ns: u64,
    pub why: String,
}

/// The follower's state: the window, the line, whether it is locked.
#[derive(Debug, Clone, Default)]
pub struct Follow {
    window: VecDeque<Measurement>,
    line: Option<Line>,
    locked: bool,
    losses: u64,
    last_loss: Option<Loss>,
}

impl Follow {
    /// Takes ptp4l's `answer` got at `now_ns` (CLOCK_REALTIME): a fresh
    /// measurement refits the line (one already seen changes nothing); an
    /// unusable answer or a stale one, while locked, is a loss. Returns
    /// the measurement taken, if any.
    pub fn take(&mut self, answer: Answer, now_ns: u64) -> Option<Measurement> {
        let measured = match answer {
            Answer::Measured(m) if now_ns.saturating_sub(m.at_ns) <= STALE_NS => m,
            Answer::Measured(m) => {
                let age_ms = now_ns.saturating_sub(m.at_ns) / 1_000_000;
                self.lose(now_ns, format!("ptp4l's last sync is {age_ms} ms old"));
                return None;
            }
            Answer::Unusable(why) => {
                self.lose(now_ns, why);
                return None;
            }
        };
        if self
            .window
            .back()
            .is_some_and(|m| m.at_ns >= measured.at_ns)
        {
            return None;
        }
        if !self.locked {
            // A new lock starts a new line: the old one's rate may no
            // longer hold, and its measurements are from before the gap.
            self.window.clear();
        }
        self.locked = true;
        if self.window.len() == WINDOW {
            self.window.pop_front();
        }
        self.window.push_back(measured);
        self.line = Some(fit(&self.window));
        Some(measured)
    }

    fn lose(&mut self, now_ns: u64, why: String) {
        if self.locked {
            self.locked = false;
            self.losses += 1;
            self.last_loss = Some(Loss { at_ns: now_ns, why });
        }
    }

    /// The offset from the grandmaster at `t_ns` (CLOCK_REALTIME) as the
    /// line has it — its last while lost; `None` before a measurement.
    pub fn offset_at(&self, t_ns: u64) -> Option<i64> {
        self.line.map(|l| l.offset_at(t_ns))
    }

    pub fn line(&self) -> Option<Line> {
        self.line
    }

    pub fn locked(&self) -> bool {
        self.locked
    }

    /// Losses since the start (a loss is counted once, however long).
    pub fn losses(&self) -> u64 {
        self.losses
    }

    pub fn last_loss(&self) -> Option<&Loss> {
        self.last_loss.as_ref()
    }
}

/// The least-squares line through the window (one measurement: flat).
fn fit(window: &VecDeque<Measurement>) -> Line {
    let last = *window.back().expect("a measurement");
    let n = window.len() as f64;
    // Seconds and ns relative to the last measurement keep the sums exact
    // enough in f64.
    let points = window.iter().map(|m| {
        let t = (m.at_ns as i128 - last.at_ns as i128) as f64 / 1e9;
        (t, (m.offset_ns - last.offset_ns) as f64)
    });
    let (st, so, stt, sto) = points.fold((0.0, 0.0, 0.0, 0.0), |(st, so, stt, sto), (t, o)| {
        (st + t, so + o, stt + t * t, sto + t * o)
    });
    let spread = n * stt - st * st;
    let rate_ppb = if spread > 1e-12 {
        (n * sto - st * so) / spread
    } else {
        0.0
    };
    // The fitted value at the last measurement's instant.
    let at_last = (so - rate_ppb * st) / n;
    Line {
        at_ns: last.at_ns,
        offset_ns: last.offset_ns as f64 + at_last,
        rate_ppb,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_795_700_000 * S;

    fn measured(at_ns: u64, offset_ns: i64) -> Answer {
        Answer::Measured(Measurement { at_ns, offset_ns })
    }

    #[test]
    fn a_clock_running_fast_is_fitted_with_its_rate() {
        let mut follow = Follow::default();
        assert_eq!(follow.offset_at(T0), None);
        // 10 ppm fast (10 µs a second) and 500 ns ahead, measured every
        // 250 ms with ±300 ns of noise.
        for k in 0..40u64 {
            let at = T0 + k * S / 4;
            let noise = [300, -300, 0, 150][k as usize % 4];
            let offset = 500 + (k * 2500) as i64 + noise;
            assert!(follow.take(measured(at, offset), at + 1000).is_some());
        }
        let line = follow.line().unwrap();
        assert!((line.rate_ppb - 10_000.0).abs() < 200.0, "{line:?}");
        let now = T0 + 10 * S;
        let expected = 500 + 100_000;
        assert!((follow.offset_at(now).unwrap() - expected).abs() < 400);
        assert!(follow.locked());
        assert_eq!(follow.losses(), 0);
    }

    #[test]
    fn one_measurement_is_a_flat_line_and_repeats_change_nothing() {
        let mut follow = Follow::default();
        follow.take(measured(T0, -700), T0);
        assert_eq!(follow.offset_at(T0 + 5 * S), Some(-700));
        assert_eq!(follow.take(measured(T0, -700), T0 + S / 4), None);
        assert_eq!(follow.line().unwrap().rate_ppb, 0.0);
    }

    #[test]
    fn a_loss_keeps_the_last_line_and_is_counted_once() {
        let mut follow = Follow::default();
        for k in 0..8u64 {
            let at = T0 + k * S / 4;
            follow.take(measured(at, (k * 250) as i64), at);
        }
        let line = follow.line().unwrap();
        assert!((line.rate_ppb - 1000.0).abs() < 1.0, "{line:?}");
        let later = T0 + 4 * S;
        let gone = Answer::Unusable("no ptp4l answers".into());
        assert_eq!(follow.take(gone.clone(), later), None);
        assert_eq!(follow.take(gone, later + S), None);
        assert!(!follow.locked());
        assert_eq!(follow.losses(), 1);
        assert_eq!(
            follow.last_loss(),
            Some(&Loss {
                at_ns: later,
                why: "no ptp4l answers".into()
            })
        );
        // Playing on at the last rate: 1 µs a second on.
        let far = T0 + 100 * S;
        assert_eq!(follow.line(), Some(line));
        assert_eq!(follow.offset_at(far), Some(line.offset_at(far)));
        assert!((follow.offset_at(far).unwrap() - 100_000).abs() < 10);
        // Measured again: a new line, and another loss later counts.
        follow.take(measured(far, 42), far);
        assert!(follow.locked());
        assert_eq!(follow.offset_at(far), Some(42));
        follow.take(Answer::Unusable("port LISTENING".into()), far + S);
        assert_eq!(follow.losses(), 2);
    }

    #[test]
    fn a_stale_sync_is_a_loss() {
        let mut follow = Follow::default();
        follow.take(measured(T0, 10), T0);
        assert_eq!(
            follow.take(measured(T0 + S, 10), T0 + S + STALE_NS + 1),
            None
        );
        assert_eq!(follow.losses(), 1);
        assert!(follow.last_loss().unwrap().why.contains("ms old"));
        // Before any lock there is nothing to lose.
        let mut fresh = Follow::default();
        fresh.take(Answer::Unusable("not yet".into()), T0);
        assert_eq!(fresh.losses(), 0);
    }
}
