//! Kernel tracepoints read through `perf_event_open`: one event per
//! tracepoint and [`Scope`] — a CPU (every task there) or one thread
//! (wherever it runs, only while it is current) — a filter the kernel
//! applies before it writes a record, the events of a scope redirected
//! into one ring, and the ring's records handed out as bytes. Also
//! mounting tracefs, where the tracepoints' ids and record formats are
//! published.
//!
//! A tracepoint can also be counted rather than sampled, in the group of a
//! sampled one: each sample of the leader then carries the count (what the
//! hits added up to), read by the kernel as it writes the record.
//!
//! It owns the syscall, its ioctls (enable, disable, set filter, set
//! output), the mmap of the ring and the ring's head/tail protocol. It must
//! never interpret a record's contents: what a record means is decoded
//! above this layer (`tessera-why`).

use crate::error::{Error, ErrorKind, Result};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// `PERF_TYPE_TRACEPOINT`: `config` is the tracepoint's id from tracefs.
const TYPE_TRACEPOINT: u32 = 2;
/// The sample fields every record carries, in this order: the time
/// (`PERF_SAMPLE_TIME`), the CPU (`PERF_SAMPLE_CPU`), the period
/// (`PERF_SAMPLE_PERIOD`), the counts of the event's group
/// (`PERF_SAMPLE_READ` with `PERF_FORMAT_GROUP`: `u64 nr; u64 value[nr]`,
/// the event's own first) and the tracepoint's own record
/// (`PERF_SAMPLE_RAW`). Every event reads as a group (one of one when it
/// has no members), so that every record has the same layout.
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_READ: u64 = 1 << 4;
const SAMPLE_CPU: u64 = 1 << 7;
const SAMPLE_PERIOD: u64 = 1 << 8;
const SAMPLE_RAW: u64 = 1 << 10;
const FORMAT_GROUP: u64 = 1 << 3;
/// Bits of the attribute's flag word: created disabled, wake-ups by bytes
/// (`watermark`) rather than per record, times on `clockid`.
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_WATERMARK: u64 = 1 << 14;
const FLAG_USE_CLOCKID: u64 = 1 << 25;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// ioctl numbers: `_IO('$', n)` and `_IOW('$', 6, char *)`.
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;
/// Offsets in the ring's first (metadata) page of `struct
/// perf_event_mmap_page`: `data_head`, `data_tail`.
const HEAD_OFFSET: usize = 1024;
const TAIL_OFFSET: usize = 1032;
/// A record's header: `u32 type, u16 misc, u16 size`.
const HEADER_LEN: usize = 8;

/// `struct perf_event_attr` as of `PERF_ATTR_SIZE_VER5` (112 bytes, Linux
/// 4.1): every field tessera sets exists in it; newer kernels take the
/// shorter struct and zero the rest.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_watermark: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 112);

impl PerfEventAttr {
    /// Tracepoint `id`, its times on `CLOCK_MONOTONIC` (a group's events
    /// must share one clock), nothing sampled yet.
    fn tracepoint(id: u64) -> PerfEventAttr {
        PerfEventAttr {
            kind: TYPE_TRACEPOINT,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: id,
            clockid: libc::CLOCK_MONOTONIC,
            ..Default::default()
        }
    }
}

/// What a tracepoint event sees: every task's hits on one CPU, or one
/// thread's on any CPU, only while it is current there (so a hit in
/// another task's context never reaches it, and costs that task no more
/// than a check of an empty list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Cpu(usize),
    Thread(i32),
}

impl Scope {
    /// `perf_event_open`'s `pid` and `cpu` arguments.
    fn target(self) -> (libc::pid_t, libc::c_int) {
        match self {
            Scope::Cpu(cpu) => (-1, cpu as libc::c_int),
            Scope::Thread(tid) => (tid, -1),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Cpu(cpu) => write!(f, "cpu {cpu}"),
            Scope::Thread(tid) => write!(f, "thread {tid}"),
        }
    }
}

/// One tracepoint in one [`Scope`]: sampled (each hit written with its
/// `CLOCK_MONOTONIC` time, its CPU, its group's counts and its raw
/// record), or counted in a sampled one's group. Created disabled.
#[derive(Debug)]
pub struct Tracepoint {
    fd: OwnedFd,
    scope: Scope,
    action: String,
}

impl Tracepoint {
    /// Opens tracepoint `id` (tracefs `events/GROUP/NAME/id`) in `scope`,
    /// sampled. `ring_bytes` is the size of the ring this event (or the one
    /// it is redirected to) writes into: wake-ups come when half of it is
    /// full.
    pub fn open(id: u64, scope: Scope, ring_bytes: usize) -> Result<Tracepoint> {
        let attr = PerfEventAttr {
            sample_period: 1,
            sample_type: SAMPLE_TIME | SAMPLE_READ | SAMPLE_CPU | SAMPLE_PERIOD | SAMPLE_RAW,
            read_format: FORMAT_GROUP,
            flags: FLAG_DISABLED | FLAG_WATERMARK | FLAG_USE_CLOCKID,
            wakeup_watermark: (ring_bytes / 2) as u32,
            ..PerfEventAttr::tracepoint(id)
        };
        Tracepoint::open_with(&attr, scope, None)
    }

