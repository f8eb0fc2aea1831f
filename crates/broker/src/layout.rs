//! The cpuset layout that realises the ledger's core modes on the kernel.
//!
//! cgroup v1 (as `cset shield` does): `tessera/` (exclusive, no load
//! balancing) holds `system` — the shared cores, where every other task of
//! the machine is moved — plus `core<K>` for each partitioned core and
//! `cell-<name>` for each dedicated cell, each exclusive with load balancing
//! on, so each is a root domain of its own and SCHED_DEADLINE admits per core.
//! The root's `sched_load_balance` is turned off and restored at teardown.
//!
//! cgroup v2: partitions need no task moves; `tessera-core<K>` and
//! `tessera-cell-<name>` are top-level groups with `cpuset.cpus.partition =
//! root`, which takes their CPUs from everyone else.
//!
//! It must never decide which cores are which (the ledger does) and never
//! leave a group behind when no cell needs one.

use crate::state::Snapshot;
use std::time::Duration;
use tessera_policy::{CoreMode, Ledger};
use tessera_sys::cgroup::{Group, Hierarchy, Version};
use tessera_sys::{Error, ErrorKind, Result};

const TOP: &str = "tessera";

/// The waits before a layout change refused for SCHED_DEADLINE bandwidth is
/// tried again (longer than the deadlines of the threads tessera reserves).
const BANDWIDTH_RELEASE_WAITS: [Duration; 4] = [
    Duration::from_millis(5),
    Duration::from_millis(20),
    Duration::from_millis(50),
    Duration::from_millis(100),
];

#[derive(Debug, Clone)]
pub struct Layout {
    pub hierarchy: Hierarchy,
}

/// A group the layout wants, with its CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Wanted {
    name: String,
    cpus: Vec<usize>,
}

/// What the cpuset tree follows from a ledger: the groups it wants and
/// the cores left shared. While it stays the same, every member stays
/// where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    groups: Vec<Wanted>,
    shared: Vec<usize>,
}

impl Layout {
    /// The shape `ledger` gives the cpuset tree (with or without one).
    pub fn shape(ledger: &Ledger) -> Shape {
        Shape {
            groups: Self::wanted(ledger),
            shared: ledger.shared_cores(),
        }
    }

    pub fn detect() -> Result<Layout> {
        Ok(Layout {
            hierarchy: Hierarchy::cpuset()?,
        })
    }

    fn v1(&self) -> bool {
        self.hierarchy.version == Version::V1
    }

    fn group(&self, name: &str) -> Group {
        match self.hierarchy.version {
            Version::V1 => self.hierarchy.root().child(TOP).child(name),
            Version::V2 => self.hierarchy.root().child(&format!("{TOP}-{name}")),
        }
    }

    /// The group of a partitioned core.
    pub fn core_group(&self, core: usize) -> Group {
        self.group(&format!("core{core}"))
    }

    /// The group of a dedicated cell.
    pub fn cell_group(&self, cell: &str) -> Group {
        self.group(&format!("cell-{cell}"))
    }

    /// Where threads of the shared cores live while the layout is active
    /// (on v1, its system group exists exactly then). Asked for every
    /// member a resize retunes: one stat, not a listing of the groups.
    pub fn system_group(&self) -> Group {
        let system = self.group("system");
        if self.v1() && system.exists() {
            system
        } else {
            self.hierarchy.root()
        }
    }

    /// Whether any tessera group exists now.
    pub fn is_active(&self) -> bool {
        !self.existing_groups().is_empty()
    }

    /// Tessera's groups present in the hierarchy (found on disk, not from
    /// state, so a reset after a lost state file still finds them).
    pub fn existing_groups(&self) -> Vec<Group> {
        let root = self.hierarchy.root();
        match self.hierarchy.version {
            Version::V1 => {
                let top = root.child(TOP);
                let mut groups = top.children();
                if top.exists() {
                    groups.push(top);
                }
                groups
            }
            Version::V2 => root
                .children()
                .into_iter()
                .filter(|g| g.name().starts_with(&format!("{TOP}-")))
                .collect(),
        }
    }

    fn wanted(ledger: &Ledger) -> Vec<Wanted> {
        let mut wanted = Vec::new();
        for usage in ledger.cores() {
            if usage.mode == CoreMode::Partitioned {
                wanted.push(Wanted {
                    name: format!("core{}", usage.core),
                    cpus: vec![usage.core],
                });
            }
        }
        for grant in ledger.grants().filter(|g| !g.dedicated.is_empty()) {
            wanted.push(Wanted {
                name: format!("cell-{}", grant.request.name),
                cpus: grant.dedicated.clone(),
            });
        }
        wanted
    }

    /// Makes the cpuset tree match the ledger: creates, resizes and removes
    /// groups; tears everything down when no core is partitioned or dedicated.
    /// A kernel refusal for SCHED_DEADLINE bandwidth is tried again a few
    /// times: the kernel frees a finished thread's reservation only at its
    /// 0-lag time (up to a deadline after it exits), so a layout change right
    /// after a cell's threads exit can be refused for bandwidth nobody holds.
    pub fn apply(&self, ledger: &Ledger, snapshot: &mut Snapshot) -> Result<()> {
        let mut waits = BANDWIDTH_RELEASE_WAITS.iter();
        loop {
            match self.apply_once(ledger, snapshot) {
                Err(e) if e.kind == ErrorKind::Busy => match waits.next() {
                    Some(&wait) => std::thread::sleep(wait),
                    None => return Err(e),
                },
                done => return done,
            }
        }
    }

