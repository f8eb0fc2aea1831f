//! Readers of /proc: the processes and threads of the machine, their names,
//! start times (so a recycled PID is never mistaken for the process we knew)
//! and whether they are kernel threads.
//!
//! It only reads; it must never signal or change a process.

use crate::error::{read_text, Error, ErrorKind, Result};
use crate::sched::Tid;
use std::collections::hash_map::{Entry, HashMap};
use std::path::{Path, PathBuf};

pub type Pid = i32;

/// The calling thread's kernel id.
pub fn current_tid() -> Tid {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// The calling process's id.
pub fn current_pid() -> Pid {
    std::process::id() as Pid
}

fn numeric_entries(dir: &Path) -> Result<Vec<i32>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::from_io(format!("list {}", dir.display()), &e))?;
    let mut ids: Vec<i32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Every process id on the machine.
pub fn all_pids() -> Result<Vec<Pid>> {
    numeric_entries(Path::new("/proc"))
}

/// The thread ids of process `pid`.
pub fn threads_of(pid: Pid) -> Result<Vec<Tid>> {
    numeric_entries(&PathBuf::from(format!("/proc/{pid}/task"))).map_err(|e| {
        Error::new(
            ErrorKind::NotFound,
            format!("list threads of process {pid}"),
            e.cause,
            "check the PID (`ps -e`); the process may have exited",
        )
    })
}

/// The process a thread belongs to (its thread-group id).
pub fn process_of(tid: Tid) -> Result<Pid> {
    let status = read_text(&PathBuf::from(format!("/proc/{tid}/status"))).map_err(|e| {
        Error::new(
            ErrorKind::NotFound,
            format!("find the process of thread {tid}"),
            e.cause,
            "check the TID (`ps -eL`); the thread may have exited",
        )
    })?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("read /proc/{tid}/status"),
                "no Tgid line",
                "",
            )
        })
}

/// Fields of /proc/PID/stat after the command name (which may hold spaces).
fn stat_fields(pid: Pid, tid: Option<Tid>) -> Result<Vec<String>> {
    let path = match tid {
        Some(t) => PathBuf::from(format!("/proc/{pid}/task/{t}/stat")),
        None => PathBuf::from(format!("/proc/{pid}/stat")),
    };
    let text = read_text(&path)?;
    let after = text.rfind(')').map(|i| &text[i + 1..]).unwrap_or("");
    Ok(after.split_whitespace().map(str::to_string).collect())
}

/// Start time of a process in clock ticks since boot; with the PID it
/// identifies a process uniquely across PID reuse.
pub fn start_time(pid: Pid) -> Result<u64> {
    // Field 22 of stat; index 19 after the command name (fields 3..).
    stat_value(pid, 19)
}

/// Field `index` + 3 of a process's stat (counted after the command name).
fn stat_value<T: std::str::FromStr>(pid: Pid, index: usize) -> Result<T> {
    stat_fields(pid, None)?
        .get(index)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("read /proc/{pid}/stat"),
                "short stat line",
                "",
            )
        })
}

/// What a thread did between two readings: its CPU time, how many times
/// it was given a CPU (`runs`: every wake-up and every return after being
/// preempted), and, when asked for, how often it gave up the CPU of its own
/// accord (an audio thread waits once a cycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageDelta {
    pub elapsed_ns: u64,
    pub cpu_ns: u64,
    pub runs: u64,
    /// Voluntary switches, counted only when the reading asked for them
    /// and the one before did too; else None.
    pub woken: Option<u64>,
}

impl UsageDelta {
    /// The wake-ups: counted when known, else the runs, which are at least
    /// as many (a thread preempted runs again without a new wake-up).
    pub fn wakes(&self) -> u64 {
        self.woken.unwrap_or(self.runs)
    }
}

/// A thread's `schedstat`: CPU time in ns and the times it was given a CPU.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    let cpu_ns = fields.next()??;
    let runs = fields.nth(1)??;
    Some((cpu_ns, runs))
}

fn voluntary_from_status(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
}