    /// Opens tracepoint `id` in `leader`'s scope, counted (never sampled) in
    /// `leader`'s group: each of the leader's samples carries, after its
    /// own count, what this one's hits have added up to (for a tracepoint
    /// that counts a quantity, such as `sched_stat_runtime`'s ns, that sum).
    pub fn open_counter(id: u64, leader: &Tracepoint) -> Result<Tracepoint> {
        let attr = PerfEventAttr {
            flags: FLAG_DISABLED | FLAG_USE_CLOCKID,
            ..PerfEventAttr::tracepoint(id)
        };
        Tracepoint::open_with(&attr, leader.scope, Some(leader))
    }

    fn open_with(
        attr: &PerfEventAttr,
        scope: Scope,
        leader: Option<&Tracepoint>,
    ) -> Result<Tracepoint> {
        let id = attr.config;
        let action = match leader {
            None => format!("perf_event_open(tracepoint {id}, {scope})"),
            Some(_) => format!("perf_event_open(tracepoint {id} counted, {scope})"),
        };
        let group = leader.map_or(-1, |l| l.fd.as_raw_fd());
        let (pid, cpu) = scope.target();
        // SAFETY: `attr` is a valid perf_event_attr of the size it declares
        // and outlives the call; pid -1 with a cpu means every task there,
        // a pid with cpu -1 that thread on any CPU; `group` is -1 or the
        // descriptor of a live event of the same scope.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr as *const PerfEventAttr,
                pid,
                cpu,
                group as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = Error::last_os(&action);
            let fix = match e.errno {
                Some(libc::EMFILE) => {
                    "raise the open-files limit (`ulimit -n`): each watched \
                                       thread takes a descriptor per tracepoint"
                }
                Some(libc::ESRCH) => "the thread has exited: watch a running one",
                _ => {
                    "run as root (or with CAP_PERFMON), or lower kernel.perf_event_paranoid \
                      to -1 (`sysctl kernel.perf_event_paranoid=-1`)"
                }
            };
            return Err(e.with_fix(fix));
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
        Ok(Tracepoint { fd, scope, action })
    }

    /// Keeps only records for which `filter` (tracefs filter syntax, e.g.
    /// `pid == 12 || pid == 14`) holds; the kernel tests it before
    /// writing, so records of other threads cost no ring space.
    pub fn set_filter(&self, filter: &str) -> Result<()> {
        let text = CString::new(filter).map_err(|_| {
            Error::new(
                ErrorKind::Invalid,
                &self.action,
                "the filter contains a NUL byte",
                "",
            )
        })?;
        // SAFETY: SET_FILTER reads a NUL-terminated string that outlives the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), IOC_SET_FILTER, text.as_ptr()) };
        self.check(rc, &format!("set the filter {filter:?}"))
    }

    /// Writes this event's records into `ring`'s (both of the same scope).
    pub fn redirect_to(&self, ring: &Tracepoint) -> Result<()> {
        // SAFETY: SET_OUTPUT takes another perf descriptor by value.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                IOC_SET_OUTPUT,
                ring.fd.as_raw_fd() as libc::c_long,
            )
        };
        self.check(rc, "redirect its records (PERF_EVENT_IOC_SET_OUTPUT)")
    }

    pub fn enable(&self) -> Result<()> {
        // SAFETY: ENABLE takes no argument.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), IOC_ENABLE, 0) };
        self.check(rc, "enable it")
    }

    pub fn disable(&self) -> Result<()> {
        // SAFETY: DISABLE takes no argument.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), IOC_DISABLE, 0) };
        self.check(rc, "disable it")
    }

    fn check(&self, rc: libc::c_int, what: &str) -> Result<()> {
        match rc {
            0 => Ok(()),
            _ => Err(Error::last_os(format!("{}: {what}", self.action))),
        }
    }
}

/// The ring a CPU's tracepoints write into: a metadata page and
/// `data_pages` (a power of two) pages of records, mapped read-write so
/// that the reader can free what it has read. Unmapped when dropped.
#[derive(Debug)]
pub struct Ring {
    base: NonNull<u8>,
    len: usize,
    data_len: usize,
    /// Where a record that wraps around the end is copied to be whole.
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by this value alone; the kernel writes the
// data pages concurrently, which is what the head/tail protocol orders.
unsafe impl Send for Ring {}

/// A record as the ring holds it: its type (`PERF_RECORD_SAMPLE` = 9,
/// `PERF_RECORD_LOST` = 2, ...) and its body after the header.
pub const RECORD_SAMPLE: u32 = 9;
pub const RECORD_LOST: u32 = 2;

impl Ring {
    /// The bytes of a ring of `data_pages` pages (what [`Tracepoint::open`]
    /// is told).
    pub fn bytes(data_pages: usize) -> usize {
        data_pages * page_size()
    }

