//! The host's records (the file host.c writes, format in its header
//! comment) read back, summed per cycle over the four threads — the chain's
//! demand, the CPU time used, the budget reserved per cycle — and one
//! configuration's figures from them: misses per step, cycles to converge,
//! steady-state reserved ÷ p99 demand, the interval calls' cost.
//!
//! It only reads and computes; it must never run anything, and never judge
//! a figure against its goal (the report states both).

use super::results::{
    Config, ConfigResult, StepResult, ThreadFigures, HIGH_PCT, LOW_PCT, PERIOD_NS, THREADS,
};
use tessera_measure::Summary;

/// A budget within this share of its settled value has converged.
const SETTLED_BAND: f64 = 0.10;
/// Cycles in a row within the band that make a budget settled: the
/// predictor's window.
const SETTLED_CYCLES: usize = 16;

/// One thread's row in one cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HostRow {
    pub thread: usize,
    pub cycle: u64,
    pub start_ns: u64,
    /// 0: the cycle was skipped (the callback could not start it in time).
    pub end_ns: u64,
    pub deadline_ns: u64,
    pub demand_ns: u64,
    pub cpu_ns: u64,
    pub budget_ns: u64,
    pub budget_period_ns: u64,
    pub call_ns: u64,
}

impl HostRow {
    /// Its budget per cycle (a reservation period may span several).
    fn budget_per_cycle(&self) -> u64 {
        match self.budget_period_ns {
            0 => 0,
            p => self.budget_ns * PERIOD_NS / p,
        }
    }
}

/// A host's file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct HostRecord {
    pub mode: String,
    /// Each thread's join code (workgroup mode).
    pub joined: Vec<i32>,
    pub rows: Vec<HostRow>,
}

impl HostRecord {
    pub fn parse(text: &str) -> Result<HostRecord, String> {
        if !text.starts_with("# tessera-workgroup-host 1") {
            return Err("not a tessera-workgroup-host 1 file".into());
        }
        let header = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("# {key}")))
                .map(str::trim)
        };
        let joined = header("joined")
            .unwrap_or_default()
            .split_whitespace()
            .map(|c| c.parse().map_err(|e| format!("joined {c:?}: {e}")))
            .collect::<Result<_, String>>()?;
        let rows = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("thread"))
            .map(parse_row)
            .collect::<Option<Vec<_>>>()
            .ok_or("a malformed row")?;
        Ok(HostRecord {
            mode: header("mode").unwrap_or_default().to_string(),
            joined,
            rows,
        })
    }

    /// The rows summed per cycle of the grid, the callback's cycles in order.
    pub fn cycles(&self) -> Vec<Cycle> {
        let count = self
            .rows
            .iter()
            .filter(|r| r.thread == 0)
            .map(|r| r.cycle + 1)
            .max()
            .unwrap_or(0);
        let mut cycles: Vec<Cycle> = (0..count).map(Cycle::skipped).collect();
        for r in &self.rows {
            let Some(c) = cycles.get_mut(r.cycle as usize) else {
                continue;
            };
            if r.thread == 0 {
                c.start_ns = r.start_ns;
                c.missed = r.end_ns == 0 || r.end_ns > r.deadline_ns;
            }
            c.demand_ns += r.demand_ns;
            c.used_ns += r.cpu_ns;
            c.reserved_ns += r.budget_per_cycle();
            if r.thread < THREADS {
                c.cpu_ns[r.thread] = r.cpu_ns;
                c.budget_ns[r.thread] = r.budget_per_cycle();
            }
        }
        cycles
    }
}

fn parse_row(line: &str) -> Option<HostRow> {
    let f: Vec<u64> = line
        .split('\t')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let [thread, cycle, start_ns, end_ns, deadline_ns, demand_ns, cpu_ns, budget_ns, budget_period_ns, call_ns] =
        f[..]
    else {
        return None;
    };
    Some(HostRow {
        thread: thread as usize,
        cycle,
        start_ns,
        end_ns,
        deadline_ns,
        demand_ns,
        cpu_ns,
        budget_ns,
        budget_period_ns,
        call_ns,
    })
}

/// One cycle of the grid, summed over the threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Cycle {
    pub index: u64,
    pub start_ns: u64,
    /// The callback finished after the deadline, or the cycle was skipped.
    pub missed: bool,
    /// The plug-ins' work asked, and the CPU time the threads used for
    /// the cycle (the plug-ins and everything around them).
    pub demand_ns: u64,
    pub used_ns: u64,
    /// The members' budgets per cycle, summed.
    pub reserved_ns: u64,
    /// Each thread's CPU time, and its budget per cycle.
    pub cpu_ns: [u64; THREADS],
    pub budget_ns: [u64; THREADS],
}

