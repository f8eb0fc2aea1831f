//! The vocabulary of attribution and its serialised form: the causes of a
//! late cycle, the time each part of a cycle took, a miss with its cause,
//! and the totals of a run (what results.json carries under `"causes"`).
//!
//! Data only; it must never decide a cause (that is [`crate::attribute`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why a cycle ended after its deadline. Declared in the order a report
/// lists them; serialised by the names users read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Cause {
    /// Released after it should have been: its timer was armed or fired
    /// late, or the idle CPU it was woken on took long to run it.
    #[serde(rename = "woken late")]
    WokenLate,
    /// Runnable while another thread held its CPU.
    #[serde(rename = "waited for a CPU")]
    WaitedForCpu,
    /// Its SCHED_DEADLINE budget ran out before its work did.
    #[serde(rename = "throttled")]
    Throttled,
    /// The hypervisor ran something else while the thread was running.
    #[serde(rename = "stolen")]
    Stolen,
    /// Interrupts and softirqs ran on its CPU while it was running.
    #[serde(rename = "interrupts")]
    Interrupts,
    /// It slept uninterruptibly (I/O, a lock in the kernel) or took page
    /// faults within the cycle.
    #[serde(rename = "faults or blocking")]
    FaultsOrBlocking,
    /// Its own work was longer than its budget.
    #[serde(rename = "own work")]
    OwnWork,
    /// The events do not tell (none were read, or some were lost).
    #[serde(rename = "unknown")]
    Unknown,
}

impl Cause {
    pub const ALL: [Cause; 8] = [
        Cause::WokenLate,
        Cause::WaitedForCpu,
        Cause::Throttled,
        Cause::Stolen,
        Cause::Interrupts,
        Cause::FaultsOrBlocking,
        Cause::OwnWork,
        Cause::Unknown,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Cause::WokenLate => "woken late",
            Cause::WaitedForCpu => "waited for a CPU",
            Cause::Throttled => "throttled",
            Cause::Stolen => "stolen",
            Cause::Interrupts => "interrupts",
            Cause::FaultsOrBlocking => "faults or blocking",
            Cause::OwnWork => "own work",
            Cause::Unknown => "unknown",
        }
    }
}

/// The time (ns) each part of a cycle took, from its expected release to
/// its end, by cause; `Unknown` is what no event accounts for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts([u64; 8]);

impl Parts {
    pub fn get(&self, cause: Cause) -> u64 {
        self.0[cause as usize]
    }

    pub fn set(&mut self, cause: Cause, ns: u64) {
        self.0[cause as usize] = ns;
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// In µs by cause name, the parts that took any time.
    pub fn micros(&self) -> BTreeMap<Cause, f64> {
        Cause::ALL
            .into_iter()
            .filter(|&c| self.get(c) > 0)
            .map(|c| (c, micros(self.get(c))))
            .collect()
    }
}

/// ns as µs, to a tenth.
pub fn micros(ns: u64) -> f64 {
    (ns as f64 / 100.0).round() / 10.0
}

/// Another thread that held the watched thread's CPU while it waited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: i32,
    pub comm: String,
    /// Its kernel priority (-1: SCHED_DEADLINE; 0–98: SCHED_FIFO/RR; 100–139: others).
    pub prio: i32,
    /// The cell it belongs to, if any.
    pub cell: Option<String>,
    pub us: f64,
    /// A normal task (priority 100–139) that held the CPU of a
    /// SCHED_DEADLINE thread whose budget had not run out: no priority of
    /// its own beats a reservation, so the kernel's fair server ran it (a
    /// deadline entity since Linux 6.12 that runs normal tasks once
    /// real-time ones have starved them), or the vCPU stalled meanwhile.
    #[serde(default, skip_serializing_if = "is_false")]
    pub by_fair_server: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Holder {
    /// What a report says after a holder the fair server ran: "" for any
    /// other.
    pub fn fair_server_note(&self) -> &'static str {
        match self.by_fair_server {
            true => "run by the fair server, or the vCPU stalled",
            false => "",
        }
    }
}

