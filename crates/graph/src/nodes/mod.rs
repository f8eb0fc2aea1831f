//! Nodes shipped with the engine: [`Passthrough`], [`Sine`], [`Mixer`],
//! [`Load`], and the latency markers ([`marker_pair`]). Each owns only its
//! own processing; none allocates in `process`.

mod load;
mod marker;
mod mixer;
mod passthrough;
mod sine;

pub use load::Load;
pub use marker::{marker_pair, MarkerCounts, MarkerProbe, MarkerSource};
pub use mixer::Mixer;
pub use passthrough::Passthrough;
pub use sine::Sine;