impl Cycle {
    fn skipped(index: u64) -> Cycle {
        Cycle {
            index,
            start_ns: 0,
            missed: true,
            demand_ns: 0,
            used_ns: 0,
            reserved_ns: 0,
            cpu_ns: [0; THREADS],
            budget_ns: [0; THREADS],
        }
    }
}

/// The chain's work in `phase` (the run starts low).
pub(super) fn pct_of_phase(phase: u64) -> u64 {
    if phase.is_multiple_of(2) {
        LOW_PCT
    } else {
        HIGH_PCT
    }
}

/// One configuration's figures from its host's record; `step_cycles`
/// cycles between two steps.
pub(super) fn figures(
    config: Config,
    record: &HostRecord,
    step_cycles: u64,
    notes: Vec<String>,
) -> ConfigResult {
    let cycles = record.cycles();
    let phases: Vec<&[Cycle]> = cycles.chunks(step_cycles.max(1) as usize).collect();
    let steps: Vec<StepResult> = phases
        .iter()
        .enumerate()
        .skip(1)
        .map(|(phase, cycles)| step(phase as u64, cycles, step_cycles))
        .collect();
    let up = steps.iter().filter(|s| s.to_pct > s.from_pct);
    let converge_up_cycles = up
        .map(|s| s.converged_after)
        .collect::<Option<Vec<u64>>>()
        .and_then(|v| v.into_iter().max());
    let high: Vec<&Cycle> = phases
        .iter()
        .enumerate()
        .filter(|(phase, _)| pct_of_phase(*phase as u64) == HIGH_PCT)
        .flat_map(|(_, cycles)| second_half(cycles))
        .collect();
    let calls: Vec<f64> = record
        .rows
        .iter()
        .filter(|r| r.call_ns > 0)
        .map(|r| r.call_ns as f64)
        .collect();
    ConfigResult {
        config,
        scheduling: config.scheduling(),
        cycles: cycles.len() as u64,
        missed: cycles.iter().filter(|c| c.missed).count() as u64,
        steps,
        converge_up_cycles,
        reserved_per_p99_demand: reserved_per_p99_demand(&high),
        threads: thread_figures(&high),
        call_ns: (!calls.is_empty()).then(|| Summary::from_samples(&calls, None)),
        joined: record.joined.clone(),
        notes,
    }
}

fn step(phase: u64, cycles: &[Cycle], step_cycles: u64) -> StepResult {
    StepResult {
        at_s: (phase * step_cycles * PERIOD_NS) as f64 / 1e9,
        from_pct: pct_of_phase(phase - 1),
        to_pct: pct_of_phase(phase),
        cycles: cycles.len() as u64,
        missed: cycles.iter().filter(|c| c.missed).count() as u64,
        converged_after: converged_after(cycles),
    }
}

fn second_half(cycles: &[Cycle]) -> &[Cycle] {
    &cycles[cycles.len() / 2..]
}

/// Cycles from the phase's start until the reserved budget is within
/// [`SETTLED_BAND`] of its median over the phase's second half for
/// [`SETTLED_CYCLES`] cycles in a row. (Not "stays within it to the
/// phase's end": the predictor follows each cycle, so one cycle a
/// preemption or a stolen vCPU lengthened lifts the budget out of the band
/// for a window anywhere in the phase, and the last such excursion would
/// be counted as the step's convergence.)
fn converged_after(cycles: &[Cycle]) -> Option<u64> {
    let settled = median(second_half(cycles).iter().map(|c| c.reserved_ns))?;
    if settled == 0 {
        return None;
    }
    let band = settled as f64 * SETTLED_BAND;
    let within = |c: &Cycle| (c.reserved_ns as f64 - settled as f64).abs() <= band;
    cycles
        .windows(SETTLED_CYCLES)
        .position(|w| w.iter().all(within))
        .map(|i| i as u64)
}

fn reserved_per_p99_demand(cycles: &[&Cycle]) -> Option<f64> {
    let reserved = median(cycles.iter().map(|c| c.reserved_ns)).filter(|&r| r > 0)?;
    let demand: f64 = (0..THREADS).map(|t| p99_cpu_ns(cycles, t)).sum();
    (demand > 0.0).then(|| reserved as f64 / demand)
}

fn p99_cpu_ns(cycles: &[&Cycle], thread: usize) -> f64 {
    let cpu: Vec<f64> = cycles.iter().map(|c| c.cpu_ns[thread] as f64).collect();
    Summary::from_samples(&cpu, None).p99
}

