//! Why was it late: every miss of a watched thread attributed to a cause,
//! with the time each part of its cycle took, from the kernel's own
//! scheduling events (docs/why.md says what each cause tells a user).
//!
//! # Where the events come from, and why
//!
//! The kernel's tracepoints (`sched_switch`, `sched_waking`,
//! `sched_migrate_task`, the irq, softirq and hrtimer-callback entries and
//! exits, `page_fault_*`, `hrtimer_start`, sched_yield's entry and the
//! exits of the calls a thread waits in) read through
//! **`perf_event_open`**: the faults, timers and system calls of the
//! watched thread's own context one event per tracepoint and watched
//! thread (the calls from the two raw syscall tracepoints, filtered to
//! those a thread waits in), the others (switches, wake-ups, migrations,
//! and interrupts, filtered to those that hit a watched thread) one per
//! tracepoint and CPU, each thread's and each CPU's events writing into
//! one mmap ring; `sched_stat_runtime` (the task
//! clock) is counted in the kernel, in each CPU's `sched_switch` group, and
//! read with every switch rather than sampled. The syscall, the ioctls and
//! the ring live in `tessera_sys::perf` (the only crate with unsafe code).
//! Chosen over the alternatives because:
//!
//! - it needs nothing at build time: eBPF through libbpf-rs would need
//!   clang, libbpf and libelf on every machine that builds tessera (CI,
//!   developers, `cargo deb`) and a C program beside the Rust, and aya's
//!   eBPF side needs a nightly toolchain;
//! - the kernel still filters: a thread's own events are written only
//!   while it is current (another task's hit of the same tracepoint finds
//!   no event, and costs it no record nor filter), and each per-CPU event
//!   carries a tracepoint filter (`prev_pid == T || next_pid == T`,
//!   `pid == T`) tested before the record is written, so only the watched
//!   threads' events reach the rings, which is what lets it stay on in
//!   long runs;
//! - each reader has its own rings, unlike tracefs's buffers, which are
//!   one per instance and whose page format is harder to read;
//! - the records' layouts are read at run time from tracefs's `format`
//!   files ([`format`]), so no offset is assumed from one kernel version
//!   (tracefs is mounted only for that read, and unmounted again if tessera
//!   mounted it);
//! - times are CLOCK_MONOTONIC (`use_clockid`), the clock tessera's own
//!   cycles and deadlines are measured on, and the same on every CPU, so
//!   that the rings merge in order.
//!
//! Some kernels deliver no event while a CPU idles (this project's KVM
//! guests: neither the timer interrupt's wake-up nor the switch from the
//! idle task reach perf): [`timeline`] infers those switch-ins from the
//! thread's own next events and its task clock.
//!
//! Without privileges (perf on tracepoints needs root or CAP_PERFMON) or
//! without the tracepoints, [`Tracer::start`] says why, and callers report
//! their misses as "unknown" rather than failing.
//!
//! # Layers
//!
//! [`decode`] (samples → events) and [`attribute`] (cycles → misses and
//! causes) are pure and property-tested; [`timeline`] folds a thread's
//! events into cycles; [`tracer`] is the only module that touches the
//! kernel. It sits above `tessera-sys` and below the measurements and the
//! cli: [`Recorder`] is the library API a run uses (start for a set of
//! threads, stop, get an [`Attribution`]: every [`Miss`] and the
//! [`Causes`] totals, serialisable).

pub mod attribute;
pub mod causes;
pub mod chain;
pub mod decode;
pub mod error;
pub mod format;
pub mod timeline;
pub mod tracer;

pub use attribute::Watch;
pub use causes::{Cause, Causes, Holder, Miss};
pub use chain::ChainLink;
pub use error::WhyError;
pub use tracer::{watch, Attribution, Recorder, Tracer};
