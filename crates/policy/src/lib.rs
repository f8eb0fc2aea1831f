//! Pure, deterministic decisions of tessera: what a cell may have and where
//! its reservations go. No I/O, no clocks, no randomness: the same ledger and
//! request always give the same answer, which is what the property tests and
//! the broker's crash recovery rely on.
//!
//! - [`adaptive`]: the feedback controller of adaptive budgets (AQuoSA's
//!   predictor, increment, fragments and bumps), per reserved thread.
//! - [`application`]: an application's share for its threads that are not
//!   real-time, and where a guard's reservations go (one core, several,
//!   global EDF), decided from measurements.
//! - [`bandwidth`]: fixed-point CPU bandwidth, the kernel's own arithmetic.
//! - [`cell`]: what a cell asks for (policy, cores, budget) and its validation.
//! - [`edf`]: uniprocessor EDF schedulability by processor demand.
//! - [`ledger`]: capacity per core, admission control with explanations, and
//!   placement of reservations on cores.
//! - [`mclock`]: the network service's flows: reservation, weight and limit
//!   (mClock tags), admission against link and CPU, pacing of the total.
//! - [`media`]: the formats services, workloads and scenarios share: a
//!   render canvas's largest side, the CIF frame, the netphone's stream.
//! - [`rap`]: the RAP service's adaptation: budgets grown on misses with
//!   demand, shrunk when underused, contested capacity split by weight.
//! - [`sla`]: the render service's SLAs: probe costs per request kind, the
//!   terms offered (reservation, gate, service times), the request gate.
//! - [`stream`]: an audio stream's buffer size and sample rate, whose period
//!   is the period of the cell that runs its graph.
//! - [`workgroup`]: a workgroup's budgets from its members' exact per-cycle
//!   samples (the adaptive feedback per member), overruns and misses.

pub mod adaptive;
pub mod application;
pub mod bandwidth;
pub mod cell;
pub mod edf;
pub mod ledger;
pub mod mclock;
pub mod media;
pub mod rap;
pub mod sla;
pub mod stream;
pub mod workgroup;

pub use adaptive::{
    compress, share_out, Adaptive, AdaptiveConfig, AdaptiveReport, PredictorConfig, PredictorKind,
};
pub use bandwidth::{largest_fitting, Bandwidth};
pub use cell::{
    Budget, CellPolicy, CellRequest, CoreRequest, Placement, RequestError, MAX_GLOBAL_RESERVATIONS,
};
pub use ledger::{CoreMode, CoreUsage, Grant, Ledger, Machine, Refusal, Reservation, Resized};
pub use mclock::{
    admit, Capacity, Discipline, FlowClass, FlowError, FlowId, FlowRefusal, FlowSpec, FlowStats,
    MClock, Pacer, Phase, Pick, Resource, SpecError,
};
pub use workgroup::{CycleSample, MemberId, MemberReport, WorkgroupControl};