    fn apply_once(&self, ledger: &Ledger, snapshot: &mut Snapshot) -> Result<()> {
        let wanted = Self::wanted(ledger);
        if wanted.is_empty() {
            return self.teardown(snapshot);
        }
        match self.hierarchy.version {
            Version::V1 => self.apply_v1(&wanted, &ledger.shared_cores(), snapshot),
            Version::V2 => self.apply_v2(&wanted),
        }
    }

    fn apply_v1(&self, wanted: &[Wanted], shared: &[usize], snapshot: &mut Snapshot) -> Result<()> {
        let root = self.hierarchy.root();
        if snapshot.root_load_balance.is_none() {
            snapshot.root_load_balance = Some(root.load_balance()?);
        }
        let mems = root.mems()?;
        let all = root.cpus()?;
        let top = root.child(TOP);
        let fresh = !top.exists();
        top.create(&[])?;
        if fresh {
            top.set_cpus(&all)?;
            top.set_mems(&mems)?;
            top.set_exclusive(true)
                .map_err(|e| overlapping_siblings(e, &root))?;
        }
        top.set_load_balance(false)?;
        let system = top.child("system");
        self.remove_stale(wanted, &system)?;
        system.create(&[])?;
        system.set_mems(&mems)?;
        system.set_cpus(shared)?;
        system.set_load_balance(true)?;
        for w in wanted {
            let g = top.child(&w.name);
            if !g.exists() {
                g.create(&[])?;
                g.set_mems(&mems)?;
                g.set_cpus(&w.cpus)?;
                g.set_exclusive(true)?;
                g.set_load_balance(true)?;
            }
        }
        // Shield: whatever still runs in the root moves to the shared cores.
        move_all(&root, &system)?;
        // Only now may the partitions become root domains of their own.
        if root.load_balance()? {
            root.set_load_balance(false)?;
        }
        Ok(())
    }

    fn apply_v2(&self, wanted: &[Wanted]) -> Result<()> {
        let root = self.hierarchy.root();
        self.remove_stale(wanted, &root)?;
        for w in wanted {
            let g = self.group(&w.name);
            if !g.exists() {
                g.create(&["cpuset"])?;
                g.set_cpus(&w.cpus)?;
                g.set_exclusive(true)?;
            }
        }
        Ok(())
    }

    /// Removes groups the ledger no longer wants, their tasks moved to `home`.
    fn remove_stale(&self, wanted: &[Wanted], home: &Group) -> Result<()> {
        for g in self.existing_groups() {
            let name = g.name();
            let short = name
                .strip_prefix(&format!("{TOP}-"))
                .unwrap_or(&name)
                .to_string();
            let keep = name == TOP || name == "system" || wanted.iter().any(|w| w.name == short);
            if !keep {
                match home.exists() {
                    true => empty_and_remove(&g, home)?,
                    false => g.remove()?,
                }
            }
        }
        Ok(())
    }

    /// Moves every task back and removes every tessera group; restores the
    /// root's load balancing. Safe to call when nothing is set up.
    pub fn teardown(&self, snapshot: &mut Snapshot) -> Result<()> {
        let root = self.hierarchy.root();
        let groups = self.existing_groups();
        // Children before the top group (existing_groups lists top last).
        for g in &groups {
            match g.name() == TOP {
                true => move_all(g, &root)?,
                false => empty_and_remove(g, &root)?,
            }
        }
        if self.v1() {
            let top = root.child(TOP);
            empty_and_remove(&top, &root)?;
            let balance = snapshot.root_load_balance.take().unwrap_or(true);
            if root.load_balance()? != balance {
                root.set_load_balance(balance)?;
            }
        }
        Ok(())
    }
}

/// How often a group is emptied again before its removal gives up: a task
/// that forks while its group is emptied leaves its child behind in it.
const REMOVE_ATTEMPTS: usize = 20;

/// Moves every task of `g` into `home` and removes `g`, moving again the
/// tasks that were born in it meanwhile.
fn empty_and_remove(g: &Group, home: &Group) -> Result<()> {
    let mut attempt = 1;
    loop {
        move_all(g, home)?;
        match g.remove() {
            Err(_) if attempt < REMOVE_ATTEMPTS && g.exists() => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            done => return done,
        }
    }
}

/// Moves every task of `from` into `to` (v1: each thread; v2: each
/// process, as v2 moves threads only inside threaded subtrees), skipping
/// those that cannot move (per-CPU kernel threads) or that exited meanwhile.
pub(crate) fn move_all(from: &Group, to: &Group) -> Result<()> {
    type Add = fn(&Group, i32) -> Result<()>;
    let (ids, add): (Result<Vec<i32>>, Add) = match from.version {
        Version::V1 => (from.threads(), Group::add_thread),
        Version::V2 => (from.processes(), Group::add_process),
    };
    let ids = match ids {
        Ok(ids) => ids,
        Err(e) if e.kind == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for id in ids {
        match add(to, id) {
            Ok(()) => {}
            Err(e) if matches!(e.kind, ErrorKind::Invalid | ErrorKind::NotFound) => {}
            Err(e) if tessera_sys::proc::is_kernel_thread(id) => drop(e),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn overlapping_siblings(err: Error, root: &Group) -> Error {
    let siblings: Vec<String> = root
        .children()
        .into_iter()
        .filter(|g| g.name() != TOP)
        .map(|g| g.path.display().to_string())
        .collect();
    err.with_cause(format!(
        "the cpuset root has other groups that claim CPUs ({siblings:?}), so tessera cannot \
         hold exclusive cores"
    ))
    .with_fix("remove those cpusets (or their exclusivity), or use --placement global cells")
}
