//! Futex wait and wake on an `AtomicU32`: the wake-up primitive of the
//! real-time path (no lock, no allocation; a wake is one system call and only
//! waiting blocks).
//!
//! [`wait`] and [`wake`] use the process-private operations
//! (`FUTEX_WAIT_PRIVATE`, `FUTEX_WAKE_PRIVATE`), which the kernel keys by
//! address in this process: cheaper, but blind to other processes.
//! [`wait_shared`] and [`wake_shared`] key the word by the memory object
//! behind it (a `MAP_SHARED` mapping of a memfd), so a waiter and a waker in
//! two processes that map the same object meet. A word is used with one pair
//! only: a private wake never reaches a shared waiter.
//!
//! This module never decides when to wait or whom to wake; the protocols that
//! do (worker sleep, cycle completion, channel wake-ups) live in the graph
//! engine and the channel layer.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Why [`wait`] returned. Callers re-check their condition in every case:
/// futex wake-ups can be spurious.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Woken by [`wake`] (or spuriously).
    Woken,
    /// The word did not hold the expected value, so the thread did not sleep.
    ValueChanged,
    /// The timeout elapsed.
    TimedOut,
    /// A signal interrupted the wait.
    Interrupted,
}

/// Sleeps while `word` holds `expected`, at most `timeout` (forever if
/// `None`). The kernel compares and sleeps atomically, so a [`wake`] issued
/// after the word changed cannot be lost.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> WaitOutcome {
    futex_wait(word, expected, timeout, libc::FUTEX_PRIVATE_FLAG)
}

/// [`wait`] on a word in memory shared with other processes: it is woken by
/// [`wake_shared`] from any process that maps the same object.
pub fn wait_shared(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> WaitOutcome {
    futex_wait(word, expected, timeout, 0)
}

/// FUTEX_WAIT with `flags` (private or not) added to the operation.
fn futex_wait(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
    flags: libc::c_int,
) -> WaitOutcome {
    let timespec = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let timeout_ptr = timespec
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the
    // call (AtomicU32 has the layout of u32); the timeout pointer is null or
    // points to a timespec on this frame. FUTEX_WAIT reads the word and never
    // writes through the pointers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | flags,
            expected,
            timeout_ptr,
        )
    };
    if rc == 0 {
        return WaitOutcome::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => WaitOutcome::ValueChanged,
        Some(libc::ETIMEDOUT) => WaitOutcome::TimedOut,
        Some(libc::EINTR) => WaitOutcome::Interrupted,
        // EFAULT/EINVAL/ENOSYS cannot happen with the arguments above; treat
        // them as a spurious wake-up so that the caller re-checks.
        _ => WaitOutcome::Woken,
    }
}

/// Wakes at most `count` threads sleeping in [`wait`] on `word`; returns how
/// many were woken. Change the word before waking, or a thread about to wait
/// may sleep through the wake.
pub fn wake(word: &AtomicU32, count: u32) -> usize {
    futex_wake(word, count, libc::FUTEX_PRIVATE_FLAG)
}

/// Wakes at most `count` threads, in any process, sleeping in
/// [`wait_shared`] on `word`; returns how many were woken.
pub fn wake_shared(word: &AtomicU32, count: u32) -> usize {
    futex_wake(word, count, 0)
}

/// FUTEX_WAKE with `flags` (private or not) added to the operation.
fn futex_wake(word: &AtomicU32, count: u32, flags: libc::c_int) -> usize {
    let count = count.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE only uses
    // its address as a key and never dereferences the remaining arguments.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | flags,
            count,
        )
    };
    rc.max(0) as usize
}

/// Wakes every thread sleeping on `word`.
pub fn wake_all(word: &AtomicU32) -> usize {
    wake(word, u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    #[test]
    fn wait_returns_at_once_when_the_value_differs() {
        let word = AtomicU32::new(1);
        assert_eq!(
            wait(&word, 0, Some(Duration::from_secs(5))),
            WaitOutcome::ValueChanged
        );
    }

    #[test]
    fn wait_times_out() {
        let word = AtomicU32::new(0);
        assert_eq!(
            wait(&word, 0, Some(Duration::from_millis(5))),
            WaitOutcome::TimedOut
        );
    }

    type Wait = fn(&AtomicU32, u32, Option<Duration>) -> WaitOutcome;

    /// A thread waiting with `wait` returns once the word changed and
    /// `wake` was called.
    fn assert_wake_releases_a_waiter(wait: Wait, wake: fn(&AtomicU32, u32) -> usize) {
        let word = Arc::new(AtomicU32::new(0));
        let waiter = {
            let word = Arc::clone(&word);
            std::thread::spawn(move || {
                while word.load(Ordering::Acquire) == 0 {
                    wait(&word, 0, Some(Duration::from_secs(5)));
                }
            })
        };
        word.store(1, Ordering::Release);
        wake(&word, u32::MAX);
        waiter.join().unwrap();
    }

    #[test]
    fn wake_releases_a_waiter() {
        assert_wake_releases_a_waiter(wait, wake);
    }

    #[test]
    fn wake_shared_releases_a_shared_waiter() {
        assert_wake_releases_a_waiter(wait_shared, wake_shared);
    }
}
