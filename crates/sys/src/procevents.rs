//! The kernel's process-events connector: a netlink socket
//! (`NETLINK_CONNECTOR`, group `CN_IDX_PROC`) on which the kernel reports
//! every fork (a new thread or process), exec and exit on the machine the
//! moment it happens, so a watcher never has to poll /proc for new threads.
//!
//! It owns the socket, the LISTEN/IGNORE handshake and the decoding of the
//! kernel's messages; every receive waits at most the timeout it is given.
//! It must never decide what an event means for a cell (the guard does), and
//! it reports only what the kernel sends: scheduling-policy changes are not
//! among them and must be polled (`sched::get_policy`).
//!
//! Needs CAP_NET_ADMIN (root), and the initial PID and user namespaces (the
//! kernel reports init-namespace PIDs and stays silent inside containers).
//!
//! Wire layouts (include/uapi/linux/{netlink,connector,cn_proc}.h), all in
//! the machine's byte order, decoded field by field from byte offsets (the
//! connector payload starts 36 bytes in, not 8-aligned, so it is never cast):
//!
//! ```text
//! struct nlmsghdr   { u32 len; u16 type; u16 flags; u32 seq; u32 pid; }  16 bytes
//! struct cn_msg     { u32 idx; u32 val; u32 seq; u32 ack;
//!                     u16 len; u16 flags; u8 data[]; }                    20 bytes
//! struct proc_event { u32 what; u32 cpu; u64 timestamp_ns;               16 bytes
//!                     union event_data { ... } }                          at 16
//!   ack  (what NONE):  u32 err
//!   fork (what 1):     i32 parent_pid, parent_tgid, child_pid, child_tgid
//!   exec (what 2):     i32 process_pid, process_tgid
//!   exit (what 0x80000000): i32 process_pid, process_tgid;
//!                      u32 exit_code, exit_signal; i32 parent_pid, parent_tgid
//! ```
//!
//! The message to the kernel is an nlmsghdr, a cn_msg for CN_IDX_PROC /
//! CN_VAL_PROC and a u32 operation (`PROC_CN_MCAST_LISTEN` = 1, `IGNORE` = 2).

use crate::error::{Error, ErrorKind, Result};
use crate::proc::Pid;
use crate::sched::Tid;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const CN_IDX_PROC: u32 = 0x1;
const CN_VAL_PROC: u32 = 0x1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_CN_MCAST_IGNORE: u32 = 2;

const PROC_EVENT_NONE: u32 = 0x0;
const PROC_EVENT_FORK: u32 = 0x1;
const PROC_EVENT_EXEC: u32 = 0x2;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;

/// sizeof(struct nlmsghdr), already a multiple of NLMSG_ALIGNTO (4).
const NLMSG_HDR_LEN: usize = 16;
/// sizeof(struct cn_msg) without its data.
const CN_MSG_LEN: usize = 20;
/// Offset of `event_data` in struct proc_event (after what, cpu, timestamp).
const EVENT_DATA: usize = 16;

/// How long `open` waits for the kernel to acknowledge LISTEN.
const ACK_TIMEOUT: Duration = Duration::from_secs(1);

/// What a receive buffer of the socket should hold: a burst of thousands of
/// events (a build forking compilers) without the kernel dropping any.
const RECEIVE_BUFFER: usize = 1 << 20;

/// The fix when the connector cannot be used for lack of privilege.
pub const GRANT_CAP_NET_ADMIN: &str = "run as root, or grant the capability with \
`sudo setcap cap_net_admin,cap_sys_nice+ep $(command -v tessera)`; without it, new threads \
are found by polling /proc instead (slower)";

