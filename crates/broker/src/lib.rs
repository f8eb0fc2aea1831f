//! The resource broker (the seeds' RAP service): the ledger of the machine's
//! capacity, admission of cells, placement of their threads on the kernel
//! (cpusets, SCHED_DEADLINE, weights), and the guarantee that nothing is lost
//! or leaked — dead clients' cells are released, a killed broker recovers
//! from its state file, `reset` restores the machine exactly.
//!
//! It watches what it granted ([`monitor`]: per cell and thread, the budget
//! and the CPU used per period, the misses and xruns reported, as a time
//! series) and, when configured, adapts the cells' budgets from it.
//!
//! Services (the network service, …) register a name and a socket with the
//! broker, and clients open them by name, checked against each service's
//! policy ([`registry`]).
//!
//! Workgroups ([`workgroup`]) are cells whose members share one deadline
//! per cycle, opened by name from the processes of the same user.
//!
//! The same [`Broker`] serves the daemon (`tessera daemon`, a Unix socket
//! speaking [`protocol`]) and runs embedded in a process when no daemon is
//! running; [`Session`] picks one. Decisions come from `tessera-policy`; only
//! `tessera-sys` touches the kernel.

pub mod broker;
pub mod config;
pub mod daemon;
pub mod error;
pub mod facts;
pub mod layout;
pub mod monitor;
pub mod paths;
pub mod placement;
pub mod protocol;
pub mod registry;
pub mod session;
pub mod state;
pub mod stranded;
pub mod wire;
pub mod workgroup;

pub use broker::Broker;
pub use error::{BrokerError, ErrorCode};
pub use facts::{Facts, Mode};
pub use protocol::{
    BudgetChange, CellInfo, MemberBudget, Request, ResizeCellsReply, ResizeMembersReply, Response,
    StatusReport,
};
pub use registry::{ServiceEntry, ServiceInfo, ServicePolicy};
pub use session::{ServiceRegistration, Session};
pub use workgroup::{WorkgroupInfo, WorkgroupShape};
