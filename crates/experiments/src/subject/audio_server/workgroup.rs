//! The load clients' workgroup, as the clients left it (`guard:workgroup`):
//! per member the budget its reservation held when recording stopped,
//! against the callback's own CPU time per cycle at the end of the run
//! (the clients' record, every cycle), and libtessera's overrun and miss
//! counts — what says whether the members' budgets were sized to their
//! work or held the core's room from the server's threads.
//!
//! It only reads and computes; it must never judge the numbers.

use tessera_jack_peer::record::PeerRecord;
use tessera_measure::{Counter, Summary};

/// The share of the run, at its end, over which a member's work is taken:
/// its budget then is sized from those cycles.
const TAIL_FRACTION: f64 = 0.1;

/// One member's figures.
#[derive(Debug, Clone, PartialEq)]
struct Member {
    budget_per_cycle_ns: f64,
    /// The callback's p99 CPU time per cycle over the run's tail.
    work_p99_ns: f64,
    overruns: u64,
    misses: u64,
}

/// Counters of the members that joined; none when no client joined one.
pub(super) fn counters(record: &PeerRecord) -> Vec<Counter> {
    let members = members(record);
    if members.is_empty() {
        return Vec::new();
    }
    let n = members.len() as f64;
    let mean = |of: fn(&Member) -> f64| members.iter().map(of).sum::<f64>() / n;
    let mut counters = Counter::counts([
        ("workgroup members", members.len() as u64),
        (
            "workgroup overruns",
            members.iter().map(|m| m.overruns).sum(),
        ),
        ("workgroup misses", members.iter().map(|m| m.misses).sum()),
    ]);
    counters.push(Counter::new(
        "workgroup budget per member",
        mean(|m| m.budget_per_cycle_ns) / 1e3,
        "µs",
    ));
    counters.push(Counter::new(
        "workgroup callback p99 per member",
        mean(|m| m.work_p99_ns) / 1e3,
        "µs",
    ));
    counters.push(Counter::new(
        "workgroup budget ÷ callback p99",
        mean(|m| m.budget_per_cycle_ns / m.work_p99_ns.max(1.0)),
        "×",
    ));
    counters
}

/// The members that joined and ran cycles at the end of the run.
fn members(record: &PeerRecord) -> Vec<Member> {
    let (Some(last_ns), Some(cycle_ns)) = (
        record.rows.iter().map(|r| r.start_ns).max(),
        record.period_ns(),
    ) else {
        return Vec::new();
    };
    let first_ns = record
        .rows
        .iter()
        .map(|r| r.start_ns)
        .min()
        .unwrap_or(last_ns);
    let tail_from = last_ns - ((last_ns - first_ns) as f64 * TAIL_FRACTION) as u64;
    record
        .workgroup
        .iter()
        .filter(|m| m.joined == Some(0) && m.budget_ns > 0 && m.period_ns > 0)
        .filter_map(|m| {
            let client = record.clients.iter().position(|c| *c == m.client)?;
            let work: Vec<f64> = record
                .rows
                .iter()
                .filter(|r| r.client == client && r.start_ns >= tail_from)
                .map(|r| r.cpu_ns as f64)
                .collect();
            if work.is_empty() {
                return None;
            }
            let work_p99_ns = Summary::from_samples(&work, None).p99;
            let fragments = (m.period_ns / cycle_ns).max(1);
            Some(Member {
                budget_per_cycle_ns: m.budget_ns as f64 / fragments as f64,
                work_p99_ns,
                overruns: m.overruns,
                misses: m.misses,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_jack_peer::record::{PeerRow, WorkgroupMember};

    /// Two loads of 100 cycles at 128 frames / 96 kHz; load-01's callback
    /// takes 100 µs, then 150 µs in the last tenth; load-02 never joined.
    fn record() -> PeerRecord {
        let member = |client: &str, joined, budget_ns| WorkgroupMember {
            client: client.into(),
            joined,
            cycles: 100,
            overruns: 3,
            misses: 2,
            budget_ns,
            period_ns: 1_333_333,
        };
        let rows = (0..100u64)
            .flat_map(|cycle| {
                (0..2).map(move |client| PeerRow {
                    client,
                    frames: 128 * cycle as u32,
                    start_ns: cycle * 1_333_333,
                    awake_ns: 0,
                    finished_ns: 0,
                    cpu_ns: if cycle >= 90 { 150_000 } else { 100_000 },
                })
            })
            .collect();
        PeerRecord {
            clients: vec!["load-01".into(), "load-02".into()],
            period: (128, 96_000),
            workgroup: vec![
                member("load-01", Some(0), 180_000),
                member("load-02", None, 0),
            ],
            rows,
            ..PeerRecord::default()
        }
    }

    fn value(counters: &[Counter], name: &str) -> f64 {
        counters.iter().find(|c| c.name == name).unwrap().value
    }

    #[test]
    fn members_that_joined_are_judged_by_their_work_at_the_end() {
        let counters = counters(&record());
        assert_eq!(value(&counters, "workgroup members"), 1.0);
        assert_eq!(value(&counters, "workgroup overruns"), 3.0);
        assert_eq!(value(&counters, "workgroup budget per member"), 180.0);
        assert_eq!(value(&counters, "workgroup callback p99 per member"), 150.0);
        assert_eq!(value(&counters, "workgroup budget ÷ callback p99"), 1.2);
    }

    #[test]
    fn no_workgroup_no_counters() {
        let mut plain = record();
        plain.workgroup.clear();
        assert!(counters(&plain).is_empty());
    }
}