/// One event of the process-events connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcEvent {
    /// A new task. A thread of process `child_tgid` when `child_pid` (its
    /// TID) differs from `child_tgid`, otherwise a new process.
    Fork {
        parent_pid: Tid,
        parent_tgid: Pid,
        child_pid: Tid,
        child_tgid: Pid,
    },
    /// Thread `pid` of process `tgid` ran execve (the process's image changed).
    Exec { pid: Tid, tgid: Pid },
    /// Thread `pid` of process `tgid` exited (the process ends with its
    /// last thread, which need not be `tgid` itself).
    Exit {
        pid: Tid,
        tgid: Pid,
        exit_code: u32,
        exit_signal: u32,
    },
    /// The kernel's answer to a LISTEN or IGNORE (this socket's or another
    /// listener's): 0 accepted, else an errno; `ack` is the request's plus 1.
    Ack { errno: u32, ack: u32 },
    /// An event this module does not decode (uid, gid, sid, ptrace, comm,
    /// coredump), by its `what` value.
    Other { what: u32 },
    /// The socket's buffer overflowed and the kernel dropped events: the
    /// caller must rescan /proc for what it missed.
    Lost,
}

impl ProcEvent {
    /// Whether this is the creation of a thread (not of a process).
    pub fn is_thread_creation(&self) -> bool {
        matches!(self, ProcEvent::Fork { child_pid, child_tgid, .. } if child_pid != child_tgid)
    }
}

/// A subscription to the connector's events, for the life of the value
/// (IGNORE is sent when it is dropped).
#[derive(Debug)]
pub struct ProcEvents {
    fd: OwnedFd,
    buf: Vec<u8>,
    /// Events received while waiting for the acknowledgement, handed out first.
    pending: Vec<ProcEvent>,
}

/// The socket, to wait for it beside other descriptors (an epoll); read
/// it with [`ProcEvents::recv`] once it is readable.
impl AsFd for ProcEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Acknowledgement numbers of our LISTEN messages, unique in this process
/// so that an acknowledgement for another listener is never taken for ours.
/// (The kernel echoes `ack + 1`; it overwrites `seq` with its own counter.)
static NEXT_ACK: AtomicU32 = AtomicU32::new(1);

impl ProcEvents {
    /// Subscribes to the machine's process events. Fails, saying why and
    /// what to do, without CAP_NET_ADMIN, in a container, or on a kernel
    /// built without CONFIG_PROC_EVENTS.
    pub fn open() -> Result<ProcEvents> {
        let fd = socket()?;
        bind_to_proc_group(&fd)?;
        // A larger buffer is an optimisation; the default still works.
        let _ = crate::net::set_receive_buffer(&fd, RECEIVE_BUFFER);
        let mut events = ProcEvents {
            fd,
            buf: vec![0; 64 * 1024],
            pending: Vec::new(),
        };
        let ack =
            NEXT_ACK.fetch_add(1, Ordering::Relaxed) ^ ((crate::proc::current_pid() as u32) << 12);
        events.send_op(PROC_CN_MCAST_LISTEN, ack)?;
        events.await_ack(ack.wrapping_add(1))?;
        Ok(events)
    }

    fn send_op(&self, op: u32, ack: u32) -> Result<()> {
        let message = control_message(op, ack);
        // SAFETY: an all-zero sockaddr_nl is valid; family is set below and
        // pid 0 / groups 0 address the kernel.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `message` is a readable buffer of the length passed, and
        // `kernel` a sockaddr_nl of the size passed.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                0,
                (&kernel as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            let verb = if op == PROC_CN_MCAST_LISTEN {
                "LISTEN"
            } else {
                "IGNORE"
            };
            return Err(explain(Error::last_os(format!(
                "send PROC_CN_MCAST_{verb} to the process-events connector"
            ))));
        }
        Ok(())
    }

