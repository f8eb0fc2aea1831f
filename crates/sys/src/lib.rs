//! The kernel layer: the only crate in tessera that makes `unsafe` system calls.
//!
//! It owns thin, typed wrappers over scheduling (sched_setattr/getattr), CPU
//! affinity, cgroup cpusets (v1 and v2), memory locking, clocks, futexes
//! (private and shared), epoll/timerfd/eventfd, shared memory (memfd and
//! mmap), signals, process control, pidfds, peer credentials, descriptor
//! passing (SCM_RIGHTS), files replaced atomically, the /proc readers, the kernel's process-events connector and
//! tracepoints read through perf events (`perf`). Every failure is an [`Error`] that names the cause and the fix.
//! It must never hold policy: what to ask for is decided above this layer.

pub mod affinity;
pub mod caps;
pub mod cgroup;
pub mod clock;
pub mod error;
pub mod event;
pub mod file;
pub mod futex;
pub mod ipc;
pub mod kernel;
pub mod marking;
pub mod mem;
pub mod net;
pub mod nudge;
pub mod perf;
pub mod pidfd;
pub mod proc;
pub mod process;
pub mod procevents;
pub mod sched;
pub mod shm;
pub mod signal;

pub use error::{Error, ErrorKind, Result};