/// One thread's `schedstat` and `status`, kept open and read again from
/// the start each time: a reading is one `pread` per file, not a path
/// walk, an open and a close (which were most of the guard's own CPU with
/// hundreds of threads read ten times a second). `status` is opened the
/// first time it is asked for: the kernel formats the whole file (a
/// dozen times the cost of `schedstat`) for its one line of voluntary
/// switches. The files stay bound to the thread they were opened for:
/// once it exits they fail to read, even when its id is reused.
#[derive(Debug)]
pub struct ThreadCounters {
    pid: Pid,
    tid: Tid,
    schedstat: std::fs::File,
    status: Option<std::fs::File>,
    buf: Vec<u8>,
}

impl ThreadCounters {
    /// Opens thread `tid` of `pid`'s files.
    pub fn open(pid: Pid, tid: Tid) -> Result<ThreadCounters> {
        Ok(ThreadCounters {
            pid,
            tid,
            schedstat: open_task_file(pid, tid, "schedstat")?,
            status: None,
            buf: Vec::with_capacity(4096),
        })
    }

    /// The thread's CPU time in ns and the times it was given a CPU.
    pub fn schedstat(&mut self) -> Result<(u64, u64)> {
        let text = reread(&self.schedstat, &mut self.buf, "schedstat")?;
        parse_schedstat(text)
            .ok_or_else(|| counter_error("schedstat", "the kernel needs CONFIG_SCHED_INFO"))
    }

    /// How often the thread gave up the CPU of its own accord.
    pub fn voluntary_switches(&mut self) -> Result<u64> {
        if self.status.is_none() {
            self.status = Some(open_task_file(self.pid, self.tid, "status")?);
        }
        let status = self.status.as_ref().expect("opened above");
        let text = reread(status, &mut self.buf, "status")?;
        voluntary_from_status(text)
            .ok_or_else(|| counter_error("status", "a kernel of 2.6.23 or later reports it"))
    }
}

fn open_task_file(pid: Pid, tid: Tid, name: &str) -> Result<std::fs::File> {
    let path = PathBuf::from(format!("/proc/{pid}/task/{tid}/{name}"));
    std::fs::File::open(&path).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("open {}", path.display()),
            e.to_string(),
            "",
        )
    })
}

/// The whole of an open /proc file, read again from its start into `buf`.
/// A /proc file of one record (schedstat, stat, status) hands all of it to
/// a read with room for it, so a read that leaves room is the whole file:
/// one system call, not a second to see the end — the guard and the daemon
/// make thousands of these a second.
fn reread<'a>(file: &std::fs::File, buf: &'a mut Vec<u8>, name: &str) -> Result<&'a str> {
    use std::os::unix::fs::FileExt;
    buf.resize(buf.capacity().max(4096), 0);
    let mut len = 0;
    loop {
        let n = file
            .read_at(&mut buf[len..], len as u64)
            .map_err(|e| counter_error(name, &e.to_string()))?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        buf.resize(len * 2, 0);
    }
    if len == 0 {
        return Err(counter_error(name, "the thread exited"));
    }
    std::str::from_utf8(&buf[..len]).map_err(|_| counter_error(name, "not text"))
}

fn counter_error(name: &str, what: &str) -> Error {
    Error::new(ErrorKind::Io, format!("read a thread's {name}"), what, "")
}

/// A thread's counters as last read, to take [`UsageDelta`]s from: by
/// path, or through [`ThreadCounters`] kept open for a thread read many
/// times a second.
#[derive(Debug)]
pub struct ThreadUsage {
    pid: Pid,
    tid: Tid,
    at: std::time::Instant,
    cpu_ns: u64,
    runs: u64,
    /// Voluntary switches at the last reading, if it counted them.
    switches: Option<u64>,
    counters: Option<ThreadCounters>,
}

impl ThreadUsage {
    /// The first reading of thread `tid` of `pid`, read by path each time
    /// (zeros if it cannot be read).
    pub fn start(pid: Pid, tid: Tid) -> ThreadUsage {
        ThreadUsage::first(pid, tid, None)
    }

    /// The same with the thread's files kept open: for a thread read often.
    pub fn kept_open(pid: Pid, tid: Tid) -> ThreadUsage {
        ThreadUsage::first(pid, tid, ThreadCounters::open(pid, tid).ok())
    }

