//! Starting and ending processes tessera runs. External load generators
//! (stress-ng forks its workers) run in a group of their own, and stopping
//! them must reach every member, not only the parent a `Child::kill` would
//! hit; a server such as jackd is asked to exit (SIGTERM) so it can clean
//! up; a program started in a cell waits at an [`ExecGate`] between fork and
//! exec until its parent has placed it, so it never runs an instruction of
//! its own outside the cell; signals are passed on to it.
//!
//! It must never signal anything the caller did not start: a group id of 0
//! or 1 (the caller's own group, init) is refused. What runs in a child
//! between fork and exec is async-signal-safe system calls only.

use crate::error::{Error, ErrorKind, Result};
use crate::proc::Pid;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// Whether `program` is on the PATH: a fact read before starting it (and
/// by the scenario language, before a run that needs it).
pub fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Sends SIGTERM (`force`: SIGKILL) to every process of group `pgid`.
pub fn signal_group(pgid: Pid, force: bool) -> Result<()> {
    if pgid <= 1 {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("signal process group {pgid}"),
            "refused: not a group created for a load generator",
            "start the generator in its own process group",
        ));
    }
    let signal = if force { libc::SIGKILL } else { libc::SIGTERM };
    // SAFETY: kill(2) takes no pointers; a negative pid addresses the group.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == -1 {
        let err = std::io::Error::last_os_error();
        // The group already ended: nothing left to stop.
        if err.raw_os_error() == Some(libc::ESRCH) {
            return Ok(());
        }
        return Err(Error::from_io(format!("signal process group {pgid}"), &err));
    }
    Ok(())
}

/// Asks child process `pid` to exit (SIGTERM). The caller must not have
/// reaped it yet, so that the PID cannot have been reused.
pub fn terminate(pid: Pid) -> Result<()> {
    if pid <= 1 {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("terminate process {pid}"),
            "refused: not a child process",
            "pass the PID of a child you started",
        ));
    }
    // SAFETY: kill(2) takes no pointers.
    if unsafe { libc::kill(pid, libc::SIGTERM) } == -1 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            return Err(Error::from_io(format!("terminate process {pid}"), &err));
        }
    }
    Ok(())
}

/// The parent's side of a gate a spawned child waits at between fork and
/// exec: the child announces its PID, then waits until the parent opens the
/// gate (it execs the program) or refuses (its spawn fails with ECANCELED).
///
/// `Command::spawn` returns only once the child has exec'd, so the gate is
/// kept by another thread of the parent than the one that spawns.
#[derive(Debug)]
pub struct ExecGate {
    announced: OwnedFd,
    release: OwnedFd,
}

/// The child's ends of the gate's pipes, held open by the parent until
/// `spawn` returned; dropping them then lets a gate keeper waiting for a
/// child that never came see end-of-file instead of waiting out its patience.
#[derive(Debug)]
pub struct ChildEnds {
    _announce: OwnedFd,
    _wait: OwnedFd,
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a writable array of two ints, as pipe2 requires.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os("pipe2(O_CLOEXEC)")
            .with_fix("raise the open-files limit (`ulimit -n`) or close unused descriptors"));
    }
    // SAFETY: both descriptors were just returned by the kernel and are
    // owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes `cmd`, when spawned (once), stop between fork and exec at a gate
/// that the returned [`ExecGate`] opens. The child waits at most `patience`,
/// then gives up (its spawn fails). Spawn it after handing the gate to
/// another thread, and drop the [`ChildEnds`] as soon as `spawn` returned.
pub fn gate_exec(cmd: &mut Command, patience: Duration) -> Result<(ExecGate, ChildEnds)> {
    let (announced, announce) = pipe()?;
    let (wait, release) = pipe()?;
    let fds = [
        announced.as_raw_fd(),
        announce.as_raw_fd(),
        wait.as_raw_fd(),
        release.as_raw_fd(),
    ];
    let patience_ms = patience.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe system calls (close, getpid, write, poll,
    // read) on descriptors that are open in the child (the parent keeps its
    // copies open until spawn returned); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || wait_at_gate(fds, patience_ms));
    }
    Ok((
        ExecGate { announced, release },
        ChildEnds {
            _announce: announce,
            _wait: wait,
        },
    ))
}

/// The child's side: close the parent's ends (so the parent's death reads
/// as end-of-file), announce the PID, wait for the verdict.
fn wait_at_gate(fds: [RawFd; 4], patience_ms: i32) -> std::io::Result<()> {
    let [parents_read, announce, wait, parents_write] = fds;
    // SAFETY: closing descriptors this child inherited; nothing else in the
    // child uses them.
    unsafe {
        libc::close(parents_read);
        libc::close(parents_write);
    }
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() }.to_ne_bytes();
    if write_fully(announce, &pid) != pid.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    let mut verdict = [0u8; 1];
    if !readable_within(wait, patience_ms) || read_once(wait, &mut verdict) != 1 || verdict[0] != 1
    {
        return Err(std::io::Error::from_raw_os_error(libc::ECANCELED));
    }
    Ok(())
}

/// write(2), retried on EINTR; async-signal-safe.
fn write_fully(fd: RawFd, bytes: &[u8]) -> isize {
    loop {
        // SAFETY: `bytes` is readable for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n;
        }
    }
}

/// read(2), retried on EINTR; async-signal-safe.
fn read_once(fd: RawFd, buf: &mut [u8]) -> isize {
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n;
        }
    }
}

