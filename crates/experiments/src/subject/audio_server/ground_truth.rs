//! The guard's measurement and prediction checked against ground truth:
//! each load client times its own process callback on the thread CPU-time
//! clock, every cycle (`tessera-jack-peer`'s record), while the guard
//! samples the same thread's CPU time from schedstat once per control
//! interval. Per client, over the measured part of the run:
//!
//! * measured ÷ true: the guard's mean use per audio period over the
//!   callback's mean CPU time (above 1: the thread's work outside the
//!   callback — waking, JACK's semaphores — which the reservation must
//!   cover too);
//! * the cycles whose callback needed more than the prediction, and more
//!   than the budget in force at that cycle.
//!
//! It only reads and computes; it must never judge the numbers.

use super::budgets::BudgetRow;
use tessera_jack_peer::record::PeerRecord;
use tessera_measure::Counter;

/// Counters of the comparison, over every load client.
pub(super) const TRUTH_CYCLES: &str = "ground truth cycles";
pub(super) const OVER_PREDICTION: &str = "ground truth cycles over the prediction";
pub(super) const OVER_BUDGET: &str = "ground truth cycles over the budget in force";

/// The peer's client that only listens (`tessera-jack-peer --monitor`).
const MONITOR: &str = "monitor";

/// One client's comparison.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ClientTruth {
    pub client: String,
    pub cycles: usize,
    /// The callback's mean CPU time per cycle, ns.
    pub true_mean_ns: f64,
    /// The guard's mean use per audio period, ns.
    pub measured_mean_ns: f64,
    pub over_prediction: usize,
    pub over_budget: usize,
}

/// Compares every client the guard reserved; `t0_ns` is the run's origin
/// (the rows' time is seconds from it).
pub(super) fn compare(
    rows: &[BudgetRow],
    record: &PeerRecord,
    t0_ns: u64,
    warmup_s: f64,
) -> Vec<ClientTruth> {
    let Some(audio_period_ns) = record.period_ns() else {
        return Vec::new();
    };
    record
        .threads
        .iter()
        .enumerate()
        // The peer's monitor does no work: its ratio says nothing.
        .filter(|(client, &tid)| tid != 0 && record.clients[*client] != MONITOR)
        .filter_map(|(client, &tid)| {
            let mut guarded: Vec<&BudgetRow> = rows
                .iter()
                .filter(|r| r.tid == tid && r.t_s >= warmup_s)
                .collect();
            guarded.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
            client_truth(record, client, &guarded, t0_ns, audio_period_ns)
        })
        .collect()
}

fn client_truth(
    record: &PeerRecord,
    client: usize,
    guarded: &[&BudgetRow],
    t0_ns: u64,
    audio_period_ns: u64,
) -> Option<ClientTruth> {
    let first = guarded.first()?.t_s;
    let per_audio_period = |r: &BudgetRow, ns: u64| {
        let fragments = (r.period_ns / audio_period_ns).max(1);
        ns as f64 / fragments as f64
    };
    let (mut cycles, mut cpu_sum, mut over_prediction, mut over_budget) = (0, 0.0, 0, 0);
    for row in record.rows.iter().filter(|r| r.client == client) {
        let t = (row.start_ns as f64 - t0_ns as f64) / 1e9;
        // The budget in force: the last decision before the cycle.
        let at = guarded.partition_point(|r| r.t_s <= t);
        if t < first || at == 0 {
            continue;
        }
        let decision = guarded[at - 1];
        let cpu = row.cpu_ns as f64;
        cycles += 1;
        cpu_sum += cpu;
        over_prediction += usize::from(cpu > per_audio_period(decision, decision.predicted_ns));
        over_budget += usize::from(cpu > per_audio_period(decision, decision.set_ns));
    }
    if cycles == 0 {
        return None;
    }
    let measured: f64 = guarded
        .iter()
        .map(|r| per_audio_period(r, r.used_ns))
        .sum::<f64>()
        / guarded.len() as f64;
    Some(ClientTruth {
        client: record.clients[client].clone(),
        cycles,
        true_mean_ns: cpu_sum / cycles as f64,
        measured_mean_ns: measured,
        over_prediction,
        over_budget,
    })
}