/// Each thread's p99 CPU time and median budget per cycle over `cycles`
/// (empty when nothing was measured).
fn thread_figures(cycles: &[&Cycle]) -> Vec<ThreadFigures> {
    if cycles.is_empty() {
        return Vec::new();
    }
    (0..THREADS)
        .map(|t| ThreadFigures {
            thread: t,
            p99_cpu_ns: p99_cpu_ns(cycles, t),
            median_budget_ns: median(cycles.iter().map(|c| c.budget_ns[t])).unwrap_or(0),
        })
        .collect()
}

fn median(values: impl Iterator<Item = u64>) -> Option<u64> {
    let mut v: Vec<u64> = values.collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cycle's four rows: each thread's share of `pct` of the period,
    /// used as asked, `budget_pct` of the period reserved for each.
    fn rows(k: u64, pct: u64, budget_pct: u64, late: bool) -> Vec<HostRow> {
        let start = k * PERIOD_NS;
        let share = PERIOD_NS * pct / 100 / THREADS as u64;
        (0..THREADS)
            .map(|thread| HostRow {
                thread,
                cycle: k,
                start_ns: start,
                end_ns: start + if late { PERIOD_NS + 1 } else { PERIOD_NS / 2 },
                deadline_ns: start + PERIOD_NS,
                demand_ns: share,
                cpu_ns: share,
                budget_ns: PERIOD_NS * budget_pct / 100,
                budget_period_ns: PERIOD_NS,
                call_ns: 800,
            })
            .collect()
    }

    /// Two phases of `n` cycles: low, then high, its budget settling
    /// `lag` cycles after the step, with `late` misses right after it.
    fn record(n: u64, lag: u64, late: u64) -> HostRecord {
        let mut all = Vec::new();
        for k in 0..2 * n {
            let high = k >= n;
            let settled = !high || k >= n + lag;
            let budget = if settled && high { 21 } else { 9 };
            let pct = if high { HIGH_PCT } else { LOW_PCT };
            all.extend(rows(k, pct, budget, high && k < n + late));
        }
        HostRecord {
            mode: "workgroup".into(),
            joined: vec![0; THREADS],
            rows: all,
        }
    }

    #[test]
    fn a_step_counts_its_misses_and_the_cycles_its_budget_took_to_settle() {
        let r = figures(Config::Workgroup, &record(100, 12, 1), 100, Vec::new());
        assert_eq!((r.cycles, r.missed), (200, 1));
        let [s] = r.steps.as_slice() else {
            panic!("{:?}", r.steps)
        };
        assert_eq!((s.from_pct, s.to_pct, s.missed), (LOW_PCT, HIGH_PCT, 1));
        assert_eq!(s.converged_after, Some(12));
        assert_eq!(r.converge_up_cycles, Some(12));
        // 4 × 21 % reserved over 4 × 17.5 % used.
        let ratio = r.reserved_per_p99_demand.unwrap();
        assert!((ratio - 1.2).abs() < 0.01, "{ratio}");
        assert_eq!(r.call_ns.unwrap().p99, 800.0);
    }

    #[test]
    fn nothing_reserved_has_no_convergence_nor_ratio() {
        let mut record = record(50, 0, 0);
        for row in &mut record.rows {
            (row.budget_ns, row.budget_period_ns, row.call_ns) = (0, 0, 0);
        }
        let r = figures(Config::Fifo, &record, 50, Vec::new());
        assert_eq!(r.steps[0].converged_after, None);
        assert_eq!((r.reserved_per_p99_demand, r.call_ns), (None, None));
    }

    #[test]
    fn the_hosts_file_reads_back_and_skipped_cycles_are_missed() {
        let text = "# tessera-workgroup-host 1\n# mode workgroup\n# joined 0 0 1 0\n\
                    thread\tcycle\tstart_ns\tend_ns\tdeadline_ns\tdemand_ns\tcpu_ns\tbudget_ns\tbudget_period_ns\tcall_ns\n\
                    0\t0\t100\t150\t200\t20\t21\t30\t100\t700\n\
                    1\t0\t100\t140\t200\t20\t22\t30\t100\t650\n\
                    0\t1\t200\t0\t300\t0\t0\t0\t0\t0\n";
        let r = HostRecord::parse(text).unwrap();
        assert_eq!(
            (r.mode.as_str(), r.joined.as_slice()),
            ("workgroup", &[0, 0, 1, 0][..])
        );
        let cycles = r.cycles();
        assert_eq!(cycles.len(), 2);
        assert!(!cycles[0].missed && cycles[1].missed);
        assert_eq!((cycles[0].used_ns, cycles[0].cpu_ns[1]), (43, 22));
        assert!(HostRecord::parse("# other\n").is_err());
        assert!(HostRecord::parse(&format!("{text}1\t2\n")).is_err());
    }
}
