//! Text output of the commands (the `--json` forms are the serde ones).

use crate::failure::{failed, Failure};
use serde::Serialize;
use std::fmt::Write;
use std::process::ExitCode;
use tessera_broker::broker::ResetReport;
use tessera_broker::{CellInfo, StatusReport};
use tessera_policy::{CellPolicy, CoreMode};

/// Prints `value` as JSON or through `text`.
pub fn print<T: Serialize>(
    json: bool,
    value: &T,
    text: impl Fn(&T) -> String,
) -> Result<ExitCode, Failure> {
    if json {
        let out = serde_json::to_string_pretty(value).map_err(|e| failed(e.to_string(), ""))?;
        println!("{out}");
    } else {
        print!("{}", text(value));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn status(s: &StatusReport) -> String {
    let mut out = String::new();
    if let Some(b) = &s.banner {
        let _ = writeln!(out, "!! {b}\n");
    }
    let _ = writeln!(
        out,
        "tessera {} — broker: {} — kernel {}",
        s.version, s.broker, s.kernel
    );
    let _ = writeln!(
        out,
        "deadline capacity per core: {} ({})\n",
        s.capacity_per_core, s.capacity_source
    );
    let _ = writeln!(
        out,
        "{:<6} {:<12} {:>8} {:>8}  cells",
        "core", "mode", "reserved", "free"
    );
    for c in &s.cores {
        let mode = match &c.mode {
            CoreMode::Shared => "shared".to_string(),
            CoreMode::Partitioned => "partitioned".to_string(),
            CoreMode::Dedicated(_) => "dedicated".to_string(),
        };
        let (reserved, free) = match c.mode {
            CoreMode::Dedicated(_) => ("1.00".to_string(), "0.00".to_string()),
            CoreMode::Shared => ("-".to_string(), "-".to_string()),
            CoreMode::Partitioned => (c.reserved.to_string(), c.free().to_string()),
        };
        let _ = writeln!(
            out,
            "{:<6} {:<12} {:>8} {:>8}  {}",
            c.core,
            mode,
            reserved,
            free,
            c.cells.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "global reservations on the shared cores: {}\n",
        s.global_reserved
    );
    out.push_str(&cells(&s.cells));
    out
}

pub fn cells(list: &[CellInfo]) -> String {
    if list.is_empty() {
        return "no cells\n".into();
    }
    // Columns as wide as their widest entry, so long budgets stay aligned.
    let allocations: Vec<String> = list.iter().map(allocation).collect();
    let name_w = list
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let alloc_w = allocations
        .iter()
        .map(|a| a.chars().count())
        .max()
        .unwrap_or(0)
        .max(10);
    let mut out = format!(
        "{:<name_w$}  {:<15}  {:<alloc_w$}  {:>9}  {:>7}  owner\n",
        "cell", "policy", "allocation", "bandwidth", "threads"
    );
    for (c, alloc) in list.iter().zip(&allocations) {
        let _ = writeln!(
            out,
            "{:<name_w$}  {:<15}  {:<alloc_w$}  {:>9}  {:>7}  uid {}{}",
            c.name,
            c.grant.request.policy.name(),
            alloc,
            c.bandwidth.to_string(),
            c.members.len(),
            c.owner_uid,
            c.bound_to_pid
                .map(|p| format!(", until pid {p} exits"))
                .unwrap_or_default()
        );
    }
    out
}

fn allocation(c: &CellInfo) -> String {
    let g = &c.grant;
    let pinned = match (g.request.pinned, g.request.owner_adapts) {
        (true, _) => " pinned",
        (false, true) => " owner adapts",
        (false, false) => "",
    };
    match g.request.policy {
        CellPolicy::Dedicated => format!("cores {:?}{pinned}", g.dedicated),
        CellPolicy::BestEffort => format!("weight {}", g.request.weight),
        _ => {
            let cores: Vec<String> = g
                .reservations
                .iter()
                .map(|r| {
                    r.core
                        .map(|k| k.to_string())
                        .unwrap_or_else(|| "any".into())
                })
                .collect();
            let budget = g.request.budget.map(|b| b.to_string()).unwrap_or_default();
            format!("{budget} on [{}]{pinned}", cores.join(","))
        }
    }
}

pub fn cell(c: &CellInfo) -> String {
    let mut out = cells(std::slice::from_ref(c));
    if let Some(free) = c.free_slots {
        let _ = writeln!(
            out,
            "reservation slots free: {free} (one thread per reservation)"
        );
    }
    for m in &c.members {
        let _ = writeln!(
            out,
            "  thread {} of process {} ({}), slot {}, was {}",
            m.tid,
            m.pid,
            tessera_sys::proc::thread_name(m.pid, m.tid),
            m.slot.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
            m.original.policy
        );
    }
    out
}

pub fn created(c: &CellInfo) -> String {
    format!("cell {:?} created\n{}", c.name, cell(c))
}

pub fn reset(r: &ResetReport) -> String {
    format!(
        "reset: {} cell(s) destroyed {:?}, {} thread(s) restored, {} cpuset group(s) removed{}\nthe machine's cpusets, load balancing and scheduling are as before tessera\n",
        r.cells_destroyed.len(),
        r.cells_destroyed,
        r.threads_restored,
        r.groups_removed,
        if r.deadline_threads_demoted.is_empty() {
            String::new()
        } else {
            format!(", orphaned deadline threads demoted to SCHED_OTHER: {:?}", r.deadline_threads_demoted)
        }
    )
}