/// One late cycle of a watched thread and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// When it should have been released, CLOCK_MONOTONIC ns.
    pub release_ns: u64,
    pub tid: i32,
    pub comm: String,
    pub cpu: u32,
    pub cause: Cause,
    /// From the expected release to the end of the cycle, and the deadline.
    pub response_us: f64,
    pub deadline_us: f64,
    /// Each part's time; they add up to the response.
    pub parts_us: BTreeMap<Cause, f64>,
    /// Who held the CPU while it waited, longest first.
    pub holders: Vec<Holder>,
    /// Its SCHED_DEADLINE budget ran out in this cycle.
    pub throttled: bool,
    /// Page faults it took in the cycle.
    pub faults: u32,
    /// Records of its cycle were lost (a ring overflowed): its cause is
    /// "unknown" and its whole response unaccounted for, rather than
    /// judged from a partial timeline.
    #[serde(default)]
    pub records_lost: bool,
    /// For a chain's miss: how many of its clients (the threads other than
    /// the driver) ended past the deadline; 0 for a thread judged alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late_threads: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Miss {
    /// The cause as users read it: "unknown (records lost)" when its
    /// records were lost.
    pub fn cause_name(&self) -> &'static str {
        match self.records_lost {
            true => "unknown (records lost)",
            false => self.cause.name(),
        }
    }

    /// The releases of a grid of `period_ns` after its own that its cycle
    /// ran past (each of them late because of it).
    pub fn releases_overrun(&self, period_ns: u64) -> u64 {
        let response_ns = (self.response_us * 1000.0).round() as u64;
        match period_ns {
            0 => 0,
            p => response_ns.saturating_sub(1) / p,
        }
    }
}

/// A run's misses by cause: how many, and the µs the winning part took
/// over all of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Causes {
    pub misses: BTreeMap<Cause, u64>,
    pub us: BTreeMap<Cause, f64>,
}

impl Causes {
    pub fn add(&mut self, miss: &Miss) {
        *self.misses.entry(miss.cause).or_default() += 1;
        let part = miss.parts_us.get(&miss.cause).copied().unwrap_or(0.0);
        *self.us.entry(miss.cause).or_default() += part;
    }

    /// `miss` standing for `n` misses of a metric (a chain's late period
    /// for each client that ended late), its deciding part's time once.
    pub fn add_n(&mut self, miss: &Miss, n: u64) {
        self.add(miss);
        self.add_overrun(miss, n.saturating_sub(1));
    }

    /// `n` more misses for `miss`'s cause, whose time it already counts:
    /// the releases its cycle ran past.
    pub fn add_overrun(&mut self, miss: &Miss, n: u64) {
        if n > 0 {
            *self.misses.entry(miss.cause).or_default() += n;
        }
    }

    /// `n` misses whose cause is not known (attribution was unavailable).
    pub fn add_unknown(&mut self, n: u64) {
        if n > 0 {
            *self.misses.entry(Cause::Unknown).or_default() += n;
            self.us.entry(Cause::Unknown).or_default();
        }
    }

    pub fn total(&self) -> u64 {
        self.misses.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_overruns_the_releases_it_ran_past() {
        let miss = Miss {
            release_ns: 0,
            tid: 1,
            comm: "t".into(),
            cpu: 0,
            cause: Cause::Throttled,
            response_us: 30_100.0,
            deadline_us: 10_000.0,
            parts_us: BTreeMap::from([(Cause::Throttled, 27_000.0)]),
            holders: vec![],
            throttled: true,
            faults: 0,
            records_lost: false,
            late_threads: 0,
        };
        assert_eq!(miss.releases_overrun(10_000_000), 3);
        assert_eq!(miss.releases_overrun(30_100_000), 0);
        assert_eq!(miss.releases_overrun(0), 0);
        let mut causes = Causes::default();
        causes.add(&miss);
        causes.add_overrun(&miss, 3);
        assert_eq!(causes.misses[&Cause::Throttled], 4);
        assert_eq!(causes.us[&Cause::Throttled], 27_000.0);
    }

    #[test]
    fn causes_serialise_by_the_names_users_read() {
        let mut causes = Causes::default();
        causes.add_unknown(2);
        let json = serde_json::to_string(&causes).unwrap();
        assert_eq!(json, r#"{"misses":{"unknown":2},"us":{"unknown":0.0}}"#);
        for c in Cause::ALL {
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.name())
            );
        }
    }
}
