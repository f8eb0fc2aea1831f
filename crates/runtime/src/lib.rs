//! The cell runtime: the second level of tessera's two-level scheduling. The
//! broker decides what a cell gets (cores, SCHED_DEADLINE reservations); the
//! runtime decides how the cell's threads use it.
//!
//! A [`Runtime`] runs worker threads, each joined to the cell (one
//! reservation per worker) with memory locked. Tasks are the seed's:
//! [`Periodic`] (`rt_periodic`: released from an absolute timerfd every
//! period), [`Event`] (`rt_select`: released when a descriptor becomes
//! readable, due a relative deadline after the worker saw it), and explicit
//! completion ([`JobContext::complete`], `rt_deadline`) for any task. Each
//! task is placed on one worker; a worker dispatches its ready jobs earliest
//! deadline first and drops a job whose deadline passed before it could
//! start, so a miss never cascades (see `worker` for the exact policy).
//! Misses and reservation overruns (SIGXCPU from `SCHED_FLAG_DL_OVERRUN`)
//! are counted per task and reported to [`Notifications`] on a non-real-time
//! thread; [`BrokerReport`] sends the misses on to the broker's monitor.
//! Without privileges the runtime still runs and says it is
//! best-effort ([`Guarantee`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use tessera_runtime::{CellJoin, NoNotifications, Periodic, Runtime, RuntimeConfig};
//!
//! let config = RuntimeConfig { cell: Some(CellJoin::connect("synth")), ..Default::default() };
//! let mut builder = Runtime::builder(config);
//! let tick = builder.periodic(Periodic::new("tick", Duration::from_millis(1)), |ctx| {
//!     // one period's work; ctx.complete() ends the critical section early
//!     let _ = ctx.time_left();
//! })?;
//! let runtime = builder.start(NoNotifications)?;
//! std::thread::sleep(Duration::from_secs(1));
//! println!("{:?}", runtime.counters(tick));
//! let report = runtime.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cell;
mod notify;
mod queue;
mod report;
mod runtime;
mod stats;
mod task;
mod worker;

pub use cell::{join_hook, CellJoin};
pub use notify::{Miss, NoNotifications, Notifications, Overrun};
pub use report::{BrokerReport, CellReport, REPORT_INTERVAL};
pub use runtime::{
    Builder, Guarantee, RunReport, Runtime, RuntimeConfig, RuntimeError, TaskReport, WorkerInfo,
};
pub use stats::TaskCounters;
pub use task::{Event, JobContext, Periodic, TaskId};