    fn first(pid: Pid, tid: Tid, counters: Option<ThreadCounters>) -> ThreadUsage {
        let mut usage = ThreadUsage {
            pid,
            tid,
            at: std::time::Instant::now(),
            cpu_ns: 0,
            runs: 0,
            switches: None,
            counters,
        };
        if let Ok((cpu_ns, runs)) = usage.schedstat() {
            (usage.cpu_ns, usage.runs) = (cpu_ns, runs);
        }
        usage
    }

    fn schedstat(&mut self) -> Result<(u64, u64)> {
        match self.counters.as_mut() {
            Some(c) => c.schedstat(),
            None => thread_schedstat(self.pid, self.tid),
        }
    }

    fn voluntary_switches(&mut self) -> Result<u64> {
        match self.counters.as_mut() {
            Some(c) => c.voluntary_switches(),
            None => thread_voluntary_switches(self.pid, self.tid),
        }
    }

    /// How long ago the last reading was taken.
    pub fn age(&self) -> std::time::Duration {
        self.at.elapsed()
    }

    /// What the thread did since the last reading; Err when it is gone.
    /// With `count_wakes` its voluntary switches are read too (the costly
    /// part), and given in the delta when the last reading read them.
    pub fn advance(&mut self, count_wakes: bool) -> Result<UsageDelta> {
        let now = std::time::Instant::now();
        let (cpu, runs) = self.schedstat()?;
        let switches = match count_wakes {
            true => Some(self.voluntary_switches()?),
            false => None,
        };
        let delta = UsageDelta {
            elapsed_ns: now.duration_since(self.at).as_nanos() as u64,
            cpu_ns: cpu.saturating_sub(self.cpu_ns),
            runs: runs.saturating_sub(self.runs),
            woken: switches
                .zip(self.switches)
                .map(|(now, then)| now.saturating_sub(then)),
        };
        (self.at, self.cpu_ns, self.runs, self.switches) = (now, cpu, runs, switches);
        Ok(delta)
    }
}

/// Start time of thread `tid` of process `pid`, in clock ticks since boot:
/// with the ids it tells a thread from a later one that reuses its id.
pub fn thread_start_time(pid: Pid, tid: Tid) -> Result<u64> {
    stat_fields(pid, Some(tid))?
        .get(19)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("read /proc/{pid}/task/{tid}/stat"),
                "short stat line",
                "",
            )
        })
}

/// The hard RLIMIT_RTTIME of a process in µs (`Max realtime timeout` of
/// /proc/PID/limits); None when unlimited.
pub fn rttime_hard_limit_us(pid: Pid) -> Result<Option<u64>> {
    let path = PathBuf::from(format!("/proc/{pid}/limits"));
    let text = read_text(&path)?;
    let hard = text
        .lines()
        .find_map(|l| l.strip_prefix("Max realtime timeout"))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("read {}", path.display()),
                "no 'Max realtime timeout' line",
                "",
            )
        })?;
    Ok(hard.parse().ok())
}

/// Whether `pid` is alive and is still the process that started at `started`.
pub fn is_same_process(pid: Pid, started: u64) -> bool {
    start_time(pid).is_ok_and(|t| t == started)
}

/// Processes (or threads) named by id and start time: whether each still
/// runs and its CPU time, read with one `pread` of its `/proc/ID/schedstat`
/// kept open after the first check. A file of /proc stays bound to the
/// task it was opened for and fails to read once that task is gone, even
/// when its id is reused: a daemon checking a hundred members five times a
/// second reads instead of walking a path, opening and closing for each.
#[derive(Debug, Default)]
pub struct Liveness {
    open: HashMap<(Pid, u64), std::fs::File>,
    buf: Vec<u8>,
}

impl Liveness {
    /// Whether `id` is alive and is still the one that started at `started`.
    pub fn is_alive(&mut self, id: Pid, started: u64) -> bool {
        self.cpu_ns(id, started).is_some()
    }

