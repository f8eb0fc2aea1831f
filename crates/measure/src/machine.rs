//! The description of the machine a run measured: CPU model, core count,
//! kernel, and whether (and under which hypervisor) it is virtual; and how
//! much CPU time the hypervisor took from it during a run (steal time).
//!
//! Owns reading those facts from plain files under /proc and /sys. It must
//! never fail a run: an unreadable file only makes the description vaguer.

use std::fs;

use crate::results::Counter;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInfo {
    pub cpu_model: String,
    /// Logical CPUs listed in /proc/cpuinfo.
    pub cores: usize,
    /// Kernel release, e.g. "6.18.44".
    pub kernel: String,
    pub virtualized: bool,
    pub hypervisor: Option<String>,
    pub hostname: String,
}

/// The contents of the files a [`MachineInfo`] is made from ("" if unreadable).
#[derive(Clone, Copy, Debug, Default)]
pub struct MachineFiles<'a> {
    /// /proc/cpuinfo
    pub cpuinfo: &'a str,
    /// /proc/sys/kernel/osrelease
    pub osrelease: &'a str,
    /// /proc/sys/kernel/hostname
    pub hostname: &'a str,
    /// /sys/devices/system/clocksource/clocksource0/available_clocksource
    pub clocksources: &'a str,
    /// /sys/class/dmi/id/sys_vendor
    pub sys_vendor: &'a str,
}

/// Paravirtual clock sources name the hypervisor more precisely than DMI
/// (a KVM guest's DMI vendor says "QEMU" or "Amazon EC2").
const HYPERVISOR_CLOCKSOURCES: [(&str, &str); 3] = [
    ("kvm-clock", "KVM"),
    ("xen", "Xen"),
    ("hyperv_clocksource", "Hyper-V"),
];

impl MachineInfo {
    /// Describes this machine from /proc and /sys.
    pub fn detect() -> MachineInfo {
        let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
        let (cpuinfo, osrelease, hostname, clocksources, sys_vendor) = (
            read("/proc/cpuinfo"),
            read("/proc/sys/kernel/osrelease"),
            read("/proc/sys/kernel/hostname"),
            read("/sys/devices/system/clocksource/clocksource0/available_clocksource"),
            read("/sys/class/dmi/id/sys_vendor"),
        );
        let mut info = MachineInfo::from_files(&MachineFiles {
            cpuinfo: &cpuinfo,
            osrelease: &osrelease,
            hostname: &hostname,
            clocksources: &clocksources,
            sys_vendor: &sys_vendor,
        });
        if info.cores == 0 {
            info.cores = std::thread::available_parallelism().map_or(0, usize::from);
        }
        info
    }

    /// Describes a machine from the contents of its files.
    pub fn from_files(files: &MachineFiles) -> MachineInfo {
        let cpuinfo_field = |key: &str| {
            files.cpuinfo.lines().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
        };
        let cores = files
            .cpuinfo
            .lines()
            .filter(|line| line.split(':').next().map(str::trim) == Some("processor"))
            .count();
        let hypervisor_flag = cpuinfo_field("flags")
            .is_some_and(|flags| flags.split_whitespace().any(|f| f == "hypervisor"));
        let hypervisor = clocksource_hypervisor(files.clocksources).or_else(|| {
            let vendor = files.sys_vendor.trim();
            (hypervisor_flag && !vendor.is_empty()).then(|| vendor.to_string())
        });
        MachineInfo {
            cpu_model: cpuinfo_field("model name")
                .or_else(|| cpuinfo_field("Hardware"))
                .unwrap_or_else(|| "unknown CPU".to_string()),
            cores,
            kernel: non_empty_or_unknown(files.osrelease),
            virtualized: hypervisor_flag || hypervisor.is_some(),
            hypervisor,
            hostname: non_empty_or_unknown(files.hostname),
        }
    }

    /// One line, e.g. "AMD EPYC, 2 cores, Linux 6.18.44, virtual (KVM)".
    pub fn describe(&self) -> String {
        let cores = match self.cores {
            1 => "1 core".to_string(),
            n => format!("{n} cores"),
        };
        let kind = match (self.virtualized, &self.hypervisor) {
            (false, _) => "physical".to_string(),
            (true, Some(name)) => format!("virtual ({name})"),
            (true, None) => "virtual (unknown hypervisor)".to_string(),
        };
        format!("{}, {cores}, Linux {}, {kind}", self.cpu_model, self.kernel)
    }
}

fn clocksource_hypervisor(clocksources: &str) -> Option<String> {
    let available: Vec<&str> = clocksources.split_whitespace().collect();
    HYPERVISOR_CLOCKSOURCES.iter().find_map(|&(prefix, name)| {
        available
            .iter()
            .any(|source| source.starts_with(prefix))
            .then(|| name.to_string())
    })
}

fn non_empty_or_unknown(text: &str) -> String {
    match text.trim() {
        "" => "unknown".to_string(),
        t => t.to_string(),
    }
}

/// The machine's CPU time when a run started: [`MachineWatch::taken`]
/// says how much of it the hypervisor ran something else while a vCPU
/// had work since then (steal time: stalls no scheduling inside the
/// machine can prevent), and how busy its CPUs were (what a tool beside
/// the run, a tracer, costs the whole machine).
pub struct MachineWatch {
    steal_before: Option<Vec<(usize, u64)>>,
    busy_before: Option<u64>,
    started: std::time::Instant,
}