/// One note for all clients: the range of measured ÷ true and the cycles
/// over prediction and budget.
/// The cycles compared, and those that needed more than the prediction and
/// than the budget, over every client; none without clients.
pub(super) fn counters(truths: &[ClientTruth]) -> Vec<Counter> {
    if truths.is_empty() {
        return Vec::new();
    }
    let sum = |of: fn(&ClientTruth) -> usize| truths.iter().map(of).sum::<usize>() as u64;
    Counter::counts([
        (TRUTH_CYCLES, sum(|t| t.cycles)),
        (OVER_PREDICTION, sum(|t| t.over_prediction)),
        (OVER_BUDGET, sum(|t| t.over_budget)),
    ])
}

pub(super) fn note(truths: &[ClientTruth]) -> Option<String> {
    if truths.is_empty() {
        return None;
    }
    let ratio = |t: &ClientTruth| t.measured_mean_ns / t.true_mean_ns.max(1.0);
    let lo = truths.iter().map(ratio).fold(f64::INFINITY, f64::min);
    let worst = truths
        .iter()
        .max_by(|a, b| ratio(a).total_cmp(&ratio(b)))
        .expect("not empty");
    let hi = ratio(worst);
    let cycles: usize = truths.iter().map(|t| t.cycles).sum();
    let over_prediction: usize = truths.iter().map(|t| t.over_prediction).sum();
    let over_budget: usize = truths.iter().map(|t| t.over_budget).sum();
    Some(format!(
        "ground truth ({} clients' own callback CPU time, {cycles} cycles): the guard's \
         measured use is {lo:.2}–{hi:.2} × the callback's (highest: {}); {over_prediction} cycles \
         ({:.3} %) needed more than the prediction, {over_budget} ({:.3} %) more than \
         the budget in force",
        truths.len(),
        worst.client,
        100.0 * over_prediction as f64 / cycles as f64,
        100.0 * over_budget as f64 / cycles as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_jack_peer::record::PeerRow;

    fn guard_row(t_s: f64, used_ns: u64, predicted_ns: u64, set_ns: u64) -> BudgetRow {
        BudgetRow {
            t_s,
            pid: 10,
            tid: 11,
            thread: "load".into(),
            kind: tessera_guard::guard::Kind::RealTime,
            period_ns: 1_333_333,
            used_ns,
            predicted_ns,
            set_ns,
            degraded: false,
            xruns: 0,
        }
    }

    fn cycle(t_s: f64, cpu_ns: u64) -> PeerRow {
        let start_ns = 1_000_000_000 + (t_s * 1e9) as u64;
        PeerRow {
            client: 0,
            frames: 128,
            start_ns,
            awake_ns: start_ns,
            finished_ns: start_ns + cpu_ns,
            cpu_ns,
        }
    }

    #[test]
    fn each_cycle_is_judged_by_the_decision_in_force() {
        let record = PeerRecord {
            clients: vec!["load-01".into()],
            threads: vec![11],
            period: (128, 96_000),
            rows: vec![
                cycle(0.5, 100_000),  // before any decision: not counted
                cycle(1.05, 100_000), // within prediction
                cycle(1.06, 130_000), // over the prediction, within budget
                cycle(2.05, 150_000), // over the later, smaller budget
            ],
            ..PeerRecord::default()
        };
        let rows = [
            guard_row(1.0, 110_000, 120_000, 144_000),
            guard_row(2.0, 110_000, 120_000, 140_000),
        ];
        let truth = compare(&rows, &record, 1_000_000_000, 0.0);
        assert_eq!(truth.len(), 1);
        let t = &truth[0];
        assert_eq!((t.cycles, t.over_prediction, t.over_budget), (3, 2, 1));
        assert!((t.measured_mean_ns - 110_000.0).abs() < 1e-6);
        let note = note(&truth).unwrap();
        assert!(
            note.contains("3 cycles") && note.contains("0.87–0.87"),
            "{note}"
        );
    }

    #[test]
    fn fragments_are_compared_per_audio_period() {
        let record = PeerRecord {
            clients: vec!["load-01".into()],
            threads: vec![11],
            period: (64, 96_000), // 667 µs: two per reservation period
            rows: vec![cycle(1.5, 70_000)],
            ..PeerRecord::default()
        };
        // 120 µs predicted per 1333 µs is 60 µs per audio period.
        let rows = [guard_row(1.0, 140_000, 120_000, 160_000)];
        let t = &compare(&rows, &record, 1_000_000_000, 0.0)[0];
        assert_eq!((t.over_prediction, t.over_budget), (1, 0));
        assert!((t.measured_mean_ns - 70_000.0).abs() < 1e-6);
    }
}
