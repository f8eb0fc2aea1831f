//! Benchmarks and demos, apart from the scenario subjects: the peer
//! benchmark against jackd2, PipeWire and cyclictest (`peer`), the lowest
//! period each server holds (`lowest`), the soak (`soak`), the isolation
//! demo (`isolation`), a time-triggered cell's windows (`windows`), the
//! guard's cost at scale (`guard_scale`), RTKit grants (`rtkit_grants`)
//! and workgroups against the guard (`workgroup`).
//!
//! Each owns its run and its report, driven by a `tessera bench`, `demo`,
//! `soak` or `trace` command that only parses; they may use the runner, the
//! subjects and the harnesses, which never use them.

pub mod guard_scale;
pub mod isolation;
pub mod lowest;
mod output;
pub mod peer;
pub mod rtkit_grants;
pub mod soak;
pub mod windows;
pub mod workgroup;