    /// Waits for the kernel to acknowledge our LISTEN; other events that
    /// arrive meanwhile are kept for the first `recv`.
    fn await_ack(&mut self, expected: u32) -> Result<()> {
        let until = Instant::now() + ACK_TIMEOUT;
        let mut received = Vec::new();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "subscribe to the process-events connector",
                    "the kernel did not acknowledge PROC_CN_MCAST_LISTEN within 1 s: tessera is in a \
                     container (not the initial PID/user namespace), or the kernel lacks \
                     CONFIG_PROC_EVENTS",
                    "run tessera on the host; new threads are found by polling /proc meanwhile",
                ));
            }
            received.clear();
            self.receive_into(left, &mut received)?;
            for event in received.drain(..) {
                match event {
                    ProcEvent::Ack { errno, ack } if ack == expected => {
                        return ack_result(errno);
                    }
                    ProcEvent::Ack { .. } => {}
                    other => self.pending.push(other),
                }
            }
        }
    }

    /// The events of the next `timeout` at most: returns as soon as at least
    /// one arrived, or empty when none did. Never blocks longer than
    /// `timeout` (rounded up to a millisecond).
    pub fn recv(&mut self, timeout: Duration) -> Result<Vec<ProcEvent>> {
        let mut out = std::mem::take(&mut self.pending);
        if !out.is_empty() {
            // Take whatever else is already queued, without waiting.
            self.receive_into(Duration::ZERO, &mut out)?;
        } else {
            self.receive_into(timeout, &mut out)?;
        }
        // Acknowledgements are the handshake's business, not the caller's.
        out.retain(|e| !matches!(e, ProcEvent::Ack { .. }));
        Ok(out)
    }

    /// Waits up to `timeout` for the socket to be readable, then reads every
    /// queued datagram without blocking.
    fn receive_into(&mut self, timeout: Duration, out: &mut Vec<ProcEvent>) -> Result<()> {
        if !wait_readable(&self.fd, timeout)? {
            return Ok(());
        }
        loop {
            // SAFETY: `buf` is a writable buffer of the length passed.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n >= 0 {
                parse_datagram(&self.buf[..n as usize], out);
                continue;
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(()),
                Some(libc::EINTR) => continue,
                // The kernel dropped events; the socket stays usable.
                Some(libc::ENOBUFS) => out.push(ProcEvent::Lost),
                _ => {
                    return Err(Error::from_io(
                        "receive from the process-events connector",
                        &err,
                    ))
                }
            }
        }
    }
}

impl Drop for ProcEvents {
    fn drop(&mut self) {
        // The kernel counts listeners and builds events while any remain.
        let _ = self.send_op(PROC_CN_MCAST_IGNORE, 0);
    }
}

impl AsRawFd for ProcEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

fn socket() -> Result<OwnedFd> {
    // SAFETY: socket takes no pointers.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_CONNECTOR,
        )
    };
    if fd < 0 {
        return Err(explain(Error::last_os(
            "open a netlink socket (NETLINK_CONNECTOR)",
        )));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind_to_proc_group(fd: &OwnedFd) -> Result<()> {
    // SAFETY: an all-zero sockaddr_nl is valid; pid 0 lets the kernel pick
    // a unique port id (several subscriptions may live in one process).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = CN_IDX_PROC;
    // SAFETY: `addr` is a sockaddr_nl of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(explain(Error::last_os(
            "join the process-events group (CN_IDX_PROC) of the netlink connector",
        )));
    }
    Ok(())
}

/// Whether `fd` became readable within `timeout`.
fn wait_readable(fd: &OwnedFd, timeout: Duration) -> Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Round up: a 0.4 ms timeout must still wait, not spin.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is one valid pollfd and the count passed is 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            return Ok(false);
        }
        return Err(Error::from_io("poll the process-events connector", &err));
    }
    Ok(rc > 0)
}

/// Turns a privilege or support failure into what to do about it.
fn explain(mut err: Error) -> Error {
    let missing = matches!(
        err.errno,
        Some(libc::EPROTONOSUPPORT) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
    );
    if missing {
        err.kind = ErrorKind::Unsupported;
        return err
            .with_cause("this kernel has no process-events connector (CONFIG_CONNECTOR, CONFIG_PROC_EVENTS)")
            .with_fix("new threads are found by polling /proc instead");
    }
    match err.kind {
        ErrorKind::Permission => err
            .with_cause("the process-events connector needs CAP_NET_ADMIN")
            .with_fix(GRANT_CAP_NET_ADMIN),
        _ => err,
    }
}

fn ack_result(errno: u32) -> Result<()> {
    if errno == 0 {
        return Ok(());
    }
    let err = Error::from_io(
        "subscribe to the process-events connector (PROC_CN_MCAST_LISTEN)",
        &std::io::Error::from_raw_os_error(errno as i32),
    );
    Err(explain(err))
}