    /// The CPU time of `id` (the one that started at `started`) in ns;
    /// None when it is gone.
    pub fn cpu_ns(&mut self, id: Pid, started: u64) -> Option<u64> {
        let file = match self.open.entry((id, started)) {
            Entry::Occupied(kept) => kept.into_mut(),
            Entry::Vacant(new) => {
                let file = std::fs::File::open(format!("/proc/{id}/schedstat")).ok()?;
                // Opened before the start time matched: the file is this task's.
                if !is_same_process(id, started) {
                    return None;
                }
                new.insert(file)
            }
        };
        let read = reread(file, &mut self.buf, "schedstat");
        let cpu_ns = read
            .ok()
            .map(|text| text.split_whitespace().next()?.parse().ok());
        if cpu_ns.is_none() {
            self.open.remove(&(id, started));
        }
        cpu_ns.map(|ns| ns.unwrap_or(0))
    }

    /// Closes the files of every task `keep` does not name.
    pub fn retain(&mut self, keep: impl Fn(Pid, u64) -> bool) {
        self.open.retain(|&(id, started), _| keep(id, started));
    }
}

/// Whether thread `tid` of `pid` is runnable now (`R`: running or waiting
/// for a CPU).
pub fn is_runnable(pid: Pid, tid: Tid) -> bool {
    stat_fields(pid, Some(tid)).is_ok_and(|f| f.first().is_some_and(|s| s == "R"))
}

/// Whether process `pid` still runs: one of its threads exists and is
/// neither a zombie nor dead. (A process whose leader exited before its
/// other threads shows a zombie leader while those threads still run; an
/// exited process not yet reaped by its parent shows only the zombie.)
pub fn is_running(pid: Pid) -> bool {
    threads_of(pid).unwrap_or_default().into_iter().any(|tid| {
        stat_fields(pid, Some(tid))
            .ok()
            .and_then(|f| f.first().cloned())
            .is_some_and(|state| state != "Z" && state != "X" && state != "x")
    })
}

/// The child processes of every thread of `pid` (/proc/PID/task/TID/children,
/// which needs CONFIG_PROC_CHILDREN; empty without it).
pub fn children_of(pid: Pid) -> Vec<Pid> {
    let mut children: Vec<Pid> = threads_of(pid)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| read_text(&PathBuf::from(format!("/proc/{pid}/task/{t}/children"))).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<Pid>>()
        })
        .collect();
    children.sort_unstable();
    children.dedup();
    children
}

/// Whether a process is a kernel thread (PF_KTHREAD in its flags).
pub fn is_kernel_thread(pid: Pid) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    stat_fields(pid, None)
        .ok()
        .and_then(|f| f.get(6)?.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_KTHREAD != 0)
}