    /// Maps the ring of `event` (the first event of a scope; the others are
    /// redirected to it). `data_pages` must be a power of two.
    pub fn map(event: &Tracepoint, data_pages: usize) -> Result<Ring> {
        let page = page_size();
        let data_len = data_pages * page;
        let len = data_len + page;
        let action = format!("mmap a perf ring of {data_pages} pages");
        if !data_pages.is_power_of_two() {
            return Err(Error::new(
                ErrorKind::Invalid,
                action,
                "its data pages are not a power of two",
                "ask for 1, 2, 4, ... pages",
            ));
        }
        // SAFETY: a new shared mapping of the perf descriptor at an address
        // the kernel chooses; it aliases no Rust object.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                event.fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os(action).with_fix(
                "raise the locked-memory limit for perf (`sysctl kernel.perf_event_mlock_kb`) \
                 or ask for fewer pages",
            ));
        }
        Ok(Ring {
            base: NonNull::new(base.cast()).expect("mmap returned a non-null address"),
            len,
            data_len,
            scratch: Vec::new(),
        })
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is one of the metadata page's 8-byte aligned
        // u64 fields, inside the mapping, which lives as long as `self`.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// Calls `each(type, body)` for every whole record the kernel has
    /// written since the last call, oldest first, then frees their space.
    pub fn drain(&mut self, mut each: impl FnMut(u32, &[u8])) {
        // Acquire: the records' bytes are visible once the head is.
        let head = self.word(HEAD_OFFSET).load(Ordering::Acquire);
        let mut tail = self.word(TAIL_OFFSET).load(Ordering::Relaxed);
        let page = self.len - self.data_len;
        while head.wrapping_sub(tail) >= HEADER_LEN as u64 {
            let mut header = [0u8; HEADER_LEN];
            self.copy_out(page, tail, &mut header);
            let kind = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes"));
            let size = u16::from_ne_bytes(header[6..8].try_into().expect("2 bytes")) as u64;
            if size < HEADER_LEN as u64 || head.wrapping_sub(tail) < size {
                break;
            }
            let body_len = size as usize - HEADER_LEN;
            let mut body = std::mem::take(&mut self.scratch);
            body.resize(body_len, 0);
            self.copy_out(page, tail + HEADER_LEN as u64, &mut body);
            each(kind, &body);
            self.scratch = body;
            tail += size;
        }
        // Release: the kernel may overwrite what we read only after we read it.
        self.word(TAIL_OFFSET).store(tail, Ordering::Release);
    }

    /// Copies `out.len()` bytes of the data area from ring position `at`,
    /// wrapping around its end.
    fn copy_out(&self, page: usize, at: u64, out: &mut [u8]) {
        let start = (at % self.data_len as u64) as usize;
        let first = out.len().min(self.data_len - start);
        // SAFETY: both ranges lie inside the data area of the mapping
        // (start + first <= data_len; the rest wraps to its beginning and
        // is shorter than data_len), and `out` is a distinct Rust buffer.
        unsafe {
            let data = self.base.as_ptr().add(page);
            std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns; no reference
        // into it outlives `self`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf only reads a configuration value.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

/// Where tracefs is mounted now (`/sys/kernel/tracing`, or debugfs's
/// `tracing` folder), if anywhere.
pub fn tracefs_mount() -> Option<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    tracefs_in_mounts(&mounts)
}

fn tracefs_in_mounts(mounts: &str) -> Option<std::path::PathBuf> {
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, kind) = (f.next()?, f.next()?, f.next()?);
        match kind {
            "tracefs" => Some(std::path::PathBuf::from(dir)),
            "debugfs" => Some(std::path::Path::new(dir).join("tracing"))
                .filter(|p| p.join("events").is_dir()),
            _ => None,
        }
    })
}

/// Where tessera mounts tracefs when nobody has.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Mounts tracefs at [`TRACEFS`].
pub fn mount_tracefs() -> Result<()> {
    let (source, target, kind) = (
        CString::new("nodev").expect("no NUL"),
        CString::new(TRACEFS).expect("no NUL"),
        CString::new("tracefs").expect("no NUL"),
    );
    // SAFETY: three NUL-terminated strings that outlive the call, no data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            kind.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(
            Error::last_os(format!("mount tracefs at {TRACEFS}")).with_fix(format!(
                "run as root, or mount it once: `mount -t tracefs nodev {TRACEFS}`"
            )),
        ),
    }
}

/// Unmounts what [`mount_tracefs`] mounted (lazily: a reader that still
/// has a file open keeps it until it closes).
pub fn unmount_tracefs() -> Result<()> {
    let target = CString::new(TRACEFS).expect("no NUL");
    // SAFETY: a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    match rc {
        0 => Ok(()),
        _ => Err(Error::last_os(format!("unmount tracefs at {TRACEFS}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracefs_is_found_in_mounts() {
        let mounts = "sysfs /sys sysfs rw 0 0\nnodev /sys/kernel/tracing tracefs rw 0 0\n";
        assert_eq!(
            tracefs_in_mounts(mounts),
            Some(std::path::PathBuf::from("/sys/kernel/tracing"))
        );
        assert_eq!(tracefs_in_mounts("sysfs /sys sysfs rw 0 0\n"), None);
    }
}