/// Whether `fd` is readable (data or end-of-file) within `ms`; a signal
/// restarts the wait. Async-signal-safe.
pub(crate) fn readable_within(fd: RawFd, ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, count 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc >= 0 {
            return rc > 0;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
}

impl ExecGate {
    /// The PID of the child waiting at the gate, once it announced itself
    /// (within `patience`).
    pub fn wait_child(&self, patience: Duration) -> Result<Pid> {
        let action = "wait for the started program at its gate";
        let ms = patience.as_millis().min(i32::MAX as u128) as i32;
        let mut pid = [0u8; 4];
        if !readable_within(self.announced.as_raw_fd(), ms) {
            return Err(Error::new(
                ErrorKind::Io,
                action,
                format!("the child did not start within {} ms", ms),
                "the machine may be overloaded; try again",
            ));
        }
        if read_once(self.announced.as_raw_fd(), &mut pid) != 4 {
            return Err(Error::new(
                ErrorKind::NotFound,
                action,
                "the child ended before it announced itself (the spawn failed)",
                "see the spawn's own error",
            ));
        }
        Ok(Pid::from_ne_bytes(pid))
    }

    /// Lets the child exec its program.
    pub fn open(self) -> Result<()> {
        if write_fully(self.release.as_raw_fd(), &[1]) != 1 {
            return Err(Error::last_os("open the gate of the started program"));
        }
        Ok(())
    }

    /// Makes the child give up: its program never runs, and the parent's
    /// spawn fails with ECANCELED ([`refused_at_gate`]).
    pub fn refuse(self) {
        let _ = write_fully(self.release.as_raw_fd(), &[0]);
    }
}

/// Whether a spawn failed because its gate was refused (or its keeper
/// never answered), rather than because the program could not run.
pub fn refused_at_gate(spawn_error: &std::io::Error) -> bool {
    spawn_error.raw_os_error() == Some(libc::ECANCELED)
}

/// The last termination signal (SIGINT, SIGTERM, SIGHUP) received since
/// [`catch_termination`], and whether a terminal sent it (Ctrl-C reaches the
/// whole foreground process group, so a child has it already).
static CAUGHT: AtomicI32 = AtomicI32::new(0);
static FROM_TERMINAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_termination(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    // SI_KERNEL: the terminal driver (Ctrl-C, Ctrl-\, hang-up), not kill(2).
    FROM_TERMINAL.store((code == libc::SI_KERNEL) as i32, Ordering::Relaxed);
    CAUGHT.store(signal, Ordering::Release);
}

/// Catches SIGINT, SIGTERM and SIGHUP in this process instead of dying of
/// them, so that the caller can restore what it changed and pass the signal
/// on ([`take_termination`]). A child's exec resets the handlers. A signal
/// this process ignores (a background job's SIGINT) stays ignored, so that
/// its children inherit that too.
pub fn catch_termination() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: all-zero is a valid sigaction, filled in below.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `action`.
        if unsafe { libc::sigaction(signal, std::ptr::null(), &mut action) } == 0
            && action.sa_sigaction == libc::SIG_IGN
        {
            continue;
        }
        action.sa_sigaction = on_termination as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        // SAFETY: `sa_mask` is a valid sigset_t of this frame.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is initialised; its handler only stores atomics.
        if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
            return Err(Error::last_os(format!("catch signal {signal}")));
        }
    }
    Ok(())
}

/// The termination signal caught since the last call, if any, and whether
/// it came from the terminal.
pub fn take_termination() -> Option<(i32, bool)> {
    let signal = CAUGHT.swap(0, Ordering::Acquire);
    (signal != 0).then(|| (signal, FROM_TERMINAL.load(Ordering::Relaxed) != 0))
}

/// Sends `signal` to child process `pid` (not yet reaped, so its PID cannot
/// have been reused).
pub fn signal_child(pid: Pid, signal: i32) -> Result<()> {
    if pid <= 1 {
        return Err(Error::new(
            ErrorKind::Invalid,
            format!("signal process {pid}"),
            "refused: not a child process",
            "pass the PID of a child you started",
        ));
    }
    // SAFETY: kill(2) takes no pointers.
    if unsafe { libc::kill(pid, signal) } == -1 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            return Err(Error::from_io(format!("signal process {pid}"), &err));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spawns `cmd` through a gate kept by another thread, which answers
    /// with `open`; returns the spawn's outcome and the announced PID.
    fn through_gate(mut cmd: Command, open: bool) -> (std::io::Result<std::process::Child>, Pid) {
        let (gate, ends) = gate_exec(&mut cmd, Duration::from_secs(5)).unwrap();
        std::thread::scope(|s| {
            let keeper = s.spawn(move || {
                let pid = gate.wait_child(Duration::from_secs(5)).unwrap();
                if open {
                    gate.open().unwrap();
                } else {
                    gate.refuse();
                }
                pid
            });
            let spawned = cmd.spawn();
            drop(ends);
            (spawned, keeper.join().unwrap())
        })
    }

    #[test]
    fn an_opened_gate_runs_the_program_and_a_refused_one_never_does() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        let (child, pid) = through_gate(cmd, true);
        let mut child = child.unwrap();
        assert_eq!(child.id() as Pid, pid, "the announced PID is the child's");
        assert_eq!(child.wait().unwrap().code(), Some(3));

        let marker = std::env::temp_dir().join(format!("tessera-gate-{}", std::process::id()));
        let mut cmd = Command::new("touch");
        cmd.arg(&marker);
        let (child, _) = through_gate(cmd, false);
        assert!(
            refused_at_gate(&child.unwrap_err()),
            "the refused program's spawn fails"
        );
        assert!(!marker.exists(), "the refused program never ran");
    }

    #[test]
    fn a_keeper_whose_child_never_came_is_told_so_at_once() {
        let mut cmd = Command::new("/nonexistent/program");
        let (gate, ends) = gate_exec(&mut cmd, Duration::from_secs(5)).unwrap();
        drop(cmd);
        drop(ends);
        let start = std::time::Instant::now();
        let err = gate.wait_child(Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