/// The command name of a thread.
pub fn thread_name(pid: Pid, tid: Tid) -> String {
    read_text(&PathBuf::from(format!("/proc/{pid}/task/{tid}/comm")))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// CPU time a thread of another process has run, in ns (the first field
/// of its schedstat; `pthread_getcpuclockid` works only inside the process).
pub fn thread_cpu_ns(pid: Pid, tid: Tid) -> Result<u64> {
    Ok(thread_schedstat(pid, tid)?.0)
}

/// A thread's CPU time in ns and the times it was given a CPU, by path.
pub fn thread_schedstat(pid: Pid, tid: Tid) -> Result<(u64, u64)> {
    read_task_counter(
        pid,
        tid,
        "schedstat",
        parse_schedstat,
        "the kernel needs CONFIG_SCHED_INFO",
    )
}

/// How many times a thread of another process gave up the CPU of its own
/// accord (`voluntary_ctxt_switches` in its status): an audio thread does
/// once per cycle, when it waits for the next.
pub fn thread_voluntary_switches(pid: Pid, tid: Tid) -> Result<u64> {
    read_task_counter(
        pid,
        tid,
        "status",
        voluntary_from_status,
        "a kernel of 2.6.23 or later reports it",
    )
}

/// One of a thread's /proc files, by path, and what `parse` finds in it.
fn read_task_counter<T>(
    pid: Pid,
    tid: Tid,
    name: &str,
    parse: fn(&str) -> Option<T>,
    fix: &str,
) -> Result<T> {
    let path = PathBuf::from(format!("/proc/{pid}/task/{tid}/{name}"));
    parse(&read_text(&path)?).ok_or_else(|| {
        Error::new(
            ErrorKind::Io,
            format!("read {}", path.display()),
            "the counter is missing",
            fix,
        )
    })
}

/// Whether a process maps a file whose path contains `needle` (how the
/// clients of a JACK2 server are found: they map its semaphores).
pub fn maps_contain(pid: Pid, needle: &str) -> bool {
    read_text(&PathBuf::from(format!("/proc/{pid}/maps")))
        .is_ok_and(|maps| maps.lines().any(|l| l.contains(needle)))
}

/// The command name of a process.
pub fn process_name(pid: Pid) -> String {
    read_text(&PathBuf::from(format!("/proc/{pid}/comm")))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The CPU a thread last ran on (field 39 of stat).
pub fn last_cpu(pid: Pid, tid: Tid) -> Option<usize> {
    stat_fields(pid, Some(tid)).ok()?.get(36)?.parse().ok()
}

/// The owner (real uid) of a process.
pub fn owner_uid(pid: Pid) -> Result<u32> {
    status_value(pid, "Uid")
}

/// The value of variable `name` in the environment a process started with
/// (/proc/PID/environ: readable by its owner and root), if it has one.
pub fn environment_variable(pid: Pid, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|&b| b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// A process's resident memory in KiB (VmRSS of its status; a kernel
/// thread has none).
pub fn resident_kib(pid: Pid) -> Result<u64> {
    status_value(pid, "VmRSS")
}

/// The first value of the `key:` line of /proc/PID/status.
fn status_value<T: std::str::FromStr>(pid: Pid, key: &str) -> Result<T> {
    let path = PathBuf::from(format!("/proc/{pid}/status"));
    let status = read_text(&path)?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("read {}", path.display()),
                format!("no {key} line"),
                "",
            )
        })
}

/// How many file descriptors a process has open (the entries of
/// /proc/PID/fd, which only its owner or root may list; for the calling
/// process, the one listing it is among them).
pub fn open_fds(pid: Pid) -> Result<usize> {
    let dir = PathBuf::from(format!("/proc/{pid}/fd"));
    std::fs::read_dir(&dir)
        .map(Iterator::count)
        .map_err(|e| Error::from_io(format!("list {}", dir.display()), &e))
}

/// A process's parent (field 4 of its stat).
pub fn parent_of(pid: Pid) -> Result<Pid> {
    stat_value(pid, 1)
}

/// The file a process runs (/proc/PID/exe; its name ends in " (deleted)"
/// when the file was replaced since). Only its owner or root may read it.
pub fn executable(pid: Pid) -> Result<PathBuf> {
    let link = PathBuf::from(format!("/proc/{pid}/exe"));
    std::fs::read_link(&link).map_err(|e| Error::from_io(format!("read {}", link.display()), &e))
}

/// The path of a thread's group in a cgroup v1 controller ("/" for the root),
/// or in the v2 hierarchy when `controller` is None.
pub fn cgroup_of(tid: Tid, controller: Option<&str>) -> Result<String> {
    let text = read_text(&PathBuf::from(format!("/proc/{tid}/cgroup")))?;
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            Some((f.next()?, f.next()?, f.next()?))
        })
        .find(|(_, ctrls, _)| match controller {
            Some(c) => ctrls.split(',').any(|x| x == c),
            None => ctrls.is_empty(),
        })
        .map(|(_, _, path)| path.to_string())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!(
                    "find the {} cgroup of thread {tid}",
                    controller.unwrap_or("v2")
                ),
                "not listed in /proc/TID/cgroup",
                "",
            )
        })
}

/// A process's CPU time, user and system, of all its threads including
/// those that exited, and of the children it has waited for (the tools it
/// runs, such as a guard's `pw-cli`), in ns (the kernel counts it in clock
/// ticks).
pub fn process_and_children_cpu_ns(pid: Pid) -> Result<u64> {
    let fields = stat_fields(pid, None)?;
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok());
    // utime, stime, cutime and cstime: fields 14 to 17, counted after the
    // command name.
    let times: Option<Vec<u64>> = (11..15).map(ticks).collect();
    let Some(times) = times else {
        return Err(Error::new(
            ErrorKind::Io,
            format!("read /proc/{pid}/stat"),
            "short stat line",
            "",
        ));
    };
    Ok(times.iter().sum::<u64>() * ns_per_tick())
}