/// nlmsghdr + cn_msg + u32 operation, as the kernel reads them.
fn control_message(op: u32, ack: u32) -> Vec<u8> {
    let total = NLMSG_HDR_LEN + CN_MSG_LEN + 4;
    let mut m = Vec::with_capacity(total);
    // nlmsghdr: len, type NLMSG_DONE (a single-part message), flags, seq, pid
    m.extend_from_slice(&(total as u32).to_ne_bytes());
    m.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // cn_msg: idx, val, seq, ack, len, flags
    m.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
    m.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&ack.to_ne_bytes());
    m.extend_from_slice(&4u16.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    // enum proc_cn_mcast_op
    m.extend_from_slice(&op.to_ne_bytes());
    m
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn i32_at(bytes: &[u8], at: usize) -> Option<i32> {
    u32_at(bytes, at).map(|v| v as i32)
}

/// Decodes every netlink message of one datagram; malformed or foreign
/// messages are skipped, never trusted past their bounds.
fn parse_datagram(bytes: &[u8], out: &mut Vec<ProcEvent>) {
    let mut at = 0;
    while let Some(len) = u32_at(bytes, at).map(|l| l as usize) {
        if len < NLMSG_HDR_LEN || at + len > bytes.len() {
            return;
        }
        let kind = u16_at(bytes, at + 4).unwrap_or(0);
        if kind == libc::NLMSG_OVERRUN as u16 {
            out.push(ProcEvent::Lost);
        } else if let Some(e) = parse_connector(&bytes[at + NLMSG_HDR_LEN..at + len]) {
            out.push(e);
        }
        // NLMSG_ALIGN: messages start on 4-byte boundaries.
        at += (len + 3) & !3;
    }
}

/// Decodes one cn_msg carrying a proc_event.
fn parse_connector(cn: &[u8]) -> Option<ProcEvent> {
    if u32_at(cn, 0)? != CN_IDX_PROC || u32_at(cn, 4)? != CN_VAL_PROC {
        return None;
    }
    let ack = u32_at(cn, 12)?;
    let data_len = u16_at(cn, 16)? as usize;
    let ev = cn.get(CN_MSG_LEN..CN_MSG_LEN + data_len)?;
    let what = u32_at(ev, 0)?;
    let data = ev.get(EVENT_DATA..)?;
    let field = |i: usize| i32_at(data, 4 * i);
    Some(match what {
        PROC_EVENT_NONE => ProcEvent::Ack {
            errno: u32_at(data, 0)?,
            ack,
        },
        PROC_EVENT_FORK => ProcEvent::Fork {
            parent_pid: field(0)?,
            parent_tgid: field(1)?,
            child_pid: field(2)?,
            child_tgid: field(3)?,
        },
        PROC_EVENT_EXEC => ProcEvent::Exec {
            pid: field(0)?,
            tgid: field(1)?,
        },
        PROC_EVENT_EXIT => ProcEvent::Exit {
            pid: field(0)?,
            tgid: field(1)?,
            exit_code: field(2)? as u32,
            exit_signal: field(3)? as u32,
        },
        other => ProcEvent::Other { what: other },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest union member (exit: six 4-byte fields).
    const EVENT_DATA_LEN: usize = 24;

    /// A datagram as the kernel builds it: nlmsghdr, cn_msg, proc_event.
    fn datagram(what: u32, fields: &[i32]) -> Vec<u8> {
        let mut event = Vec::new();
        event.extend_from_slice(&what.to_ne_bytes());
        event.extend_from_slice(&1u32.to_ne_bytes()); // cpu
        event.extend_from_slice(&123u64.to_ne_bytes()); // timestamp_ns
        for f in fields {
            event.extend_from_slice(&f.to_ne_bytes());
        }
        event.resize(EVENT_DATA + EVENT_DATA_LEN, 0);
        let mut m = control_message(0, 9);
        m.truncate(NLMSG_HDR_LEN + CN_MSG_LEN);
        m[NLMSG_HDR_LEN + 16..NLMSG_HDR_LEN + 18]
            .copy_from_slice(&(event.len() as u16).to_ne_bytes());
        m.extend_from_slice(&event);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn the_kernels_layouts_decode() {
        let mut out = Vec::new();
        let mut two = datagram(PROC_EVENT_FORK, &[10, 10, 11, 10]);
        two.extend(datagram(PROC_EVENT_EXIT, &[11, 10, 0, 17, 1, 1]));
        parse_datagram(&two, &mut out);
        parse_datagram(&datagram(PROC_EVENT_EXEC, &[12, 12]), &mut out);
        parse_datagram(&datagram(PROC_EVENT_NONE, &[1]), &mut out);
        parse_datagram(&datagram(0x200, &[]), &mut out);
        assert_eq!(
            out,
            [
                ProcEvent::Fork {
                    parent_pid: 10,
                    parent_tgid: 10,
                    child_pid: 11,
                    child_tgid: 10
                },
                ProcEvent::Exit {
                    pid: 11,
                    tgid: 10,
                    exit_code: 0,
                    exit_signal: 17
                },
                ProcEvent::Exec { pid: 12, tgid: 12 },
                ProcEvent::Ack { errno: 1, ack: 9 },
                ProcEvent::Other { what: 0x200 },
            ]
        );
        assert!(out[0].is_thread_creation());
        assert_eq!(control_message(1, 5).len(), 40);
    }

    #[test]
    fn truncated_or_foreign_messages_are_skipped() {
        let mut out = Vec::new();
        let whole = datagram(PROC_EVENT_FORK, &[1, 1, 2, 2]);
        parse_datagram(&whole[..whole.len() - 30], &mut out);
        let mut foreign = whole.clone();
        foreign[NLMSG_HDR_LEN..NLMSG_HDR_LEN + 4].copy_from_slice(&7u32.to_ne_bytes());
        parse_datagram(&foreign, &mut out);
        assert!(out.is_empty(), "{out:?}");
        parse_datagram(&whole, &mut out);
        assert!(!out[0].is_thread_creation(), "a process, not a thread");
    }

    #[test]
    fn refusal_names_the_capability_and_the_fix() {
        let err = ack_result(libc::EPERM as u32).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Permission);
        let text = err.to_string();
        assert!(text.contains("CAP_NET_ADMIN"), "{text}");
        assert!(text.contains("setcap cap_net_admin"), "{text}");
        assert!(text.contains("polling /proc"), "{text}");
    }

    #[test]
    fn a_spawned_threads_creation_and_exit_are_seen() {
        if !crate::caps::root_or_skip("procevents", "the process-events connector") {
            return;
        }
        let mut events = ProcEvents::open().unwrap();
        let me = crate::proc::current_pid();
        let (tx, rx) = std::sync::mpsc::channel();
        let release = std::sync::mpsc::channel::<()>();
        let waiter = release.1;
        let handle = std::thread::spawn(move || {
            tx.send(crate::proc::current_tid()).unwrap();
            let _ = waiter.recv_timeout(Duration::from_secs(10));
        });
        let tid = rx.recv().unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let mut seen_fork = false;
        while !seen_fork && Instant::now() < until {
            for e in events.recv(Duration::from_millis(100)).unwrap() {
                if let ProcEvent::Fork {
                    child_pid,
                    child_tgid,
                    ..
                } = e
                {
                    seen_fork |= child_pid == tid && child_tgid == me;
                }
            }
        }
        assert!(seen_fork, "the creation of thread {tid} was reported");
        release.0.send(()).unwrap();
        handle.join().unwrap();
        let mut seen_exit = false;
        while !seen_exit && Instant::now() < until {
            for e in events.recv(Duration::from_millis(100)).unwrap() {
                seen_exit |=
                    matches!(e, ProcEvent::Exit { pid, tgid, .. } if pid == tid && tgid == me);
            }
        }
        assert!(seen_exit, "the exit of thread {tid} was reported");
        let start = Instant::now();
        let quiet = events.recv(Duration::from_millis(30));
        assert!(quiet.is_ok() && start.elapsed() < Duration::from_secs(1));
    }
}
