//! cgroupfs for the two controllers tessera uses: `cpuset` (exclusive cores,
//! partitions for per-core SCHED_DEADLINE root domains, shielding) and `cpu`
//! (weights of best-effort cells), on cgroup v1 (one mount per controller, as
//! on the project's machines) and v2 (the unified hierarchy).
//!
//! It owns the file names and value formats of each version. It must never
//! decide which cores go where: that is the broker's.

use crate::error::{read_text, write_text, Error, ErrorKind, Result};
use crate::kernel::{format_cpu_list, parse_cpu_list};
use crate::proc::Pid;
use crate::sched::Tid;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A controller's hierarchy: where it is mounted and in which version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub version: Version,
    pub mount: PathBuf,
    /// The controller it was found for (`cpuset`, `cpu`).
    pub controller: &'static str,
}

/// One cgroup directory of a hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub version: Version,
    pub path: PathBuf,
    /// Its hierarchy's mount and controller, to find a thread's group from
    /// /proc/TID/cgroup.
    mount: PathBuf,
    controller: &'static str,
}

impl Hierarchy {
    /// Finds the cpuset controller (v1 mount first, then v2).
    pub fn cpuset() -> Result<Hierarchy> {
        Self::find("cpuset")
    }

    /// Finds the cpu controller (v1 mount first, then v2).
    pub fn cpu() -> Result<Hierarchy> {
        Self::find("cpu")
    }

    fn find(controller: &'static str) -> Result<Hierarchy> {
        let mounts = read_text(Path::new("/proc/self/mounts"))?;
        let mut unified = None;
        for line in mounts.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 4 {
                continue;
            }
            match f[2] {
                "cgroup" if f[3].split(',').any(|o| o == controller) => {
                    return Ok(Hierarchy {
                        version: Version::V1,
                        mount: PathBuf::from(f[1]),
                        controller,
                    })
                }
                "cgroup2" => unified = Some(PathBuf::from(f[1])),
                _ => {}
            }
        }
        let mount = unified.filter(|m| {
            read_text(&m.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|w| w == controller))
        });
        mount
            .map(|mount| Hierarchy {
                version: Version::V2,
                mount,
                controller,
            })
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unsupported,
                    format!("find the {controller} cgroup controller"),
                    format!("no cgroup v1 mount with {controller} and no cgroup v2 hierarchy offering it"),
                    format!(
                        "mount it: `mount -t cgroup -o {controller} none /sys/fs/cgroup/{controller}` \
                         (v1) or enable it in the v2 root's cgroup.subtree_control"
                    ),
                )
            })
    }

    pub fn root(&self) -> Group {
        Group {
            version: self.version,
            path: self.mount.clone(),
            mount: self.mount.clone(),
            controller: self.controller,
        }
    }
}

impl Group {
    pub fn child(&self, name: &str) -> Group {
        Group {
            path: self.path.join(name),
            ..self.clone()
        }
    }

    /// Whether thread `tid` is in this group, from its /proc/TID/cgroup:
    /// one short file, where this group's task list would be read and
    /// sorted whole by the kernel (the root's holds every task).
    pub fn holds(&self, tid: Tid) -> bool {
        let controller = match self.version {
            Version::V1 => Some(self.controller),
            Version::V2 => None,
        };
        crate::proc::cgroup_of(tid, controller)
            .is_ok_and(|rel| self.mount.join(rel.trim_start_matches('/')) == self.path)
    }

    pub fn exists(&self) -> bool {
        self.path.is_dir()
    }

    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Creates the directory; on v2 first enables `controllers` for children
    /// of the parent.
    pub fn create(&self, controllers: &[&str]) -> Result<()> {
        if self.exists() {
            return Ok(());
        }
        if self.version == Version::V2 {
            if let Some(parent) = self.path.parent() {
                for c in controllers {
                    // Already-enabled controllers make this a no-op.
                    write_text(&parent.join("cgroup.subtree_control"), &format!("+{c}"))?;
                }
            }
        }
        std::fs::create_dir(&self.path)
            .map_err(|e| Error::from_io(format!("create cgroup {}", self.path.display()), &e))
    }

    /// Removes the (empty) directory.
    pub fn remove(&self) -> Result<()> {
        if !self.exists() {
            return Ok(());
        }
        std::fs::remove_dir(&self.path).map_err(|e| {
            let err = Error::from_io(format!("remove cgroup {}", self.path.display()), &e);
            if e.raw_os_error() == Some(libc::EBUSY) {
                err.with_cause("it still has tasks or child groups")
                    .with_fix("move its tasks out first (`tessera reset` does)")
            } else {
                err
            }
        })
    }

    /// Child groups, by name order.
    pub fn children(&self) -> Vec<Group> {
        let Ok(entries) = std::fs::read_dir(&self.path) else {
            return Vec::new();
        };
        let mut out: Vec<Group> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| self.child(&e.file_name().to_string_lossy()))
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    fn file(&self, v1: &str, v2: &str) -> PathBuf {
        self.path.join(match self.version {
            Version::V1 => v1,
            Version::V2 => v2,
        })
    }