/// The machine's CPU time over a run (/proc/stat, in clock ticks).
#[derive(Debug, Clone, PartialEq)]
pub struct MachineTime {
    /// (cpu, ns stolen); empty when /proc/stat was unreadable.
    pub steal_per_cpu_ns: Vec<(usize, u64)>,
    /// Busy time of all CPUs (user, nice, system, interrupts) as a share
    /// of all of them over the run, in %.
    pub busy_pct: Option<f64>,
}

impl MachineWatch {
    pub fn start() -> MachineWatch {
        MachineWatch {
            steal_before: tessera_sys::proc::cpu_steal_ns().ok(),
            busy_before: tessera_sys::proc::cpus_busy_ns().ok(),
            started: std::time::Instant::now(),
        }
    }

    /// The machine's time since [`MachineWatch::start`].
    pub fn taken(&self) -> MachineTime {
        let steal_per_cpu_ns = match (&self.steal_before, tessera_sys::proc::cpu_steal_ns()) {
            (Some(before), Ok(after)) => before
                .iter()
                .zip(&after)
                .map(|(&(cpu, b), &(_, a))| (cpu, a.saturating_sub(b)))
                .collect(),
            _ => Vec::new(),
        };
        let elapsed_ns = self.started.elapsed().as_nanos() as f64;
        let cpus = tessera_sys::kernel::online_cpus().map_or(0, |c| c.len()) as f64;
        let busy_pct = match (self.busy_before, tessera_sys::proc::cpus_busy_ns()) {
            (Some(before), Ok(after)) if elapsed_ns > 0.0 && cpus > 0.0 => {
                Some(after.saturating_sub(before) as f64 / (elapsed_ns * cpus) * 100.0)
            }
            _ => None,
        };
        MachineTime {
            steal_per_cpu_ns,
            busy_pct,
        }
    }
}

impl MachineTime {
    /// "steal time …: cpu0 12 ms, cpu1 40 ms" (none when unread).
    pub fn note(&self) -> Option<String> {
        if self.steal_per_cpu_ns.is_empty() {
            return None;
        }
        let per_cpu: Vec<String> = self
            .steal_per_cpu_ns
            .iter()
            .map(|(cpu, ns)| format!("cpu{cpu} {:.0} ms", *ns as f64 / 1e6))
            .collect();
        Some(format!(
            "steal time (the hypervisor running something else while a vCPU had work; \
             /proc/stat, in clock ticks): {}",
            per_cpu.join(", ")
        ))
    }

    /// A counter per vCPU, "steal time cpuN" in ms, and "machine CPU busy"
    /// in % of all CPUs.
    pub fn counters(&self) -> Vec<Counter> {
        let steal = self
            .steal_per_cpu_ns
            .iter()
            .map(|(cpu, ns)| Counter::new(format!("steal time cpu{cpu}"), *ns as f64 / 1e6, "ms"));
        let busy = self
            .busy_pct
            .map(|pct| Counter::new(MACHINE_BUSY, pct, "%"));
        steal.chain(busy).collect()
    }
}

/// The counter of all CPUs' busy time over a configuration.
pub const MACHINE_BUSY: &str = "machine CPU busy";

#[cfg(test)]
mod tests {
    use super::*;

    const KVM_CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n\
        flags\t\t: fpu vme hypervisor lahf_lm\n\nprocessor\t: 1\nmodel name\t: AMD EPYC\n\
        flags\t\t: fpu vme hypervisor lahf_lm\n";

    #[test]
    fn kvm_guest() {
        let m = MachineInfo::from_files(&MachineFiles {
            cpuinfo: KVM_CPUINFO,
            osrelease: "6.18.44\n",
            hostname: "vm\n",
            clocksources: "tsc kvm-clock \n",
            sys_vendor: "",
        });
        assert_eq!(m.cores, 2);
        assert_eq!((m.kernel.as_str(), m.hostname.as_str()), ("6.18.44", "vm"));
        assert!(m.virtualized);
        assert_eq!(
            m.describe(),
            "AMD EPYC, 2 cores, Linux 6.18.44, virtual (KVM)"
        );
    }

    #[test]
    fn dmi_vendor_names_other_hypervisors_only_when_flagged() {
        let files = MachineFiles {
            cpuinfo: "processor : 0\nmodel name : Intel Xeon\nflags : fpu hypervisor\n",
            sys_vendor: "VMware, Inc.\n",
            ..MachineFiles::default()
        };
        let m = MachineInfo::from_files(&files);
        assert_eq!(m.hypervisor.as_deref(), Some("VMware, Inc."));
        assert_eq!(
            m.describe(),
            "Intel Xeon, 1 core, Linux unknown, virtual (VMware, Inc.)"
        );

        let physical = MachineInfo::from_files(&MachineFiles {
            cpuinfo: "processor : 0\nmodel name : Intel Xeon\nflags : fpu\n",
            sys_vendor: "Dell Inc.\n",
            ..MachineFiles::default()
        });
        assert!(!physical.virtualized);
        assert_eq!(physical.hypervisor, None);
        assert!(physical.describe().ends_with(", physical"));
    }

    #[test]
    fn unreadable_files_give_a_vague_description() {
        let m = MachineInfo::from_files(&MachineFiles::default());
        assert_eq!(
            m.describe(),
            "unknown CPU, 0 cores, Linux unknown, physical"
        );
    }

    #[test]
    fn detect_reads_this_machine_and_round_trips_as_json() {
        let m = MachineInfo::detect();
        assert!(m.cores >= 1);
        assert_ne!(m.kernel, "unknown");
        let back: MachineInfo = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}