/// The length of the kernel's clock tick as /proc reports times, in ns.
fn ns_per_tick() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    1_000_000_000 / ticks_per_s
}

/// Steal time per CPU since boot, in ns, from /proc/stat: how long the
/// hypervisor ran something else while a vCPU had work. Zero everywhere
/// on bare metal or under a hypervisor that does not report it.
pub fn cpu_steal_ns() -> Result<Vec<(usize, u64)>> {
    let stat = read_text(Path::new("/proc/stat"))?;
    Ok(steal_from_stat(&stat, ns_per_tick()))
}

/// CPU time every CPU together spent running tasks since boot, in ns,
/// from /proc/stat's `cpu` line: user, nice, system, irq and softirq (not
/// idle, iowait, nor steal — the hypervisor's; guest time is already in
/// user).
pub fn cpus_busy_ns() -> Result<u64> {
    let stat = read_text(Path::new("/proc/stat"))?;
    busy_from_stat(&stat, ns_per_tick()).ok_or_else(|| {
        Error::new(
            ErrorKind::Io,
            "read /proc/stat".to_string(),
            "no `cpu` line",
            "",
        )
    })
}

/// The all-CPU line's busy columns, scaled to ns.
fn busy_from_stat(stat: &str, ns_per_tick: u64) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal …
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?;
    Some(busy * ns_per_tick)
}

