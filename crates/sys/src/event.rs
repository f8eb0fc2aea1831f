//! Event sources and readiness for the cell runtime: `epoll` (waiting for
//! many file descriptors at once), `timerfd` (periodic releases at absolute
//! `CLOCK_MONOTONIC` times, so that they never drift) and `eventfd` (a
//! counter another thread bumps to wake a waiter).
//!
//! It owns the file descriptors and the system calls. Waiting, reading and
//! signalling never allocate, so they may run on a real-time thread; creating
//! the objects may. It must never decide what a readiness means: releasing
//! jobs and their deadlines is the runtime's.

use crate::error::{Error, Result};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The fix for running out of file descriptors or kernel memory.
const FIX_RESOURCES: &str = "raise the open-files limit (`ulimit -n`) or close unused descriptors";

fn owned(fd: libc::c_int, action: &str) -> Result<OwnedFd> {
    if fd < 0 {
        return Err(Error::last_os(action).with_fix(FIX_RESOURCES));
    }
    // SAFETY: `fd` was just returned by the kernel, is open, and nothing else
    // owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one `u64` counter (eventfd, timerfd); 0 when there is none yet.
fn read_counter(fd: &OwnedFd) -> u64 {
    // The descriptors are non-blocking: EAGAIN means "nothing yet", and no
    // other error is possible on a valid eventfd/timerfd with an 8-byte read
    // (but a cancelled timer's, which `ClockSteps` asks for).
    try_read_counter(fd).unwrap_or(0)
}

/// One `u64` counter, or the read's errno.
fn try_read_counter(fd: &OwnedFd) -> std::result::Result<u64, i32> {
    let mut value = 0u64;
    // SAFETY: `value` is a writable 8-byte buffer on this frame and the
    // length passed is its size.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut value as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
    match n == std::mem::size_of::<u64>() as isize {
        true => Ok(value),
        false => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// An `eventfd` counter: one thread signals, another waits for readability.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking, close-on-exec eventfd starting at 0.
    pub fn new() -> Result<EventFd> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        owned(fd, "eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)").map(EventFd)
    }

    /// Adds 1 to the counter, making the descriptor readable. Never blocks:
    /// a saturated counter (EAGAIN) is already readable.
    pub fn signal(&self) {
        let one = 1u64;
        // SAFETY: `one` is a readable 8-byte buffer on this frame.
        let _ = unsafe {
            libc::write(
                self.0.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Takes the counter (how many signals since the last drain), resetting
    /// it to 0; 0 if none.
    pub fn drain(&self) -> u64 {
        read_counter(&self.0)
    }

    /// An eventfd another process handed over (SCM_RIGHTS), checked to be
    /// one: signalling writes 8 bytes to it, which must never land in a
    /// file or a pipe a misbehaving peer sent instead.
    pub fn from_received(fd: OwnedFd) -> Result<EventFd> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| Error::from_io("look at a received descriptor", &e))?;
        match link.as_os_str() == "anon_inode:[eventfd]" {
            true => Ok(EventFd(fd)),
            false => Err(Error::new(
                crate::error::ErrorKind::Invalid,
                "take a received eventfd",
                format!("the peer sent {} instead of an eventfd", link.display()),
                "the peer must hand over an eventfd",
            )),
        }
    }

    /// A second descriptor on the same counter (for handing one to epoll and
    /// keeping one to signal with).
    pub fn try_clone(&self) -> Result<EventFd> {
        self.0
            .try_clone()
            .map(EventFd)
            .map_err(|e| Error::from_io("dup eventfd", &e).with_fix(FIX_RESOURCES))
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<EventFd> for OwnedFd {
    fn from(e: EventFd) -> OwnedFd {
        e.0
    }
}

/// A `timerfd` on `CLOCK_MONOTONIC`, armed at absolute times.
#[derive(Debug)]
pub struct TimerFd(OwnedFd);

impl TimerFd {
    /// A non-blocking, close-on-exec, disarmed timer.
    pub fn new() -> Result<TimerFd> {
        // SAFETY: timerfd_create takes no pointers.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
            )
        };
        owned(fd, "timerfd_create(CLOCK_MONOTONIC)").map(TimerFd)
    }

    /// Expires first at `first_ns` on `CLOCK_MONOTONIC`, then every
    /// `period_ns` (`TFD_TIMER_ABSTIME`: late wake-ups do not shift later
    /// expirations). A `first_ns` in the past expires at once.
    pub fn arm_periodic(&self, first_ns: u64, period_ns: u64) -> Result<()> {
        let spec = libc::itimerspec {
            it_interval: timespec(period_ns),
            // 0 would disarm the timer; the earliest legal time is 1 ns.
            it_value: timespec(first_ns.max(1)),
        };
        // SAFETY: `spec` is a valid itimerspec on this frame; the old-value
        // pointer may be null.
        let rc = unsafe {
            libc::timerfd_settime(
                self.0.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc == 0 {
            return Ok(());
        }
        Err(Error::last_os(format!(
            "timerfd_settime(first {first_ns} ns, period {period_ns} ns, TFD_TIMER_ABSTIME)"
        ))
        .with_fix("use a period of at least 1 ns and a time within CLOCK_MONOTONIC's range"))
    }

    /// Expirations since the last read (0 if none): more than 1 means the
    /// reader was late by whole periods.
    pub fn expirations(&self) -> u64 {
        read_counter(&self.0)
    }
}

impl AsFd for TimerFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Tells when `CLOCK_REALTIME` was set — stepped by `clock_settime`, or by
/// an offset ptp4l, phc2sys or an NTP daemon injects — and never when it is
/// only slewed (`CLOCK_MONOTONIC` follows a slew, so an offset between the
/// two changes only with a step). A `timerfd` on `CLOCK_REALTIME` armed at
/// the end of time with `TFD_TIMER_CANCEL_ON_SET`: the kernel makes it
/// readable at each step, and its read then fails with ECANCELED.
#[derive(Debug)]
pub struct ClockSteps(OwnedFd);

impl ClockSteps {
    /// A non-blocking, close-on-exec watch, armed.
    pub fn new() -> Result<ClockSteps> {
        // SAFETY: timerfd_create takes no pointers.
        let fd = unsafe {
            libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
        };
        let steps = ClockSteps(owned(fd, "timerfd_create(CLOCK_REALTIME)")?);
        // Far enough never to expire, within what the kernel accepts.
        let never = libc::itimerspec {
            it_interval: timespec(0),
            it_value: timespec(1 << 62),
        };
        // SAFETY: `never` is a valid itimerspec on this frame; the
        // old-value pointer may be null.
        let rc = unsafe {
            libc::timerfd_settime(
                steps.0.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET,
                &never,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(Error::last_os(
                "timerfd_settime(CLOCK_REALTIME, TFD_TIMER_CANCEL_ON_SET)",
            ));
        }
        Ok(steps)
    }

    /// Whether the clock was stepped since the last call. Never blocks.
    pub fn stepped(&self) -> bool {
        // The kernel keeps the timer armed and reports the next step anew.
        try_read_counter(&self.0) == Err(libc::ECANCELED)
    }
}

impl AsFd for ClockSteps {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// One readiness report of [`Epoll::wait`].
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Readiness(libc::epoll_event);

impl Readiness {
    /// An empty slot, to preallocate the buffer [`Epoll::wait`] fills.
    pub const EMPTY: Readiness = Readiness(libc::epoll_event { events: 0, u64: 0 });

    /// The token the descriptor was registered with.
    pub fn token(&self) -> u64 {
        self.0.u64
    }

    /// The peer hung up or the descriptor is in error (reported even when
    /// not asked for).
    pub fn hangup(&self) -> bool {
        self.0.events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0
    }
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (events, token) = (self.0.events, self.0.u64);
        write!(f, "Readiness {{ token: {token}, events: {events:#x} }}")
    }
}

/// How a descriptor is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Reported at every wait while readable (level-triggered).
    Level,
    /// Reported once, then disarmed until [`Epoll::rearm`] (`EPOLLONESHOT`):
    /// one readiness, one job.
    OneShot,
    /// Reported when it becomes readable: for a socket, at every datagram
    /// that arrives (`EPOLLET`), whether or not earlier ones were read.
    Edge,
}

impl Trigger {
    fn events(self) -> u32 {
        match self {
            Trigger::Level => libc::EPOLLIN as u32,
            Trigger::OneShot => (libc::EPOLLIN | libc::EPOLLONESHOT) as u32,
            Trigger::Edge => (libc::EPOLLIN | libc::EPOLLET) as u32,
        }
    }
}

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        owned(fd, "epoll_create1(EPOLL_CLOEXEC)").map(Epoll)
    }

    fn control(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: `event` is a valid epoll_event on this frame; the kernel
        // copies it and keeps no pointer.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut event) };
        if rc == 0 {
            return Ok(());
        }
        Err(
            Error::last_os(format!("epoll_ctl(op {op}, fd {fd}, token {token})")).with_fix(
                "watch only open descriptors that support polling (sockets, pipes, eventfds, \
             timerfds; not regular files), each once",
            ),
        )
    }

    /// Watches `fd` for readability, reporting `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64, trigger: Trigger) -> Result<()> {
        self.control(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), trigger.events(), token)
    }

    /// Arms a [`Trigger::OneShot`] descriptor again. Never allocates.
    pub fn rearm(&self, fd: BorrowedFd<'_>, token: u64) -> Result<()> {
        self.control(
            libc::EPOLL_CTL_MOD,
            fd.as_raw_fd(),
            Trigger::OneShot.events(),
            token,
        )
    }

    /// Waits until a descriptor is ready or `timeout` passes (rounded up to
    /// milliseconds; `Duration::ZERO` polls), filling `ready` from the front.
    /// Returns how many were filled; 0 on timeout or when a signal (e.g.
    /// SIGXCPU) interrupted the wait. Never allocates.
    pub fn wait(&self, ready: &mut [Readiness], timeout: Duration) -> Result<usize> {
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
        let max = ready.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `Readiness` is a transparent epoll_event, so `ready` is a
        // writable array of `max` epoll_events; the kernel writes at most that
        // many.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                ready.as_mut_ptr().cast::<libc::epoll_event>(),
                max,
                ms,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINTR) {
            return Ok(0);
        }
        Err(Error::from_io("epoll_wait", &err)
            .with_fix("pass a non-empty buffer and keep the epoll descriptor open"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::monotonic_ns;

    #[test]
    fn a_step_of_the_realtime_clock_is_seen_once() {
        let steps = ClockSteps::new().unwrap();
        assert!(!steps.stepped(), "no step yet");
        if !crate::caps::root_or_skip("clock steps", "setting the clock") {
            return;
        }
        // A step of 1 µs forward and its exact inverse right after (the
        // kernel ignores a step by nothing): the machine's clock ends where
        // it would have been, and both steps are seen, each once.
        let first = crate::clock::step_realtime(1_000);
        let seen_first = steps.stepped();
        let back = crate::clock::step_realtime(-1_000);
        let (seen_back, again) = (steps.stepped(), steps.stepped());
        first.and(back).unwrap();
        assert!(seen_first && seen_back, "both steps are reported");
        assert!(!again, "each once");
    }

    #[test]
    fn an_eventfd_signal_is_reported_with_its_token() {
        let epoll = Epoll::new().unwrap();
        let efd = EventFd::new().unwrap();
        epoll.add(efd.as_fd(), 7, Trigger::Level).unwrap();
        let mut ready = [Readiness::EMPTY; 4];
        assert_eq!(epoll.wait(&mut ready, Duration::ZERO).unwrap(), 0);
        efd.signal();
        efd.signal();
        assert_eq!(epoll.wait(&mut ready, Duration::from_secs(5)).unwrap(), 1);
        assert_eq!(ready[0].token(), 7);
        assert!(!ready[0].hangup());
        assert_eq!(efd.drain(), 2);
        assert_eq!(efd.drain(), 0, "drained");
    }

    #[test]
    fn a_one_shot_descriptor_reports_once_until_rearmed() {
        let epoll = Epoll::new().unwrap();
        let efd = EventFd::new().unwrap();
        epoll.add(efd.as_fd(), 1, Trigger::OneShot).unwrap();
        efd.signal();
        let mut ready = [Readiness::EMPTY; 2];
        assert_eq!(epoll.wait(&mut ready, Duration::from_secs(5)).unwrap(), 1);
        assert_eq!(epoll.wait(&mut ready, Duration::ZERO).unwrap(), 0);
        epoll.rearm(efd.as_fd(), 1).unwrap();
        assert_eq!(epoll.wait(&mut ready, Duration::ZERO).unwrap(), 1);
    }

    #[test]
    fn a_timer_counts_missed_periods() {
        let timer = TimerFd::new().unwrap();
        let start = monotonic_ns();
        // First expiry 3 periods in the past: 4 expirations are due at once.
        timer.arm_periodic(start - 3_000_000, 1_000_000).unwrap();
        let epoll = Epoll::new().unwrap();
        epoll.add(timer.as_fd(), 0, Trigger::Level).unwrap();
        let mut ready = [Readiness::EMPTY; 1];
        assert_eq!(epoll.wait(&mut ready, Duration::from_secs(5)).unwrap(), 1);
        assert!(timer.expirations() >= 4);
    }

    #[test]
    fn watching_a_regular_file_is_explained() {
        let epoll = Epoll::new().unwrap();
        // A regular file does not support polling (EPERM).
        let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        let err = epoll.add(file.as_fd(), 0, Trigger::Level).unwrap_err();
        assert!(err.fix.contains("support polling"), "{err}");
    }
}