    fn read(&self, v1: &str, v2: &str) -> Result<String> {
        read_text(&self.file(v1, v2)).map(|s| s.trim().to_string())
    }

    fn write(&self, v1: &str, v2: &str, value: &str) -> Result<()> {
        write_text(&self.file(v1, v2), value).map_err(|e| self.explain_write(e))
    }

    fn explain_write(&self, err: Error) -> Error {
        let name = self.path.display();
        match err.errno {
            Some(libc::EBUSY) => err.with_cause(format!(
                "the kernel refused: {name} would overlap an exclusive sibling, or a \
                 SCHED_DEADLINE task's bandwidth would no longer fit"
            )),
            Some(libc::EINVAL) => err.with_cause(format!(
                "the kernel refused the value for {name}: CPUs must be online and within the parent's"
            )),
            Some(libc::ENOSPC) => err.with_cause(format!("{name} has no CPUs or memory nodes yet")),
            Some(libc::EACCES) | Some(libc::EPERM) => err
                .with_cause("cgroupfs writes need root")
                .with_fix("run as root; without it tessera runs best-effort"),
            _ => err,
        }
    }

    pub fn cpus(&self) -> Result<Vec<usize>> {
        parse_cpu_list(&self.read("cpuset.cpus", "cpuset.cpus")?)
    }

    pub fn set_cpus(&self, cpus: &[usize]) -> Result<()> {
        self.write("cpuset.cpus", "cpuset.cpus", &format_cpu_list(cpus))
    }

    pub fn effective_cpus(&self) -> Result<Vec<usize>> {
        parse_cpu_list(&self.read("cpuset.effective_cpus", "cpuset.cpus.effective")?)
    }

    pub fn mems(&self) -> Result<String> {
        self.read("cpuset.mems", "cpuset.mems.effective")
    }

    pub fn set_mems(&self, mems: &str) -> Result<()> {
        self.write("cpuset.mems", "cpuset.mems", mems)
    }

    /// v1 `cpuset.cpu_exclusive`; v2 a `root` partition.
    pub fn exclusive(&self) -> Result<bool> {
        let v = self.read("cpuset.cpu_exclusive", "cpuset.cpus.partition")?;
        Ok(v == "1" || v.starts_with("root") || v.starts_with("isolated"))
    }

    pub fn set_exclusive(&self, on: bool) -> Result<()> {
        let value = match (self.version, on) {
            (Version::V1, true) => "1",
            (Version::V1, false) => "0",
            (Version::V2, true) => "root",
            (Version::V2, false) => "member",
        };
        self.write("cpuset.cpu_exclusive", "cpuset.cpus.partition", value)
    }

    /// v1 `cpuset.sched_load_balance`; on v2 partitions replace it (always true).
    pub fn load_balance(&self) -> Result<bool> {
        match self.version {
            Version::V1 => Ok(self.read("cpuset.sched_load_balance", "")? == "1"),
            Version::V2 => Ok(true),
        }
    }

    pub fn set_load_balance(&self, on: bool) -> Result<()> {
        match self.version {
            Version::V1 => self.write("cpuset.sched_load_balance", "", if on { "1" } else { "0" }),
            Version::V2 => Ok(()),
        }
    }

    /// The threads in this group (v1 `tasks`, v2 `cgroup.threads`).
    pub fn threads(&self) -> Result<Vec<Tid>> {
        parse_ids(&self.read("tasks", "cgroup.threads")?)
    }

    pub fn processes(&self) -> Result<Vec<Pid>> {
        parse_ids(&self.read("cgroup.procs", "cgroup.procs")?)
    }

    /// Moves one thread here. On v2 a single thread moves only inside a
    /// threaded subtree; elsewhere its whole process must move.
    pub fn add_thread(&self, tid: Tid) -> Result<()> {
        self.write("tasks", "cgroup.threads", &tid.to_string())
    }

    pub fn add_process(&self, pid: Pid) -> Result<()> {
        self.write("cgroup.procs", "cgroup.procs", &pid.to_string())
    }

    /// A relative CPU weight (1–10000, 100 is the default) for the `cpu`
    /// controller: v2 `cpu.weight`, v1 `cpu.shares` scaled so 100 ↦ 1024.
    pub fn set_weight(&self, weight: u32) -> Result<()> {
        let weight = weight.clamp(1, 10_000);
        match self.version {
            Version::V1 => self.write(
                "cpu.shares",
                "",
                &(weight as u64 * 1024 / 100).max(2).to_string(),
            ),
            Version::V2 => self.write("", "cpu.weight", &weight.to_string()),
        }
    }
}

fn parse_ids(text: &str) -> Result<Vec<i32>> {
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}