/// The `cpuN` lines' steal column (the 8th value), scaled to ns.
fn steal_from_stat(stat: &str, ns_per_tick: u64) -> Vec<(usize, u64)> {
    stat.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let cpu = fields.next()?.strip_prefix("cpu")?.parse().ok()?;
            let steal: u64 = fields.nth(7)?.parse().ok()?;
            Some((cpu, steal * ns_per_tick))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_main_thread_starts_with_its_process_and_usage_advances() {
        let pid = current_pid();
        assert_eq!(
            thread_start_time(pid, pid).unwrap(),
            start_time(pid).unwrap()
        );
        assert!(thread_start_time(pid, 0).is_err());
        let tid = current_tid();
        let mut usage = ThreadUsage::kept_open(pid, tid);
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(20) {}
        let delta = usage.advance(true).unwrap();
        assert!(delta.cpu_ns > 0 && delta.elapsed_ns >= delta.cpu_ns / 2);
        assert_eq!(delta.woken, None, "the first reading counted no wake-ups");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let delta = usage.advance(true).unwrap();
        assert!(delta.woken.unwrap() >= 1, "it slept");
        assert!(delta.runs >= delta.wakes(), "a wake-up is a run");
        assert_eq!(usage.advance(false).unwrap().woken, None);
        // Kept-open files read the same as a fresh read.
        let mut counters = ThreadCounters::open(pid, tid).unwrap();
        let (kept, _) = counters.schedstat().unwrap();
        assert!(thread_cpu_ns(pid, tid).unwrap() >= kept);
        assert!(counters.voluntary_switches().is_ok());
    }

    #[test]
    fn busy_time_counts_tasks_and_interrupts_not_idle_nor_steal() {
        let stat = "cpu  100 2 30 5000 7 4 6 900 0 0\ncpu0 50 1 15 2500 3 2 3 450 0 0\n";
        assert_eq!(busy_from_stat(stat, 10), Some((100 + 2 + 30 + 4 + 6) * 10));
        assert_eq!(busy_from_stat("cpu0 1 2 3 4 5 6 7 8\n", 10), None);
        assert!(cpus_busy_ns().unwrap() > 0);
    }

    #[test]
    fn the_rttime_limit_reads_back_as_set() {
        // A child process of our own: the test binary's limit stays.
        let child = std::process::Command::new("prlimit")
            .args(["--rttime=150000:200000", "sleep", "5"])
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("SKIPPED the_rttime_limit_reads_back_as_set: no prlimit (util-linux)");
            return;
        };
        let pid = child.id() as Pid;
        let read = (0..100)
            .map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                rttime_hard_limit_us(pid)
            })
            .find(|l| matches!(l, Ok(Some(_))));
        let _ = child.kill();
        let _ = child.wait();
        assert!(matches!(read, Some(Ok(Some(200_000)))), "{read:?}");
        assert_eq!(rttime_hard_limit_us(current_pid()).unwrap(), None);
    }

    #[test]
    fn steal_is_the_eighth_value_of_each_cpu_line() {
        let stat = "cpu  1162484 14100 362866 1320150 20888 0 29819 807 0 0\n\
                    cpu0 607520 8226 169305 662488 6020 0 23305 366 0 0\n\
                    cpu1 554963 5874 193560 657661 14867 0 6513 441 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(
            steal_from_stat(stat, 10_000_000),
            [(0, 3_660_000_000), (1, 4_410_000_000)]
        );
        let here = cpu_steal_ns().unwrap();
        assert_eq!(here.len(), crate::kernel::online_cpus().unwrap().len());
    }

    #[test]
    fn reads_own_process() {
        let me = current_pid();
        assert!(threads_of(me).unwrap().contains(&current_tid()));
        assert_eq!(process_of(current_tid()).unwrap(), me);
        let started = start_time(me).unwrap();
        assert!(resident_kib(me).unwrap() > 0);
        assert!(open_fds(me).unwrap() >= 3, "stdin, stdout, stderr at least");
        assert_eq!(
            parent_of(me).unwrap(),
            std::os::unix::process::parent_id() as Pid
        );
        assert_eq!(executable(me).unwrap(), std::env::current_exe().unwrap());
        assert!(is_same_process(me, started));
        assert_eq!(
            environment_variable(me, "PATH"),
            std::env::var("PATH").ok(),
            "PATH as the process started with it"
        );
        assert_eq!(environment_variable(me, "PAT"), None, "whole names only");
        assert!(!is_same_process(me, started + 1));
        assert!(!is_kernel_thread(me));
        assert!(is_running(me));
        assert!(!is_running(i32::MAX));
    }

    #[test]
    fn reread_takes_a_file_longer_than_its_buffer_whole_and_a_short_one_in_one_read() {
        let path = std::env::temp_dir().join(format!("tessera-reread-{}", current_pid()));
        let long: String = (0..3000).map(|i| format!("{i} ")).collect();
        std::fs::write(&path, &long).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut buf = Vec::new();
        assert_eq!(reread(&file, &mut buf, "test").unwrap(), long);
        std::fs::remove_file(&path).unwrap();
        let status = std::fs::File::open("/proc/self/status").unwrap();
        let text = reread(&status, &mut buf, "status").unwrap();
        assert!(text.starts_with("Name:") && text.contains("nonvoluntary_ctxt_switches"));
    }

    #[test]
    fn liveness_keeps_a_task_until_it_is_reaped() {
        let mut live = Liveness::default();
        let me = current_pid();
        let started = start_time(me).unwrap();
        assert!(live.is_alive(me, started));
        assert!(
            live.cpu_ns(me, started).unwrap() > 0,
            "read again from the file kept open"
        );
        assert!(
            !live.is_alive(me, started + 1),
            "another start: another task"
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as Pid;
        let child_started = start_time(pid).unwrap();
        assert!(live.is_alive(pid, child_started));
        child.wait().unwrap();
        assert!(
            !live.is_alive(pid, child_started),
            "reaped: its file no longer reads"
        );
        live.retain(|id, _| id != me);
        assert!(live.open.is_empty());
    }

    #[test]
    fn a_child_is_listed_and_its_zombie_is_not_running() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.05")
            .spawn()
            .unwrap();
        let pid = child.id() as Pid;
        assert!(children_of(current_pid()).contains(&pid));
        let zombie = || stat_fields(pid, None).ok().and_then(|f| f.first().cloned());
        for _ in 0..1000 {
            if zombie().as_deref() == Some("Z") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!is_running(pid), "a zombie has exited");
        child.wait().unwrap();
        assert!(!is_running(pid));
    }

    #[test]
    fn unknown_thread_is_not_found() {
        let err = threads_of(i32::MAX).unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert!(err.to_string().contains("check the PID"));
    }
}
